"""JSON schemas as grammars: which keywords a constrained reply honours, and the GBNF of a bounded number.

A schema (``response_format``, a tool's ``parameters``) becomes a grammar through llama.cpp's converter in the
engine (``engine/decode/grammar.py``), which drops what it cannot express without a word. ``check`` runs first,
in the API, and refuses any keyword the grammar would not enforce, naming where it is (``SchemaProblem.param``,
e.g. ``response_format.json_schema.schema.properties.rating.multipleOf``) in plain words: a client is never
told its schema holds when it does not. Bounds (``minimum``, ``maximum``, ``exclusiveMinimum``,
``exclusiveMaximum``) on an ``integer``, and integer bounds on a ``number``, are enforced: ``bounded_rule`` gives
their GBNF, which the engine's converter uses in place of the plain number rule.

Rules of use: pure functions, no I/O; ``check`` raises ``SchemaProblem`` only.
"""

from __future__ import annotations

import math
from typing import Any

TYPES = ("object", "array", "string", "number", "integer", "boolean", "null")
# Formats the converter writes a grammar for; any other would be ignored by it.
FORMATS = ("date", "time", "date-time", "uuid", "uuid1", "uuid2", "uuid3", "uuid4", "uuid5")
BOUNDS = ("minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum")
# Keywords that say what a value must be, which no grammar here enforces.
UNENFORCED = {
    "multipleOf": "a multiple of a number cannot be expressed in the grammar",
    "uniqueItems": "distinct array items cannot be expressed in the grammar",
    "contains": "'contains' is not enforced here",
    "minContains": "'minContains' is not enforced here",
    "maxContains": "'maxContains' is not enforced here",
    "minProperties": "'minProperties' is not enforced here",
    "maxProperties": "'maxProperties' is not enforced here",
    "patternProperties": "'patternProperties' is not enforced here",
    "propertyNames": "'propertyNames' is not enforced here",
    "dependentRequired": "'dependentRequired' is not enforced here",
    "dependentSchemas": "'dependentSchemas' is not enforced here",
    "dependencies": "'dependencies' is not enforced here",
    "not": "'not' is not enforced here",
    "if": "'if'/'then'/'else' are not enforced here",
    "unevaluatedProperties": "'unevaluatedProperties' is not enforced here",
    "unevaluatedItems": "'unevaluatedItems' is not enforced here",
    "contentSchema": "'contentSchema' is not enforced here",
}
# Bounded numbers are written with at most this many digits before the point (the converter's own limit is 16).
MAX_DIGITS = 16


class SchemaProblem(ValueError):
    """A schema keyword no grammar here enforces, or a schema that is not one; ``param`` says where."""

    def __init__(self, param: str, message: str) -> None:
        super().__init__(f"{param}: {message}")
        self.param = param
        self.message = message


def check(schema: Any, param: str, *, hints: bool = False) -> None:
    """Raise ``SchemaProblem`` for the first part of ``schema`` (found at ``param``) a grammar would not enforce.
    ``hints``: a tool's parameters, where such keywords are the client's to check (the model reads them in the
    template, ``loosen`` leaves them out of the grammar); only a malformed schema is refused then."""
    if hints:
        schema = loosen(schema)
    _check(schema, param, schema)


def loosen(schema: Any) -> Any:
    """``schema`` without what the grammar would not enforce (keywords, string formats, patterns that do not
    match a whole string, lengths beside them), for a tool's grammar: the call is still well-formed JSON of the
    schema's shape, and the client checks the rest."""
    if isinstance(schema, list):
        return [loosen(s) for s in schema]
    if not isinstance(schema, dict):
        return schema
    out = {k: loosen(v) for k, v in schema.items() if k not in UNENFORCED}
    fmt, pattern = out.get("format"), out.get("pattern")
    if fmt is not None and fmt not in FORMATS:
        del out["format"]
    if pattern is not None and (not isinstance(pattern, str) or not pattern.startswith("^")
                                or not pattern.endswith("$")):
        del out["pattern"]
    if "format" in out or "pattern" in out:
        out.pop("minLength", None)
        out.pop("maxLength", None)
    if isinstance(out.get("allOf"), list):
        allowed = {"properties", "required", "$ref", "anyOf", "type", "title", "description", "additionalProperties"}
        out["allOf"] = [{k: v for k, v in part.items() if k in allowed} if isinstance(part, dict) else part
                        for part in out["allOf"]]
    kind = out.get("type")
    whole = all(isinstance(out[k], (int, float)) and not isinstance(out[k], bool) and math.isfinite(out[k])
                and out[k] == int(out[k]) and abs(out[k]) < 10 ** MAX_DIGITS for k in BOUNDS
                if k in out and not isinstance(out[k], bool))
    if kind not in ("integer", "number") or not whole or any(k in out for k in ("enum", "const", "$ref", "anyOf",
                                                                                 "oneOf")):
        for key in BOUNDS:
            out.pop(key, None)
    return out


