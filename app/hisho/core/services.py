"""The composition root: the one place that makes the app's services and wires them together. No Qt.

``build(...)`` returns a ``Services``: settings, the conversation store, the engine, the executor (the app's
worker lanes), the chat service, KV persistence and documents. The window (``hisho.gui.shell.app``), ``hisho chat``,
``hisho summarize`` and ``hisho generate`` all get theirs here, so a chat resumes from its saved KV and a
question about a long document gets its relevant parts whichever front end sends it. Nothing else constructs
an ``EngineClient``, a ``KVSession`` or a ``ChatService`` for the app (benchmarks and tests may, to measure or
isolate one part), nor a ``ModelStore`` or ``Downloader`` (``open_models`` / ``open_downloads``: one each per
process, each a database connection; ``Services.models`` and ``Services.downloads`` for a front end).

Rules of use:
- A front end names its ``Profile`` (``PROFILES``: window, chat, generate, summarize, serve); the profile says
  what it gets (sequences, KV persistence, strictness), here and nowhere else. The caller adds only ``post``
  (how callbacks reach its thread: the window's bridge, or nothing for the command line).
- What is running is changed here only: ``restore_engine`` at start (the saved local/remote choice, window and
  ``hisho chat`` alike), ``switch_model`` (a local model, planned and loaded as at start-up), ``connect`` /
  ``disconnect`` (a remote engine). Each runs on the caller's engine lane, between turns.
- ``state`` (``core/appstate.py``) says what answers now, for every screen and front end; only the methods here
  change it (and the after-turn hook, with the speeds measured). Read ``state.now``, or ``state.subscribe``.
- The chat hooks and their order are declared in ``install_hooks`` (``core/wiring.py``, used only here) and
  nowhere else.
- A server over the services (the API) is started, replaced and stopped here (``serve`` / ``stop_serving``),
  whichever front end asked for it: ``close`` stops it before the engine it runs on.
- ``close()`` once at exit: the API stops, KV saves in flight land, the lanes stop, the engine exits, the
  databases close.
"""

from __future__ import annotations

import dataclasses
import functools
import logging
import os
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from hisho.core import settings as settings_mod
from hisho.core import spawn
from hisho.core.appstate import AppState
from hisho.core.conversations.chat import ChatService
from hisho.core.conversations.store import ConversationStore
from hisho.core.db import Database, DatabaseUnavailable, SchemaTooNew
from hisho.core.documents.service import Documents
from hisho.core.engine.protocol import ErrorKind, LoadParams
from hisho.core.engine.seam import Capability, Engine
from hisho.core.errors import EngineCrashed, EngineError, LoadStopped, UserError
from hisho.core.executor import Executor, Post
from hisho.core.kv.chat_hooks import KVChat
from hisho.core.kv.chat_hooks import attach as attach_kv
from hisho.core.models.names import ModelName, name_of, remote_name
from hisho.core.models.store import ModelStore
from hisho.core.planner.gate import PlanRefused
from hisho.core.planner.launch import load_params_for, open_model
from hisho.core.remote.endpoints import LOCAL, load_choice, load_endpoints, save_choice, with_key
from hisho.core.remote.http import Endpoint
from hisho.core.tools.approvals import Approve
from hisho.core.tools.config import ServerConfig, load_servers
from hisho.core.tools.loop import ToolLoop
from hisho.core.tools.manager import ServerState, ToolManager
from hisho.core.wiring import install_hooks, record_speed, use_engine

if TYPE_CHECKING:
    from hisho.core.hub.download import Downloader

log = logging.getLogger("hisho.services")


@dataclass(frozen=True)
class Profile:
    """What one front end gets from the root.

    ``n_seq_max``: sequences the model is loaded with (KV saves use the last one as scratch, so a front end
    that keeps KV needs 2; ``serve`` takes its ``parallel`` instead). ``kv``: saved KV is restored and saved
    per chat. ``strict``: a bad model or a refused plan raises (``UserError``) instead of opening with a
    problem to show. ``kv_unified``: one KV stream shared by the sequences (False: one per sequence, as the
    API's slots load, where a sliding-window model holds a window per sequence; the plan must know)."""

    name: str
    n_seq_max: int
    kv: bool
    strict: bool
    kv_unified: bool = True


