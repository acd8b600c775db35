"""The learning optimiser's features: load as context, warm start from history, stopping rule, safe exploration."""

from __future__ import annotations

import json
import math
from dataclasses import replace

import numpy as np
import pytest
from scipy import stats

from actuators.host import OperatingPoint, apply_point
from core.errors import TunerError
from tests.fakes import FakeHost
from tests.optimize_fakes import MAXQ, OBJ, SMALL, ctx, history, meas
from tuner.optimize import acquisition
from tuner.optimize.latscale import LatencyScale
from tuner.optimize.optimizer import Optimizer
from tuner.optimize.presets import cold_settings
from tuner.optimize.records import TrialRecord
from tuner.optimize.retune import run_retune
from tuner.optimize.settings import Objective


def node_of(opt: Optimizer, ax_index: int) -> str | None:
    gr = opt.model.client._experiment.trials[ax_index].generator_runs
    return gr[0]._generation_node_name if gr else None


# ------------------------------------------------------------------------------------------------ settings


@pytest.mark.parametrize(
    ("kw", "msg"),
    [
        ({"context": 1}, "context: expected true or false, got 1"),
        ({"context_max_qps": 0}, "context_max_qps: expected a value > 0, got 0"),
        ({"history_max_trials": 0}, "history_max_trials: expected 1..100000, got 0"),
        ({"min_trials": 1.5}, "min_trials: expected an integer, got 1.5"),
        ({"stop_ei_pct": -1}, r"stop_ei_pct: expected a percentage in \[0, 100\) \(0 = off\), got -1"),
        ({"safe_delta": 1.0}, r"safe_delta: expected a probability in \[0, 1\)"),
        ({"window_mode": "auto"}, "window_mode: expected one of 'fixed', 'adaptive', got 'auto'"),
        ({"window_ci_pct": 0}, r"window_ci_pct: expected a percentage in \(0, 100\)"),
        ({"window_min_s": -2}, "window_min_s: expected 0.001..3600 seconds, got -2"),
        ({"window_mode": "adaptive", "window_min_s": 30.0}, "window_min_s .30 s. must not exceed window_s"),
    ],
)
def test_new_settings_are_validated_in_one_line(kw: dict, msg: str) -> None:
    with pytest.raises(TunerError, match=msg) as exc:
        cold_settings(**kw)
    assert "\n" not in str(exc.value)


def test_new_defaults_are_off_and_old_state_json_still_loads() -> None:
    s = cold_settings()
    assert (s.context, s.stop_ei_pct, s.safe_delta, s.window_mode) == (False, 0.0, 0.0, "fixed")
    assert s.load_of(2e6) == 1.0 and s.load_of(-5) == 0.0 and cold_settings(context_max_qps=4e5).load_of(1e5) == 0.25
    opt = Optimizer(SMALL, OBJ, cold_settings(trials=2, sobol_trials=2, seed=1))
    i, _ = opt.suggest()
    opt.complete(i, meas(300, 20), 1e5)
    d = json.loads(opt.to_json())
    for k in (
        "context",
        "context_max_qps",
        "history_max_trials",
        "min_trials",
        "stop_ei_pct",
        "safe_delta",
        "window_mode",
        "window_ci_pct",
        "window_min_s",
    ):
        del d["settings"][k]
    for k in ("next_index", "retune", "line_t"):
        del d[k]
    for t in d["trials"]:
        del t["p_violation"], t["note"]
    old = Optimizer.from_json(json.dumps(d))
    assert old.settings == cold_settings(trials=2, sobol_trials=2, seed=1)
    assert old.trials() == opt.trials()
    j, _ = old.suggest()
    assert j == 1


# ------------------------------------------------------------------------------------------- pure math


def test_prob_violation_matches_the_lognormal_tail() -> None:
    mu, sd, sla = np.array([5.0, 6.5, 6.0]), np.array([0.3, 0.2, 0.0]), 500.0
    got = LatencyScale("log", sla).prob_over(mu, sd, sla)
    assert got[0] == pytest.approx(stats.lognorm(s=0.3, scale=math.exp(5.0)).sf(500.0), rel=1e-9)
    assert got[1] == pytest.approx(stats.norm(6.5, 0.2).sf(math.log(500)), rel=1e-9)
    assert got[2] == 0.0  # no uncertainty, mean ln 403 µs < ln 500
    assert LatencyScale("log", sla).prob_over([math.nan], [0.1], sla)[0] == 1.0  # unknown is unsafe


