"""JSON-schema keywords and grammars (hisho.core.formats.schema): bounded numbers' GBNF matches exactly the
numbers in bounds (checked against every number near them, the GBNF read as a regular expression), and every
keyword no grammar enforces is refused with where it is."""

from __future__ import annotations

import re
from typing import Any

import pytest

from hisho.core.formats import schema as S


def as_regex(gbnf: str) -> re.Pattern[str]:
    """The GBNF these rules use (quoted literals, character classes, groups, ``|``, ``?``, ``+``, ``*``)."""
    out = re.sub(r'"([^"]*)"', lambda m: re.escape(m.group(1)), gbnf)
    return re.compile(out.replace(" ", ""))


@pytest.mark.parametrize(("lo", "hi"), [(1, 5), (0, 0), (-5, 5), (-1200, -7), (7, 1234), (None, 3), (-3, None),
                                         (10, 10), (99, 101), (0, 1000)])
def test_integer_ranges_are_exact(lo: int | None, hi: int | None) -> None:
    pattern = as_regex(S.integer_range(lo, hi))
    for n in range(-1500, 1500):
        inside = (lo is None or n >= lo) and (hi is None or n <= hi)
        assert bool(pattern.fullmatch(str(n))) == inside, (lo, hi, n)
    assert not pattern.fullmatch("007") and not pattern.fullmatch("-0") and not pattern.fullmatch("+1")


@pytest.mark.parametrize("node", [
    {"type": "number", "minimum": 0, "maximum": 5}, {"type": "number", "exclusiveMinimum": 0, "maximum": 1},
    {"type": "number", "minimum": -2, "exclusiveMaximum": 3}, {"type": "number", "exclusiveMinimum": -10,
                                                               "exclusiveMaximum": -2},
    {"type": "number", "minimum": 3}, {"type": "number", "maximum": -1},
    {"type": "integer", "exclusiveMinimum": 0, "exclusiveMaximum": 4},
    {"type": "integer", "minimum": 1, "exclusiveMinimum": True, "maximum": 3}])
def test_number_ranges_are_exact(node: dict[str, Any]) -> None:
    S.check(node, "x")
    rule = S.bounded_rule(node)
    assert rule is not None
    pattern = as_regex(rule)
    lo, hi = node.get("minimum", node.get("exclusiveMinimum")), node.get("maximum", node.get("exclusiveMaximum"))
    lo = node.get("exclusiveMinimum") if isinstance(node.get("exclusiveMinimum"), int) and \
        not isinstance(node.get("exclusiveMinimum"), bool) else lo
    lo_open = "exclusiveMinimum" in node
    hi_open = "exclusiveMaximum" in node
    texts = [f"{n / 4:g}" for n in range(-60, 60)] + ["2.50", "5.000", "0.0", "-0.5", "3.0001", "1.10"]
    for text in texts:
        v = float(text)
        inside = (lo is None or (v > lo if lo_open else v >= lo)) and (hi is None or (v < hi if hi_open else v <= hi))
        if node["type"] == "integer":
            inside = inside and "." not in text
        assert bool(pattern.fullmatch(text)) == inside, (node, text)


@pytest.mark.parametrize(("node", "param"), [
    ({"type": "object", "properties": {"rating": {"type": "integer", "multipleOf": 2}}},
     "s.properties.rating.multipleOf"),
    ({"type": "array", "items": {"type": "string"}, "uniqueItems": True}, "s.uniqueItems"),
    ({"type": "number", "maximum": 4.5}, "s.maximum"),
    ({"type": "string", "minimum": 3}, "s.minimum"),
    ({"type": "string", "format": "email"}, "s.format"),
    ({"type": "string", "pattern": "[a-z]+"}, "s.pattern"),
    ({"$ref": "#/$defs/nowhere"}, "s.$ref"),
    ({"type": "object", "properties": {"a": {"anyOf": [{"type": "int"}]}}}, "s.properties.a.anyOf[0].type"),
    ({"type": "object", "minProperties": 1}, "s.minProperties"),
    ({"type": "integer", "minimum": 5, "maximum": 1}, "s.minimum"),
    ({"type": "array", "maxItems": 3}, "s.maxItems"),
    ("string", "s"),
])
def test_unenforced_keywords_are_refused_where_they_are(node: Any, param: str) -> None:
    with pytest.raises(S.SchemaProblem) as err:
        S.check(node, "s")
    assert err.value.param == param
    assert "Error" not in err.value.message and "assert" not in err.value.message


def test_schemas_the_grammar_enforces_pass() -> None:
    S.check({"type": "object", "additionalProperties": False, "required": ["a"], "$defs": {"p": {"type": "string"}},
             "properties": {"a": {"$ref": "#/$defs/p"}, "b": {"type": "array", "items": {"type": "integer"},
                                                             "maxItems": 3, "uniqueItems": False},
                            "c": {"type": "string", "format": "date", "description": "when"},
                            "d": {"anyOf": [{"type": "integer", "minimum": 0}, {"type": "null"}]}}}, "s")
    assert S.bounded_rule({"type": "integer"}) is None and S.bounded_rule({"enum": [1, 2], "minimum": 0}) is None
