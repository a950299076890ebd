"""The Settings pages (general, performance, prompts, KV cache, engines, API, your data) and the per-chat
settings dialog."""
