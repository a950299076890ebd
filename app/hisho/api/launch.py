"""Making an API server from the composition root (``hisho.core.services``): the engine loaded with one KV
stream per parallel sequence, the disk prompt cache on the app's KV store. ``hisho serve`` and
``hisho bench api`` call it. No Qt."""

from __future__ import annotations

import dataclasses

from hisho.api.backend import Backend
from hisho.api.cache import PromptCache
from hisho.api.server import ApiServer
from hisho.core import services
from hisho.core import settings as settings_mod
from hisho.core.engine.seam import Engine


def build_api(model: str | None, *, parallel: int, n_ctx: int | None, key: str, port: int = 0,
              force: bool = False, settings: settings_mod.Settings | None = None,
              engine: Engine | None = None) -> tuple[services.Services, ApiServer, int]:
    """Services with the model loaded for ``parallel`` sequences of ``n_ctx`` tokens (default: the setting),
    and an unstarted server bound to ``port`` on loopback. Returns (services, server, n_ctx per sequence).
    Raises UserError for a model or plan the user must fix; the caller closes the services."""
    settings = settings or settings_mod.load()
    per_seq = int(n_ctx or settings["n_ctx"])
    # One KV stream per sequence (docs/api.md): the plan is made for all of them together.
    app = services.build(model, n_ctx=per_seq * parallel, n_seq_max=parallel, kv=True, strict=True,
                         override=force, settings=settings, engine=engine, kv_unified=False)
    try:
        assert app.load_params is not None and app.model_path is not None
        app.load(dataclasses.replace(app.load_params, kv_unified=False))
        defaults = {"temperature": settings["temperature"], "top_p": settings["top_p"], "top_k": settings["top_k"]}
        cache = PromptCache(app.kv.session) if app.kv is not None else None
        backend = Backend(app.engine, app.model_path.stem, defaults, int(settings["max_tokens"]), cache)
        server = ApiServer(backend, key, port=port)
        server.bind()
    except BaseException:
        app.close()
        raise
    return app, server, per_seq