PROFILES: dict[str, Profile] = {p.name: p for p in (
    Profile("window", n_seq_max=2, kv=True, strict=False),      # opens anyway; the banner says what is wrong
    Profile("chat", n_seq_max=2, kv=True, strict=True),         # resumes a chat from its KV, as the window
    Profile("generate", n_seq_max=1, kv=False, strict=True),    # one turn, nothing kept
    # Document batches run in job contexts the engine swaps in (one KV stream per sequence): a plain load.
    Profile("summarize", n_seq_max=1, kv=False, strict=True),
    Profile("serve", n_seq_max=1, kv=True, strict=True, kv_unified=False),  # n_seq_max: the server's ``parallel``
)}


class Served(Protocol):
    """A server over the services (the API, ``hisho.api.server.ApiServer``): the root starts it, replaces it and
    stops it before the engine closes, whichever front end asked for it."""

    def start(self) -> None: ...
    def stop(self) -> None: ...


@dataclass
class Running:
    """What answers after ``restore_engine`` / ``connect``: the load's info, the remote endpoint (None: this
    computer) and, when a saved remote engine did not answer, why the local model answers instead."""

    info: dict[str, Any]
    endpoint: Endpoint | None = None
    model: str = ""
    fallback: str = ""


@dataclass
class Services:
    settings: settings_mod.Settings
    store: ConversationStore
    engine: Engine
    executor: Executor
    chat: ChatService
    documents: Documents
    kv: KVChat | None                    # None: read-only store, or an engine that cannot keep KV state
    model_path: Path | None
    load_params: LoadParams | None       # None: no model could be chosen (``model_problem`` says why)
    problem: str = ""                    # why conversations are read-only / not saved (a banner in the window)
    model_problem: str = ""
    plan_refused: bool = False
    local_engine: Engine | None = None   # the built-in engine, kept while a remote one answers (use_engine)
    profile: Profile = field(default_factory=lambda: PROFILES["window"])
    n_ctx: int | None = None             # the front end's context length (None: the settings')
    closing: bool = False                # the app is quitting: nothing is loaded any more (``begin_close``)
    state: AppState = field(default_factory=AppState)   # what answers now (written here only)
    models: ModelStore = field(default_factory=lambda: open_models())   # the model registry: the app's one
    _downloads: Downloader | None = field(default=None, repr=False)
    served: Served | None = None        # the API server running over these services (``serve``), if any
    tools: ToolLoop | None = None       # tools in the chat (``use_tools``), while turned on
    _named: tuple[Path | None, ModelName] | None = field(default=None, repr=False)

    @property
    def model_name(self) -> ModelName:
        """The loaded (or chosen) local model's one identity and display name (read from the model store once
        per model, so the GUI thread may ask)."""
        if self._named is None or self._named[0] != self.model_path:
            self._named = (self.model_path, name_of(self.model_path, self.models))
        return self._named[1]

    @property
    def downloads(self) -> Downloader:
        """The download queue over ``models`` (made on first use: most front ends never download)."""
        if self._downloads is None:
            self._downloads = open_downloads(self.models)
        return self._downloads

    def serve(self, server: Served) -> None:
        """Start ``server`` over these services, in place of one that runs (stopped first: one port, one
        server); it runs until ``stop_serving`` or ``close``. A server that does not start raises and is not kept."""
        self.stop_serving()
        server.start()
        self.served = server

    def stop_serving(self) -> None:
        server, self.served = self.served, None
        if server is not None:
            server.stop()

    def load(self, params: LoadParams | None = None) -> dict[str, Any]:
        """Load ``params`` (default: the planned ones) into the engine; a file the engine cannot load is the
        user's to fix (UserError), whatever the engine's own error says."""
        params = params or self.load_params
        if params is None:
            raise UserError(self.model_problem or "no model to load")
        self.state.loading()
        try:
            with self.state.working(f"loading {self.model_name.display}"):
                info = load_engine(self.engine, params)
        except BaseException as exc:
            self.state.failed(str(exc))
            raise
        self._answering_local(info)
        return info

    def ensure_loaded(self) -> None:
        """Engine lane: load the planned model when nothing answers (the state says so), e.g. before a summary
        or an attach that needs the engine; a no-op when a model answers or none is planned."""
        if not self.state.now.loaded and self.load_params is not None:
            self.load()

    def asked_to_switch(self) -> None:
        """A switch was asked for (any thread, before ``switch_model`` runs on the engine lane): nothing
        answers until it ends, so new messages wait for it."""
        self.state.loading()

    def _answering_local(self, info: dict[str, Any]) -> None:
        """The state once this computer's model answers (``info``: what its load reported)."""
        params = self.engine.load_params or self.load_params
        kv = "" if params is None else (params.type_k if params.type_k == params.type_v
                                        else f"{params.type_k}/{params.type_v}")
        self.state.answering(self.model_name, path=str(self.model_path or ""),
                             n_ctx=int(info.get("n_ctx", 0) or (params.n_ctx if params else 0)), kv_type=kv,
                             base=bool(info.get("base_model")))

    # ----- what is running: each on the engine lane, between turns ---------------------------------------

    def switch_model(self, name: str | None, *, override: bool = False) -> dict[str, Any]:
        """Answer with local model ``name`` (a store id or a path; None: the default model), planned and loaded
        as at start-up, with this front end's profile. A remote engine that answered steps aside (and the next
        start is local). The engine's crash or a file it cannot load is a ``UserError`` in one line; a refused
        plan is ``PlanRefused`` (``override`` loads anyway). On success ``model_path`` and ``load_params`` name
        the new model (the API page, documents and a later reload use them)."""
        self.disconnect()
        try:
            path = open_model(name or None, self.models)
            params = load_params_for(path, n_ctx=self.n_ctx, settings=self.settings,
                                     n_seq_max=self.profile.n_seq_max, override=override,
                                     kv_unified=self.profile.kv_unified, saves_kv=self.profile.kv)
        except BaseException as exc:   # no such model, or the plan refused it: the switch failed
            self.state.failed(str(exc))
            raise
        previous = self.engine.load_params
        named = name_of(path, self.models)
        self.state.loading(named, str(path))
        try:
            with self.state.working(f"loading {named.display}"):
                info = load_engine(self.engine, params)
        except LoadStopped as exc:
            raise self._stopped(exc, previous) from None
        except BaseException as exc:
            self.state.failed(str(exc), self.model_name, str(self.model_path or ""))
            raise
        self.model_path, self.load_params = path, params
        self.model_problem, self.plan_refused = "", False
        self._answering_local(info)
        self._remember_model(named.id)
        return info

    def _remember_model(self, name: str) -> None:
        """The window's next start loads the model it answered with last (``last_model``), kept on the store
        lane as every settings write is."""
        if self.profile.name != "window" or not name or self.settings["last_model"] == name:
            return
        self.settings.set("last_model", name)
        self.executor.submit("store", self.settings.save,
                             failed=lambda exc: log.warning("the last model used was not saved: %s", exc))

    def _stopped(self, exc: LoadStopped, previous: LoadParams | None) -> LoadStopped:
        """A switch the user stopped: the model that answered before is loaded again (the engine freed it to
        make room for the new one), so the chat goes on as it was; without one nothing is loaded, and the
        message says so. Stopping this second load too leaves none."""
        self.state.unloaded(self.model_name, str(self.model_path or ""))
        if previous is None or self.closing:  # quitting: nothing to answer any more, nothing to wait for
            self.state.failed(f"{exc}: no model is loaded")
            return LoadStopped(f"{exc}: no model is loaded")
        try:
            info = load_engine(self.engine, previous)
        except UserError as again:
            stopped = LoadStopped(f"{exc}, and {Path(previous.model_path).name} did not load again ({again}): "
                                  "no model is loaded")
            self.state.failed(str(stopped))
            return stopped
        self._answering_local(info)
        back = LoadStopped(f"{exc}; {self.model_name.display} answers again")
        back.restored = info
        return back

    def asked_to_connect(self, endpoint: str) -> None:
        """A connect to ``endpoint`` was asked for (any thread, before ``connect`` runs on the engine lane): new
        messages wait for it; ``connect`` ends that, whichever way it goes."""
        self.state.connecting(endpoint)

    def connect(self, endpoint: Endpoint, model: str,
                on_wait: Callable[[str], None] | None = None) -> dict[str, Any]:
        """Answer with ``model`` on remote ``endpoint`` from the next turn on, and remember that choice for the
        next start. Raises the engine's one-line error when it does not answer; what answered before still
        does then."""
        from hisho.core.remote.engine import RemoteEngine

        eng = RemoteEngine(with_key(endpoint))
        eng.on_wait = on_wait
        self.state.connecting(endpoint.name)
        try:
            with self.state.working(f"connecting to {endpoint.name}"):
                info = eng.load(LoadParams(model_path=model, n_ctx=int(self.n_ctx or self.settings["n_ctx"])))
        except BaseException:
            self.state.connecting("")   # what answered before still does
            raise
        previous = self.engine
        use_engine(self, eng)
        if previous is not self.local_engine:
            previous.close()
        save_choice(endpoint.name, model)
        self.state.answering(remote_name(model, endpoint.name), engine=endpoint.name,
                             n_ctx=int(info.get("n_ctx", 0)))
        return info

    def disconnect(self) -> None:
        """Back to this computer's engine (its model, if loaded, answers again) and remember that; a no-op when
        it answers already."""
        local = self.local_engine
        if local is None or local is self.engine:
            return
        remote = self.engine
        use_engine(self, local)
        remote.close()
        save_choice(LOCAL)
        if local.load_params is not None:   # its model, still loaded, answers again
            self._answering_local(dict(local.load_info))
        else:
            self.state.unloaded(self.model_name, str(self.model_path or ""))

    def saved_remote(self) -> tuple[Endpoint, str] | None:
        """The remote engine and model chosen last (``connect``), if it is still configured; None: local."""
        name, model = load_choice()
        ep = next((e for e in load_endpoints() if e.name == name), None)
        return None if name == LOCAL or ep is None else (ep, model)

    def restore_engine(self, on_wait: Callable[[str], None] | None = None) -> Running:
        """At start: answer as the user chose last — the remote model picked then, else the local model loaded
        (``load``). A remote engine that does not answer now is said in ``Running.fallback`` and the local
        model loads instead; the choice is kept, so the next start tries it again."""
        saved = self.saved_remote()
        fallback = ""
        if saved is not None:
            ep, model = saved
            try:
                return Running(self.connect(ep, model, on_wait), ep, model)
            except EngineError as exc:
                fallback = (f"{exc}. Using this computer's model for now (Hisho tries {ep.name} again at the "
                            "next start).")
                log.warning("the saved engine %s did not answer: %s", ep.name, exc)
        return Running(self.load(), None, self.model_name.id, fallback)

    def begin_close(self) -> None:
        """The app is quitting (any thread): a model load in flight stops at once and nothing loads after it
        (not even the model that answered before a stopped switch), so the quit waits on no load."""
        self.closing = True
        self.chat.closing = True  # a reply that ends now was stopped by the quit, whatever the engine says
        spawn.stop_running()  # a probe child (the first start's measurement, a plan's dry run) ends with the app
        for engine in {id(e): e for e in (self.engine, self.local_engine) if e is not None}.values():
            engine.cancel_load()
            # No crash recovery during a quit: an engine killed or gone is not started (and loaded) again.
            stop_restarts = getattr(engine, "begin_close", None)
            if callable(stop_restarts):
                stop_restarts()

    def use_tools(self, approve: Approve, servers: list[ServerConfig] | None = None,
                  on_state: Callable[[ServerState], None] | None = None) -> ToolLoop:
        """Tools in every chat (docs/tools.md): the MCP servers configured (or ``servers``) start in the
        background, every prompt carries their enabled tools and replies run the tool loop, ``approve`` asking
        the person about each call (on the engine lane: the window moves the question to its own thread and
        waits for the answer). "Always" answers are saved with the settings on the store lane. Called again:
        the loop already running."""
        if self.tools is None:
            manager = ToolManager(servers if servers is not None else load_servers(), on_state=on_state)
            manager.start()
            loop = ToolLoop.from_settings(self.settings, manager, approve)

            def remember(keys: list[str]) -> None:
                def save() -> None:
                    self.settings.set("tools_always_allowed", keys)
                    self.settings.save()
                self.executor.submit("store", save)

            loop.approvals.on_change = remember
            self.tools = self.chat.tools = loop
        return self.tools

    def stop_tools(self) -> None:
        """Tools off: replies answer in words again and the servers stop."""
        loop, self.tools = self.tools, None
        self.chat.tools = None
        if loop is not None:
            loop.manager.close()

    def close(self, timeout: float = 30.0) -> None:
        """App exit: KV saves in flight land and are indexed, the lanes stop, the engine exits, the store
        closes. Safe to call twice."""
        self.stop_serving()   # its requests end before the engine they run on
        self.stop_tools()
        if self.kv is not None:
            self.kv.close(timeout)
        self.executor.shutdown(timeout)
        self.engine.close()
        if self.local_engine is not None and self.local_engine is not self.engine:
            self.local_engine.close()
        self.store.close()
        self.models.db.close()