def _check(node: Any, param: str, root: Any) -> None:
    if isinstance(node, bool):
        return
    if not isinstance(node, dict):
        raise SchemaProblem(param, "a schema must be a JSON object")
    for key, why in UNENFORCED.items():
        if key in node and not (key == "uniqueItems" and node[key] is False):
            raise SchemaProblem(f"{param}.{key}", f"{why}; remove '{key}' (or check it after the reply)")
    kinds = node.get("type")
    for kind in kinds if isinstance(kinds, list) else [kinds] if kinds is not None else []:
        if kind not in TYPES:
            raise SchemaProblem(f"{param}.type", f"{kind!r} is not a JSON schema type (one of {', '.join(TYPES)})")
    _check_ref(node, param, root)
    _check_bounds(node, param)
    _check_strings(node, param)
    if "minItems" in node or "maxItems" in node:
        if "items" not in node and "prefixItems" not in node:
            raise SchemaProblem(f"{param}.{'minItems' if 'minItems' in node else 'maxItems'}",
                                "array lengths are enforced only with 'items' (say what the items are)")
    for key in ("properties", "$defs", "definitions"):
        children = node.get(key)
        if children is not None:
            if not isinstance(children, dict):
                raise SchemaProblem(f"{param}.{key}", f"'{key}' must be an object of schemas")
            for name, child in children.items():
                _check(child, f"{param}.{key}.{name}", root)
    for key in ("anyOf", "oneOf", "allOf", "prefixItems"):
        children = node.get(key)
        if children is not None:
            if not isinstance(children, list) or not children:
                raise SchemaProblem(f"{param}.{key}", f"'{key}' must be a non-empty list of schemas")
            for k, child in enumerate(children):
                _check(child, f"{param}.{key}[{k}]", root)
    if "allOf" in node:
        for k, part in enumerate(node["allOf"]):
            if isinstance(part, dict) and set(part) - {"properties", "required", "$ref", "anyOf", "type", "title",
                                                       "description", "additionalProperties"}:
                raise SchemaProblem(f"{param}.allOf[{k}]", "'allOf' is enforced only for parts that add object "
                                                           "properties")
    if isinstance(node.get("items"), list):  # draft 4's tuple form
        for k, child in enumerate(node["items"]):
            _check(child, f"{param}.items[{k}]", root)
    for key in ("items", "additionalProperties"):
        if key == "items" and isinstance(node.get(key), list):
            continue
        if isinstance(node.get(key), (dict, bool)):
            _check(node[key], f"{param}.{key}", root)
        elif key in node and node[key] is not None:
            raise SchemaProblem(f"{param}.{key}", f"'{key}' must be a schema")


def _check_ref(node: dict[str, Any], param: str, root: Any) -> None:
    ref = node.get("$ref")
    if ref is None:
        return
    if not isinstance(ref, str) or not ref.startswith("#"):
        raise SchemaProblem(f"{param}.$ref", "only references inside the schema ('#/$defs/…') are followed")
    target = root
    for part in [p for p in ref[1:].split("/") if p]:
        part = part.replace("~1", "/").replace("~0", "~")
        if not isinstance(target, dict) or part not in target:
            raise SchemaProblem(f"{param}.$ref", f"{ref!r} points to nothing in the schema")
        target = target[part]


