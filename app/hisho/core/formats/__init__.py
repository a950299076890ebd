"""Reply formats of chat models: how a model writes tool calls (``tools``) in its own syntax, read back from the
reply's raw text (special tokens shown), and what grammar keeps such a reply well-formed.

Rules of use:
- Pure functions and small stateful parsers over text: no I/O, no engine, no llama_cpp, no Qt. The API (and any
  other caller) renders the prompt with the model's template, sends the grammar request this package builds
  with the sampling, and parses the reply's ``raw_text`` here.
- A format is recognised from the chat template's text, the way llama.cpp's ``common/chat.cpp`` does, never from
  a model's name: a fine-tune keeps its family's template.
- Parsers take the raw text (``GenerationResult.raw_text``, token events' ``piece``): control tokens such as
  ``[TOOL_CALLS]`` or harmony's ``<|channel|>`` are markers there, and absent from ``text``.
"""