def load_engine(engine: Engine, params: LoadParams) -> dict[str, Any]:
    try:
        return engine.load(params)
    except EngineCrashed as exc:
        raise UserError(f"the engine crashed while loading {params.model_path}; the file is probably damaged "
                        f"({exc})") from None
    except EngineError as exc:
        if exc.kind is ErrorKind.MODEL_LOAD:
            raise UserError(str(exc)) from None
        raise


def open_store(path: Path | None = None) -> tuple[ConversationStore, str]:
    """The user's store, or a read-only / temporary one with a message saying why (opening never fails)."""
    try:
        return ConversationStore(Database(path)), ""
    except DatabaseUnavailable as exc:
        problem, too_new = str(exc), isinstance(exc, SchemaTooNew)
        log.error("conversation database unavailable: %s", problem)
    if not too_new:
        try:
            store = ConversationStore(Database(path, read_only=True))
            return store, f"{problem}. Showing your chats read-only; new messages are not saved."
        except DatabaseUnavailable as exc2:
            log.error("read-only open failed too: %s", exc2)
    return ConversationStore(Database(":memory:")), f"{problem}. Starting with an empty chat list; " \
                                                     "nothing is saved this session."


def open_models() -> ModelStore:
    """The process's model registry (its own connection to the app's database). ``build`` makes the one a front
    end's ``Services`` holds; a command that needs only the registry (``hisho models``, ``hisho plan``) calls
    this once. Nothing else constructs a ``ModelStore`` (tests/core/test_architecture.py)."""
    return ModelStore()


