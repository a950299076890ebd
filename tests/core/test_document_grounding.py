""""The document may not say this": an answer whose key terms are mostly in none of the passages it was given
gets the note; one that rests on them does not (paraphrase, inflection and framing words allowed)."""

from __future__ import annotations

from hisho.core.documents.grounding import MIN_TERMS, NOTE, UNSUPPORTED_SHARE, check, key_terms

PAGE_17 = ("The lighthouse keeper Marta Olsen painted the tower blue in 1987, after the storm that broke the "
           "lantern glass. The work took three summers.")
PAGE_5 = "The harbour office opens at nine on weekdays and sells ferry tickets to Tern Island."


def test_an_answer_that_rests_on_its_passages_has_no_note() -> None:
    g = check("Marta Olsen, the lighthouse keeper, painted the tower blue in 1987.", [PAGE_5, PAGE_17])
    assert not g.unsupported and g.missing == () and g.note() == ""
    # Its own words for the same facts: inflections and a framing word or two are fine.
    g = check("According to the document, the keeper Marta Olsen repainted the towers blue; the painting "
              "took three summers.", [PAGE_17])
    assert not g.unsupported, g
    assert g.share <= UNSUPPORTED_SHARE


def test_an_answer_made_up_beside_its_passages_gets_the_note() -> None:
    g = check("The lighthouse was built by Captain Henrik Dahl in 1902 with granite shipped from Bergen.",
              [PAGE_5, PAGE_17])
    assert g.unsupported and g.share > UNSUPPORTED_SHARE
    assert {"henrik", "dahl", "1902", "granite", "bergen"} <= set(g.missing)
    assert "lighthouse" not in g.missing  # the topic is there; the facts are not
    assert g.note().startswith(NOTE) and "henrik" in g.note()


def test_figures_must_match_exactly() -> None:
    assert "198" in check("It was painted in 198 by Marta Olsen, the keeper.", [PAGE_17]).missing
    assert check("Painted in 1987 by Marta Olsen, the keeper.", [PAGE_17]).missing == ()


def test_no_passage_given_means_the_answer_rests_on_none() -> None:
    g = check("The warranty lasts ninety days.", [])
    assert g.unsupported and not g.given and "rests on none" in g.note()


def test_short_answers_are_not_judged() -> None:
    assert len(key_terms("Yes, on Tuesday.")) < MIN_TERMS
    assert not check("Yes, on Tuesday.", [PAGE_5]).unsupported
    assert key_terms("The the AND of 17 lighthouse Lighthouse") == ["17", "lighthouse"]
