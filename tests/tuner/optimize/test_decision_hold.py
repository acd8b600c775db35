"""Holding from the model without trials: the shared rule (`hold_or_retune`), the contextual tuner's retune that
runs 0 trials inside the loads it measured and retunes outside them, the daemon's load-shift check deciding by the
same rule, and the hourly oracle the fine-window replay compares against (`summary.json`)."""

from __future__ import annotations

import pytest

from actuators.host import OperatingPoint
from tests.daemon_fakes import FakeOptimizers, write_config
from tests.fakes import FakeHost
from tests.replay_fakes import KNOBS, make_model_host
from tuner.config import load_config
from tuner.daemon.loop import Daemon
from tuner.daemon.plain import ModelTable
from tuner.optimize.decision import HoldCandidate, hold_or_retune, outside_measured
from tuner.optimize.optimizer import Optimizer
from tuner.optimize.presets import cold_settings
from tuner.optimize.retune import run_retune
from tuner.optimize.settings import Objective
from tuner.replay.oracle import oracle_point
from tuner.replay.report import summary
from tuner.replay.run import FINE_HOLD_MAX_P, ReplayWindow, default_policies, fine_window_hold, hour_loads, replay

CHEAP = HoldCandidate(OperatingPoint(300, 1.6), 380.0, 0.01, 60.0)
SAFE = HoldCandidate(OperatingPoint(50, 2.9), 120.0, 0.0, 90.0)
RISKY = HoldCandidate(OperatingPoint(400, 1.2), 470.0, 0.40, 45.0)
MEASURED = [(300_000.0, SAFE.point), (320_000.0, CHEAP.point), (320_000.0, RISKY.point), (400_000.0, SAFE.point)]
LOADS = [q for q, _ in MEASURED]


def test_inside_the_measured_loads_holds_the_cheapest_confident_point() -> None:
    v = hold_or_retune(310_000.0, MEASURED, [SAFE, CHEAP, RISKY], max_p=0.05)
    assert v.hold and v.point == CHEAP.point and v.candidate == CHEAP
    assert "no trial" in v.reason


@pytest.mark.parametrize(
    "qps,why",
    [
        (450_000.0, "above the highest"),  # a new peak: retune (the peak step starts from the highest)
        (250_000.0, "below the lowest"),
        (360_000.0, "no load within 10 %"),  # a gap between 320K and 400K
    ],
)
def test_outside_the_measured_loads_retunes(qps: float, why: str) -> None:
    v = hold_or_retune(qps, MEASURED, [SAFE, CHEAP], max_p=0.05)
    assert not v.hold and v.point is None and why in v.reason
    assert outside_measured(qps, LOADS) == v.reason


def test_only_a_point_measured_at_this_load_or_above_is_held() -> None:
    # CHEAP was measured at 320K only: at 330K it cannot be held, SAFE (measured at 400K) can
    v = hold_or_retune(330_000.0, MEASURED, [CHEAP, SAFE], max_p=0.05)
    assert v.hold and v.point == SAFE.point
    v = hold_or_retune(330_000.0, MEASURED, [CHEAP], max_p=0.05)
    assert not v.hold and "measured within the limit at 330000 QPS or above" in v.reason


def test_a_model_not_confident_enough_or_holding_off_retunes() -> None:
    v = hold_or_retune(310_000.0, MEASURED, [RISKY], max_p=0.05)
    assert not v.hold and "not confident" in v.reason
    assert not hold_or_retune(310_000.0, MEASURED, [SAFE], max_p=0.0).hold
    assert not hold_or_retune(310_000.0, [], [SAFE], max_p=0.05).hold
    assert not hold_or_retune(310_000.0, MEASURED, [], max_p=0.05).hold


def _optimizer() -> Optimizer:
    settings = cold_settings(
        trials=6,
        sobol_trials=6,
        settle_s=0.0,
        window_s=2.0,
        seed=3,
        itr_resolution_us=40,
        context=True,
        hold_max_p=0.5,
    )
    return Optimizer(FakeHost(qps=300_000.0, seed=3, knobs=KNOBS).knobs(), Objective("constrained", 99, 5000), settings)


def test_contextual_retune_holds_with_zero_trials_inside_and_retunes_outside() -> None:
    host = FakeHost(qps=300_000.0, seed=3, knobs=KNOBS)
    opt = _optimizer()
    first = run_retune(host, opt, opt.settings)  # nothing measured yet: 6 trials at 300K
    assert not first.held and len(opt.retune_trials()) == 6 and "no load measured" in first.reason
    host.set_offered_qps(303_000.0)  # inside what was measured (2 % tolerance)
    held = run_retune(host, opt, opt.settings)
    assert held.held and held.measurement is None and opt.retune_trials() == []
    assert host.point() == held.point and "no trial" in held.reason
    host.set_offered_qps(600_000.0)  # a new peak: trials again
    moved = run_retune(host, opt, opt.settings, should_stop=lambda: len(opt.retune_trials()) >= 1)
    assert not moved.held and len(opt.retune_trials()) == 1 and "above the highest" in moved.reason