def test_expected_improvement_matches_monte_carlo_and_limits() -> None:
    rng = np.random.default_rng(0)
    m, s, best = 20.0, 3.0, 21.0
    mc = np.maximum(best - rng.normal(m, s, 400_000), 0).mean()
    assert acquisition.expected_improvement([m], [s], best)[0] == pytest.approx(mc, rel=0.01)
    assert acquisition.expected_improvement([18.0, 25.0], [0.0, 0.0], best).tolist() == [3.0, 0.0]
    cei = acquisition.constrained_ei([m], [s], best, [0.25])[0]
    assert cei == pytest.approx(0.75 * acquisition.expected_improvement([m], [s], best)[0])
    assert acquisition.should_stop_ei(0.09, 10.0, 1.0) and not acquisition.should_stop_ei(0.11, 10.0, 1.0)
    assert not acquisition.should_stop_ei(0.0, 10.0, 0.0)  # 0 % = off


def test_safe_line_steps_out_then_bisects_and_nearest_respects_the_mask() -> None:
    assert acquisition.line_point(0.0) == (0.0, 1.0) and acquisition.line_point(1.0) == (0.5, 0.5)
    assert acquisition.next_line_t([], 0.25) == 0.0
    assert acquisition.next_line_t([(0.0, True)], 0.25) == 0.25
    assert acquisition.next_line_t([(0.0, True), (0.25, True), (0.5, False)], 0.25) == 0.375
    assert acquisition.next_line_t([(0.0, False)], 0.25) == 0.0  # the corner breaks it: stay there
    coords = np.array([[0.0, 1.0], [0.5, 0.5], [0.6, 0.5], [1.0, 0.0]])
    assert acquisition.nearest(coords, [0.55, 0.5], np.array([True, False, True, True])) == 2
    assert acquisition.nearest(coords, [0.9, 0.1], np.array([True, True, False, False])) == 1
    with pytest.raises(ValueError):
        acquisition.nearest(coords, [0, 0], np.zeros(4, bool))


# ------------------------------------------------------------------------------------ context + warm start


def test_history_warm_start_first_suggestion_is_from_the_gp_at_the_pinned_load() -> None:
    opt = Optimizer(SMALL, OBJ, ctx())
    recs = history(6)
    bad = [
        TrialRecord(90, OperatingPoint(3, 2.0), 1e5, "completed", meas(300, 20), None, None),  # ITR off-space
        TrialRecord(91, OperatingPoint(2, 2.0), 1e5, "failed", None, None, "boom"),
        TrialRecord(92, OperatingPoint(2, 2.0), 1e5, "completed", meas(math.inf, 20), None, None),
    ]
    assert opt.add_history(recs + bad) == 6
    opt.begin_retune(123_000)
    i, p = opt.suggest()
    ax_index = max(opt.model.client._experiment.trials)  # after the 6 attached ones
    assert ax_index == 6
    assert node_of(opt, ax_index) == "MBM"  # not Sobol: warm
    assert opt.model.client._experiment.trials[ax_index].arm.parameters["load"] == pytest.approx(0.123)
    assert SMALL.check(p) == p and i == 0
    # a cold experiment starts with Sobol
    cold = Optimizer(SMALL, OBJ, ctx())
    cold.begin_retune(123_000)
    cold.suggest()
    assert node_of(cold, 0) == "Sobol"


def test_context_retunes_share_one_experiment_and_later_ones_start_from_the_model() -> None:
    host = FakeHost(qps=100_000, knobs=SMALL)
    s = ctx(trials=5)
    opt = Optimizer(SMALL, OBJ, s)
    d1 = run_retune(host, opt, s)
    assert len(opt.retune_trials()) == 5 and d1.met_sla
    host.set_offered_qps(140_000)
    d2 = run_retune(host, opt, s)
    second = opt.retune_trials()
    assert [r.index for r in second] == [5, 6, 7, 8, 9] and len(opt.trials()) == 10
    assert all(r.qps == 140_000 for r in second)
    exp = opt.model.client._experiment
    assert node_of(opt, 5) == "MBM"  # no Sobol in the 2nd retune
    assert {round(exp.trials[k].arm.parameters["load"], 6) for k in range(5, 10)} == {0.14}
    assert d2.measurement in [r.measurement for r in second]  # best() is of THIS retune
    assert host.point() == d2.point


