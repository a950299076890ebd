"""The text formats of today's models: reasoning (think tags, GPT-OSS harmony) and tool calls.

Rules of use: pure Python, no Qt, no llama_cpp, so the engine, the API, the conversations and the window all
read a reply the same way. A format is detected once per loaded model from its chat template and vocabulary
(the engine reports it in the load info) and applied per reply.
"""
