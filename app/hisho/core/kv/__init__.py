"""KV persistence, core side: chunk file format (``format``) and the SQLite index (``index``).

The engine side (``hisho.engine.kvstate``) moves state bytes; ``hisho.core.kv_session`` is what the app calls.
Decisions and the file layout: docs/kv-format.md.
"""

from hisho.core.kv.format import KVFormatError
from hisho.core.kv.index import KVIndex, Match, Usage

__all__ = ["KVFormatError", "KVIndex", "Match", "Usage"]