def _check_strings(node: dict[str, Any], param: str) -> None:
    fmt = node.get("format")
    if fmt is not None and fmt not in FORMATS:
        raise SchemaProblem(f"{param}.format", f"the format {fmt!r} is not enforced here (only "
                                               f"{', '.join(FORMATS[:4])}); remove it or use a 'pattern'")
    pattern = node.get("pattern")
    if pattern is not None and (not isinstance(pattern, str) or not pattern.startswith("^")
                                or not pattern.endswith("$")):
        raise SchemaProblem(f"{param}.pattern", "a pattern must match the whole string here: start it with ^ "
                                                "and end it with $")
    if (fmt is not None or pattern is not None) and ("minLength" in node or "maxLength" in node):
        raise SchemaProblem(f"{param}.{'minLength' if 'minLength' in node else 'maxLength'}",
                            "a length is not enforced beside a 'format' or 'pattern' (put it in the pattern)")
    for key in ("minLength", "maxLength", "minItems", "maxItems"):
        value = node.get(key)
        if value is not None and (isinstance(value, bool) or not isinstance(value, int) or value < 0):
            raise SchemaProblem(f"{param}.{key}", f"'{key}' must be a whole number, 0 or more")


def _check_bounds(node: dict[str, Any], param: str) -> None:
    given = [k for k in BOUNDS if k in node]
    if not given:
        return
    for key in given:
        value = node[key]
        if key.startswith("exclusive") and isinstance(value, bool):
            if value and key.replace("exclusiveM", "m") not in node:
                raise SchemaProblem(f"{param}.{key}", f"'{key}': true needs '{key.replace('exclusiveM', 'm')}'")
            continue
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
            raise SchemaProblem(f"{param}.{key}", f"'{key}' must be a number")
    kind = node.get("type")
    if kind not in ("integer", "number") or any(k in node for k in ("enum", "const", "$ref", "anyOf", "oneOf")):
        raise SchemaProblem(f"{param}.{given[0]}", f"'{given[0]}' is enforced only on a schema of \"type\": "
                                                   "\"integer\" or \"number\" (alone, not in a list of types)")
    if kind == "number":
        for key in given:
            value = node[key]
            if not isinstance(value, bool) and value != int(value):
                raise SchemaProblem(f"{param}.{key}", f"a number's bound is enforced only where it is a whole "
                                                      f"number ({value} is not); use \"type\": \"integer\", or "
                                                      "a whole bound")
    lo, lo_open, hi, hi_open = _bounds(node)
    if lo is not None and hi is not None and (lo > hi or (lo == hi and (lo_open or hi_open))):
        raise SchemaProblem(f"{param}.{given[0]}", "no number lies between these bounds")
    if any(abs(v) >= 10 ** MAX_DIGITS for v in (lo, hi) if v is not None):
        raise SchemaProblem(f"{param}.{given[0]}", f"bounds of {MAX_DIGITS} digits or more are not enforced here")


def _bounds(node: dict[str, Any]) -> tuple[int | None, bool, int | None, bool]:
    """(low, low is exclusive, high, high is exclusive), rounded inward to whole numbers for an integer."""
    lo: float | None = node.get("minimum")
    hi: float | None = node.get("maximum")
    lo_open = hi_open = False
    ex_lo, ex_hi = node.get("exclusiveMinimum"), node.get("exclusiveMaximum")
    if ex_lo is True or ex_hi is True:  # draft 4: a flag on minimum / maximum
        lo_open, hi_open = ex_lo is True, ex_hi is True
    if isinstance(ex_lo, (int, float)) and not isinstance(ex_lo, bool) and (lo is None or ex_lo >= lo):
        lo, lo_open = ex_lo, True
    if isinstance(ex_hi, (int, float)) and not isinstance(ex_hi, bool) and (hi is None or ex_hi <= hi):
        hi, hi_open = ex_hi, True
    if node.get("type") == "integer":
        ilo = None if lo is None else (math.floor(lo) + 1 if lo_open else math.ceil(lo))
        ihi = None if hi is None else (math.ceil(hi) - 1 if hi_open else math.floor(hi))
        return ilo, False, ihi, False
    return (None if lo is None else int(lo)), lo_open, (None if hi is None else int(hi)), hi_open


# ----- GBNF of bounded numbers ---------------------------------------------------------------------------------

