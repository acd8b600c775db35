"""`RetuneDriver` alone (with its history, guardrail and model tables, no `Daemon` or loop thread)."""

from __future__ import annotations

from actuators.host import OperatingPoint
from tests.daemon_fakes import FakeOptimizers, loop_context
from tests.fakes import FakeHost
from tuner.daemon.guardrail import Guardrail
from tuner.daemon.model_tables import ModelTables
from tuner.daemon.observer import Observer
from tuner.daemon.retune_driver import RetuneDriver
from tuner.daemon.trial_history import TrialHistory


def _driver(ctx, opts):
    models = ModelTables(ctx)
    guard = Guardrail(ctx, Observer(ctx), models)
    return RetuneDriver(ctx, opts, TrialHistory(ctx), guard, models)


def test_a_retune_runs_its_trials_decides_and_records_points_as_operating_points(tmp_path):
    ctx = loop_context(tmp_path, FakeHost(qps=200_000.0), trials=4, sla_us=2000.0)
    opts = FakeOptimizers()
    driver = _driver(ctx, opts)
    feed = ctx.feed.subscribe()
    driver.retune("startup")
    assert opts.created == 1 and len(ctx.state.trials) == 4
    assert all(isinstance(t["point"], OperatingPoint) for t in ctx.state.trials)
    assert all(isinstance(t["measurement"]["point"], OperatingPoint) for t in ctx.state.trials)
    decision = feed.get_nowait()
    assert decision["reason"] == "startup" and decision["point"] == ctx.live_host.point() == ctx.state.held["point"]
    assert ctx.state.current_retune is None and (ctx.progress.done, ctx.progress.planned) == (4, 4)
    assert [t.retune_id for t in driver.models.tables()] == ["r000001"]  # predictions made once, here
    ctx.store.release()


def test_a_requested_restart_drops_the_retune_in_progress(tmp_path):
    ctx = loop_context(tmp_path, FakeHost(qps=200_000.0), trials=4)
    driver = _driver(ctx, FakeOptimizers())
    ctx.requests.restart_retune = True
    driver.retune("startup")
    assert ctx.state.trials == [] and ctx.state.current_retune is None and ctx.state.held is None
    ctx.store.release()
