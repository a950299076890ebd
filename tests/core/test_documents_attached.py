"""Documents attached to an ordinary chat: kept with the chat, shown whole in its system
message while they fit half the context, otherwise their relevant parts go with each question; removing one
takes it out of the next prompt; an encrypted PDF asks for its password. A real ConversationStore and database;
a word counter stands in for the tokenizer."""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace

import pytest

from hisho.core.conversations.store import ConversationStore
from hisho.core.db import Database
from hisho.core.documents import exchange as conversation_io
from hisho.core.documents.attached import CHAT_HEAD, MAX_CHARS, ChatDocuments, read_document
from hisho.core.documents.cache import SummaryCache
from hisho.core.documents.extract import extract
from hisho.core.documents.model import Document, DocumentError, Section
from hisho.core.errors import UserError
from tests.fixtures.docs.make import make_encrypted_pdf


def words(text: str) -> int:
    return len(text.split())


def chat_docs(tmp_path: Path, n_ctx: int = 4096) -> tuple[ConversationStore, ChatDocuments]:
    db = Database(tmp_path / "h.sqlite3")
    store = ConversationStore(db)
    SummaryCache(db)  # the documents component's tables
    return store, ChatDocuments(db, words, lambda: n_ctx)


def test_a_short_document_goes_whole_into_the_system_message_and_leaves_with_its_chip(tmp_path: Path) -> None:
    store, chat = chat_docs(tmp_path)
    conv = store.create("Holiday plans", system_prompt="Answer in English.")
    other = store.create("Something else")
    note = tmp_path / "NOTES"   # no extension: read by content
    note.write_text("The ferry to the island leaves at 7:15 every morning.\n", encoding="utf-8")
    added = chat.add(conv.id, extract(note))
    assert chat.add(conv.id, extract(note)).id == added.id           # the same file twice is kept once
    assert [d.name for d in chat.attached(conv.id)] == ["NOTES"] and chat.attached(other.id) == []
    assert chat.approach(conv.id) == "whole" and "read whole" in chat.note(conv.id)

    messages = [{"role": "system", "content": "Answer in English."}, {"role": "user", "content": "When?"}]
    chat.context(conv.id, messages)
    assert messages[0]["content"].startswith("Answer in English.\n\n" + CHAT_HEAD)
    assert "# NOTES" in messages[0]["content"] and "7:15" in messages[0]["content"]
    assert messages[1] == {"role": "user", "content": "When?"}      # the question itself is untouched
    bare = [{"role": "user", "content": "When?"}]
    chat.context(conv.id, bare)                                       # a chat without a system prompt gets one
    assert bare[0]["role"] == "system" and "7:15" in bare[0]["content"]
    chat.before_prompt(SimpleNamespace(conversation_id=conv.id), messages)
    assert messages[1]["content"] == "When?"                          # whole: nothing added to the question
    untouched = [{"role": "user", "content": "When?"}]
    chat.context(other.id, untouched)
    assert untouched == [{"role": "user", "content": "When?"}]

    chat.remove(added.id)
    after = [{"role": "user", "content": "When?"}]
    chat.context(conv.id, after)
    assert after == [{"role": "user", "content": "When?"}] and chat.approach(conv.id) == ""


def test_a_long_document_sends_its_relevant_parts_with_each_question(tmp_path: Path) -> None:
    store, chat = chat_docs(tmp_path, n_ctx=600)
    conv = store.create("Town report")
    topics = ["harbour ferry schedule", "library opening hours", "bridge painting budget"]
    sections = [Section(f"Page {i} is about the {topics[i % 3]}. " + "filler words here " * 40, f"p. {i}", i)
                for i in range(1, 10)]
    chat.add(conv.id, Document(Path("town.pdf"), "pdf", "sha-town", sections))
    assert chat.approach(conv.id) == "parts" and "most relevant parts" in chat.note(conv.id)
    messages = [{"role": "user", "content": "What is the bridge painting budget?"}]
    chat.context(conv.id, messages)
    assert len(messages) == 1                                        # too long to go whole
    chat.before_prompt(SimpleNamespace(conversation_id=conv.id), messages)
    sent = messages[-1]["content"]
    assert sent.startswith("Relevant parts of the document:") and "[p. 2]" in sent and "bridge" in sent
    assert sent.endswith("Question: What is the bridge painting budget?")
    assert "[p. 1]" not in sent                                       # a part that shares no word is not sent
    assert store.get(conv.id).system_prompt == ""                     # nothing stored was changed


