"""Model files: the store of named GGUF files (``store``), the GGUF header reader the planner and the load
check use (``gguf_facts`` over ``gguf_header``), a file's identity (``identity``: what a KV state is keyed by)
and removing a model with what goes with it (``removal``). No Qt, no llama_cpp."""
