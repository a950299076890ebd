"""Whether an answer about a document rests on the passages it was given: "the document may not say this".

``check(answer, passages)`` compares the answer's key terms (its content words: not the common words of
``sources.STOPWORDS``, not words of one or two letters, but every number) with the words of the passages the
model was given. A term counts as found when a passage has a word with the same stem (the first
``STEM_CHARS`` letters: "warranties" finds "warranty", "painted" finds "painting"). The answer gets the note
when more than ``UNSUPPORTED_SHARE`` of its distinct key terms are in no passage, or when it was given no
passage at all.

Why a share, and why more than half: an answer grounded in its passages still says things in its own words
("the ferry *leaves* at *seven*" for a page that says "departs at 07:00"), adds the question's framing and the
model's connectives ("therefore", "according"), so a few missing terms are normal; a paraphrase of a page keeps
most of its nouns, names and figures. An answer made up beside the passages (the common failure of a small
model: a fluent text about the topic, not the page) has most of its nouns, names and figures in none of them.
Half splits those two: below it a fair paraphrase is never flagged, above it the answer is mostly words the
document did not give. Answers with fewer than ``MIN_TERMS`` key terms ("Yes.", "On page 3.") are not judged:
one missing word would be all of it. The note is a hint to check the sources, not a verdict: it says "may".
Pure text in and out: no Qt, no model, no database.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass

from hisho.core.documents.sources import STOPWORDS

UNSUPPORTED_SHARE = 0.5
MIN_TERMS = 3
STEM_CHARS = 5
SHOWN_TERMS = 5           # how many of the missing terms the note names
NOTE = "The document may not say this"

_WORD = re.compile(r"\w+", re.UNICODE)
# Words an answer adds about the document itself, not about what it says: never evidence either way.
_FRAMING = frozenset("""document documents page pages section passage passages part parts text says said
according mentioned mentions states stated provided given answer question however therefore also""".split())


def _stem(word: str) -> str:
    return word[:STEM_CHARS]


def key_terms(text: str) -> list[str]:
    """The text's distinct content words, lower-cased, in first-seen order (numbers included)."""
    out: list[str] = []
    for w in _WORD.findall(text.lower()):
        keep = w.isdigit() or (len(w) > 2 and w not in STOPWORDS and w not in _FRAMING)
        if keep and w not in out:
            out.append(w)
    return out


@dataclass(frozen=True)
class Grounding:
    terms: int                  # the answer's distinct key terms
    missing: tuple[str, ...]    # those in no passage, in the answer's order
    given: bool                 # the answer was given at least one passage

    @property
    def share(self) -> float:
        return len(self.missing) / self.terms if self.terms else 0.0

    @property
    def unsupported(self) -> bool:
        if not self.given:
            return self.terms > 0
        return self.terms >= MIN_TERMS and self.share > UNSUPPORTED_SHARE

    def note(self) -> str:
        """The line under the answer; "" when it rests on its passages."""
        if not self.unsupported:
            return ""
        if not self.given:
            return f"{NOTE}: no passage of it matched the question, so the answer rests on none."
        named = ", ".join(self.missing[:SHOWN_TERMS]) + (" …" if len(self.missing) > SHOWN_TERMS else "")
        return (f"{NOTE}: {len(self.missing)} of the answer's {self.terms} key terms are in none of the passages "
                f"it was given ({named}). Check the sources.")


def check(answer: str, passages: Iterable[str]) -> Grounding:
    """How far ``answer`` rests on ``passages`` (the texts the model was given with the question)."""
    texts = list(passages)
    words = {w for t in texts for w in _WORD.findall(t.lower())}
    stems = {_stem(w) for w in words}
    terms = key_terms(answer)
    # A figure is found only as itself: "17" is not "1789".
    missing = tuple(t for t in terms if (t not in words if t.isdigit() else _stem(t) not in stems))
    return Grounding(len(terms), missing, any(t.strip() for t in texts))
