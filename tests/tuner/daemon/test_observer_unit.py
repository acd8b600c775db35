"""`Observer` alone: the baseline and tuned bands, savings, their files, and an observe window."""

from __future__ import annotations

from actuators.host import OperatingPoint
from tests.daemon_fakes import loop_context
from tuner.daemon.observer import BASELINE_FILE, Observer


def test_observe_window_adds_an_os_policy_window_to_the_baseline_and_writes_no_knob(tmp_path):
    ctx = loop_context(tmp_path)
    obs = Observer(ctx)
    obs.load()
    obs.observe_window()
    assert ctx.live_host.point() is None and ctx.loop_state == "observing"
    assert sum(b.windows for b in obs.baseline.data.values()) == 1 and not obs.tuned.data
    assert obs.baseline_rows()[0]["windows"] == 1 and obs.baseline_rows()[0]["power_w"] > 0
    assert ctx.metrics.registry.get_sample_value("tuner_baseline_windows", {"band": obs.baseline_rows()[0]["band"]})
    ctx.store.release()


def test_savings_come_from_the_tuned_windows_against_the_baseline_and_survive_a_reload(tmp_path):
    ctx = loop_context(tmp_path)
    obs = Observer(ctx)
    obs.load()
    host = ctx.live_host
    for _ in range(6):
        obs.record_baseline(host.measure(1.0))  # the OS's setting (FakeHost: ITR 50 at the top frequency)
    ctx.apply(OperatingPoint(ctx.knob_space.itr_us[-1], ctx.knob_space.dvfs_ghz[0]))  # the cheapest point
    for _ in range(6):
        obs.record_tuned(host.measure(1.0))
    assert obs.savings is not None and obs.savings.ratio > 0
    assert ctx.metrics.registry.get_sample_value("tuner_energy_saved_ratio") == obs.savings.ratio
    obs.save()
    again = Observer(ctx)
    again.load()
    assert (tmp_path / "state" / BASELINE_FILE).exists() and again.savings is not None
    assert abs(again.savings.ratio - obs.savings.ratio) < 1e-9
    ctx.store.release()