def test_trial_measured_at_another_load_is_filed_at_its_own_load() -> None:
    opt = Optimizer(SMALL, OBJ, ctx())
    opt.add_history(history(5))
    opt.begin_retune(100_000)
    i, _ = opt.suggest()
    rec = opt.complete(i, meas(300, 20, qps=150_000), 150_000)
    exp = opt.model.client._experiment
    done = [t for t in exp.trials.values() if t.status.is_completed and t.index >= 5]
    assert rec.qps == 150_000 and len(done) == 1
    assert done[0].arm.parameters["load"] == pytest.approx(0.15)
    assert exp.trials[5].status.name == "FAILED" and "re-filed" in exp.trials[5].status_reason
    j, _ = opt.suggest()
    opt.complete(j, meas(300, 20, qps=100_400), 100_400)  # within 0.5 % of max QPS: kept as suggested
    assert exp.trials[max(exp.trials)].arm.parameters["load"] == pytest.approx(0.1)


def test_history_bound_keeps_the_newest_trials() -> None:
    opt = Optimizer(SMALL, OBJ, ctx(history_max_trials=8))
    recs = history(12, seed=2)
    assert opt.add_history(recs) == 8
    exp = opt.model.client._experiment
    loads = sorted(round(t.arm.parameters["load"], 9) for t in exp.trials.values())
    assert loads == sorted(round(r.qps / MAXQ, 9) for r in recs[-8:])
    opt.begin_retune(100_000)
    i, _ = opt.suggest()
    opt.complete(i, meas(300, 20), 100_000)  # 9 observed > 8
    j, _ = opt.suggest()  # rebuilt from the newest 6 before generating
    assert len(opt.model.observed()) == 6
    exp = opt.model.client._experiment
    kept = sorted(round(exp.trials[k].arm.parameters["load"], 9) for k in opt.model.observed())
    assert kept == sorted([round(r.qps / MAXQ, 9) for r in recs[-5:]] + [0.1])
    opt.complete(j, meas(300, 20), 100_000)
    for _ in range(3):
        k, _ = opt.suggest()
        assert len(opt.model.observed()) <= 8  # the model never holds more than the bound
        opt.complete(k, meas(300, 20), 100_000)
    assert [r.index for r in opt.retune_trials()] == [0, 1, 2, 3, 4]


def test_other_hosts_trials_stay_marked_across_the_history_bound() -> None:
    opt = Optimizer(SMALL, OBJ, ctx(history_max_trials=8))
    assert opt.add_history(history(4, seed=1)) == 4
    assert opt.add_history(history(8, seed=2), borrowed=True) == 8  # 12 > 8: rebuilt from the newest 6
    assert len(opt.model.observed()) == 6 and opt.book.borrowed == set(opt.model.observed())


def test_json_round_trip_keeps_context_state() -> None:
    opt = Optimizer(SMALL, OBJ, ctx(safe_delta=0.05, stop_ei_pct=1.0))
    opt.begin_retune(100_000)
    i, _ = opt.suggest()
    opt.complete(i, meas(120, 40), 100_000)
    j, p = opt.suggest()  # left pending
    back = Optimizer.from_json(opt.to_json())
    assert back.settings == opt.settings and back.trials() == opt.trials()
    assert back.book.load == pytest.approx(0.1) and back.book.retune_start == 0 and back.book.line_t == opt.book.line_t
    assert back.book.pending[j].point == p and back.book.pending[j].note.startswith("safe start")
    rec = back.complete(j, meas(150, 35), 100_000)
    assert rec.index == 1 and len(back.retune_trials()) == 2
    assert back.suggest()[0] == 2
    (mbm,) = [n for n in back.model.client._generation_strategy._nodes if n.name == "MBM"]
    opts = mbm.generator_specs[0].generator_gen_kwargs["model_gen_options"]["optimizer_kwargs"]
    assert opts == {"max_batch_size": 64}


