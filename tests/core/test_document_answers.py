"""Answers you can check, on a 30-page PDF made here (pypdfium2; known sentences on known pages): the question
whose answer is on page 17 is given the page-17 passage first, that choice is kept, and the answer shows it as
source 1, located in the document's text; a made-up answer gets "the document may not say this"; a summary
shows the pages it came from (a long document's parts by page range, one read whole by its best passages) and
carries its "too small" verdict. A word counter stands in for the tokenizer: no model."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

from hisho.core.conversations.store import ConversationStore
from hisho.core.db import Database
from hisho.core.documents import plan as P
from hisho.core.documents.ask import (
    PASSAGE_TOKENS,
    DocumentContext,
    given_for,
    open_conversation,
    question_key,
    record_given,
    whole_attachment,
)
from hisho.core.documents.attached import ChatDocuments
from hisho.core.documents.cache import SummaryCache
from hisho.core.documents.extract import extract
from hisho.core.documents.extras import read_extras
from hisho.core.documents.grounding import NOTE
from hisho.core.documents.model import Document
from hisho.core.documents.quality import TOO_SMALL
from hisho.core.documents.sources import by_part, lay_out, pages_of, reflow
from tests.fixtures.docs.make import make_pdf

FACT_PAGE = 17
FACT = "The lighthouse keeper Marta Olsen painted the tower blue in 1987 after the winter storm."
QUESTION = "Who painted the lighthouse tower blue?"
N_CTX = 4096   # the document (~5,400 words) does not fit: questions get passages, n_ctx / 8 = 512 words of them
TOPICS = ["harbour dues", "ferry timetable", "fish market", "school roof", "bus shelter", "library books"]


def page_text(n: int) -> str:
    """About 180 words (a passage is one page): one known sentence, then filler that names no fact of another
    page."""
    topic = TOPICS[n % len(TOPICS)]
    lines = [f"Page {n} of the town report covers the {topic}."]
    if n == FACT_PAGE:
        lines.append(FACT)
    if n == 5:
        lines.append("The lighthouse is closed to visitors in winter.")
    lines += [f"Line {k}: the council noted progress on the {topic} and agreed to review it in spring."
              for k in range(1, 11)]
    return "\n".join(lines)


def report_pdf(folder: Path) -> Path:
    return make_pdf(folder / "report.pdf", [page_text(n) for n in range(1, 31)])


def words(text: str) -> int:
    return len(text.split())


def passages_of(doc: Document) -> list[tuple[str, str]]:
    """The passages a long document's questions are given, as the summary job makes them."""
    return [(f"{doc.name}, {c.refs}", c.text) for c in P.pack_sections(doc.sections, words, PASSAGE_TOKENS)]


class Docs:
    """The two stores ``read_extras`` reads, as the root's ``Documents`` gives them."""

    def __init__(self, db: Database) -> None:
        self._cache = SummaryCache(db)
        self._chat = ChatDocuments(db, words, lambda: 2048)

    def cache(self) -> SummaryCache:
        return self._cache

    def chat_documents(self) -> ChatDocuments:
        return self._chat


def ask(store: ConversationStore, db: Database, cid: int, question: str, answer: str) -> int:
    """The question as the chat sends it (hook, then the kept passages), and its stored answer's id."""
    leaf = store.get(cid).leaf_id
    messages = [{"role": "system", "content": store.get(cid).system_prompt},
                {"role": "user", "content": question}]
    given = DocumentContext(db, words, lambda: N_CTX).shape(SimpleNamespace(conversation_id=cid), messages)
    assert given is not None
    record_given(db, cid, question, given)
    q = store.add_message(cid, "user", question, parent_id=leaf)
    return int(store.add_message(cid, "assistant", answer, parent_id=q.id).id)


