"""``hisho bench resume --image [--model shape:llava-smollm2] [--tokens N] --json``: resume a saved conversation
that holds an image, from SSD, against reading it afresh (docs/images.md "Saved state").

One run, ratios against baselines from the same run:
1. Engine A, a model with its projector: a conversation of a ~N-token document and one picture (a 640 × 480
   gradient, prepared as the app prepares a dropped image: ``hisho.core.images``) prefilled once
   (``prefill_s``: the text and the image's encode), saved through ``KVSession``, then a question sent on it in
   memory (the greedy reference continuation).
2. Engine B, a new process with the model loaded and warmed: the conversation restored from the files
   (``restore_s``, median of ``--repeat``), the question sent on it (``ttft_restored_s``: restore, question,
   first token), its continuation against A's (``identical_continuation``) and the images it encoded
   (``image_encodes_restored``: 0 is the promise); then the same question sent from nothing in B
   (``ttft_fresh_s``: the whole prompt read, the image encoded again: ``image_encodes_fresh``).
KV files and the index live in a temporary folder.
"""

from __future__ import annotations

import argparse
import base64
import io
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

from hisho.bench import projector
from hisho.core.db import Database
from hisho.core.engine.client import EngineClient
from hisho.core.engine.protocol import LoadParams, Sampling
from hisho.core.images import prepare
from hisho.core.kv.index import KVIndex
from hisho.core.kv.session import KVSession
from hisho.core.models.store import ModelStore
from hisho.core.planner.launch import load_params_for, open_model
from hisho.core.units import padded_cells

QUESTION = "What colour is the picture, and what colour is item 17?"
REPLY = "I have seen the picture and read the list."
CONTINUATION = 16
DEFAULT_MODEL = "shape:llava-smollm2"


def picture() -> str:
    """A 640 × 480 gradient as the engine gets a dropped photo: through ``core.images.prepare``, base64."""
    from PIL import Image

    img = Image.linear_gradient("L").resize((640, 480)).convert("RGB")
    buf = io.BytesIO()
    img.save(buf, "JPEG", quality=90)
    return base64.b64encode(prepare(buf.getvalue()).png).decode("ascii")


def run(args: argparse.Namespace) -> dict[str, Any]:
    from hisho.bench.filler import document

    n = max(64, int(args.tokens or 1024))
    repeat = max(1, int(args.repeat))
    name = args.model or DEFAULT_MODEL
    pair = projector.pair(name)
    model_path = pair[0] if pair else open_model(name, ModelStore())
    params = load_params_for(model_path, n_ctx=padded_cells(n + 1024), n_seq_max=2, saves_kv=True)
    if not params.mmproj_path:
        raise SystemExit(f"{model_path.name} has no projector beside it: --image needs a model that sees images")
    greedy = Sampling(temperature=0.0, repeat_penalty=1.0, max_tokens=CONTINUATION, ignore_eos=True)
    history: list[dict[str, Any]] = [
        {"role": "user", "content": [{"type": "text", "text": document(max(1, n // 14)) + "\n"},
                                     {"type": "image", "data": picture()}]},
        {"role": "assistant", "content": REPLY}]
    question: list[dict[str, Any]] = [*history, {"role": "user", "content": QUESTION}]
    out: dict[str, Any] = {"model": model_path.name, "projector": Path(params.mmproj_path).name,
                           "n_ctx": params.n_ctx}
    with tempfile.TemporaryDirectory(prefix="hisho-bench-kv-") as tmp:
        index = KVIndex(Database(Path(tmp) / "index.sqlite3"), Path(tmp) / "kv")
        reference = _fresh(params, index, history, question, greedy, out)
        _restored(params, index, question, reference, greedy, repeat, out)
    out["restore_speedup"] = round(out["prefill_s"] / out["restore_s"], 2) if out["restore_s"] > 0 else None
    out["speedup"] = round(out["ttft_fresh_s"] / out["ttft_restored_s"], 2) if out["ttft_restored_s"] > 0 else None
    return out


def _send(client: EngineClient, tokens: list[int], sampling: Sampling, started: float
          ) -> tuple[float, list[int], int]:
    """Seconds from ``started`` to the first token, the tokens, and the images the engine has encoded."""
    first = 0.0
    got: list[int] = []
    stream = client.generate(tokens=tokens, sampling=sampling)
    for ev in stream:
        if not first:
            first = time.perf_counter() - started
        got.append(int(ev["token"]))
    assert stream.result is not None
    return first, got, int(stream.result.extra.get("image_encodes", 0))


def _fresh(params: LoadParams, index: KVIndex, history: list[dict[str, Any]], question: list[dict[str, Any]],
           greedy: Sampling, out: dict[str, Any]) -> list[int]:
    with EngineClient() as client:
        info = client.load(params)
        out["image_tokens"] = info.get("image_tokens")
        conv = client.tokenize(messages=history, add_generation_prompt=False)
        full = client.tokenize(messages=question)
        out["tokens"], out["image_positions"] = len(conv), sum(1 for t in conv if t < 0)
        client.seq_rm(0)
        started = time.perf_counter()
        client.prefill(conv, 0)
        out["prefill_s"] = time.perf_counter() - started
        session = KVSession(client, index, budget_bytes=1 << 50)
        session.save("bench:image")
        session.flush()
        _first, reference, out["image_encodes_fresh_a"] = _send(client, full, greedy, time.perf_counter())
        session.close()
    return reference


def _restored(params: LoadParams, index: KVIndex, question: list[dict[str, Any]], reference: list[int],
              greedy: Sampling, repeat: int, out: dict[str, Any]) -> None:
    with EngineClient() as client:
        client.load(params)
        client.generate(prompt="Hello", sampling=Sampling(temperature=0.0, max_tokens=2)).collect()  # warm-up
        full = client.tokenize(messages=question)
        session = KVSession(client, index, budget_bytes=1 << 50)
        times = []
        for _ in range(repeat):
            client.seq_rm(0)
            rep = session.restore("bench:image", full)
            times.append(rep.seconds)
        out["restore_s"], out["restored_tokens"] = statistics.median(times), rep.restored
        client.seq_rm(0)
        started = time.perf_counter()
        session.restore("bench:image", full)
        out["ttft_restored_s"], got, out["image_encodes_restored"] = _send(client, full, greedy, started)
        out["identical_continuation"] = got == reference
        client.seq_rm(0)
        out["ttft_fresh_s"], _got, encodes = _send(client, full, greedy, time.perf_counter())
        out["image_encodes_fresh"] = encodes - out["image_encodes_restored"]
        session.close()
