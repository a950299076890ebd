"""Vision: the true-shape projector files (hisho.bench.projector) load in libmtmd beside their language model, and
an image is tokenized into its image chunk and encoded into the language model's cells."""

from __future__ import annotations

import base64
import ctypes
import io
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import llama_cpp
import pytest
from llama_cpp import mtmd_cpp as mtmd

from hisho.bench import projector
from hisho.core.engine.client import EngineClient
from hisho.core.engine.protocol import GenerationResult, LoadParams, Sampling
from hisho.core.errors import EngineError


def _png(size: tuple[int, int] = (40, 30), color: tuple[int, int, int] = (200, 10, 10)) -> bytes:
    from PIL import Image

    buf = io.BytesIO()
    Image.new("RGB", size, color).save(buf, "PNG")
    return buf.getvalue()


def test_tensor_table_names_are_the_loader_s() -> None:
    table = projector.tensor_table(projector.VISION["clip-tiny"], 128)
    names = [t[0] for t in table]
    assert len(names) == len(set(names))
    assert {"v.class_embd", "v.patch_embd.weight", "v.position_embd.weight", "v.pre_ln.weight",
            "v.blk.0.attn_q.weight", "v.blk.2.ffn_down.weight", "mm.0.weight", "mm.2.bias"} <= set(names)
    # clip.cpp swaps up and down when down's rows are the tower's width (old files): ours are not swapped.
    down = dict((n, d) for n, d, _ in table)["v.blk.0.ffn_down.weight"]
    assert down == (256, 64)


def test_unknown_pair_is_none() -> None:
    assert projector.pair("shape:llama-tiny") is None
    assert projector.pair("") is None


@pytest.mark.parametrize("name", ["llava-tiny", "llava-smollm2"])
def test_projector_loads_and_encodes_an_image(name: str) -> None:
    pair = projector.pair(f"shape:{name}")
    assert pair is not None
    lm, mmproj = pair
    llama_cpp.llama_backend_init()
    model = llama_cpp.llama_model_load_from_file(str(lm).encode(), llama_cpp.llama_model_default_params())
    assert model
    cparams = llama_cpp.llama_context_default_params()
    cparams.n_ctx, cparams.n_batch = 256, 256
    ctx = llama_cpp.llama_init_from_model(model, cparams)
    params = mtmd.mtmd_context_params_default()
    params.use_gpu, params.n_threads, params.print_timings = False, 1, False
    mctx = mtmd.mtmd_init_from_file(str(mmproj).encode(), model, params)
    chunks = mtmd.mtmd_input_chunks_init()
    try:
        assert mctx, "libmtmd refused the projector"
        assert mtmd.mtmd_support_vision(mctx)
        assert not mtmd.mtmd_decode_use_mrope(mctx)
        data = _png()
        buf = (ctypes.c_uint8 * len(data)).from_buffer_copy(data)
        bitmap = mtmd.mtmd_helper_bitmap_init_from_buf(mctx, buf, len(data), False)
        assert bitmap
        text = b"Look: " + mtmd.mtmd_default_marker()
        inp = mtmd.mtmd_input_text(text, len(text), False, True)
        bitmaps = (mtmd.mtmd_bitmap_p_ctypes * 1)(bitmap)
        assert mtmd.mtmd_tokenize(mctx, chunks, ctypes.byref(inp), bitmaps, 1) == 0
        mtmd.mtmd_bitmap_free(bitmap)
        kinds = [mtmd.mtmd_input_chunk_get_type(mtmd.mtmd_input_chunks_get(chunks, i))
                 for i in range(mtmd.mtmd_input_chunks_size(chunks))]
        assert mtmd.MTMD_INPUT_CHUNK_TYPE_IMAGE in kinds
        image = mtmd.mtmd_input_chunks_get(chunks, kinds.index(mtmd.MTMD_INPUT_CHUNK_TYPE_IMAGE))
        assert mtmd.mtmd_input_chunk_get_n_tokens(image) == projector.VISION["clip-tiny"].n_patches
        n_past = llama_cpp.llama_pos(0)
        assert mtmd.mtmd_helper_eval_chunks(mctx, ctx, chunks, 0, 0, 256, True, ctypes.byref(n_past)) == 0
        assert n_past.value == mtmd.mtmd_helper_get_n_pos(chunks)
    finally:
        mtmd.mtmd_input_chunks_free(chunks)
        if mctx:
            mtmd.mtmd_free(mctx)
        llama_cpp.llama_free(ctx)
        llama_cpp.llama_model_free(model)


