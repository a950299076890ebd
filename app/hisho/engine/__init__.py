"""The engine: the only package that imports llama_cpp. It runs in its own process (``python -m hisho.engine``),
started by ``hisho.core.engine.client.EngineClient``; see docs/engine-protocol.md."""
