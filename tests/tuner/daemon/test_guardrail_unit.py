"""`Guardrail` alone (its observer and model tables, no `Daemon`): reverts, the idle hold, leaving the band."""

from __future__ import annotations

from actuators.host import OperatingPoint
from tests.daemon_fakes import loop_context
from tests.fakes import FakeHost
from tuner.daemon.guardrail import SUSTAINED_WINDOWS, Guardrail
from tuner.daemon.model_tables import ModelTables
from tuner.daemon.observer import Observer
from tuner.daemon.plain import safe_corner


def _guardrail(tmp_path, host, **config):
    ctx = loop_context(tmp_path, host, **config)
    observer = Observer(ctx)
    observer.load()
    return ctx, Guardrail(ctx, observer, ModelTables(ctx))


def _hold(ctx, point, qps):
    ctx.apply(point)
    ctx.state.held = {"retune_id": "r000001", "reason": "startup", "point": point, "qps": qps}
    ctx.state.tuned_qps = qps


def test_a_window_over_the_sla_plus_margin_reverts_to_the_safe_corner_and_publishes_it(tmp_path):
    ctx, guard = _guardrail(tmp_path, FakeHost(qps=300_000.0), sla_us=200.0)
    slow = OperatingPoint(ctx.knob_space.itr_us[-1], ctx.knob_space.dvfs_ghz[0])
    _hold(ctx, slow, 300_000.0)
    feed = ctx.feed.subscribe()
    guard.hold_window()
    revert = feed.get_nowait()
    corner = safe_corner(ctx.knob_space)
    assert revert["reason"] == "guardrail" and revert["point"] == corner == ctx.live_host.point()
    assert ctx.state.held["point"] == corner and ctx.state.counters["guardrail_reverts"] == 1
    assert ctx.metrics.registry.get_sample_value("tuner_guardrail_reverts_total") == 1
    ctx.store.release()


def test_sustained_windows_just_over_the_sla_revert_too(tmp_path):
    host = FakeHost(qps=300_000.0)
    ctx, guard = _guardrail(tmp_path, host, sla_us=10_000.0)
    point = OperatingPoint(ctx.knob_space.itr_us[-1], ctx.knob_space.dvfs_ghz[0])
    _hold(ctx, point, 300_000.0)
    lat = host.measure(1.0).latency_us[99.0]
    ctx.set_policy(lat * 0.99, None, None)  # just over the SLA, within the 10 % margin
    ctx.requests.retune = None
    for _ in range(SUSTAINED_WINDOWS - 1):
        guard.hold_window()
        assert ctx.live_host.point() == point  # noise so far
    guard.hold_window()
    assert ctx.state.held["reason"] == "guardrail" and ctx.live_host.point() != point
    ctx.store.release()


def test_near_idle_load_holds_the_idle_point_and_the_load_leaving_the_band_asks_for_a_retune(tmp_path):
    host = FakeHost(qps=5.0)
    ctx, guard = _guardrail(tmp_path, host, sla_us=5000.0)
    _hold(ctx, safe_corner(ctx.knob_space), 100_000.0)
    guard.hold_window()
    assert ctx.state.held["reason"] == "idle" and not ctx.requests.load
    assert ctx.live_host.point() == OperatingPoint(ctx.knob_space.itr_us[0], ctx.knob_space.dvfs_ghz[0])
    host.set_offered_qps(100_000.0)
    guard.hold_window()  # back above idle: retune
    assert ctx.requests.load
    ctx.store.release()