def test_context_mode_needs_begin_retune() -> None:
    opt = Optimizer(SMALL, OBJ, ctx())
    with pytest.raises(TunerError, match="call begin_retune"):
        opt.suggest()
    with pytest.raises(TunerError, match="begin_retune needs the offered load"):
        opt.begin_retune(math.nan)


# ------------------------------------------------------------------------------------------ stopping rule


def _fed(values: list[tuple[float, float]], **kw) -> Optimizer:
    s = cold_settings(trials=12, sobol_trials=4, seed=5, stop_ei_pct=5.0, min_trials=2, sla_margin_pct=0.0, **kw)
    opt = Optimizer(SMALL, OBJ, s)
    opt.begin_retune(1e5)
    for p99, power in values:
        i, _ = opt.suggest()
        opt.complete(i, meas(p99, power), 1e5)
    return opt


def test_stop_rule_stops_when_no_point_can_save_more_than_the_threshold() -> None:
    # every point measured at 20 W within the SLA: the model sees a flat power surface
    opt = _fed([(200, 20.0)] * 6)
    stop, why = opt.should_stop()
    assert stop and why.startswith("expected improvement of one more trial") and "< 5 % of the best 20.0 W" in why


def test_stop_rule_goes_on_when_a_point_may_save_a_lot() -> None:
    # power varies 18..60 W over the points, all within the SLA: large expected improvement somewhere
    opt = _fed([(200, 60.0), (200, 18.0), (200, 45.0), (200, 30.0), (200, 55.0), (200, 25.0)])
    stop, why = opt.should_stop()
    assert not stop and why.startswith("expected improvement")
    best_w = 18.0
    limit = float(why.split(">= ")[1].split(" W")[0])
    assert limit == pytest.approx(0.05 * best_w, rel=1e-3)


def test_stop_rule_waits_for_min_trials_a_feasible_point_and_honours_the_budget() -> None:
    assert _fed([(200, 20.0)]).should_stop() == (False, "1 trial(s) of at least 2")
    assert _fed([(900, 20.0)] * 3).should_stop() == (False, "no trial of this retune met the SLA yet")
    off = cold_settings(trials=2, sobol_trials=2, seed=1)
    opt = Optimizer(SMALL, OBJ, off)
    assert opt.should_stop() == (False, "stopping rule off")
    for _ in range(2):
        i, _ = opt.suggest()
        opt.complete(i, meas(200, 20), 1e5)
    assert opt.should_stop() == (True, "trial budget reached (2 of 2)")


def test_run_retune_ends_early_on_the_stopping_rule() -> None:
    host = FakeHost(qps=100_000, knobs=SMALL)
    s = ctx(trials=12, stop_ei_pct=50.0, min_trials=2)  # a lax threshold: must stop well before 12
    opt = Optimizer(SMALL, OBJ, s)
    opt.add_history(history(10, seed=4))
    run_retune(host, opt, s)
    n = len(opt.retune_trials())
    assert 2 <= n < 12
    assert opt.should_stop()[0]


# ------------------------------------------------------------------------------------------ safe exploration