def test_refusals_say_why_and_an_encrypted_pdf_asks_for_its_password(tmp_path: Path) -> None:
    store, chat = chat_docs(tmp_path)
    conv = store.create("x")
    huge = Document(Path("huge.txt"), "text", "sha-huge", [Section("word " * (MAX_CHARS // 5 + 1), "line 1")])
    with pytest.raises(DocumentError, match="huge.txt: too long to attach"):
        chat.add(conv.id, huge)
    assert chat.attached(conv.id) == []
    locked = make_encrypted_pdf(tmp_path / "locked.pdf", "s3cret")
    with pytest.raises(DocumentError, match="locked.pdf: the PDF is encrypted and no password was given"):
        read_document(locked, ask_password=lambda name, wrong: None)
    tries: list[bool] = []
    doc = read_document(locked, ask_password=lambda name, wrong: tries.append(wrong) or ("nope", "s3cret")[wrong])
    assert tries == [False, True] and "Secret quarterly figures" in doc.text


OLD_EXPORT = {  # a version 1 export, as Hisho wrote it before attached documents travelled with the chat
    "format": "hisho-conversation", "version": 1, "exported_at": 1764400000.0,
    "conversation": {"title": "Ferry times", "model": "", "system_prompt": "Be brief.", "settings": {},
                     "created_at": 1764400000.0, "pinned": False, "leaf": 2},
    "messages": [{"id": 1, "parent": None, "role": "user", "content": "When?", "status": "done"},
                 {"id": 2, "parent": 1, "role": "assistant", "content": "At 7:15.", "status": "done"}],
}


def test_an_exported_chat_carries_its_documents_and_an_old_export_still_imports(tmp_path: Path) -> None:
    store, chat = chat_docs(tmp_path)
    conv = store.create("Holiday plans")
    store.add_message(conv.id, "user", "When does the ferry leave?")
    note = tmp_path / "NOTES"
    note.write_text("The ferry to the island leaves at 7:15 every morning.\n", encoding="utf-8")
    town = Document(Path("town.pdf"), "pdf", "sha-town", [Section("Harbour fees rose.", "p. 1", 1),
                                                          Section("The bridge is painted blue.", "p. 2", 2)])
    chat.add(conv.id, extract(note))
    chat.add(conv.id, town)
    out = conversation_io.export_file(store, conv.id, tmp_path / "c.json")
    data = json.loads(out.read_text(encoding="utf-8"))
    assert data["version"] == conversation_io.FORMAT_VERSION and [d["name"] for d in data["documents"]] == ["NOTES", "town.pdf"]
    assert "> **Attached:** NOTES, town.pdf" in conversation_io.to_markdown(store, conv.id)

    # Another computer: a database that never held a document (no documents tables yet).
    other = ConversationStore(Database(tmp_path / "other.sqlite3"))
    new_id = conversation_io.import_file(other, out)
    other_chat = ChatDocuments(other.db, words, lambda: 4096)
    before = [(d.name, d.sha256, d.tokens, d.parts) for d in chat.attached(conv.id)]
    assert [(d.name, d.sha256, d.tokens, d.parts) for d in other_chat.attached(new_id)] == before
    messages = [{"role": "user", "content": "When?"}]
    other_chat.context(new_id, messages)                    # read by the model as before the move
    assert "7:15" in messages[0]["content"] and "painted blue" in messages[0]["content"]
    assert [m.content for m in other.branch(new_id)] == ["When does the ferry leave?"]

    old_id = conversation_io.import_data(other, OLD_EXPORT)
    assert [m.content for m in other.branch(old_id)] == ["When?", "At 7:15."]
    assert other.get(old_id).system_prompt == "Be brief." and other_chat.attached(old_id) == []

    bad = dict(OLD_EXPORT, version=2, documents=[{"name": "x.md", "parts": "not a list"}])
    with pytest.raises(UserError, match="attached document 1 of the export is malformed"):
        conversation_io.import_data(other, bad)
    assert len(other.conversations()) == 2                  # refused before anything was written
