"""llama.cpp in the engine process: which backend library and CPU variant, context and sampler parameters, thread counts, huge pages, process housekeeping."""
