"""A reply's text never holds the model's markup tokens: control tokens, and user-defined ones that are the
model's own markers (Gemma's ``<start_of_image>``); HTML tags that are user-defined tokens (``<table>``) are text.
The raw text (what format parsers read) keeps them all. On the real Gemma-3-270M, replies forced through the
engine (test hook ``force_text``)."""

from __future__ import annotations

from pathlib import Path

from hisho.core.engine.client import EngineClient
from hisho.core.engine.protocol import LoadParams, Sampling


def test_markers_are_left_out_of_the_text_and_kept_in_the_raw_reply(real_gemma_path: Path) -> None:
    with EngineClient(test_hooks=True) as client:
        client.load(LoadParams(model_path=str(real_gemma_path), n_ctx=1024))
        forced = "A cat<start_of_image> sits on a <table>mat</table>.<end_of_image>"
        result = client.generate(prompt="Describe:", sampling=Sampling(temperature=0.0, max_tokens=64),
                                 test_hooks={"force_text": forced}).collect()
        assert result.text == "A cat sits on a <table>mat</table>."
        assert result.raw_text == forced