def test_another_hosts_trials_inform_the_model_but_never_hold_without_a_trial() -> None:
    """Host A's retune at 300K, handed to host B's optimiser as borrowed (a class's trials): B measures at
    300K before it holds there, as its daemon would; handed over as B's own history, the same trials hold."""
    a_host = FakeHost(qps=300_000.0, seed=3, knobs=KNOBS)
    a = _optimizer()
    run_retune(a_host, a, a.settings)
    done = [r for r in a.trials() if r.status == "completed"]
    assert len(done) == 6
    for borrowed in (True, False):
        b_host = FakeHost(qps=300_000.0, seed=4, knobs=KNOBS)
        b = _optimizer()
        assert b.add_history(done, borrowed=borrowed) == 6
        first = run_retune(b_host, b, b.settings, should_stop=lambda b=b: len(b.retune_trials()) >= 2)
        if borrowed:
            assert not first.held and len(b.retune_trials()) == 2 and "no load measured" in first.reason
            again = run_retune(b_host, b, b.settings)  # now it measured 300K itself: it may hold
            assert again.held and b.retune_trials() == []
            assert Optimizer.from_json(b.to_json()).book.borrowed == b.book.borrowed != set()  # kept in the state
        else:
            assert first.held and b.retune_trials() == []


def test_daemon_load_shift_holds_the_model_point_inside_and_retunes_outside(tmp_path) -> None:
    host = FakeHost(qps=300_000.0)
    d = Daemon(
        load_config(write_config(tmp_path, sla_us=5000.0, tuning="context = true")),
        host=host,
        optimizers=FakeOptimizers(),
        serve=False,
    )
    d.start()
    try:
        space = d.space
        cheap, safe = OperatingPoint(space.itr_us[-1], space.dvfs_ghz[0]), OperatingPoint(space.itr_us[0], 2.9)
        for q, p in ((300_000.0, safe), (400_000.0, cheap)):  # only points measured at the load or above can be held
            md = {"offered_qps": q, "latency_us": {"99": 300.0}, "latency_ci_us": {"99": [290.0, 310.0]}}
            d.state.trials.append({"status": "completed", "measurement": md, "point": p, "time": 0.0})
        d.models.put(
            ModelTable("r000001", 400_000.0, 99.0, (cheap, safe), (900.0, 200.0), (50.0, 5.0), (40.0, 80.0), (1.0, 1.0))
        )
        d.state.tuned_qps = 300_000.0
        host.set_offered_qps(390_000.0)  # left the 20 % band, inside the measured loads, next to the table's load
        d.guardrail.hold_window()
        held = d.state.held
        assert held["reason"] == "model" and held["point"] == cheap
        assert host.point() == cheap and d.ctx.requests.load is False and d.state.tuned_qps == 390_000.0
        host.set_offered_qps(600_000.0)  # above every load measured: retune
        d.guardrail.hold_window()
        assert d.ctx.requests.load is True  # (the guardrail may also revert the cheap point at this load)
    finally:
        d._shutdown()


