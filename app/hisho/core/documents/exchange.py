"""Export a conversation to Markdown (the branch on screen, for reading) or JSON (the whole message tree, for
moving it elsewhere), and import that JSON back. Format: docs/conversations.md.

The JSON keeps every branch and the ids that link them, and (version 2) the documents attached to the chat, as
read; an import gives the rows new ids and re-links them, so importing the same file twice gives two independent
copies. Version 1 files (no documents) still import. Bad files are refused with one clear message (``UserError``)
and nothing is written.
"""

from __future__ import annotations

import json
import re
import time
from datetime import datetime
from pathlib import Path
from typing import Any

from hisho.core.conversations import tool_rounds as rounds
from hisho.core.conversations.store import ChatSettings, ConversationStore
from hisho.core.documents import attached
from hisho.core.errors import UserError
from hisho.core.user_files import read_json

FORMAT = "hisho-conversation"
FORMAT_VERSION = 3          # 3: + a reply's "tool_calls"; 2: + "documents"; older files import as before
_ROLES = ("system", "user", "assistant")
_MESSAGE_META = ("status", "tokens", "prompt_tokens", "ttft_s", "tokens_per_s", "model", "error", "created_at",
                 "reasoning", "reasoning_s")


def to_markdown(store: ConversationStore, conversation_id: int) -> str:
    conv = store.get(conversation_id)
    out = [f"# {conv.title}", ""]
    stamp = datetime.fromtimestamp(conv.created_at).strftime("%Y-%m-%d %H:%M")
    out.append(f"*{stamp}" + (f" · {conv.model}" if conv.model else "") + "*")
    out.append("")
    if conv.system_prompt:
        out += ["> **System:** " + conv.system_prompt.replace("\n", "\n> "), ""]
    documents = attached.exported(store.db, conversation_id)
    if documents:  # for reading: their names (the JSON export carries their text)
        out += ["> **Attached:** " + ", ".join(d["name"] for d in documents), ""]
    for m in store.branch(conversation_id):
        who = {"user": "You", "assistant": "Assistant", "system": "System"}[m.role]
        note = " *(partial reply)*" if m.partial else ""
        out += [f"## {who}{note}", ""]
        if m.reasoning.strip():  # folded, as the window shows it: a reader opens it when they want it
            took = f" for {m.reasoning_s:.0f} s" if m.reasoning_s else ""
            out += ["<details>", f"<summary>Thought{took}</summary>", "", m.reasoning.strip(), "", "</details>", ""]
        if m.tool_calls:
            out += _calls_markdown(rounds.load(m.tool_calls))
        out += [m.content.rstrip(), ""]
    return "\n".join(out).rstrip() + "\n"


def to_json(store: ConversationStore, conversation_id: int) -> dict[str, Any]:
    conv = store.get(conversation_id)
    messages = []
    for m in store.messages(conversation_id):
        item: dict[str, Any] = {"id": m.id, "parent": m.parent_id, "role": m.role, "content": m.content}
        item.update({k: getattr(m, k) for k in _MESSAGE_META if getattr(m, k) not in (None, "")})
        if m.tool_calls:
            item["tool_calls"] = rounds.load(m.tool_calls)
        messages.append(item)
    return {
        "format": FORMAT, "version": FORMAT_VERSION, "exported_at": time.time(),
        "conversation": {
            "title": conv.title, "model": conv.model, "system_prompt": conv.system_prompt,
            "settings": conv.settings.to_dict(), "created_at": conv.created_at, "pinned": conv.pinned,
            "leaf": conv.leaf_id,
        },
        "messages": messages,
        "documents": attached.exported(store.db, conversation_id),
    }


def export_file(store: ConversationStore, conversation_id: int, path: Path) -> Path:
    """Write ``.md`` or ``.json`` by the file's suffix."""
    if path.suffix.lower() == ".md":
        path.write_text(to_markdown(store, conversation_id), encoding="utf-8")
    elif path.suffix.lower() == ".json":
        text = json.dumps(to_json(store, conversation_id), ensure_ascii=False, indent=2)
        path.write_text(text, encoding="utf-8")
    else:
        raise UserError(f"export to .md or .json, not {path.suffix or 'a file without a suffix'}")
    return path


