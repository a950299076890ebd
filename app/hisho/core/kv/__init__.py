"""KV persistence, core side: chunk file format (``format``), the SQLite index (``index``), what the saved
KV costs and which of it goes first (``usage``), what the app calls (``session``) and its hooks into the chat
service (``chat_hooks``).

The engine side (``hisho.engine.kv.kvstate``) moves state bytes; ``hisho.core.kv.session`` is what the app calls.
Decisions and the file layout: docs/kv-format.md.
"""

from hisho.core.kv.format import KVFormatError
from hisho.core.kv.index import KVIndex, Match
from hisho.core.kv.usage import Usage

__all__ = ["KVFormatError", "KVIndex", "Match", "Usage"]
