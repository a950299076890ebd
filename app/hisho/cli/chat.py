"""``hisho chat [--conversation ID]``: a terminal chat on the same conversation store as the window.

Lines are sent as messages; ``/help`` lists the commands. Ctrl+C during a reply stops it (the partial reply is
saved and marked, as in the window); Ctrl+C or Ctrl+D at the prompt leaves. The services come from the same
composition root as the window's (``hisho.core.services``): a long chat resumes from its saved KV and a question
about a summarized document gets the document's relevant parts, exactly as in the window.
"""

from __future__ import annotations

import argparse
import signal
import sys
import threading
from typing import IO, TYPE_CHECKING, Any

from hisho.core.errors import UserError

if TYPE_CHECKING:  # imported in cmd_chat: every `hisho` start builds this parser, few run chat
    from hisho.core.conversations.chat import ChatService, PreparedPrompt, Turn

HELP = """commands:
  /new            start a new conversation
  /list           list conversations (id, title)
  /open ID        switch to conversation ID
  /regen          write a new reply to the last message (the old one is kept)
  /history        show this conversation
  /quit           leave (Ctrl+D works too)"""


def register(subparsers: Any) -> None:
    p = subparsers.add_parser("chat", help="terminal chat on a saved conversation")
    p.add_argument("--conversation", type=int, default=None, help="conversation id (default: a new one)")
    p.add_argument("--model", help="model store name or GGUF path (default: the bundled model)")
    p.set_defaults(func=cmd_chat)


def cmd_chat(args: argparse.Namespace) -> int:
    from hisho.core import services

    app = services.build(args.model, "chat")
    try:
        if app.problem:
            sys.stderr.write(f"hisho: warning: {app.problem}\n")
        if args.conversation is not None:
            try:
                app.store.get(args.conversation)
            except KeyError:
                raise UserError(f"no conversation {args.conversation} (see /list inside 'hisho chat')") from None
        if args.model:
            app.load()               # a model named here answers, whatever the window chose last
        else:                        # as the window: the engine chosen last (a remote one), else the local model
            running = app.restore_engine()
            if running.fallback:
                sys.stderr.write(f"hisho: warning: {running.fallback}\n")
            if running.endpoint is not None:
                sys.stderr.write(f"hisho: chatting with {running.model} on {running.endpoint.name}\n")
        if app.kv is not None and not app.state.now.remote and args.conversation is not None:
            app.kv.selected(args.conversation)  # restore its saved KV while the user types, as the window does
        return TerminalChat(app.chat, args.conversation, sys.stdin, sys.stdout).loop()
    finally:
        app.close()


