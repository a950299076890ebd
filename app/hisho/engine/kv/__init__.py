"""KV reuse and persistence: which prefix a sequence keeps exactly, sliding-window cell order, chunk files and their writer."""
