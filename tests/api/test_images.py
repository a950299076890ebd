"""Images through ``hisho serve`` with the real ``openai`` client: a true-shape vision pair (hisho.bench.projector)
answers an image chat greedily and deterministically with the image's tokens in its usage; URLs that would need
fetching, bad images and a text-only model get a 400 that says why."""

from __future__ import annotations

import base64
import io
from collections.abc import Iterator
from typing import Any

import openai
import pytest
from PIL import Image

from hisho.bench import projector
from tests.api.conftest import Served, start_serve, stop_serve


@pytest.fixture(scope="module")
def seeing(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Served]:
    pair = projector.pair("shape:llava-tiny")
    assert pair is not None
    s = start_serve(tmp_path_factory.mktemp("serve_home"), "--model", str(pair[0]))
    yield s
    stop_serve(s)


def client(served: Served) -> openai.OpenAI:
    return openai.OpenAI(base_url=served.url, api_key=served.key, max_retries=0, timeout=300)


def data_url(color: tuple[int, int, int], fmt: str = "PNG") -> str:
    buf = io.BytesIO()
    Image.new("RGB", (48, 32), color).save(buf, fmt)
    return f"data:image/{fmt.lower()};base64," + base64.b64encode(buf.getvalue()).decode("ascii")


def with_image(url: str, text: str = "What is in this picture?") -> list[Any]:
    return [{"role": "user", "content": [{"type": "text", "text": text},
                                         {"type": "image_url", "image_url": {"url": url}}]}]


def test_an_image_chat_is_greedy_and_deterministic(seeing: Served) -> None:
    c = client(seeing)
    ask = dict(model=seeing.model, max_tokens=8, temperature=0)
    first = c.chat.completions.create(messages=with_image(data_url((200, 10, 10))), **ask)  # type: ignore[call-overload]
    again = c.chat.completions.create(messages=with_image(data_url((200, 10, 10))), **ask)  # type: ignore[call-overload]
    assert first.choices[0].message.content and first.choices[0].message.content == again.choices[0].message.content
    text_only = c.chat.completions.create(messages=[{"role": "user", "content": "What is in this picture?"}],
                                          **ask)  # type: ignore[call-overload]
    assert first.usage is not None and text_only.usage is not None
    assert first.usage.prompt_tokens == text_only.usage.prompt_tokens + projector.VISION["clip-tiny"].n_patches
    other = c.chat.completions.create(messages=with_image(data_url((10, 10, 200), "JPEG")), **ask)  # type: ignore[call-overload]
    assert other.choices[0].message.content != first.choices[0].message.content  # the answer reads the pixels


def test_urls_to_fetch_and_bad_images_are_refused(seeing: Served) -> None:
    c = client(seeing)
    cases = {"https://example.com/cat.png": "fetching is off",
             "data:image/svg+xml;base64," + base64.b64encode(b"<svg xmlns='http://www.w3.org/2000/svg'/>").decode():
                 "SVG",
             "data:image/png;base64,not base64!": "not valid"}
    for url, words in cases.items():
        with pytest.raises(openai.BadRequestError) as info:
            c.chat.completions.create(model=seeing.model, messages=with_image(url), max_tokens=4)  # type: ignore[arg-type]
        assert words in str(info.value)


def test_a_text_only_model_cannot_see_images(tmp_path_factory: pytest.TempPathFactory) -> None:
    served = start_serve(tmp_path_factory.mktemp("serve_home"))
    try:
        with pytest.raises(openai.BadRequestError, match="this model cannot see images"):
            client(served).chat.completions.create(model=served.model, messages=with_image(data_url((1, 2, 3))),  # type: ignore[arg-type]
                                                   max_tokens=4)
    finally:
        stop_serve(served)


def test_responses_and_messages_read_an_image_as_chat_completions_does(seeing: Served) -> None:
    """The ``openai`` client's responses.create with an ``input_image`` and the ``anthropic`` SDK's messages.create
    with a base64 image block: the same greedy answer as the chat route's, the image's tokens in the usage."""
    import anthropic

    url = data_url((200, 10, 10))
    question = "What is in this picture?"
    chat = client(seeing).chat.completions.create(model=seeing.model, messages=with_image(url, question),  # type: ignore[arg-type]
                                                  max_tokens=8, temperature=0)
    text_only = client(seeing).responses.create(model=seeing.model, input=question, max_output_tokens=8,
                                                temperature=0)
    seen = client(seeing).responses.create(model=seeing.model, max_output_tokens=8, temperature=0, input=[
        {"role": "user", "content": [{"type": "input_text", "text": question},
                                     {"type": "input_image", "image_url": url, "detail": "auto"}]}])
    assert seen.output_text and seen.output_text == chat.choices[0].message.content
    assert seen.usage is not None and text_only.usage is not None
    assert seen.usage.input_tokens == text_only.usage.input_tokens + projector.VISION["clip-tiny"].n_patches
    follow = client(seeing).responses.create(model=seeing.model, previous_response_id=seen.id, input="And now?",
                                             max_output_tokens=4, temperature=0)
    assert follow.usage is not None and follow.usage.input_tokens > seen.usage.input_tokens  # the image is kept
    with pytest.raises(openai.BadRequestError, match="fetching is off"):
        client(seeing).responses.create(model=seeing.model, max_output_tokens=4, input=[
            {"role": "user", "content": [{"type": "input_image", "image_url": "https://example.com/cat.png",
                                          "detail": "auto"}]}])

    ant = anthropic.Anthropic(base_url=seeing.url.removesuffix("/v1"), api_key=seeing.key, max_retries=0, timeout=300)
    payload = url.partition(",")[2]
    answer = ant.messages.create(model=seeing.model, max_tokens=8, messages=[{"role": "user", "content": [
        {"type": "text", "text": question},
        {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": payload}}]}])
    plain = ant.messages.create(model=seeing.model, max_tokens=8,
                                messages=[{"role": "user", "content": question}])
    assert answer.content and answer.content[0].type == "text"   # type: ignore[union-attr]
    def prompt(u: Any) -> int:   # Anthropic's usage: the uncached part and the part read from the cache
        return int(u.input_tokens + (u.cache_read_input_tokens or 0) + (u.cache_creation_input_tokens or 0))
    assert prompt(answer.usage) == prompt(plain.usage) + projector.VISION["clip-tiny"].n_patches
    with pytest.raises(anthropic.BadRequestError, match="fetching is off"):
        ant.messages.create(model=seeing.model, max_tokens=4, messages=[{"role": "user", "content": [
            {"type": "image", "source": {"type": "url", "url": "https://example.com/cat.png"}}]}])
