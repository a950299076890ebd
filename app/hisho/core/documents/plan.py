"""Planning a summary job: prompts, token-sized chunks, one pass or map-reduce, and the ETA.

Rules:
- Sizes are tokens of the loaded model's tokenizer (``count`` is ``EngineClient.count_tokens``), never characters.
- One pass when prompt + document + reply fit the context. Otherwise chunks of at most ``chunk_tokens``:
  ``min(CHUNK_TARGET, n_ctx − prompt overhead − reply)``, cut at section borders (pages, headings) where a
  section fits, so each chunk carries the references it covers ("pp. 3–5", "§ Methods").
- Parallel sequences: as many as fit ``n_ctx`` at once (each in its own KV stream of ``seq_cells`` cells, in the
  job context the engine swaps in for the batch), at most ``max_parallel``.
- ``PROMPT_VERSION`` is part of every cache key: change it whenever a prompt or the sampling changes.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Callable
from dataclasses import dataclass, field

from hisho.core.documents.model import Document, Section, page_range
from hisho.core.units import CELL_PAD, padded_cells

PROMPT_VERSION = "sum-v1"
CHUNK_TARGET = 1024          # tokens; big enough for context, small enough to batch 8 in a 12K context
MIN_CHUNK = 128
SUMMARY_TOKENS = 200         # reply budget of a chunk summary or a combine step
FINAL_TOKENS = 400           # reply budget of the last (whole-document) summary
MAX_PARALLEL = 8
STRETCH = 1.25               # how much bigger than CHUNK_TARGET a chunk may grow to fill the last batch round

MAP_SYSTEM = ("You summarize one part of a longer document. Write 3 to 6 short bullet points with the key facts, "
              "names, numbers and conclusions of this part only. End each bullet with its reference in brackets, "
              "as given (for example [pp. 3–4]). Do not invent anything.")
REDUCE_SYSTEM = ("You combine partial summaries of one document into one summary. Keep the most important facts, "
                 "drop repetition, keep the references in brackets so a reader can find the source. "
                 "Write a short overview paragraph, then bullet points.")
SINGLE_SYSTEM = ("You summarize documents. Write a short overview paragraph, then bullet points with the key facts, "
                 "names, numbers and conclusions. Cite page or section references in brackets where given.")

Count = Callable[[str], int]
Messages = list[dict[str, str]]


def map_messages(doc_name: str, refs: str, text: str) -> Messages:
    return [{"role": "system", "content": MAP_SYSTEM},
            {"role": "user", "content": f"Document: {doc_name}\nPart: [{refs}]\n\n{text}"}]


def reduce_messages(doc_name: str, parts: list[str]) -> Messages:
    body = "\n\n".join(parts)
    return [{"role": "system", "content": REDUCE_SYSTEM},
            {"role": "user", "content": f"Document: {doc_name}\nPartial summaries in order:\n\n{body}"}]


def single_messages(doc_name: str, text: str) -> Messages:
    return [{"role": "system", "content": SINGLE_SYSTEM},
            {"role": "user", "content": f"Summarize this document.\nDocument: {doc_name}\n\n{text}"}]


def text_key(*parts: str) -> str:
    digest = hashlib.sha256()
    for p in parts:
        digest.update(p.encode("utf-8"))
        digest.update(b"\x00")
    return digest.hexdigest()[:32]


@dataclass
class Chunk:
    index: int
    text: str
    refs: str
    tokens: int

    @property
    def key(self) -> str:
        return text_key(self.refs, self.text)


@dataclass
class Plan:
    mode: str                   # "single" or "map_reduce"
    n_ctx: int
    input_tokens: int
    chunk_tokens: int
    n_parallel: int
    overhead_tokens: int
    chunks: list[Chunk] = field(default_factory=list)

    def as_dict(self) -> dict[str, object]:
        return {"mode": self.mode, "n_ctx": self.n_ctx, "input_tokens": self.input_tokens,
                "chunk_tokens": self.chunk_tokens, "n_parallel": self.n_parallel, "chunks": len(self.chunks)}


def make_plan(doc: Document, count: Count, n_ctx: int, *, overhead_tokens: int,
              summary_tokens: int = SUMMARY_TOKENS, final_tokens: int = FINAL_TOKENS,
              max_parallel: int = MAX_PARALLEL, chunk_target: int = CHUNK_TARGET) -> Plan:
    """Decide one pass vs map-reduce for ``doc`` in a context of ``n_ctx`` tokens.

    Sections are counted once (memoized); the whole text is counted only when the sum of its sections says it
    may fit, so a 500-page document is never sent to the tokenizer in one piece."""
    memo: dict[str, int] = {}
    tokenizer = count

    def counted(text: str) -> int:
        if text not in memo:
            memo[text] = tokenizer(text)
        return memo[text]

    count = counted
    room = n_ctx - overhead_tokens - final_tokens
    if sum(count(s.text) for s in doc.sections) <= room * 1.1:
        whole = doc.text
        total = count(whole)
        if total <= room:
            return Plan("single", n_ctx, total, total, 1, overhead_tokens,
                        [Chunk(0, whole, _refs(doc.sections), total)])
    return map_plan(doc, count, n_ctx, overhead_tokens=overhead_tokens, summary_tokens=summary_tokens,
                    max_parallel=max_parallel, chunk_target=chunk_target)


def map_plan(doc: Document, count: Count, n_ctx: int, *, overhead_tokens: int, summary_tokens: int = SUMMARY_TOKENS,
             max_parallel: int = MAX_PARALLEL, chunk_target: int = CHUNK_TARGET) -> Plan:
    """The map-reduce plan of ``doc`` (``make_plan`` without the one-pass check; the bench uses it directly)."""
    chunk_tokens = min(chunk_target, n_ctx - overhead_tokens - summary_tokens)
    if chunk_tokens < MIN_CHUNK:
        raise ValueError(f"a context of {n_ctx} tokens is too small to summarize in chunks (needs "
                         f"{overhead_tokens + summary_tokens + MIN_CHUNK})")
    chunks = pack_sections(doc.sections, count, chunk_tokens)
    per_seq = overhead_tokens + max(c.tokens for c in chunks) + summary_tokens
    n_parallel = max(1, min(max_parallel, n_ctx // seq_cells(per_seq), len(chunks)))
    if len(chunks) > n_parallel and len(chunks) % n_parallel:
        # A last round of a few chunks costs a whole round of decode steps for a few sequences (10 chunks on 8
        # sequences: 2 rounds, the second at 2/8 of the batch). Chunks up to STRETCH× bigger, when the
        # sequences' cells allow it, fill whole rounds instead (measured: the map phase of 10 -> 8 chunks).
        cells = (n_ctx // n_parallel) // CELL_PAD * CELL_PAD
        cap = min(int(chunk_tokens * STRETCH), cells - overhead_tokens - summary_tokens)
        fewer = _balanced(doc.sections, count, len(chunks) // n_parallel * n_parallel, cap)
        if fewer:
            chunks, chunk_tokens = fewer, max(c.tokens for c in fewer)
    return Plan("map_reduce", n_ctx, sum(c.tokens for c in chunks), chunk_tokens, n_parallel, overhead_tokens,
                chunks)


def _balanced(sections: list[Section], count: Count, n_chunks: int, cap: int) -> list[Chunk]:
    """The packing into at most ``n_chunks`` chunks of at most ``cap`` tokens with the smallest budget, or []
    if there is none. Sections are first cut into pieces of ~1/16 of a chunk so chunks can be evened out."""
    total = sum(count(s.text) for s in sections)
    lo = -(-total // max(1, n_chunks))
    if n_chunks < 1 or lo > cap:
        return []
    pieces = [part for s in sections for part in _split(s, count, max(MIN_CHUNK // 2, lo // 16))]
    best: list[Chunk] = []
    hi = cap
    while lo <= hi:  # packing more per chunk never makes more chunks: binary search on the budget
        mid = (lo + hi) // 2
        packed = pack_sections(pieces, count, mid)
        if len(packed) <= n_chunks:
            best, hi = packed, mid - 16
        else:
            lo = mid + 16
    return best


def seq_cells(tokens: int) -> int:
    """KV cells a sequence of ``tokens`` gets in a job context (its own stream, padded to 256 like llama.cpp)."""
    return padded_cells(tokens)


def _refs(sections: list[Section]) -> str:
    pages = [s.page for s in sections if s.page]
    if pages:
        return page_range(pages)
    refs: list[str] = []
    for s in sections:
        if s.ref not in refs:
            refs.append(s.ref)
    if len(refs) > 3:
        return f"{refs[0]} … {refs[-1]}"
    return "; ".join(refs)


def merge_refs(refs: list[str]) -> str:
    """One reference for consecutive parts: "pp. 1–3" + "pp. 4–6" -> "pp. 1–6"; headings -> "first … last"."""
    pages: list[int] = []
    for ref in refs:
        found = re.findall(r"(\d+)(?:–(\d+))?", ref) if ref.startswith("p") else []
        if not found:
            pages = []
            break
        for a, b in found:
            pages.extend(range(int(a), int(b or a) + 1))
    if pages:
        return page_range(pages)
    uniq = [r for i, r in enumerate(refs) if r and r not in refs[:i]]
    return uniq[0] if len(uniq) == 1 else f"{uniq[0]} … {uniq[-1]}" if uniq else ""


def pack_sections(sections: list[Section], count: Count, budget: int) -> list[Chunk]:
    """Greedy packing of whole sections into chunks of at most ``budget`` tokens; an oversized section is cut
    at paragraph, then line, then word borders. Every chunk is counted again as a whole (tokens at the seams
    differ from the sum of the parts), so no chunk ever exceeds the budget."""
    pieces: list[tuple[Section, int]] = []
    for s in sections:
        for part in _split(s, count, budget):
            pieces.append((part, count(part.text)))
    chunks: list[Chunk] = []
    group: list[Section] = []
    size = 0
    for section, n in pieces:
        if group and size + n + 2 > budget:
            chunks.extend(_close(group, count, budget, len(chunks)))
            group, size = [], 0
        group.append(section)
        size += n + 2
    if group:
        chunks.extend(_close(group, count, budget, len(chunks)))
    for i, c in enumerate(chunks):
        c.index = i
    return chunks


def _close(group: list[Section], count: Count, budget: int, index: int) -> list[Chunk]:
    text = "\n\n".join(s.text for s in group)
    n = count(text)
    if n <= budget or len(group) == 1:
        return [Chunk(index, text, _refs(group), n)]
    half = len(group) // 2
    return _close(group[:half], count, budget, index) + _close(group[half:], count, budget, index)


def _split(section: Section, count: Count, budget: int) -> list[Section]:
    n = count(section.text)
    if n <= budget:
        return [section]
    for sep in ("\n\n", "\n", " "):
        parts = [p for p in section.text.split(sep) if p.strip()]
        if len(parts) > 1:
            break
    else:
        sep = ""
        # One unbroken run of characters: cut by characters, proportionally to the token count.
        size = max(1, len(section.text) * budget // (n + 1))
        parts = [section.text[i:i + size] for i in range(0, len(section.text), size)]
    out: list[Section] = []
    buf: list[str] = []
    # Pieces are packed by estimated size, then each result is checked (and cut again) by a real count.
    est_per_char = n / max(1, len(section.text))
    acc = 0.0
    for p in parts:
        cost = (len(p) + len(sep)) * est_per_char
        if buf and acc + cost > budget * 0.9:
            out.append(Section(sep.join(buf), section.ref, section.page))
            buf, acc = [], 0.0
        buf.append(p)
        acc += cost
    if buf:
        out.append(Section(sep.join(buf), section.ref, section.page))
    result: list[Section] = []
    for s in out:
        result.extend([s] if count(s.text) <= budget or len(out) == 1 and s.text == section.text
                      else _split(s, count, budget))
    return result


def reduce_groups(parts: list[str], count: Count, budget: int) -> list[list[str]]:
    """Group partial summaries in order so each group's text fits ``budget`` tokens. Every group holds at least
    two parts when there are two or more, so each round shrinks the list."""
    groups: list[list[str]] = []
    cur: list[str] = []
    size = 0
    for p in parts:
        n = count(p) + 2
        if cur and size + n > budget and len(cur) >= 2:
            groups.append(cur)
            cur, size = [], 0
        cur.append(p)
        size += n
    if cur:
        if len(cur) == 1 and groups:
            groups[-1].append(cur[0])
        else:
            groups.append(cur)
    return groups


def estimate_seconds(plan: Plan, prefill_tps: float, decode_tps: float, batch_gain: float = 1.0,
                     summary_tokens: int = SUMMARY_TOKENS) -> float:
    """ETA before starting: prompt tokens at the measured prefill speed plus expected reply tokens at the
    measured decode speed (times the batch gain when sequences decode in parallel). Reduce rounds add about
    one reply per 4 chunks plus the final one."""
    if prefill_tps <= 0 or decode_tps <= 0:
        return 0.0
    n = len(plan.chunks)
    prompt = plan.input_tokens + n * plan.overhead_tokens
    if plan.mode == "single":
        return prompt / prefill_tps + FINAL_TOKENS * 0.6 / decode_tps
    reduce_tokens = (n // 4 + 1) * summary_tokens
    replies = n * summary_tokens * 0.6 / (decode_tps * max(1.0, batch_gain))
    return (prompt + reduce_tokens) / prefill_tps + replies + (n // 4 + 1) * summary_tokens * 0.6 / decode_tps