def import_file(store: ConversationStore, path: Path) -> int:
    data = read_json(path)
    return import_data(store, data)


def import_data(store: ConversationStore, data: Any) -> int:
    """Create a new conversation from exported JSON; returns its id."""
    conv, messages, documents = _validate(data)
    if documents:
        attached.prepare(store.db)
    with store.tx():
        cid = _insert(store, conv, messages)
        attached.restore(store.db, cid, documents)
        return cid


def _insert(store: ConversationStore, conv: dict[str, Any], messages: list[dict[str, Any]]) -> int:
    new_conv = store.create(str(conv.get("title") or "Imported chat"), model=str(conv.get("model") or ""),
                            system_prompt=str(conv.get("system_prompt") or ""),
                            settings=ChatSettings.from_dict(conv.get("settings")))
    new_ids: dict[Any, int] = {}
    for m in messages:
        meta = {k: m[k] for k in _MESSAGE_META if k in m and k != "status"}
        if m.get("tool_calls"):
            meta["tool_calls"] = json.dumps(m["tool_calls"], ensure_ascii=False)
        row = store.add_message(new_conv.id, m["role"], m["content"], parent_id=new_ids.get(m.get("parent")),
                                status=str(m.get("status", "done")), make_leaf=False, **meta)
        new_ids[m["id"]] = row.id
    leaf = new_ids.get(conv.get("leaf")) if conv.get("leaf") is not None else None
    if leaf is None and new_ids:
        leaf = store.latest_leaf_under(next(iter(new_ids.values())))
    store.update(new_conv.id, leaf_id=leaf, pinned=bool(conv.get("pinned", False)))
    return new_conv.id


def _validate(data: Any) -> tuple[dict[str, Any], list[dict[str, Any]], list[dict[str, Any]]]:
    if not isinstance(data, dict) or data.get("format") != FORMAT:
        raise UserError("this JSON file is not a Hisho conversation export")
    if int(data.get("version", 0)) > FORMAT_VERSION:
        raise UserError(f"this export is format version {data.get('version')}; this Hisho reads up to "
                        f"{FORMAT_VERSION}")
    conv, messages = data.get("conversation"), data.get("messages")
    if not isinstance(conv, dict) or not isinstance(messages, list):
        raise UserError("the export has no conversation or no message list")
    seen: set[Any] = set()
    for i, m in enumerate(messages):
        if not isinstance(m, dict) or m.get("role") not in _ROLES or not isinstance(m.get("content"), str):
            raise UserError(f"message {i + 1} of the export is malformed (needs role and content)")
        if "id" not in m or m["id"] in seen:
            raise UserError(f"message {i + 1} of the export has a missing or repeated id")
        calls = m.get("tool_calls")
        if calls is not None and (not isinstance(calls, list) or not all(isinstance(r, dict) for r in calls)):
            raise UserError(f"message {i + 1} of the export has tool calls that are not a list of rounds")
        if m.get("parent") is not None and m["parent"] not in seen:
            raise UserError(f"message {i + 1} of the export refers to a parent that comes after it")
        seen.add(m["id"])
    return conv, messages, attached.checked(data.get("documents", []))


def _fence(text: str) -> str:
    """A code fence longer than any run of backticks in ``text``, so a result cannot close it."""
    longest = max((len(run) for run in re.findall(r"`+", text)), default=0)
    return "`" * max(3, longest + 1)


def _calls_markdown(stored: list[dict[str, Any]]) -> list[str]:
    """A reply's tool calls for reading: each call, its arguments and its result as plain text."""
    out: list[str] = []
    for r in stored:
        if str(r.get("content", "")).strip():
            out += [str(r["content"]).strip(), ""]
        for c in r.get("calls", []):
            server = f" ({c['server']})" if c.get("server") else ""
            out += [f"**Tool call** `{c.get('name', '')}`{server} — {c.get('status', '')}", ""]
            for label, text in (("Arguments", str(c.get("arguments", ""))), ("Result", str(c.get("result", "")))):
                fence = _fence(text)
                out += [f"{label}:", "", fence, text, fence, ""]
    return out
