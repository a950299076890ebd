"""The local OpenAI-compatible API, with Anthropic's Messages API beside it (``hisho serve``, Settings → API):
Starlette + uvicorn on loopback, in front of the app's one engine. No Qt, no llama_cpp: it sits between core and
the front ends, so both the command line and the window can start it (docs/architecture.md, docs/api.md)."""
