"""The disk prompt cache of the API: a chat request whose tokens share a prefix with a KV state the store holds
(an earlier API request, a saved chat or document under the same fingerprint) restores it in the engine and
prefills only the rest; a request that prefilled many new tokens leaves its prompt's KV in the store. No Qt.

Rules of use:
- ``PromptCache(session)`` over the app's ``KVSession`` (same index, folder, budget and eviction as chats).
  ``plan(tokens)`` runs on a request's worker thread before it is sent; ``record(owner, result)`` after its
  "done" (the engine holds "done" back until the files are written, so they exist when indexed).
- Owners are ``api:<first 16 hex of the tip chunk's key>``: one per distinct prompt, so Settings → KV cache
  lists them as "API" and deleting one never touches another. Identical prompts are one file (keys are hashes
  chained over the tokens, docs/kv-format.md).
- A request is saved when reading its new tokens again would cost at least what ``min_new_tokens`` tokens of
  a fresh prefill cost (``worth_saving``): a token read after ``d`` cached ones attends over them, so it costs
  about ``1 + d / DEPTH_PARITY`` fresh ones, and a short follow-up of a long conversation is saved where a short
  first prompt is not (below that a prefill costs less than reading the file back would save, and every saved
  file costs disk). A chat request's save comes after its reply and keeps it (engine/decode/replykeep.py), so
  the next request reads only its own message.
"""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from hisho.core.kv.index import Match
from hisho.core.kv.session import KVSession
from hisho.core.kv.stored import API_PREFIX

log = logging.getLogger("hisho.api")

MIN_NEW_TOKENS = 256
# Cached tokens at which a new token's attention over the cache costs about what its weights do. Measured on the
# 2-core box (1B shape): a question token at 4K cached cost ~15 ms, a token of a 512-token prefill from empty
# ~3.3 ms (x4.5); short batches are less efficient besides. 512 rounds that toward saving.
DEPTH_PARITY = 512


def worth_saving(new_tokens: int, cached: int, min_new_tokens: int = MIN_NEW_TOKENS) -> bool:
    """Whether ``new_tokens`` read after ``cached`` tokens cost at least ``min_new_tokens`` fresh ones."""
    return new_tokens > 0 and new_tokens * (1 + cached / DEPTH_PARITY) >= min_new_tokens


@dataclass
class CachePlan:
    chunks: list[dict[str, Any]] = field(default_factory=list)
    keep: int = 0
    save_dir: str | None = None
    keys: list[str] = field(default_factory=list)


class PromptCache:
    def __init__(self, session: KVSession, min_new_tokens: int = MIN_NEW_TOKENS) -> None:
        self.session = session
        self.min_new_tokens = min_new_tokens

    def worth_it(self, messages: list[dict[str, Any]], tools: list[dict[str, Any]] | None = None) -> bool:
        """Whether a request is long enough to bother the disk tier: a prompt of fewer characters than
        ``min_new_tokens`` tokens usually take (~2 per token at the least) is neither saved nor worth a restore,
        and asking costs a tokenize round trip and an index query before its first token (measured: ~150 ms on
        a busy 2-core box)."""
        if any(isinstance(m.get("content"), list) for m in messages):
            return False  # images: the disk tier keeps text prompts only (docs/images.md)
        chars = sum(len(m.get("content") or "") for m in messages) + (len(json.dumps(tools)) if tools else 0)
        return chars >= 2 * self.min_new_tokens

    def plan(self, tokens: list[int]) -> CachePlan:
        """What to restore for ``tokens`` and whether to save them (a worker thread; reads on the store lane)."""
        session = self.session
        fp = session.fingerprint()
        match = session.executor.call("store", lambda: session.index.lookup(fp, tokens))
        missing = [str(c["key"]) for c in match.chunks if not Path(str(c["path"])).exists()]
        if missing:  # deleted by hand or by another process's index: forget them, the rest may still serve
            log.debug("disk prompt cache: %d indexed chunk files are gone; forgetting them", len(missing))

            def forget() -> Match:
                for key in missing:
                    session.index.remove_chunk(key, "file missing")
                return session.index.lookup(fp, tokens)

            match = session.executor.call("store", forget)
        plan = CachePlan(match.request(), match.keep, keys=[str(c["key"]) for c in match.chunks])
        if worth_saving(len(tokens) - match.keep, match.keep, self.min_new_tokens):
            plan.save_dir = str(session.kv_dir)
        return plan

    def used(self, plan: CachePlan) -> None:
        """A restore happened: its chunks are recently used (eviction is least recently used first)."""
        if plan.keys:
            keys = plan.keys
            self.session.submit(lambda: self.session.index.touch("", keys))

    def record(self, extra: dict[str, Any]) -> None:
        """Index what the engine saved for a request (``GenerationResult.extra["saved"]``, and the prefixes it
        saved at interval checkpoints, ``extra["snapshots"]``), then keep the store within its budget. Queued on
        the store lane; never raises."""
        snapshots = extra.get("snapshots")
        for report in [*(snapshots if isinstance(snapshots, list) else []), extra.get("saved")]:
            self._record(report)

    def _record(self, report: Any) -> None:
        if not isinstance(report, dict) or not report.get("chunks"):
            if isinstance(report, dict) and report.get("error"):
                log.warning("disk prompt cache: save failed: %s", report["error"])
            return
        session = self.session
        chunks = list(report["chunks"])
        owner = API_PREFIX + str(chunks[-1]["key"])[:16]
        fp = str(report["fingerprint"])
        model = report.get("model")

        def write() -> None:
            session.index.record_save(owner, fp, chunks, model)
            session.index.evict(session.budget_bytes)
            session.changed()

        session.submit(write)  # the store lane: the database's one writer
