"""The loopback peers live in ``hisho.bench.servers`` (the bench starts the same servers)."""

from hisho.bench.servers import (
    NOT_BUILT,
    Peer,
    free_port,
    llama_cpp_python_server,
    llama_server,
    llama_server_binary,
)

__all__ = ["NOT_BUILT", "Peer", "free_port", "llama_cpp_python_server", "llama_server", "llama_server_binary"]
