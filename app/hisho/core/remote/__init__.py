"""Remote OpenAI-compatible engines (docs/remote-engines.md). No Qt, no llama_cpp."""