# ----- the engine process: a model loaded with its projector reads images in a chat ---------------------------


def _b64(color: tuple[int, int, int]) -> str:
    return base64.b64encode(_png(color=color)).decode("ascii")


def _ask(engine: EngineClient, color: tuple[int, int, int], question: str = "What is this?") -> GenerationResult:
    messages = [{"role": "user", "content": [{"type": "text", "text": question + "\n"},
                                             {"type": "image", "data": _b64(color)}]}]
    stream = engine.generate(messages=messages, sampling=Sampling(temperature=0.0, max_tokens=8))  # type: ignore[arg-type]
    for _ in stream:
        pass
    assert stream.result is not None
    return stream.result


@pytest.fixture(scope="module")
def vision_engine(engine_home: Path) -> Iterator[tuple[EngineClient, dict[str, Any]]]:
    pair = projector.pair("shape:llava-tiny")
    assert pair is not None
    mp = pytest.MonkeyPatch()
    mp.setenv("HISHO_HOME", str(engine_home))
    client = EngineClient()
    info = client.load(LoadParams(model_path=str(pair[0]), n_ctx=512, n_threads=1, mmproj_path=str(pair[1])))
    yield client, info
    client.close()
    mp.undo()


def test_engine_loads_the_pair_and_reports_what_an_image_costs(vision_engine: tuple[EngineClient, Any]) -> None:
    _engine, info = vision_engine
    assert info["vision"] is True
    assert info["image_tokens"] == projector.VISION["clip-tiny"].n_patches
    assert info["image_attention"] == "causal"


def test_an_image_chat_is_greedy_deterministic_and_reuses_the_image(vision_engine: tuple[EngineClient, Any]) -> None:
    engine, _info = vision_engine
    engine.seq_rm(0, 0)
    first = _ask(engine, (200, 10, 10))
    n_text = engine.count_tokens(messages=[{"role": "user", "content": "What is this?\n"}])
    assert first.prompt_tokens == n_text + 16  # the image's tokens count in the usage
    again = _ask(engine, (200, 10, 10))  # the same image in the same place: its cells are kept, not re-encoded
    assert again.text == first.text
    assert again.cached_tokens > 16
    assert again.extra["image_encodes"] == first.extra["image_encodes"]
    other = _ask(engine, (10, 10, 200))  # another image: the prefix up to it is kept, the image is encoded
    assert other.extra["image_encodes"] == first.extra["image_encodes"] + 1
    assert other.cached_tokens < other.prompt_tokens - 16
    assert other.text != first.text  # random weights, but the answer depends on the pixels
    engine.seq_rm(0, 0)
    assert _ask(engine, (200, 10, 10)).text == first.text  # read afresh: the same greedy answer


def test_a_text_only_model_refuses_images(engine: EngineClient) -> None:
    with pytest.raises(EngineError, match="cannot see images"):
        _ask(engine, (1, 2, 3))


def test_a_pair_resolves_for_benches_to_its_model_with_the_projector_beside() -> None:
    from hisho.bench.model_ids import resolve
    from hisho.core.models.projector import projector_for

    pair = projector.pair("shape:llava-tiny")
    assert pair is not None
    assert resolve("shape:llava-tiny") == pair[0]
    assert projector_for(pair[0]) == pair[1]
