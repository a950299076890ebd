"""Making an API server from the composition root (``hisho.core.services``). No Qt.

Rules of use:
- ``api_server(app, key, port=...)`` is the one way an ``ApiServer`` is made over a ``Services``: ``hisho
  serve``, ``hisho bench`` and the window's Settings → API all call it, so they honour the same settings (the
  limits, the CORS origins, the sampling defaults), use the app's KV store as the disk prompt cache, and ask
  ``app`` for its engine and model for each request (a model switch or a remote connect is followed at once).
- ``build_api(...)`` is ``hisho serve``'s whole start: the model loaded for ``parallel`` sequences with one KV
  stream each (docs/api.md), then ``api_server`` bound on loopback. The window keeps its own engine shape
  and only calls ``api_server``.
"""

from __future__ import annotations

import logging

from hisho.api.backend import Backend
from hisho.api.cache import PromptCache
from hisho.api.limits import Limits
from hisho.api.server import ApiServer
from hisho.core import services
from hisho.core import settings as settings_mod
from hisho.core.db import DatabaseUnavailable
from hisho.core.engine.seam import Engine
from hisho.core.models.names import ModelName
from hisho.core.planner.launch import chosen_ctx, open_model
from hisho.core.stored_responses import StoredResponses

log = logging.getLogger("hisho.api")


def origins(text: str) -> list[str]:
    """The ``api_cors_origins`` setting as a list."""
    return [o.strip() for o in text.split(",") if o.strip()]


def model_name(app: services.Services) -> ModelName:
    """The model answering now, as the API names it: the app's state (``Services.state``), which follows a
    switch and a remote connect (a remote model is known by its server's id)."""
    model = app.state.now.model
    return model if model.id else ModelName("hisho", "hisho")


def stored_responses(app: services.Services) -> StoredResponses | None:
    """The Responses API's kept responses, in the app's database (None where it cannot be written: then
    nothing is kept and ``previous_response_id`` finds nothing)."""
    if app.store.read_only:
        return None
    try:
        return StoredResponses(app.store.db)
    except DatabaseUnavailable as exc:
        log.warning("the API keeps no responses: %s", exc)
        return None


def api_server(app: services.Services, key: str, *, port: int = 0) -> ApiServer:
    """An unstarted server over ``app`` on loopback ``port`` (0: a free one once bound)."""
    settings = app.settings
    defaults = {"temperature": settings["temperature"], "top_p": settings["top_p"], "top_k": settings["top_k"]}
    cache = PromptCache(app.kv.session) if app.kv is not None else None  # the same KV store as the chats
    backend = Backend(lambda: app.engine, lambda: model_name(app), defaults, int(settings["max_tokens"]), cache,
                      Limits.from_settings(settings))
    backend.on_queue = app.state.api_queue   # the app's queue says what the API runs and what waits
    backend.responses = stored_responses(app)
    return ApiServer(backend, key, port=port, cors_origins=origins(str(settings["api_cors_origins"])))


def build_api(model: str | None, *, parallel: int, n_ctx: int | None, key: str, port: int = 0,
              force: bool = False, settings: settings_mod.Settings | None = None,
              engine: Engine | None = None) -> tuple[services.Services, ApiServer, int]:
    """Services with the model loaded for ``parallel`` sequences of ``n_ctx`` tokens each (default: the model's
    own choice, as the window loads it: ``launch.chosen_ctx``), and an unstarted server bound to ``port`` on
    loopback. Returns (services, server, n_ctx per sequence). Raises UserError for a model or plan the user must
    fix; the caller closes the services."""
    settings = settings or settings_mod.load()
    models = services.open_models()
    per_seq = int(n_ctx or chosen_ctx(open_model(model or str(settings["default_model"] or "") or None, models),
                                      settings))
    # One KV stream per sequence (docs/api.md): the serve profile plans and loads that way, for all of them together.
    app = services.build(model, "serve", n_ctx=per_seq * parallel, parallel=parallel, override=force,
                         settings=settings, engine=engine, models=models)
    try:
        assert app.load_params is not None and app.model_path is not None
        assert not app.load_params.kv_unified  # the serve profile's plan
        app.load()
        server = api_server(app, key, port=port)
        server.bind()
    except BaseException:
        app.close()
        raise
    return app, server, per_seq