def open_downloads(models: ModelStore) -> Downloader:
    """The process's download queue, registering into (and sharing the connection of) ``models``."""
    from hisho.core.hub.download import Downloader

    return Downloader(models)


def make_engine() -> Engine:
    """The engine the app runs on: the local child process (the one implementation so far). It measures flash
    attention when idle after a load (docs/flash-attention.md, "Measured here")."""
    from hisho.core.engine.client import EngineClient
    from hisho.core.planner.attention import IDLE_ENV, IDLE_S

    return EngineClient(env={IDLE_ENV: str(IDLE_S), **os.environ})  # a "0" already set (the test suite) stays


def _last_model(profile: Profile, settings: settings_mod.Settings, models: ModelStore) -> str:
    """The window opens on the model it answered with last, while that model is still in the store."""
    last = str(settings["last_model"] or "")
    return last if profile.name == "window" and last and models.get(last) is not None else ""


def build(model: str | None = None, profile: str = "window", *, db_path: Path | None = None,
          post: Post | None = None, n_ctx: int | None = None, parallel: int | None = None, override: bool = False,
          engine: Engine | None = None, settings: settings_mod.Settings | None = None,
          models: ModelStore | None = None) -> Services:
    """Make and wire every service for front end ``profile`` (``PROFILES``). ``model``: a store id or path (None:
    the settings' default model). ``parallel``: the ``serve`` profile's sequences. ``models``: the registry the
    command already opened to decide its arguments (``open_models``), else one opened here."""
    chosen = PROFILES[profile]
    if parallel is not None:
        chosen = dataclasses.replace(chosen, n_seq_max=max(1, parallel))
    n_seq_max, kv, strict, kv_unified = chosen.n_seq_max, chosen.kv, chosen.strict, chosen.kv_unified
    settings = settings or settings_mod.load()
    store, problem = open_store(db_path)
    models = models or open_models()
    model_problem, plan_refused = "", False
    model_path: Path | None = None
    params: LoadParams | None = None
    try:
        model_path = open_model(model or _last_model(chosen, settings, models)
                                or str(settings["default_model"] or "") or None, models)
        params = load_params_for(model_path, n_ctx=n_ctx, settings=settings, n_seq_max=n_seq_max,
                                 override=override, kv_unified=kv_unified, saves_kv=kv)
    except UserError as exc:
        if strict:
            store.close()
            raise
        model_problem, plan_refused = str(exc), isinstance(exc, PlanRefused)
    engine = engine or make_engine()
    executor = Executor(post)
    named = name_of(model_path, models)
    state = AppState()
    chat = ChatService(store, engine, answering=lambda: state.now.model.id,
                       write=lambda fn: executor.call("store", fn),
                       default_system_prompt=lambda: str(settings["default_system_prompt"]))
    kv_chat = None
    if kv and not store.read_only and Capability.KV_STATE.value in engine.capabilities:
        kv_chat = attach_kv(chat, store.db, executor, budget_bytes=int(settings["kv_disk_budget_bytes"]))
    documents = Documents(store, engine, kv_chat.session if kv_chat else None,
                          write=lambda fn: executor.call("store", fn))
    app = Services(settings, store, engine, executor, chat, documents, kv_chat, model_path, params, problem,
                   model_problem, plan_refused, local_engine=engine, profile=chosen, n_ctx=n_ctx,
                   models=models, _named=(model_path, named), state=state)
    app.state.chosen(named, str(model_path or ""))
    if app.model_problem or app.load_params is None:   # nothing to load: the window says why, sends are refused
        app.state.failed(app.model_problem or "no model to load")
    documents.working = app.state.working   # a summary or an attach is engine work the queue shows
    install_hooks(chat, documents, kv_chat, measured=functools.partial(record_speed, app))
    return app