def test_summary_compares_the_tuner_with_the_hourly_oracle_held_over_its_windows() -> None:
    # two hours of 20-minute windows; the hourly oracle is the oracle at each hour's highest window load
    loads = [100_000.0, 180_000.0, 140_000.0, 220_000.0, 120_000.0, 160_000.0]
    windows = tuple(ReplayWindow(i, 1200.0 * i, 1200.0, q) for i, q in enumerate(loads))
    assert hour_loads(windows) == {(0, 0): 180_000.0, (0, 1): 220_000.0}
    assert default_policies(300.0)[-1] == "oracle-hourly" and "oracle-hourly" not in default_policies(3600.0)
    obj = Objective("constrained", 99, 500)
    settings = cold_settings(trials=3, sobol_trials=2, settle_s=0.0, window_s=5.0, seed=1)
    res = replay(lambda: make_model_host(0), windows, obj, settings, policies=("tuner", "oracle", "oracle-hourly"))
    hourly = res.policies["oracle-hourly"].windows
    at_peak = {h: oracle_point(make_model_host(0), obj, q)[0] for h, q in ((0, 180_000.0), (1, 220_000.0))}
    assert [w.point for w in hourly] == [at_peak[0]] * 3 + [at_peak[1]] * 3
    assert all(w.met_sla for w in hourly)
    comp = summary(res)["oracle_comparison"]
    e = {p: sum(w.energy_j for w in res.policies[p].windows) for p in res.policies}
    assert comp["hourly_oracle_energy_j"] == pytest.approx(e["oracle-hourly"])
    assert comp["ratio_to_hourly_oracle"] == pytest.approx(e["tuner"] / e["oracle-hourly"])
    assert comp["ratio_to_window_oracle"] == pytest.approx(e["tuner"] / e["oracle"])
    assert e["oracle"] <= e["oracle-hourly"]  # following the load within the hour never costs more
    assert summary(res)["policies"]["tuner"]["ratio_to_hourly_oracle"] == pytest.approx(comp["ratio_to_hourly_oracle"])
    # side by side: the per-window oracle against the hourly one, and each one's significantly violating windows
    assert comp["window_oracle_ratio_to_hourly"] == pytest.approx(e["oracle"] / e["oracle-hourly"])
    assert comp["windows"] == 6
    for key, pol in (("tuner", "tuner"), ("window_oracle", "oracle"), ("hourly_oracle", "oracle-hourly")):
        assert (
            comp[f"{key}_violating_windows_significant"]
            == summary(res)["policies"][pol]["sla_violating_windows_significant"]
        )
    assert comp["tuner_explore_above_sla_pct"] == summary(res)["policies"]["tuner"]["explore_above_sla_pct"]
    partial = replay(lambda: make_model_host(0), windows[:2], obj, settings, policies=("tuner", "oracle-hourly"))
    side = summary(partial)["oracle_comparison"]
    assert side["window_oracle_violating_windows_significant"] is None and side["window_oracle_ratio_to_hourly"] is None


def test_fine_windows_hold_by_default_and_hourly_windows_retune() -> None:
    warm = cold_settings(context=True)
    assert fine_window_hold(warm, 300.0).hold_max_p == FINE_HOLD_MAX_P
    assert fine_window_hold(warm, 3600.0).hold_max_p == 0.0
    assert fine_window_hold(warm, 300.0, explicit=True).hold_max_p == 0.0  # --hold-max-p 0 stays 0
    assert fine_window_hold(cold_settings(), 300.0).hold_max_p == 0.0  # the cold tuner has no load input


def test_hold_max_p_is_validated() -> None:
    with pytest.raises(Exception, match="hold_max_p"):
        cold_settings(hold_max_p=0.9)


def _daemon(tmp_path, host: FakeHost, **kw) -> Daemon:
    return Daemon(
        load_config(write_config(tmp_path, tuning="context = true", **kw)),
        host=host,
        optimizers=FakeOptimizers(),
        serve=False,
    )


def test_a_violating_window_is_steady_inside_the_tuned_band_and_shifted_outside_it(tmp_path) -> None:
    host = FakeHost(qps=300_000.0)
    d = _daemon(tmp_path, host, sla_us=1.0)  # every window breaks a 1 µs SLA
    d.start()
    try:
        d.state.tuned_qps = 300_000.0
        d.guardrail.hold_window()  # 300 kQPS: inside the band the point was tuned for
        host.set_offered_qps(600_000.0)  # the load left the band: the point was not chosen for it
        d.guardrail.hold_window()
        s = d.status()
        assert (s.sla_violations_total, s.sla_violations_steady_total) == (2, 1)
        reg = d.metrics.registry
        assert reg.get_sample_value("tuner_sla_violations_total", {"load": "steady"}) == 1
        assert reg.get_sample_value("tuner_sla_violations_total", {"load": "shifted"}) == 1
    finally:
        d._shutdown()
    again = _daemon(tmp_path, FakeHost(qps=300_000.0), sla_us=1.0)  # counters continue across restarts, by label
    again.start()
    try:
        reg = again.metrics.registry
        assert reg.get_sample_value("tuner_sla_violations_total", {"load": "steady"}) == 1
        assert reg.get_sample_value("tuner_sla_violations_total", {"load": "shifted"}) == 1
        assert again.status().sla_violations_steady_total == 1
    finally:
        again._shutdown()


def _measured_at_390k(d: Daemon, *points: OperatingPoint) -> None:
    """Completed trials at `points`, each measured within a 5000 µs SLA at 390 kQPS, in the daemon's state."""
    for p in points:
        md = {"offered_qps": 390_000.0, "latency_us": {"99": 300.0}, "latency_ci_us": {"99": [290.0, 310.0]}}
        d.state.trials.append({"status": "completed", "measurement": md, "point": p, "time": 0.0})