def test_the_page_17_passage_is_given_first_and_shown_as_source_1(tmp_path: Path) -> None:
    doc = extract(report_pdf(tmp_path))
    assert doc.pages == 30 and FACT.split(" in ")[0] in doc.sections[FACT_PAGE - 1].text
    db = Database(tmp_path / "h.sqlite3")
    store = ConversationStore(db)
    docs = Docs(db)
    parts = passages_of(doc)
    cid, att = open_conversation(store, docs.cache().db, [doc], "A town report.", words, N_CTX, parts)
    assert att.approach == "chunks"

    right = ask(store, db, cid, QUESTION, "Marta Olsen, the lighthouse keeper, painted the tower blue in 1987.")
    kept = given_for(db, cid)[question_key(QUESTION)]
    # Best first: page 17 holds the answer, page 5 only names the lighthouse; no other page shares a word.
    assert [pages_of(ref) for ref, _ in kept] == [[FACT_PAGE], [5]]
    assert FACT.split(" in ")[0] in kept[0][1]
    wrong = ask(store, db, cid, "Who built the lighthouse?",
                "Captain Henrik Dahl built the lighthouse in 1902 from granite brought from Bergen.")

    found = read_extras(docs, cid, store.branch(cid))
    first = found.sources[right][0]
    assert first.number == 1 and first.label == f"report.pdf, p. {FACT_PAGE}"
    assert [s.label for s in found.sources[right]] == [ref for ref, _ in kept]   # all given, in that order
    group = found.groups[first.group]
    text, spans = lay_out(group.passages)
    start, end = spans[first.first]
    assert FACT.split(" in ")[0] in text[start:end] and text[start:end] == reflow(group.passages[first.first].text)
    assert found.notes[right] == ""
    assert found.notes[wrong].startswith(NOTE) and "henrik" in found.notes[wrong]


def test_a_long_summary_shows_each_parts_pages(tmp_path: Path) -> None:
    doc = extract(report_pdf(tmp_path))
    db = Database(tmp_path / "h.sqlite3")
    store = ConversationStore(db)
    docs = Docs(db)
    summary = ("The report covers the town's works.\n\nBy part:\n- [pp. 1–10] Harbour and ferries.\n"
               "- [pp. 11–20] The lighthouse was painted.\n- [pp. 21–30] Schools and buses.")
    assert by_part(summary) == ["pp. 1–10", "pp. 11–20", "pp. 21–30"]
    cid, _ = open_conversation(store, docs.cache().db, [doc], summary, words, N_CTX, passages_of(doc))
    found = read_extras(docs, cid, store.branch(cid))
    summary_id = store.branch(cid)[-1].id
    assert summary_id in found.summaries and found.banners[summary_id] == ""
    shown = found.sources[summary_id]
    assert [s.label for s in shown] == ["report.pdf, pp. 1–10", "report.pdf, pp. 11–20", "report.pdf, pp. 21–30"]
    passages = found.groups[shown[1].group].passages
    assert pages_of(passages[shown[1].first].ref) == [11] and pages_of(passages[shown[1].last].ref) == [20]


def test_a_summary_read_whole_shows_the_pages_it_rests_on_and_its_verdict(tmp_path: Path) -> None:
    doc = extract(report_pdf(tmp_path))
    db = Database(tmp_path / "h.sqlite3")
    store = ConversationStore(db)
    docs = Docs(db)
    verdict = f"This summary is mostly repetition (60% repeats itself): the model tiny {TOO_SMALL}. A model " \
              "that fits this machine: Qwen3 4B, on the Models page."
    summary = f"Marta Olsen painted the lighthouse tower blue; the fish market was reviewed.\n\n⚠ {verdict}"
    assert len(whole_attachment([doc]).parts) == 30   # read whole, its pages are still its passages
    cid = open_conversation(store, docs.cache().db, [doc], summary, words, 100_000)[0]
    found = read_extras(docs, cid, store.branch(cid))
    summary_id = store.branch(cid)[-1].id
    assert found.banners[summary_id] == verdict
    shown = found.sources[summary_id]
    assert shown and f"p. {FACT_PAGE}" in [s.label.split(", ")[1] for s in shown]
    firsts = [s.first for s in shown]
    assert firsts == sorted(firsts)  # in page order


def test_an_answer_given_no_passage_is_judged_only_when_it_speaks_of_the_document(tmp_path: Path) -> None:
    doc = extract(report_pdf(tmp_path))
    db = Database(tmp_path / "h.sqlite3")
    store = ConversationStore(db)
    docs = Docs(db)
    cid, _ = open_conversation(store, docs.cache().db, [doc], "A town report.", words, N_CTX, passages_of(doc))
    hello = ask(store, db, cid, "Hello there!", "Hello! How can I help you today?")
    made_up = ask(store, db, cid, "Quelle heure est-il?", "The fish market opens at dawn on Mondays near pier 9.")
    kept = given_for(db, cid)
    assert kept[question_key("Hello there!")] == [] and kept[question_key("Quelle heure est-il?")] == []
    found = read_extras(docs, cid, store.branch(cid))
    assert found.notes.get(hello, "") == "" and found.sources[hello] == []
    assert "rests on none" in found.notes[made_up]
