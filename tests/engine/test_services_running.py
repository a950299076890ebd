"""What is running is owned by the composition root (``hisho.core.services``): a model switch plans and loads as
start-up does and names the new model everywhere the services are read; a file the engine cannot load is one
line; the saved remote choice is restored for ``hisho chat`` as for the window; each front end names a profile.
"""

from __future__ import annotations

import io
import shutil
import sys
from pathlib import Path

import pytest

from hisho.cli.main import main
from hisho.core import services
from hisho.core.conversations.store import ConversationStore
from hisho.core.db import Database
from hisho.core.errors import UserError
from hisho.core.models.store import ModelStore
from hisho.core.remote import endpoints
from hisho.core.remote.http import Endpoint
from tests.remote_peers import free_port
from tests.remote_stub import MODEL, StubServer


def _unknown_architecture(model: Path, dest: Path) -> Path:
    """A file whose header reads as GGUF (our check passes) but names an architecture llama.cpp does not know:
    the engine itself refuses it (MODEL_LOAD)."""
    data = bytearray(model.read_bytes())
    at = data.find(b"llama", data.find(b"general.architecture"))
    data[at:at + 5] = b"qwerq"
    dest.write_bytes(bytes(data))
    return dest


def test_switch_model_loads_as_start_up_and_names_the_new_model(tmp_path: Path, default_model_path: Path) -> None:
    other = shutil.copy(default_model_path, tmp_path / "Other-Model.Q4_1.gguf")
    ModelStore().add(Path(other), name="other-model")
    app = services.build(None, "chat")
    try:
        app.restore_engine()
        assert app.model_name.id == "smollm2-135m-instruct-q4_1"
        app.switch_model("other-model")
        assert app.model_path is not None and app.model_path.resolve() == Path(other).resolve()
        assert app.load_params is not None and app.engine.load_params is not None
        assert app.load_params.model_path == app.engine.load_params.model_path == str(app.model_path)
        assert app.load_params.n_seq_max == services.PROFILES["chat"].n_seq_max == 2   # KV saves' scratch
        assert app.model_name.id == app.chat.model_name == "other-model"
        assert app.model_name.accepts("Other-Model.Q4_1")                             # the file stem too
    finally:
        app.close()


def test_a_file_the_engine_refuses_during_a_switch_is_one_line(tmp_path: Path, default_model_path: Path) -> None:
    bad = _unknown_architecture(default_model_path, tmp_path / "odd.gguf")
    app = services.build(None, "chat")
    try:
        app.load()
        before = app.model_path
        with pytest.raises(UserError) as info:
            app.switch_model(str(bad))
        assert "\n" not in str(info.value) and str(info.value)
        assert app.model_path == before                     # still names what is loaded
        app.switch_model(None)                              # and the engine loads the next file
        assert app.engine.load_params is not None and app.engine.load_params.model_path == str(before)
    finally:
        app.close()


def test_hisho_chat_runs_on_the_engine_the_window_chose_last(monkeypatch: pytest.MonkeyPatch,
                                                             default_model_path: Path) -> None:
    monkeypatch.setenv("HISHO_NO_KEYRING", "1")
    with StubServer("ok") as srv:
        endpoints.save_endpoints([Endpoint("box", srv.url)])
        endpoints.save_choice("box", MODEL)
        out, err = io.StringIO(), io.StringIO()
        monkeypatch.setattr(sys, "stdin", io.StringIO("Hello?\n"))
        monkeypatch.setattr(sys, "stdout", out)
        monkeypatch.setattr(sys, "stderr", err)
        assert main(["chat"]) == 0
        assert srv.requests, "the saved remote engine was not asked"
    assert "Hello from the stub." in out.getvalue()
    assert "on box" in err.getvalue()
    store = ConversationStore(Database())
    try:
        reply = store.branch(store.conversations()[0].id)[-1]
        assert (reply.engine, reply.model) == ("box", MODEL)
    finally:
        store.close()


def test_hisho_chat_falls_back_to_the_local_model_in_one_line(monkeypatch: pytest.MonkeyPatch,
                                                              default_model_path: Path) -> None:
    monkeypatch.setenv("HISHO_NO_KEYRING", "1")
    endpoints.save_endpoints([Endpoint("gone", f"http://127.0.0.1:{free_port()}")])
    endpoints.save_choice("gone", MODEL)
    app = services.build(None, "chat")
    try:
        running = app.restore_engine()
        assert running.endpoint is None and "gone" in running.fallback and "\n" not in running.fallback
        assert app.engine is app.local_engine and app.engine.load_params is not None
        assert endpoints.load_choice() == ("gone", MODEL)       # tried again next time
    finally:
        app.close()


def test_each_front_end_names_a_profile(default_model_path: Path) -> None:
    assert set(services.PROFILES) == {"window", "chat", "generate", "summarize", "serve"}
    app = services.build(None, "generate")
    try:
        assert app.kv is None and app.load_params is not None and app.load_params.n_seq_max == 1
    finally:
        app.close()
    app = services.build(None, "serve", parallel=3)
    try:
        assert app.kv is not None and app.load_params is not None and app.load_params.n_seq_max == 3
    finally:
        app.close()
    with pytest.raises(UserError):
        services.build("no-such-model", "chat")                 # strict: the command line says it
    app = services.build("no-such-model", "window")             # the window opens and shows it
    try:
        assert app.model_problem and app.load_params is None
    finally:
        app.close()


def test_the_queue_shows_a_load_while_it_runs_and_documents_report_to_it(default_model_path: Path) -> None:
    app = services.build(None, "chat")
    seen: list[tuple[str, ...]] = []
    app.state.subscribe(lambda now: seen.append(now.queue.jobs))
    try:
        app.load()
        assert ("loading " + app.model_name.display,) in seen
        assert app.state.now.queue.idle and app.state.now.loaded
        with app.documents.working("summarizing report.pdf"):   # the root handed Documents its queue
            assert app.state.now.queue.jobs == ("summarizing report.pdf",)
        assert app.state.now.queue.idle
    finally:
        app.close()
