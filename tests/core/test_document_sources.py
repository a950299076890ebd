"""An answer about attached documents names the passages it rests on; a sent message knows which documents were
attached with it."""

from __future__ import annotations

from hisho.core.documents.sources import Attached, Passage, Sent, attachments_by_message, sources_for

PASSAGES = [
    Passage("report.docx", "§ Summary", "Sales rose by twelve percent in the northern region this year."),
    Passage("report.docx", "§ Costs", "Costs of shipping fell after the new warehouse opened in March."),
    Passage("report.docx", "§ Staff", "Two new pilots were hired for the harbour in the autumn."),
    Passage("report.docx", "§ Outlook", "The board expects steady demand and no new borrowing next year."),
]


def test_cited_references_come_first_then_shared_words() -> None:
    answer = "Shipping got cheaper once the warehouse opened [§ Costs]; sales rose by twelve percent."
    got = sources_for(PASSAGES, "What happened to costs?", answer)
    assert [p.ref for p in got][:2] == ["§ Costs", "§ Summary"]
    assert all(p.ref != "§ Staff" for p in got)  # shares no word with the question or the answer


def test_an_answer_sharing_nothing_has_no_sources() -> None:
    assert sources_for(PASSAGES, "Hello?", "Hi! How can I help?") == []
    assert sources_for([], "q", "a") == []


def test_long_passages_show_an_excerpt() -> None:
    p = Passage("a.pdf", "p. 3", "word " * 200)
    assert p.label == "a.pdf · p. 3" and len(p.excerpt) <= 165 and p.excerpt.endswith("…")


def test_documents_belong_to_the_message_sent_after_them() -> None:
    docs = [Attached("a.pdf", 10.0), Attached("b.docx", 25.0), Attached("late.txt", 99.0)]
    msgs = [Sent(1, "user", 5.0), Sent(2, "assistant", 6.0), Sent(3, "user", 20.0), Sent(4, "assistant", 21.0),
            Sent(5, "user", 30.0)]
    assert attachments_by_message(docs, msgs) == {3: ["a.pdf"], 5: ["b.docx"]}


def test_the_viewer_text_joins_a_pdfs_printed_lines_into_paragraphs() -> None:
    """A PDF's text breaks at the end of every printed line; the document viewer shows paragraphs, a word
    hyphenated across lines whole again, and keeps blank lines, list items and a paragraph's short last line."""
    from hisho.core.documents.sources import reflow

    pdf = ("The keeper walked up the spiral stairs every evening to light the\n"
           "lamp, which could be seen from thirty kilometres away on a clear\n"
           "night, according to the harbour's records.\n"
           "He wrote in the log.\n\n"
           "Supplies came by boat twice a month, weather permit-\n"
           "ting, and included:\n"
           "- oil for the lamp\n"
           "- flour and salt")
    assert reflow(pdf) == (
        "The keeper walked up the spiral stairs every evening to light the lamp, which could be seen from thirty "
        "kilometres away on a clear night, according to the harbour's records.\nHe wrote in the log.\n\n"
        "Supplies came by boat twice a month, weather permitting, and included:\n- oil for the lamp\n"
        "- flour and salt")
    assert reflow("One line only.") == "One line only."