def bounded_rule(node: dict[str, Any]) -> str | None:
    """The GBNF (without its trailing ``space``) of an ``integer`` or ``number`` schema with bounds that ``check``
    passed; None for any other schema."""
    if not isinstance(node, dict) or node.get("type") not in ("integer", "number"):
        return None
    if not any(k in node for k in BOUNDS) or any(k in node for k in ("enum", "const", "$ref", "anyOf", "oneOf")):
        return None
    lo, lo_open, hi, hi_open = _bounds(node)
    if node["type"] == "integer":
        return integer_range(lo, hi)
    return _number_range(lo, lo_open, hi, hi_open)


_TOP = 10 ** MAX_DIGITS - 1


def integer_range(lo: int | None, hi: int | None) -> str:
    """GBNF of the integers from ``lo`` to ``hi`` (None: unbounded, up to MAX_DIGITS digits), written as JSON
    writes them (no leading zeros, no "+")."""
    lo = -_TOP if lo is None else lo
    hi = _TOP if hi is None else hi
    alts = []
    if lo < 0:
        alts += ['"-" ' + a for a in _magnitudes(max(1, -hi), -lo)]
    if hi >= 0:
        alts += _magnitudes(max(0, lo), hi)
    return "(" + " | ".join(alts) + ")"


def _number_range(lo: int | None, lo_open: bool, hi: int | None, hi_open: bool) -> str:
    """GBNF of the decimal numbers (no exponent) between whole-number bounds, each inclusive or not."""
    some, zero, nonzero = '("." [0-9]+)?', '("." "0"+)?', '"." [0-9]* [1-9] [0-9]*'
    lo_v = -_TOP if lo is None else lo
    hi_v = _TOP if hi is None else hi
    alts: list[str] = []

    def side(sign: str, near: int, near_open: bool, far: int, far_open: bool) -> None:
        """Magnitudes m = k.f on one side of zero with near <= m <= far (each end open or closed)."""
        if far - 1 >= near:  # k from near to far - 1: any fraction (k = near needs one if near is open)
            first = near + 1 if near_open else near
            if first <= far - 1:
                alts.extend(f"{sign}{m} {some}" for m in _magnitudes(first, far - 1))
            if near_open:
                alts.extend(f"{sign}{m} {nonzero}" for m in _magnitudes(near, near))
        if not far_open and (far > near or not near_open):  # k = far: only a zero fraction
            alts.extend(f"{sign}{m} {zero}" for m in _magnitudes(far, far))

    if lo_v < 0:  # negative numbers: magnitudes from max(0, -hi) to -lo
        near, near_open = (-hi_v, hi_open) if hi_v < 0 else (0, True)
        side('"-" ', near, near_open, -lo_v, lo_open if lo is not None else False)
    if hi_v >= 0 and not (hi_v == 0 and hi_open):
        near, near_open = (lo_v, lo_open) if lo_v >= 0 else (0, False)
        side("", near, near_open, hi_v, hi_open if hi is not None else False)
    return "(" + " | ".join(alts) + ")"


def _magnitudes(lo: int, hi: int) -> list[str]:
    """GBNF alternatives for the whole numbers ``lo``..``hi`` (0 <= lo <= hi), grouped by digit count."""
    out = []
    for digits in range(len(str(lo)), len(str(hi)) + 1):
        a = max(lo, 0 if digits == 1 else 10 ** (digits - 1))
        b = min(hi, 10 ** digits - 1)
        if a <= b:
            out += _same_length(str(a), str(b))
    return out


def _same_length(a: str, b: str) -> list[str]:
    """Alternatives for the numbers ``a``..``b``, both written with the same number of digits."""
    if not a:
        return [""]
    if a == b:
        return ['"' + a + '"']
    if a[0] == b[0]:
        return [f'"{a[0]}" {rest}'.rstrip() for rest in _same_length(a[1:], b[1:])]
    n = len(a) - 1
    out = []
    first, last = int(a[0]), int(b[0])
    if a[1:] != "0" * n:  # a's first digit, then a's rest up to all nines
        out += [f'"{a[0]}" {rest}'.rstrip() for rest in _same_length(a[1:], "9" * n)]
        first += 1
    if b[1:] != "9" * n:  # b's first digit, from all zeros up to b's rest
        tail = [f'"{b[0]}" {rest}'.rstrip() for rest in _same_length("0" * n, b[1:])]
        last -= 1
    else:
        tail = []
    if first <= last:
        out.append((f"[{first}-{last}]" + " [0-9]" * n).strip())
    return out + tail