class TerminalChat:
    def __init__(self, service: ChatService, conversation_id: int | None, inp: IO[str], out: IO[str]) -> None:
        self.service = service
        self.store = service.store
        self.cid = conversation_id
        self.inp, self.out = inp, out
        self.terminated = False

    def say(self, text: str) -> None:
        self.out.write(terminal_safe(text))
        self.out.flush()

    def loop(self) -> int:
        if self.cid is not None:
            self.history()
        else:
            self.say("new conversation — /help for commands\n")
        while True:
            self.say("\n> ")
            try:
                line = self.inp.readline()
            except KeyboardInterrupt:
                self.say("\n")
                return 0
            if not line:
                self.say("\n")
                return 0
            text = valid_text(line.rstrip("\n"))
            if not text.strip():
                continue  # an empty message is never sent
            try:
                if text.startswith("/"):
                    if self.command(text.strip()) == "quit":
                        return 0
                else:
                    self.send(text)
            except UserError as exc:
                self.say(f"hisho: {exc}\n")
            if self.terminated:
                return 143

    def command(self, text: str) -> str:
        name, _, arg = text.partition(" ")
        if name in ("/quit", "/exit"):
            return "quit"
        if name == "/help":
            self.say(HELP + "\n")
        elif name == "/new":
            self.cid = None
            self.say("new conversation\n")
        elif name == "/list":
            for c in self.store.conversations():
                self.say(f"{c.id:6d}  {'*' if c.pinned else ' '} {c.title}\n")
        elif name == "/open":
            try:
                self.cid = self.store.get(int(arg)).id
            except (ValueError, KeyError):
                raise UserError(f"no conversation {arg!r}") from None
            self.history()
        elif name == "/regen":
            last = next((m for m in reversed(self.store.branch(self.cid)) if m.role == "assistant"), None) \
                if self.cid is not None else None
            if last is None:
                raise UserError("no reply to regenerate yet")
            self.run(self.service.regenerate(last.id))
        elif name == "/history":
            self.history()
        else:
            raise UserError(f"unknown command {name}; /help lists them")
        return ""

    def history(self) -> None:
        if self.cid is None:
            return
        conv = self.store.get(self.cid)
        self.say(f"# {conv.title} (conversation {conv.id})\n")
        for m in self.store.branch(self.cid):
            who = "you" if m.role == "user" else m.role
            mark = f"  [{m.status}]" if m.partial else ""
            self.say(f"\n{who}:{mark}\n{m.content}\n")

    def send(self, text: str) -> None:
        if self.cid is None:
            self.cid = self.service.new_conversation().id   # the app-wide default system prompt, as the window
            self.say(f"(conversation {self.cid})\n")
        from hisho.core.conversations.chat import FitReport

        # The window's one send path: the prompt is built and tokenized once, for the fit and the reply.
        sent = self.service.send_if_fits(self.cid, text)
        if not isinstance(sent, FitReport):
            self.run(*sent)
            return
        self.say(f"this conversation ({sent.prompt_tokens} tokens) no longer fits the context ({sent.n_ctx}).\n"
                 "send anyway leaving out the oldest turns? [y/N] ")
        if self.inp.readline().strip().lower() not in ("y", "yes"):
            self.say("not sent\n")
            return
        self.run(self.service.send(self.cid, text, drop_oldest=True))

    def run(self, turn: Turn, prompt: PreparedPrompt | None = None) -> None:
        # Ctrl+C or SIGTERM while a reply streams stops the engine; run() then saves the partial reply as
        # "stopped". The engine runs in its own session, so the terminal's SIGINT does not kill it.
        # After a SIGTERM the session ends once the reply is saved.
        def stop(signum: int, _frame: object) -> None:
            self.terminated = self.terminated or signum == signal.SIGTERM
            turn.cancel()

        previous = {sig: signal.signal(sig, stop) for sig in (signal.SIGINT, signal.SIGTERM)} \
            if _main_thread() else {}
        try:
            result = self.service.run(turn, self.say, prompt)
        finally:
            for sig, handler in previous.items():
                signal.signal(sig, handler)
        m = result.message
        if result.error:
            self.say(f"\n[{result.error}]\n")
        elif m.partial:
            self.say(f"\n[{m.status}]\n")
        elif m.tokens_per_s:
            self.say(f"\n[{m.tokens} tokens, {m.tokens_per_s:.1f} tok/s]\n")


# C0 controls but tab and newline, DEL, and C1 controls: what starts or ends an ANSI/OSC escape sequence.
_CONTROLS = {c: 0x2400 + c for c in range(0x20) if chr(c) not in "\t\n"} | {0x7F: 0x2421} | \
    {c: 0xFFFD for c in range(0x80, 0xA0)}


def terminal_safe(text: str) -> str:
    """Text as it may reach a terminal: control characters become their visible symbols (ESC shows as ␛), so a
    stored message or a reply cannot move the cursor, clear the screen, set the title or write a hyperlink.
    Works piece by piece: a sequence split across streamed pieces is disarmed all the same."""
    return text.translate(_CONTROLS)


def valid_text(text: str) -> str:
    """A line read from stdin as valid Unicode: bytes that were not UTF-8 (kept as surrogates by Python's
    surrogateescape stdin) become U+FFFD instead of failing when the message is stored."""
    try:
        return text.encode("utf-8", "surrogateescape").decode("utf-8", "replace")
    except UnicodeEncodeError:  # a lone surrogate that is not an escaped byte
        return text.encode("utf-8", "replace").decode("utf-8")


def _main_thread() -> bool:
    return threading.current_thread() is threading.main_thread()
