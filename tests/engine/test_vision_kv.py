"""The KV promise for images: a conversation's saved state, image cells included, restored into a new engine
process answers exactly as the engine that read it, without encoding the image again."""

from __future__ import annotations

import base64
import io
from pathlib import Path
from typing import Any

from PIL import Image

from hisho.bench import projector
from hisho.core.db import Database
from hisho.core.engine.client import EngineClient
from hisho.core.engine.protocol import LoadParams, Sampling
from hisho.core.kv.index import KVIndex
from hisho.core.kv.session import KVSession

GREEDY = Sampling(temperature=0.0, repeat_penalty=1.0, max_tokens=8, ignore_eos=True)
CHUNK = 32


def _image() -> str:
    buf = io.BytesIO()
    Image.new("RGB", (40, 40), (30, 160, 90)).save(buf, "PNG")
    return base64.b64encode(buf.getvalue()).decode("ascii")


HISTORY: list[dict[str, Any]] = [
    {"role": "user", "content": [{"type": "text", "text": "Here is a picture of my garden.\n"},
                                 {"type": "image", "data": _image()}]},
    {"role": "assistant", "content": "A green garden."},
]
FOLLOW_UP = {"role": "user", "content": "What colour is it?"}


def _engine(home: Path, pair: tuple[Path, Path]) -> EngineClient:
    client = EngineClient(env={"HISHO_HOME": str(home)})
    client.load(LoadParams(model_path=str(pair[0]), n_ctx=512, n_seq_max=2, n_threads=1, mmproj_path=str(pair[1])))
    return client


def _answer(engine: EngineClient, tokens: list[int]) -> tuple[list[int], dict[str, Any]]:
    stream = engine.generate(tokens=tokens, sampling=GREEDY)
    got = [int(ev["token"]) for ev in stream]
    assert stream.result is not None
    return got, {"cached": stream.result.cached_tokens, **stream.result.extra}


def test_saved_image_cells_restore_without_encoding(tmp_path: Path) -> None:
    pair = projector.pair("shape:llava-tiny")
    assert pair is not None
    index = KVIndex(Database(tmp_path / "db.sqlite3"), tmp_path / "kv")
    first = _engine(tmp_path, pair)
    try:
        conv = first.tokenize(messages=HISTORY, add_generation_prompt=False)
        full = first.tokenize(messages=[*HISTORY, FOLLOW_UP])
        assert full[:len(conv)] == conv and sum(t < 0 for t in conv) == 16  # the image's placeholders
        first.call("prefill", {"seq": 0, "tokens": conv})
        session = KVSession(first, index, chunk_tokens=CHUNK, budget_bytes=1 << 40)
        session.save("conv:1")
        assert session.flush(60)
        reference, seen = _answer(first, full)
        assert seen["image_encodes"] == 1
        session.close()
    finally:
        first.close()
    second = _engine(tmp_path, pair)  # a new process: nothing of the image in memory
    try:
        assert second.tokenize(messages=[*HISTORY, FOLLOW_UP]) == full  # the same placeholders
        session = KVSession(second, index, chunk_tokens=CHUNK, budget_bytes=1 << 40)
        report = session.restore("conv:1", full)
        assert report.restored == len(conv)
        got, seen = _answer(second, full)
        assert got == reference
        assert seen["image_encodes"] == 0  # restored, not encoded again
        assert seen["cached"] == len(conv)
        # A prompt that parts from the saved one inside the image: the restore keeps up to the image's start,
        # and the image is read whole again (a cut inside it is never kept).
        start = next(i for i, t in enumerate(conv) if t < 0)
        second.seq_rm(0, 0)
        assert session.restore("conv:1", [*conv[:start + 5], 1, 2, 3]).restored == start
        got, seen = _answer(second, full)
        assert got == reference and seen["image_encodes"] == 1
        session.close()
    finally:
        second.close()
