"""The chat service: one conversation turn from "the user pressed Enter" to "the reply is saved". No Qt.

The window and ``hisho chat`` both use it. Rules of use:
- ``send`` / ``regenerate`` / ``edit`` record the user's side at once (cheap, any thread) and return a ``Turn``;
  ``run(turn, on_text)`` then streams the reply and must run off the GUI thread. ``on_text`` is called on that
  thread with each new piece; the caller batches for display.
- The reply row is created when streaming starts and saved as it grows (every ``SAVE_EVERY_S``), so a crash of
  the engine, a Stop or the whole app going away leaves the partial text in the store, marked as such.
- ``turn.cancel()`` may be called from any thread; the engine stops within one token.
- One prepared prompt per turn (``PreparedPrompt``): the messages are built once, shaped once by the
  ``before_prompt`` hooks (a long document's parts), and tokenized once on the engine's lane; the
  ``restore_prompt`` hooks (KV restore) look up those tokens and the engine generates from them, so the chat
  template is rendered once per send. ``send_if_fits`` does the fit check on the same tokens, so a send is one
  job on the engine lane; the caller is asked only when the prompt does not fit.
- ``after_turn`` hooks run after the reply is saved (KV save).
- Tools (``tools``: the tool loop, ``hisho.core.tools.loop``): when set and the model's template writes tool
  calls, every prompt carries the enabled tools (``prompt_tools``) and ``run`` hands the reply to the loop, which
  generates, runs the calls and generates again; the calls and results are saved with the reply
  (``Message.tool_calls``) and shown to the model again in later prompts.
- Every store write goes through ``write`` (the composition root passes the executor's store lane, the
  database's one writer; by default it runs inline). Reads stay on the caller's thread.
- Nothing is ever cut silently: ``check_fit`` says whether a prompt fits the context, and the caller chooses
  (``Turn.drop_oldest`` or ``summarize_into_new``).
- A store that fails while a reply streams (disk full) stops the engine at once; the reply stays in memory
  (``unsaved``) and is written by ``save_unsaved`` — called before every send and run — once there is space
  again. The turn's ``error`` then says what happened.
"""

from __future__ import annotations

import dataclasses
import functools
import json
import logging
import threading
import time
from collections.abc import Callable
from typing import Any, Protocol

from hisho.core.conversations import continued
from hisho.core.conversations import images as chat_images
from hisho.core.conversations.schema import STOPPED_AT_CLOSE
from hisho.core.conversations.store import (
    DONE,
    FAILED,
    STOPPED,
    STREAMING,
    Conversation,
    ConversationStore,
    Message,
)
from hisho.core.conversations.turn import DEFAULT_TITLE as DEFAULT_TITLE
from hisho.core.conversations.turn import MIN_REPLY_TOKENS as MIN_REPLY_TOKENS
from hisho.core.conversations.turn import SAVE_EVERY_S as SAVE_EVERY_S
from hisho.core.conversations.turn import WARN_FRACTION as WARN_FRACTION
from hisho.core.conversations.turn import FitReport as FitReport
from hisho.core.conversations.turn import PreparedPrompt as PreparedPrompt
from hisho.core.conversations.turn import T
from hisho.core.conversations.turn import Turn as Turn
from hisho.core.conversations.turn import TurnResult as TurnResult
from hisho.core.conversations.turn import Write as Write
from hisho.core.db import DatabaseUnavailable
from hisho.core.engine.protocol import ErrorKind, GenerationResult, Sampling
from hisho.core.engine.seam import Capability, Engine, TokenStream
from hisho.core.errors import EngineError, UserError
from hisho.core.formats.reasoning import ReasoningFormat

log = logging.getLogger("hisho.chat")

# not eat the answer's budget. A reply still thinking when it runs out says so (``THOUGHT_TOO_LONG``).
THINKING_BUDGET = 4096
THOUGHT_TOO_LONG = ("the model was still thinking when its token budget ran out, so no answer came; raise "
                    "Reply tokens in Chat settings or regenerate")


