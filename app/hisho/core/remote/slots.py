"""llama-server slot save/restore: a long remote chat resumes after the server restarted without re-reading
it. No Qt.

Rules of use:
- Only for llama-server started with ``--slot-save-path`` (``ServerInfo.slot_save``); chats are pinned to one
  slot (``id_slot``) so the slot holds this conversation's tokens.
- After a turn the slot is saved under a content-derived name: a hash of the model and the exact messages the
  slot now holds (prompt + reply). Before the next send, the name of the conversation so far (every message
  but the new one) is the same hash, so the file is found again — after a server restart, in another Hisho
  session, on another laptop pointed at the same server — with no index to keep.
- A restore is sent only when the server no longer holds that prefix: the slot is not the one we last filled
  with that name, or ``/slots`` shows it holds fewer tokens than were saved (restarted or evicted). A failed
  restore (no such file, server without slots) costs one request and is only logged: the server prefills.
"""

from __future__ import annotations

import hashlib
import json
import logging
from dataclasses import dataclass
from typing import Any

from hisho.core.remote.http import Endpoint, RemoteError, call

log = logging.getLogger("hisho.remote")

MIN_TOKENS = 256       # shorter chats prefill faster than a file round trip pays back


def slot_name(model: str, messages: list[dict[str, str]]) -> str:
    """The file name for a slot holding exactly ``messages`` (role and content only) of ``model``."""
    canon = json.dumps([model, [[m.get("role", ""), m.get("content", "")] for m in messages]],
                       ensure_ascii=False, separators=(",", ":"))
    return "hisho-" + hashlib.sha256(canon.encode("utf-8")).hexdigest()[:40] + ".bin"


@dataclass
class Held:
    name: str
    n_tokens: int


class SlotKeeper:
    def __init__(self, ep: Endpoint, slot: int = 0, min_tokens: int = MIN_TOKENS) -> None:
        self.ep, self.slot, self.min_tokens = ep, slot, min_tokens
        self.held: Held | None = None      # what we last saved into / restored to the slot
        self.restored = 0                  # restores that landed (tests and the bench read them)
        self.last_restore: dict[str, Any] = {}

    def save(self, model: str, messages: list[dict[str, str]], n_tokens: int) -> dict[str, Any] | None:
        """After a turn: ``messages`` is the prompt plus the reply. Returns the server's answer, or None."""
        if n_tokens < self.min_tokens:
            return None
        name = slot_name(model, messages)
        try:
            got = call(self.ep, "POST", f"/slots/{self.slot}?action=save", {"filename": name}, timeout=120)
        except RemoteError as exc:
            log.warning("slot save on %s failed: %s", self.ep.name, exc)
            return None
        saved = int(got.get("n_saved", n_tokens) or n_tokens) if isinstance(got, dict) else n_tokens
        self.held = Held(name, saved)
        log.info("saved slot %d of %s as %s (%d tokens)", self.slot, self.ep.name, name, saved)
        return got if isinstance(got, dict) else {}

    def _server_tokens(self) -> int | None:
        """Tokens the server says the slot holds now; None when it does not tell (``--no-slots``)."""
        try:
            slots = call(self.ep, "GET", "/slots", timeout=10)
        except RemoteError:
            return None
        for s in slots if isinstance(slots, list) else []:
            if isinstance(s, dict) and s.get("id") == self.slot:
                return int(s.get("n_prompt_tokens", 0) or 0)
        return None

    def ensure(self, model: str, history: list[dict[str, str]]) -> bool:
        """Before a send: ``history`` is the conversation without the new message. Restores the slot when the
        server lost it; True when a restore landed."""
        if not history:
            return False
        name = slot_name(model, history)
        if self.held is not None and self.held.name == name:
            have = self._server_tokens()
            if have is None or have >= self.held.n_tokens:
                return False                           # still there (or the server cannot tell us)
        try:
            got = call(self.ep, "POST", f"/slots/{self.slot}?action=restore", {"filename": name}, timeout=120)
        except RemoteError as exc:
            log.info("no slot to restore on %s for this chat (%s)", self.ep.name, exc)
            return False
        n = int(got.get("n_restored", 0) or 0) if isinstance(got, dict) else 0
        self.held = Held(name, n)
        self.restored += 1
        self.last_restore = got if isinstance(got, dict) else {}
        log.info("restored slot %d of %s from %s (%d tokens)", self.slot, self.ep.name, name, n)
        return n > 0