def test_safe_exploration_never_tries_a_point_the_model_deems_unsafe() -> None:
    delta = 0.05
    host = FakeHost(qps=100_000, knobs=SMALL)
    s = ctx(trials=6, safe_delta=delta, safe_model_error=0.03, safe_sd_scale=2.0)
    opt = Optimizer(SMALL, OBJ, s)
    checked = 0
    for qps in (100_000, 150_000, 120_000):
        host.set_offered_qps(qps)
        opt.begin_retune(qps)
        for _ in range(s.trials):
            i, p = opt.suggest()
            pend = opt.book.pending[i]
            if pend.p_violation is not None:
                # independent check against the model Ax just fitted: P(ln p99 > ln SLA) at this point and load
                # (the model's SD times `safe_sd_scale` and `safe_model_error`, in quadrature)
                pr = opt.predict([p])[0]
                assert not pr.from_measured
                own = s.safe_sd_scale * pr.latency_sem / pr.latency_us
                sd = math.hypot(own, s.safe_model_error)
                pv = stats.norm(math.log(pr.latency_us), sd).sf(math.log(OBJ.sla_us))
                assert pv == pytest.approx(pend.p_violation, abs=1e-6)
                assert pv <= delta
                # and the model itself (its own SD times safe_sd_scale) rates the point within the limit `best` applies (SLA less
                # the margin): one it could never take is not worth trying
                limit = OBJ.sla_us * (1 - s.sla_margin_pct / 100.0)
                assert s.sla_margin_pct > 0 and stats.norm(math.log(pr.latency_us), own).sf(math.log(limit)) <= delta
                checked += 1
            apply_point(host, p)
            opt.complete(i, host.measure(s.window_s), qps)
    recs = opt.trials()
    start = [r for r in recs if r.note.startswith("safe start")]
    assert len(start) == s.sobol_trials and all(r.p_violation is None for r in start)
    assert start[0].point == OperatingPoint(SMALL.itr_us[0], SMALL.dvfs_ghz[-1])  # the safe corner
    assert [r.point.itr_us for r in start] == sorted(r.point.itr_us for r in start)  # stepping outward
    later = recs[len(start) :]
    assert later and all(r.p_violation is not None and r.p_violation <= delta for r in later)
    assert checked == len(later)
    subs = [r for r in later if "instead" in r.note]
    assert subs, "the filter never had to act: the test proves nothing"
    assert all("> δ 0.05" in r.note or "from any point measured within the limit" in r.note for r in subs)
    # every substituted proposal was abandoned in Ax (the experiment is rebuilt without them past ABANDONED_MAX):
    # no Ax trial is left pending
    assert {t.status.name for t in opt.model.client._experiment.trials.values()} <= {"COMPLETED", "ABANDONED", "FAILED"}


def test_when_the_model_deems_every_point_unsafe_it_steps_out_from_the_safe_corner() -> None:
    s = cold_settings(trials=6, sobol_trials=3, seed=2, safe_delta=0.05)
    opt = Optimizer(SMALL, OBJ, s)
    for _ in range(3):  # safe start: every step breaks the SLA badly
        i, p = opt.suggest()
        assert opt.book.pending[i].note.startswith("safe start")
        opt.complete(i, meas(5000, 30), 1e5)
    i, p = opt.suggest()
    pend = opt.book.pending[i]
    assert (
        "no point is within δ and near a point measured safe at this load or above, stepping out from the "
        "safe corner" in pend.note
    )
    assert p == OperatingPoint(SMALL.itr_us[0], SMALL.dvfs_ghz[-1])
    assert pend.p_violation is not None and pend.p_violation > 0.05  # recorded honestly


def test_adaptive_window_mode_measures_through_windowing(monkeypatch: pytest.MonkeyPatch) -> None:
    import tuner.optimize.windowing as windowing
    from tuner.optimize.retune import run_trial

    seen = []

    def fake_measure_window(host, policy):
        seen.append(policy)
        return host.measure(3.0)

    monkeypatch.setattr(windowing, "measure_window", fake_measure_window)
    host = FakeHost(qps=100_000, knobs=SMALL)
    s = cold_settings(
        trials=1,
        sobol_trials=1,
        settle_s=0.0,
        window_s=12.0,
        window_mode="adaptive",
        window_ci_pct=4.0,
        window_min_s=2.0,
    )
    rec = run_trial(host, Optimizer(SMALL, Objective("constrained", 95, 500), s), s)
    assert rec.status == "completed" and rec.measurement.seconds == 3.0
    (pol,) = seen
    assert (pol.mode, pol.percentile, pol.ci_pct, pol.min_s, pol.max_s) == ("adaptive", 95.0, 4.0, 2.0, 12.0)
    # the window ends once its CI clears the limit `best` applies (SLA less the 5 % margin): never chosen anyway
    assert pol.stop_above_us == pytest.approx(500 * 0.95)
    assert pol.abort_above_us == pytest.approx(500)  # the guard: a chunk wholly over the SLA ends it at once
    unguarded = replace(s, window_guard=False)
    run_trial(host, Optimizer(SMALL, Objective("constrained", 95, 500), unguarded), unguarded)
    assert seen[-1].abort_above_us is None and seen[-1].stop_above_us == pytest.approx(500 * 0.95)
    fixed = cold_settings(trials=1, sobol_trials=1, settle_s=0.0, window_s=7.0)
    rec = run_trial(host, Optimizer(SMALL, OBJ, fixed), fixed)
    assert rec.measurement.seconds == 7.0 and len(seen) == 2  # fixed mode: host.measure(window_s) as before
