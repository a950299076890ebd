"""Reply formats of today's chat models: reasoning (think tags, GPT-OSS harmony: ``reasoning``) and tool calls in
each family's own syntax (``tools``), read back from a reply's raw text (special tokens shown), and what grammar
keeps a tool-calling reply well-formed.

Rules of use:
- Pure functions and small stateful parsers over text: no I/O, no engine, no llama_cpp, no Qt, so the engine
  client, the API, the conversations and the window all read a reply the same way. The API (and any other
  caller) renders the prompt with the model's template, sends the grammar request this package builds with the
  sampling, and parses the reply's ``raw_text`` here.
- A format is recognised from the chat template's text (and, for reasoning, the vocabulary), the way llama.cpp's
  ``common/chat.cpp`` does, never from a model's name: a fine-tune keeps its family's template. The engine
  reports the reasoning format in its load info, detected once per loaded model.
- Parsers take the raw text (``GenerationResult.raw_text``, token events' ``piece``): control tokens such as
  ``[TOOL_CALLS]`` or harmony's ``<|channel|>`` are markers there, and absent from ``text``.
"""
