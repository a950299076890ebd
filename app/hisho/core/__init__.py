"""Hisho's core: no Qt, no llama_cpp. Everything here runs in the CLI, the GUI and the tests alike."""
