"""A chat's images through the chat service on the true-shape vision pair: an image kept in the data folder is
sent with its user message, the reply reads it (the image's tokens in the prompt), and a store reopened after a
restart renders the same message with its image again."""

from __future__ import annotations

import io
import json
from collections.abc import Iterator
from pathlib import Path

import pytest
from PIL import Image

from hisho.bench import projector
from hisho.core.conversations import images as chat_images
from hisho.core.conversations.chat import ChatService
from hisho.core.conversations.store import DONE, ChatSettings, ConversationStore
from hisho.core.db import Database
from hisho.core.engine.client import EngineClient
from hisho.core.engine.protocol import LoadParams
from hisho.core.images import ImageError

SHORT = ChatSettings(temperature=0.0, max_tokens=8, repeat_penalty=1.0)


def _png(color: tuple[int, int, int]) -> bytes:
    buf = io.BytesIO()
    Image.new("RGB", (48, 32), color).save(buf, "PNG")
    return buf.getvalue()


@pytest.fixture
def seeing(hisho_home: Path) -> Iterator[EngineClient]:
    """The pair's engine, in this test's HISHO_HOME (the data folder its image paths must be in)."""
    pair = projector.pair("shape:llava-tiny")
    assert pair is not None
    client = EngineClient(env={"HISHO_HOME": str(hisho_home)})
    client.load(LoadParams(model_path=str(pair[0]), n_ctx=512, n_threads=1, mmproj_path=str(pair[1])))
    yield client
    client.close()


def test_an_image_is_kept_sent_answered_and_shown_again_after_a_restart(hisho_home: Path,
                                                                      seeing: EngineClient) -> None:
    name = chat_images.keep(_png((200, 10, 10)))
    assert chat_images.keep(_png((200, 10, 10))) == name            # the same picture: one file
    assert chat_images.path(name).read_bytes().startswith(b"\x89PNG")
    with pytest.raises(ImageError):
        chat_images.keep(b"<svg xmlns='http://www.w3.org/2000/svg'/>")
    with pytest.raises(ValueError):
        chat_images.path("../hisho.sqlite3")

    db_path = hisho_home / "chat.sqlite3"
    store = ConversationStore(Database(db_path))
    service = ChatService(store, seeing, model_name="llava-tiny")
    cid = store.create(settings=SHORT).id
    seen = service.run(service.send(cid, "What is this?", images=[name])).message
    text_cid = store.create(settings=SHORT).id
    plain = service.run(service.send(text_cid, "What is this?")).message
    assert seen.status == DONE and seen.prompt_tokens == (plain.prompt_tokens or 0) + 16
    user = store.branch(cid)[0]
    assert json.loads(user.images) == [name] and store.get(cid).title == "What is this?"
    with pytest.raises(Exception, match="empty"):
        service.send(cid, "  ")
    edited = service.run(service.edit(user.id, "What colour is this?")).message
    assert json.loads(store.branch(cid)[0].images) == [name]   # an edit keeps the message's pictures
    assert edited.prompt_tokens is not None and edited.prompt_tokens > 16
    user = store.branch(cid)[0]

    again = ConversationStore(Database(db_path))   # the app restarted: the chat reopens with its image
    messages = ChatService(again, seeing, model_name="llava-tiny").prompt_messages(cid)
    assert messages[0]["content"] == [{"type": "image", "path": str(chat_images.path(name))},
                                      {"type": "text", "text": "What colour is this?"}]
    assert chat_images.names(again.branch(cid)[0].images) == [name]


def test_a_picture_chat_goes_on_on_a_text_only_model(tmp_path: Path, engine: EngineClient) -> None:
    """Continued on a model without a projector, each earlier picture is a line saying the model cannot see
    it (the prompt still counts and the reply comes), never an error that locks the chat."""
    name = chat_images.keep(_png((10, 200, 10)))
    store = ConversationStore(Database(tmp_path / "chat.sqlite3"))
    service = ChatService(store, engine, model_name="smollm2")
    cid = store.create(settings=SHORT).id
    u = store.add_message(cid, "user", "What is this?", images=json.dumps([name]))
    store.add_message(cid, "assistant", "A green square.", parent_id=u.id)
    first = service.prompt_messages(cid)[0]["content"]
    assert first == f"{chat_images.UNSEEN}\nWhat is this?"
    result = service.run(service.send(cid, "Thanks."))
    assert result.message.status == DONE and result.message.content