def test_the_load_shift_check_holds_from_the_newest_retunes_table(tmp_path) -> None:
    host = FakeHost(qps=300_000.0)
    d = _daemon(tmp_path, host, sla_us=5000.0)
    d.start()
    try:
        space = d.space
        old_pick, new_pick = OperatingPoint(space.itr_us[0], 2.9), OperatingPoint(space.itr_us[-1], space.dvfs_ghz[0])
        _measured_at_390k(d, old_pick, new_pick)
        # the first retune, tuned nearest this load, had not measured `new_pick`; a later one had, a little higher
        d.models.put(ModelTable("r000001", 390_000.0, 99.0, (old_pick,), (200.0,), (5.0,), (80.0,), (1.0,)))
        d.models.put(
            ModelTable(
                "r000002", 420_000.0, 99.0, (old_pick, new_pick), (220.0, 400.0), (5.0, 5.0), (82.0, 45.0), (1.0, 1.0)
            )
        )
        d.state.tuned_qps = 300_000.0
        host.set_offered_qps(390_000.0)
        d.guardrail.hold_window()
        assert d.state.held["reason"] == "model" and host.point() == new_pick
    finally:
        d._shutdown()


def test_a_held_window_over_the_sla_stops_that_point_being_held_there_again() -> None:
    """A trial vouched for the point; the long window held at it then read over the SLA (near saturation a short
    trial reads the percentile low): that window is evidence, and the point is not held at that load again."""
    from dataclasses import replace as dc_replace

    host = FakeHost(qps=300_000.0, seed=3, knobs=KNOBS)
    opt = _optimizer()
    run_retune(host, opt, opt.settings)
    host.set_offered_qps(303_000.0)
    held = run_retune(host, opt, opt.settings)
    assert held.held
    ok = host.measure(60.0)
    assert not opt.note_held_window(held.point, ok)  # within the SLA: nothing to learn
    over = dc_replace(ok, latency_us={**ok.latency_us, 99.0: 6000.0})  # the 5000 µs SLA, broken
    assert opt.note_held_window(held.point, over)
    again = opt.hold_verdict(303_000.0)
    assert again.point != held.point
    assert Optimizer.from_json(opt.to_json()).book.held_broke == opt.book.held_broke != []  # kept in the state


def test_three_windows_in_a_row_over_the_sla_within_the_margin_revert(tmp_path) -> None:
    """Each window under SLA + the guardrail's 10 % margin, so no single one reverts; three in a row at the held
    point, the load steady, are the point failing the SLA there: the daemon reverts to a safer one."""
    host = FakeHost(qps=300_000.0)
    space = host.knobs()
    held = OperatingPoint(space.itr_us[-1], space.dvfs_ghz[0])
    lat, _, _ = host.model(held.itr_us, held.dvfs_ghz, 300_000.0)
    d = _daemon(tmp_path, host, sla_us=round(lat[99.0] / 1.05, 1))  # the held point reads 5 % over
    d.start()
    try:
        d.ctx.apply(held)
        d.state.tuned_qps = 300_000.0
        for _ in range(2):
            d.guardrail.hold_window()
            assert host.point() == held and int(d.state.counters.get("guardrail_reverts", 0)) == 0
        d.guardrail.hold_window()
        assert host.point() != held and d.state.counters["guardrail_reverts"] == 1
        assert "3 windows in a row" in d.state.decisions[-1]["detail"]
    finally:
        d._shutdown()


def test_the_load_shift_check_never_holds_a_point_a_window_measured_over_the_sla(tmp_path) -> None:
    host = FakeHost(qps=300_000.0)
    d = _daemon(tmp_path, host, sla_us=5000.0)
    d.start()
    try:
        space = d.space
        safe, cheap = OperatingPoint(space.itr_us[0], 2.9), OperatingPoint(space.itr_us[-1], space.dvfs_ghz[0])
        _measured_at_390k(d, safe, cheap)
        d.models.put(
            ModelTable("r000001", 390_000.0, 99.0, (safe, cheap), (220.0, 400.0), (5.0, 5.0), (82.0, 45.0), (1.0, 1.0))
        )
        over = {"offered_qps": 385_000.0, "latency_us": {"99": 5400.0}, "latency_ci_us": {"99": [5300.0, 5500.0]}}
        d.state.windows.append({"point": cheap, "qps": 385_000.0, "measurement": over})
        d.state.tuned_qps = 300_000.0
        host.set_offered_qps(390_000.0)
        d.guardrail.hold_window()
        assert d.state.held["reason"] == "model" and host.point() == safe  # the cheap point broke it here
    finally:
        d._shutdown()
