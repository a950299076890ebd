"""The op layer (``hisho.gui.ops``): the lane follows from what the work touches; success, failure, quiet
failures and latest-wins reach the caller as the executor delivers them."""

from __future__ import annotations

import logging
import threading
from collections.abc import Iterator

import pytest

from hisho.core.executor import Executor
from hisho.gui import ops


@pytest.fixture
def ex() -> Iterator[Executor]:
    executor = Executor()   # no post: callbacks run on the lane right after the job
    yield executor
    executor.shutdown(5)


def test_each_kind_of_work_runs_on_its_own_lane(ex: Executor) -> None:
    kinds = {ops.database: "store", ops.engine: "engine", ops.remote: "remote", ops.hub: "hub",
             ops.download: "download", ops.kv_files: "kv"}
    for kind, lane in kinds.items():
        op = kind(ex, lambda lane=lane: ex.on_lane(lane))
        assert op.lane == lane
        assert op.run().result(5) is True, lane


def test_success_and_failure_get_the_result_and_the_error(ex: Executor) -> None:
    got: list[object] = []
    ops.database(ex, lambda: 41 + 1).success(got.append).run()

    def boom() -> None:
        raise ValueError("no disk")

    ops.engine(ex, boom).failure(got.append).run()
    assert ex.idle("store") and ex.idle("engine")
    assert got[0] == 42 and isinstance(got[1], ValueError)


def test_without_a_failure_handler_the_app_s_report_says_it(ex: Executor) -> None:
    reported: list[BaseException] = []
    ex.on_error = reported.append
    ops.hub(ex, lambda: 1 / 0).run()
    assert ex.idle("hub")
    assert len(reported) == 1 and isinstance(reported[0], ZeroDivisionError)


def test_a_quiet_failure_is_logged_not_reported(ex: Executor, caplog: pytest.LogCaptureFixture) -> None:
    reported: list[BaseException] = []
    ex.on_error = reported.append
    with caplog.at_level(logging.INFO, logger="hisho.gui"):
        ops.hub(ex, lambda: 1 / 0).quiet("no model card").run()
        assert ex.idle("hub")
    assert not reported
    assert any("no model card: division by zero" in r.getMessage() for r in caplog.records)


def test_latest_wins_drops_a_waiting_op_with_the_same_key(ex: Executor) -> None:
    gate = threading.Event()
    got: list[str] = []
    ops.remote(ex, lambda: gate.wait(5)).run()          # holds the lane
    first = ops.remote(ex, lambda: "first").success(got.append).latest("picker").run()
    ops.remote(ex, lambda: "second").success(got.append).latest("picker").run()
    gate.set()
    assert ex.idle("remote")
    assert first.cancelled() and got == ["second"]


def test_save_settings_writes_them_on_the_database_lane(ex: Executor) -> None:
    class Values:
        saved_on_store: list[bool] = []

        def save(self) -> None:
            self.saved_on_store.append(ex.on_lane("store"))

    values = Values()
    op = ops.save_settings(ex, values)
    assert op.lane == "store"
    op.run().result(5)
    assert values.saved_on_store == [True]