def sampling_for(settings: Any, n_ctx: int | None = None, *, reasons: bool = False) -> Sampling:
    max_tokens = int(settings.max_tokens) + (THINKING_BUDGET if reasons else 0)
    return Sampling(temperature=float(settings.temperature), top_p=float(settings.top_p), top_k=int(settings.top_k),
                    repeat_penalty=float(settings.repeat_penalty), seed=int(settings.seed),
                    max_tokens=min(max_tokens, n_ctx) if n_ctx else max_tokens)


class ToolLoop(Protocol):
    """What the chat needs of the tool loop (``hisho.core.tools.loop.ToolLoop``)."""

    def schemas(self) -> list[dict[str, Any]]: ...

    def reply(self, service: ChatService, turn: Turn, prompt: PreparedPrompt,
              on_text: Callable[[str], None] | None,
              on_reasoning: Callable[[str], None] | None) -> GenerationResult | None: ...


class ChatService:
    def __init__(self, store: ConversationStore, engine: Engine, *, model_name: str = "",
                 answering: Callable[[], str] | None = None,
                 write: Write | None = None, default_system_prompt: Callable[[], str] = lambda: "") -> None:
        self.store = store
        self.engine = engine
        # The model a reply is stamped with: ``answering()`` at each reply (the composition root passes the
        # app's state, so no second copy of "what answers now" can lag behind it); alone, ``model_name``.
        self._answering = answering or (lambda: model_name)
        self.write: Write = write or _inline
        # What a new chat's system prompt starts as; the composition root reads it from the settings
        # (Settings → System prompts), so the window and ``hisho chat`` start chats alike.
        self.default_system_prompt = default_system_prompt
        # Shape the prompt's messages before they are tokenized (documents); then, with the tokens, get the
        # engine ready for them (KV restore). Both on the turn's worker thread.
        self.before_prompt: list[Callable[[Turn, list[dict[str, str]]], None]] = []
        self.restore_prompt: list[Callable[[Turn, PreparedPrompt], None]] = []
        # Context every prompt of a chat carries (documents attached to it): applied wherever the prompt is
        # built, so the meter, KV prefetch and type-ahead see what the reply's prompt will hold.
        self.prompt_context: list[Callable[[int, list[dict[str, str]]], None]] = []
        self.after_turn: list[Callable[[TurnResult], None]] = []
        self.unsaved: dict[int, dict[str, Any]] = {}   # reply id -> fields the store could not take yet
        self.tools: ToolLoop | None = None
        self.closing = False   # the app is quitting (``Services.begin_close``): a reply ended now was stopped
        self._unsaved_lock = threading.Lock()

    @property
    def model_name(self) -> str:
        """The id of the model that answers now (what a reply is stamped with)."""
        return self._answering()

    # ----- prompts and fit -----------------------------------------------------------------------------

    @property
    def n_ctx(self) -> int:
        return int(self.engine.load_info.get("n_ctx", 0))

    def tool_family(self) -> str | None:
        """The tool-call family the model's own template writes (None: it shows no tools)."""
        from hisho.core.formats.tools import detect

        info = self.engine.load_info
        if info.get("chat_template_source") != "gguf" or not self._takes_tokens():
            return None
        return detect(str(info.get("chat_template") or ""))

    def sees(self) -> bool:
        """Whether the loaded model reads images (loaded with its projector: docs/images.md)."""
        return bool(self.engine.load_info.get("vision"))

    def prompt_tools(self) -> list[dict[str, Any]] | None:
        """The tools every prompt carries now: the enabled ones, where the model can call them (else None)."""
        if self.tools is None or self.tool_family() is None:
            return None
        return self.tools.schemas() or None

    def prompt_messages(self, conversation_id: int, leaf_id: int | None = None,
                        extra_user: str | None = None, extra_images: list[str] | None = None) -> list[dict[str, Any]]:
        """The chat messages the model sees for a branch (system prompt first), plus an unsent draft (with
        ``extra_images``: the names of its images, ``conversations.images``). A user message's images are image
        parts before its text."""
        conv = self.store.get(conversation_id)
        out: list[dict[str, Any]] = [{"role": "system", "content": conv.system_prompt}] \
            if conv.system_prompt.strip() else []
        calls_shown = self.tool_family() is not None
        for m in self.store.branch(conversation_id, leaf_id):
            prefix = ""
            if m.tool_calls:
                from hisho.core.conversations.tool_rounds import history

                shown, prefix = history(m.tool_calls, calls_shown)
                out += shown
            if m.content or prefix or m.role == "user":
                pictures = chat_images.names(m.images) if m.role == "user" else []
                msg = {"role": m.role, "content": chat_images.parts(prefix + m.content, pictures, self.sees())
                       if pictures else prefix + m.content}
                if m.reasoning and self._takes_tokens():
                    # The model's own template decides whether earlier reasoning is shown again (Qwen3's and
                    # GPT-OSS's drop it): Hisho passes it and drops what the template drops.
                    msg["reasoning_content"] = m.reasoning
                out.append(msg)
        for add in self.prompt_context:
            add(conversation_id, out)
        if extra_user is not None:
            out.append({"role": "user", "content": chat_images.parts(extra_user, extra_images) if extra_images
                        else extra_user})
        return out

    def count(self, messages: list[dict[str, Any]]) -> int:
        if not messages:
            return 0
        tools = self.prompt_tools()   # the tools a prompt carries count too (the context meter, fit checks)
        return len(self.engine.tokenize(messages=messages, tools=tools)) if tools else \
            self.engine.count_tokens(messages=messages)

    def check_fit(self, conversation_id: int, draft: str | None = None) -> FitReport:
        """Would the branch on screen plus ``draft`` fit the context with room for a reply?"""
        conv = self.store.get(conversation_id)
        tokens = self.count(self.prompt_messages(conversation_id, extra_user=draft))
        reply = min(conv.settings.max_tokens, max(MIN_REPLY_TOKENS, self.n_ctx // 8))
        return FitReport(tokens, reply, self.n_ctx)

    def reply_room(self, conversation_id: int) -> int:
        """Tokens kept free for the reply when judging a fit."""
        return min(self.store.get(conversation_id).settings.max_tokens, max(MIN_REPLY_TOKENS, self.n_ctx // 8))

    def _takes_tokens(self) -> bool:
        # The local engine prefills token ids; a remote server takes messages and applies its own template.
        return Capability.PREFILL.value in self.engine.capabilities

    def _prepared(self, turn: Turn, messages: list[dict[str, str]]) -> PreparedPrompt:
        for hook in self.before_prompt:
            hook(turn, messages)
        tools = self.prompt_tools()
        tokens = self.engine.tokenize(messages=messages, template_kwargs=turn.template_kwargs, tools=tools) \
            if self._takes_tokens() and messages else None
        count = len(tokens) if tokens is not None else self.count(messages)
        return PreparedPrompt(messages, tokens, FitReport(count, self.reply_room(turn.conversation_id), self.n_ctx),
                              tools)

    def prepare(self, turn: Turn) -> PreparedPrompt:
        """The prompt of ``turn`` (engine lane): its branch, cut to fit when the turn says so, shaped and
        tokenized once."""
        messages = self.prompt_messages(turn.conversation_id, turn.parent_id)
        if turn.drop_oldest:
            messages = self.fitted(messages, turn.sampling.max_tokens)
        return self._prepared(turn, messages)

    def send_if_fits(self, conversation_id: int, text: str,
                     images: list[str] | None = None) -> tuple[Turn, PreparedPrompt] | FitReport:
        """A send in one step (engine lane): the prompt with ``text`` as the next message is built and tokenized
        once; when it fits, the message is recorded and the turn comes back with that prompt, for
        ``run(turn, prompt=...)``. When it does not fit, nothing is recorded and the ``FitReport`` comes back:
        the user chooses (``send(..., drop_oldest=True)`` or ``summarize_into_new``)."""
        if not text.strip() and not images:
            raise UserError("nothing to send: the message is empty")
        conv = self.store.get(conversation_id)
        shaping = Turn(conversation_id, conv.leaf_id or 0, self._sampling(conv),
                       template_kwargs=self.template_kwargs(conv.settings))
        prompt = self._prepared(shaping, self.prompt_messages(conversation_id, extra_user=text, extra_images=images))
        if not prompt.fit.fits:
            return prompt.fit
        return self.send(conversation_id, text, images=images), prompt

    def fitted(self, messages: list[dict[str, str]], reply_tokens: int) -> list[dict[str, str]]:
        """Drop the oldest turns (never the system prompt or the last message) until the prompt fits."""
        head = messages[:1] if messages and messages[0]["role"] == "system" else []
        body = messages[len(head):]
        while len(body) > 1 and self.count(head + body) + reply_tokens > self.n_ctx:
            body = body[2:] if len(body) > 2 else body[1:]
        return head + body

    # ----- starting chats and turns --------------------------------------------------------------------

    def new_conversation(self, *, model: str = "") -> Conversation:
        """A new chat whose system prompt is the app-wide default. Every front end makes its chats here."""
        system = self.default_system_prompt()
        return self.write(lambda: self.store.create(model=model, system_prompt=system))

    def send(self, conversation_id: int, text: str, *, drop_oldest: bool = False,
             images: list[str] | None = None) -> Turn:
        """Record the user's message under the current leaf, with the names of its images (kept by
        ``conversations.images.keep``). An empty message (no text, no image) is refused (UserError)."""
        if not text.strip() and not images:
            raise UserError("nothing to send: the message is empty")
        self.save_unsaved()
        pictures = json.dumps(images) if images else ""

        def record() -> Message:
            conv = self.store.get(conversation_id)
            with self.store.tx():
                msg = self.store.add_message(conversation_id, "user", text, parent_id=conv.leaf_id,
                                             images=pictures)
                changes: dict[str, Any] = {"draft": ""}
                if conv.title == DEFAULT_TITLE and conv.leaf_id is None:
                    changes["title"] = title_from(text)
                self.store.update(conversation_id, **changes)
            return msg

        return self._turn(conversation_id, self.write(record).id, drop_oldest)

    def regenerate(self, reply_id: int) -> Turn:
        """A new reply to the same user message; the old one stays as a sibling branch."""
        reply = self.store.message(reply_id)
        if reply.role != "assistant" or reply.parent_id is None:
            raise UserError("only a reply can be regenerated")
        return self._turn(reply.conversation_id, reply.parent_id, False)

    def edit(self, user_message_id: int, text: str) -> Turn:
        """Send an edited copy of a user message as a sibling; the original branch stays reachable."""
        if not text.strip():
            raise UserError("nothing to send: the message is empty")
        old = self.store.message(user_message_id)
        if old.role != "user":
            raise UserError("only your own messages can be edited")
        def record() -> Message:
            with self.store.tx():
                msg = self.store.add_message(old.conversation_id, "user", text, parent_id=old.parent_id,
                                             images=old.images)   # an edit changes the words; the pictures stay
                conv = self.store.get(old.conversation_id)
                if old.parent_id is None and conv.title == title_from(old.content):  # a title made from it
                    self.store.update(old.conversation_id, title=title_from(text))
            return msg

        msg = self.write(record)
        return self._turn(old.conversation_id, msg.id, False)

    def _turn(self, conversation_id: int, parent_id: int, drop_oldest: bool) -> Turn:
        conv = self.store.get(conversation_id)
        return Turn(conversation_id, parent_id, self._sampling(conv), drop_oldest,
                    template_kwargs=self.template_kwargs(conv.settings))

    @property
    def reasoning(self) -> ReasoningFormat:
        """How the model answering reasons before it answers (think tags, GPT-OSS channels), if it does."""
        info = self.engine.load_info.get("reasoning")
        return ReasoningFormat.from_dict(info if isinstance(info, dict) else None)

    def template_kwargs(self, settings: Any) -> dict[str, Any] | None:
        """The chat's thinking choices as the model's template takes them (None: it takes none)."""
        fmt = self.reasoning
        out: dict[str, Any] = {}
        if fmt.toggle:
            out[fmt.toggle] = bool(settings.thinking)
        if fmt.efforts:
            effort = str(settings.reasoning_effort)
            out["reasoning_effort"] = effort if effort in fmt.efforts else "medium"
        return out or None

    def _sampling(self, conv: Conversation) -> Sampling:
        fmt = self.reasoning
        thinks = fmt.reasons and (conv.settings.thinking or not fmt.toggle)
        return sampling_for(conv.settings, self.n_ctx or None, reasons=thinks)

    # ----- running a turn ------------------------------------------------------------------------------

    def save_unsaved(self) -> int:
        """Write the replies kept in memory while the store failed. Returns how many still wait (any thread)."""
        with self._unsaved_lock:
            for reply_id, fields in list(self.unsaved.items()):
                try:
                    self.write(functools.partial(self.store.update_message, reply_id, **fields))
                except DatabaseUnavailable as exc:
                    log.warning("%d replies still unsaved: %s", len(self.unsaved), exc)
                    break
                del self.unsaved[reply_id]
                log.info("reply %d saved after the store came back", reply_id)
            return len(self.unsaved)

    def run(self, turn: Turn, on_text: Callable[[str], None] | None = None,
            prompt: PreparedPrompt | None = None,
            on_reasoning: Callable[[str], None] | None = None) -> TurnResult:
        """Stream the reply (worker thread). ``prompt``: the turn's prepared prompt (``send_if_fits``), else it is
        prepared here. Always returns once the reply row exists; errors end up in the saved message, or, when
        the store itself fails, in ``unsaved`` and the result's ``error``."""
        self.save_unsaved()
        prompt = prompt or self.prepare(turn)
        messages = prompt.messages
        for restore in self.restore_prompt:
            restore(turn, prompt)
        engine_name = str(self.engine.engine_info.get("engine") or "local")   # which engine answers
        reply = self.write(lambda: self.store.add_message(turn.conversation_id, "assistant", "",
                                                          parent_id=turn.parent_id, status=STREAMING,
                                                          model=self.model_name, engine=engine_name))
        turn.reply_id = reply.id
        status, error, result = DONE, "", None
        try:
            if self.tools is not None and prompt.tools:
                result = self.tools.reply(self, turn, prompt, on_text, on_reasoning)
            else:
                result = self.stream_step(turn, prompt.tokens, messages, turn.sampling, on_text, on_reasoning)
            if result is not None and result.stop_reason == "cancelled":
                status = STOPPED
            if result is not None and result.reasoning_unfinished and result.stop_reason == "length":
                status, error = STOPPED, THOUGHT_TOO_LONG
            if turn.tool_error and not error:
                status, error = STOPPED, turn.tool_error
        except EngineError as exc:
            status, error = FAILED, _engine_message(exc)
            log.warning("turn %s in conversation %s failed: %s", turn.id, turn.conversation_id, error)
        if self.closing and status in (STOPPED, FAILED):  # the quit stopped it (or killed a slow engine)
            status, error = STOPPED, STOPPED_AT_CLOSE
        meta: dict[str, Any] = {}
        if result is not None:
            first = turn.first_token_at
            meta = {"tokens": result.completion_tokens, "prompt_tokens": result.prompt_tokens,
                    "ttft_s": first - turn.sent_at if first is not None else (result.ttft_s or None),
                    "tokens_per_s": result.tokens_per_s}
            if turn.reasoning:
                answer_at = turn.answer_at or time.monotonic()
                turn.reasoning = result.reasoning or turn.reasoning.strip()
                meta |= {"reasoning": turn.reasoning,
                         "reasoning_s": answer_at - first if first is not None else None}
        if turn.store_error is not None:
            status, error = FAILED, "the disk filled up during this reply; it was stopped here"
        fields = {"content": turn.text, "status": status, "error": error, **meta}
        if turn.rounds:
            fields["tool_calls"] = json.dumps(turn.rounds, ensure_ascii=False)
        try:
            if turn.store_error is None:
                self.write(lambda: self.store.update_message(reply.id, **fields))
        except DatabaseUnavailable as exc:
            turn.store_error = exc
        if turn.store_error is not None:
            with self._unsaved_lock:
                self.unsaved[reply.id] = fields
            message = dataclasses.replace(reply, **fields)
            shown = f"{turn.store_error} — the reply is kept and saved when there is space again"
            log.warning("reply %d of conversation %s not saved: %s", reply.id, turn.conversation_id, turn.store_error)
            return TurnResult(turn, message, messages, shown, result)  # no after_turn: a KV save cannot land
        out = TurnResult(turn, self.store.message(reply.id), messages, error, result)
        for after in self.after_turn:
            after(out)
        return out

    def stream_step(self, turn: Turn, tokens: list[int] | None, messages: list[dict[str, Any]],
                    sampling: Sampling, on_text: Callable[[str], None] | None,
                    on_reasoning: Callable[[str], None] | None = None,
                    shown: Callable[[dict[str, Any]], str] | None = None) -> GenerationResult | None:
        """One generation of the turn's reply (the whole reply, or one step of the tool loop): streamed into
        ``turn.text`` (``shown`` picks each event's text to show; default its answer text)."""
        kwargs = turn.template_kwargs
        stream = self.engine.generate(tokens=tokens, sampling=sampling, template_kwargs=kwargs) \
            if tokens is not None else self.engine.generate(messages=messages, sampling=sampling,
                                                            template_kwargs=kwargs)
        turn._stream = stream
        if turn.cancelled:
            stream.cancel()
        self._pump(turn, stream, on_text, on_reasoning, shown)
        return stream.result

    def _pump(self, turn: Turn, stream: TokenStream, on_text: Callable[[str], None] | None,
              on_reasoning: Callable[[str], None] | None = None,
              shown: Callable[[dict[str, Any]], str] | None = None) -> None:
        saved_at = time.monotonic()
        assert turn.reply_id is not None
        for ev in stream:
            if turn.first_token_at is None:
                turn.first_token_at = time.monotonic()
            thought = str(ev.get("reasoning") or "")
            if thought:
                turn.reasoning += thought
                if on_reasoning is not None:
                    on_reasoning(thought)
            piece = shown(ev) if shown is not None else str(ev.get("text", ""))
            if piece:
                if turn.answer_at is None:
                    turn.answer_at = time.monotonic()
                turn.text += piece
                if on_text is not None:
                    on_text(piece)
            now = time.monotonic()
            if turn.store_error is None and now - saved_at >= SAVE_EVERY_S:
                # A crash of this process loses at most a second of text.
                try:
                    self.write(functools.partial(self.store.update_message, turn.reply_id, content=turn.text,
                                                 reasoning=turn.reasoning))
                except DatabaseUnavailable as exc:
                    # Generating on would only grow what cannot be saved and keep the engine from the next
                    # request: stop it, keep the text (the tokens still in flight arrive before "done").
                    turn.store_error = exc
                    stream.cancel()
                saved_at = now

    # ----- context overflow: summarize into a new chat ---------------------------------------------------

    def summarize_into_new(self, conversation_id: int, on_text: Callable[[str], None] | None = None) -> int:
        """Ask the model for a summary of the branch and start a new conversation seeded with it
        (``hisho.core.conversations.continued``: written at the end of the chat's own prompt when it fits)."""
        return continued.summarize_into_new(self, conversation_id, on_text)


def _inline(fn: Callable[[], T]) -> T:
    return fn()


def title_from(text: str, limit: int = 48) -> str:
    line = " ".join(text.split())
    return line if len(line) <= limit else line[: limit - 1].rstrip() + "…"


def _engine_message(exc: EngineError) -> str:
    if exc.kind is ErrorKind.CRASHED:
        return "the engine stopped in the middle of this reply; the text so far is kept — retry to continue"
    if exc.kind is ErrorKind.CLOSED:
        return "the engine was closed in the middle of this reply; the text so far is kept — retry to continue"
    if exc.kind is ErrorKind.CONTEXT_FULL:
        return f"the conversation no longer fits the context ({exc})"
    return str(exc)
