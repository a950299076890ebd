""""Ask about it": approach choice, retrieval of relevant parts, the conversation a summary opens as, and the
before_prompt hook on a real ConversationStore and database (a word counter stands in for the tokenizer)."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

from hisho.core.conversations.store import ConversationStore
from hisho.core.db import Database
from hisho.core.documents.ask import (
    ASK_CHUNKS,
    ASK_WHOLE,
    DocumentContext,
    attach,
    load_attachment,
    open_conversation,
    plan_chat,
    question_room,
    relevant_parts,
    summary_levels,
)
from hisho.core.documents.cache import SummaryCache
from hisho.core.documents.model import Document, Section
from hisho.core.documents.reading import summary_request


def words(text: str) -> int:
    return len(text.split())


def doc(n_pages: int) -> Document:
    topics = ["harbour ferry schedule", "library opening hours", "bridge painting budget", "school lunch menu"]
    sections = [Section(f"Page {i} is about the {topics[i % 4]}. " + "filler text here " * 50, f"p. {i}", i)
                for i in range(1, n_pages + 1)]
    return Document(Path("town.pdf"), "pdf", "sha-town", sections)


def test_short_document_goes_whole_into_the_system_prompt() -> None:
    att = attach([doc(3)], "A summary.", words, 4096)
    assert att.approach == "whole"
    # The pages the model is given whole are its parts too: answers' sources and the summary's pages.
    assert [ref for ref, _ in att.parts] == ["town.pdf, p. 1", "town.pdf, p. 2", "town.pdf, p. 3"]
    assert att.system_prompt.startswith(ASK_WHOLE) and "# town.pdf" in att.system_prompt
    assert "KV is computed once" in att.note


def test_long_document_answers_from_relevant_parts() -> None:
    long = doc(40)
    att = attach([long], "A summary.", words, 2048)
    assert att.approach == "chunks" and len(att.parts) == 40
    assert "most relevant parts" in att.note
    picked = relevant_parts(att.parts, "When does the ferry leave the harbour?", words, 300)
    assert picked and all("harbour ferry" in att.parts[i][1] for i in picked)
    assert len(picked) <= 300 // 150 + 1
    # A common word alone ("the") never makes a part relevant.
    assert relevant_parts(att.parts, "What is the one?", words, 300) == []
    assert relevant_parts(att.parts, "xylophone quantum", words, 300) == []
    # Question text is never FTS5 query syntax: quotes, operators and stars are just words (or nothing).
    assert relevant_parts(att.parts, 'ferry" OR harbour* NOT (NEAR', words, 300) == picked
    # Best first (the order the model gets them and the answer's sources are numbered in): an exact page wins.
    att.parts[33] = ("p. 33", "The harbour ferry leaves the harbour at seven; the ferry returns at noon.")
    assert relevant_parts(att.parts, "When does the ferry leave the harbour?", words, 300)[0] == 33


def test_summary_opens_as_conversation_and_hook_adds_parts(tmp_path: Path) -> None:
    db = Database(tmp_path / "h.sqlite3")
    cache = SummaryCache(db)
    store = ConversationStore(db)
    long = doc(40)
    cid, att = open_conversation(store, cache.db, [long], "Town summary [pp. 1–40].", words, 2048)
    conv = store.get(cid)
    assert conv.title == "Summary: town.pdf" and conv.system_prompt == att.system_prompt
    assert [(m.role, m.content) for m in store.branch(cid)] == [
        ("user", summary_request("town.pdf")), ("assistant", "Town summary [pp. 1–40].")]
    assert load_attachment(cache.db, cid) is not None
    hook = DocumentContext(cache.db, words, lambda: 2048)
    messages = [{"role": "system", "content": conv.system_prompt},
                {"role": "user", "content": "What is the library opening hours plan?"}]
    hook(SimpleNamespace(conversation_id=cid), messages)
    sent = messages[-1]["content"]
    assert sent.startswith("Relevant parts of the document:\n\n[p. ")
    assert sent.endswith("Question: What is the library opening hours plan?")
    assert "library opening hours" in sent and "harbour ferry" not in sent
    # A conversation without a long document is left alone.
    other = store.create("plain")
    plain = [{"role": "user", "content": "hi there library"}]
    hook(SimpleNamespace(conversation_id=other.id), plain)
    assert plain == [{"role": "user", "content": "hi there library"}]


def test_a_long_documents_chat_leaves_room_for_its_first_question() -> None:
    """The summary is held once (the chat's first answer), and a summary whose part-by-part list would leave no
    room for a question, its passages and an answer opens as its overview, saying so."""
    long = doc(40)
    overview = "Town overview [pp. 1–40]."
    full = overview + "\n\nBy part:\n" + "\n".join(f"- [p. {i}] " + "word " * 60 for i in range(1, 41))

    def count_messages(messages: list[dict[str, str]]) -> int:
        return sum(words(m["content"]) + 4 for m in messages)

    tight = plan_chat([long], summary_levels(full), words, count_messages, 4096)
    assert tight.attachment.approach == "chunks" and tight.attachment.system_prompt == ASK_CHUNKS
    assert tight.shortened and tight.summary == overview and "short summary" in tight.attachment.note
    assert tight.prefix_tokens + question_room(4096) <= 4096
    assert "a context of 5,120 tokens would hold the whole summary" in tight.attachment.note
    assert [m["content"] for m in tight.messages][-1] == overview
    roomy = plan_chat([long], summary_levels(full), words, count_messages, 8192)
    assert roomy.attachment.approach == "chunks" and not roomy.shortened and roomy.summary == full
    assert roomy.prefix_tokens + question_room(8192) <= 8192
