"""The ``hisho`` command line: the parser and entry point (``main``) and one module per command (``chat``,
``models``, ``plan``, ``serve``, ``summarize``, ``selftest``). Same core as the window, no Qt unless ``hisho gui``
is asked for; errors are one line on stderr, exit 2 for bad input (the command line contract,
docs/architecture.md)."""
