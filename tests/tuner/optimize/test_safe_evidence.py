"""Safe exploration beyond the model's word: evidence radius, calibrated model error, the shortened line step."""

from __future__ import annotations

import math

import numpy as np
import pytest

from actuators.host import OperatingPoint, apply_point
from core.errors import TunerError
from tests.fakes import FakeHost
from tests.optimize_fakes import OBJ, SMALL, ctx, meas, seeded
from tuner.optimize import acquisition
from tuner.optimize.acquisition import LINE_AIM
from tuner.optimize.optimizer import Optimizer
from tuner.optimize.presets import cold_settings
from tuner.optimize.safe_evidence import SAFE_ITR_DOWN_WEIGHT, SAFE_LOAD_TOL

CORNER = OperatingPoint(SMALL.itr_us[0], SMALL.dvfs_ghz[-1])


# ------------------------------------------------------------------------------------------- pure math


def test_supported_needs_met_evidence_near_it_at_this_load_or_above() -> None:
    cand = np.array([[0.0, 1.0], [0.1, 1.0], [0.3, 1.0], [0.0, 0.5], [0.1, 0.9], [0.05, 0.95]])
    ev = np.array([[0.0, 0.8]])
    got = acquisition.supported(cand, ev, np.array([0.5]), np.array([True]), 0.5, 0.15, 0.1)
    # higher frequency than the evidence costs no distance: (0, 1) is 0 away, (0.1, 1) 0.1; (0, 0.5) is 0.3 below
    assert got.tolist() == [True, True, False, False, True, True]
    # the same evidence measured at a load 20 % below this one vouches for nothing; 10 % below still does
    assert not acquisition.supported(cand, ev, np.array([0.4]), np.array([True]), 0.5, 0.15, 0.1).any()
    assert acquisition.supported(cand, ev, np.array([0.45]), np.array([True]), 0.5, 0.15, 0.1).tolist() == got.tolist()
    # evidence that broke the limit vouches for nothing; no load (no context) ignores the loads
    assert not acquisition.supported(cand, ev, np.array([0.9]), np.array([False]), 0.5, 0.15, 0.1).any()
    assert acquisition.supported(cand, ev, np.array([0.0]), np.array([True]), None, 0.15, 0.1).tolist() == got.tolist()
    assert acquisition.supported(cand, np.zeros((0, 2)), np.zeros(0), np.zeros(0, bool), 0.5, 0.15, 0.1).tolist() == [
        False
    ] * len(cand)
    # a lower ITR than the evidence (more interrupts, steeper toward saturation) counts double with weight 2
    side = np.array([[0.4, 0.8], [0.6, 0.8]])
    mid = np.array([[0.5, 0.8]])
    assert acquisition.supported(side, mid, np.array([0.5]), np.array([True]), 0.5, 0.15, 0.1).tolist() == [True, True]
    assert acquisition.supported(side, mid, np.array([0.5]), np.array([True]), 0.5, 0.15, 0.1, 2.0).tolist() == [
        False,
        True,
    ]


def test_vetoed_rules_out_neighbours_of_a_violation_at_its_frequency_or_below_and_its_load_or_above() -> None:
    bad = np.array([[0.5, 0.5]])
    cand = np.array([[0.45, 0.5], [0.55, 0.3], [0.5, 0.6], [0.6, 0.5], [0.5, 0.0]])
    got = acquisition.vetoed(cand, bad, np.array([0.5]), np.array([True]), 0.5, 0.06, 0.1)
    # within 0.06 in ITR at the same or a lower frequency: vetoed; faster, or farther in ITR: not
    assert got.tolist() == [True, True, False, False, True]
    # a violation at a load well above this one says nothing here; one at a lower load still does
    assert not acquisition.vetoed(cand, bad, np.array([0.7]), np.array([True]), 0.5, 0.06, 0.1).any()
    assert acquisition.vetoed(cand, bad, np.array([0.3]), np.array([True]), 0.5, 0.06, 0.1).tolist() == got.tolist()
    # a point that met the SLA vetoes nothing
    assert not acquisition.vetoed(cand, bad, np.array([0.5]), np.array([False]), 0.5, 0.06, 0.1).any()


def test_the_filter_never_tries_next_to_a_point_just_measured_over_the_sla() -> None:
    opt, s = seeded()
    opt.begin_retune(120_000)
    i, p = opt.suggest()
    opt.complete(i, meas(900, 25, qps=120_000), 120_000)  # whatever it was, it broke the SLA badly
    for _ in range(3):
        j, q = opt.suggest()
        if opt.book.pending[j].line_t is None:
            same_or_slower = q.dvfs_ghz <= p.dvfs_ghz
            itr_gap = abs(SMALL.itr_us.index(q.itr_us) - SMALL.itr_us.index(p.itr_us)) / (len(SMALL.itr_us) - 1)
            assert not (same_or_slower and itr_gap <= 0.06 + 1e-9), (p, q, opt.book.pending[j].note)
        opt.complete(j, meas(300, 30, qps=120_000), 120_000)


def test_line_step_is_shortened_where_latency_climbs_toward_the_limit() -> None:
    step = 1 / 7
    flat = [(0.0, True, 0.10), (step, True, 0.12)]
    assert acquisition.next_line_t(flat, step) == pytest.approx(2 * step)  # far from the limit: full step
    steep = [(4 * step, True, 0.76), (5 * step, True, 0.86)]
    t = acquisition.next_line_t(steep, step)
    # the straight line through the last two covers half the headroom left (0.86 -> 0.93) at t, not all of it
    assert 5 * step < t < 6 * step
    assert 0.86 + (0.86 - 0.76) / step * (t - 5 * step) == pytest.approx(0.86 + LINE_AIM * (1 - 0.86))
    # near the limit (that step would be under a quarter step): back to the midpoint of the two farthest, not out
    near = [(4 * step, True, 0.76), (5 * step, True, 0.94)]
    assert acquisition.next_line_t(near, step) == pytest.approx(4.5 * step)
    at_limit = [(0.0, True, 0.5), (step, True, 0.999)]
    assert acquisition.next_line_t(at_limit, step) == pytest.approx(step / 2)
    # ratios do not change the bisection once a step broke the limit
    assert acquisition.next_line_t([(0.0, True, 0.2), (0.25, True, 0.9), (0.5, False, 1.2)], 0.25) == 0.375


def test_safe_radius_is_validated_in_one_line() -> None:
    for bad in (-0.1, math.nan, 3.0, "0.2"):
        with pytest.raises(
            TunerError,
            match=r"safe_radius: expected (a number|a normalised knob distance in \[0, 2\] \(0 = off\)), got ",
        ) as exc:
            cold_settings(safe_radius=bad)
        assert "\n" not in str(exc.value)


# ------------------------------------------------------------------------------------------- optimiser


def _dist(a: OperatingPoint, b: OperatingPoint) -> float:
    """Normalised knob distance of candidate `a` from evidence `b` as `acquisition.supported` measures it
    (raising the frequency is free, lowering the ITR counts SAFE_ITR_DOWN_WEIGHT times)."""
    di = (SMALL.itr_us.index(a.itr_us) - SMALL.itr_us.index(b.itr_us)) / (len(SMALL.itr_us) - 1)
    di *= SAFE_ITR_DOWN_WEIGHT if di < 0 else 1.0
    dj = max(SMALL.dvfs_ghz.index(b.dvfs_ghz) - SMALL.dvfs_ghz.index(a.dvfs_ghz), 0) / (len(SMALL.dvfs_ghz) - 1)
    return math.hypot(di, dj)


def test_a_load_above_every_measured_one_starts_at_the_safe_corner_then_expands_from_evidence() -> None:
    opt, s = seeded()
    host = FakeHost(knobs=SMALL)
    qps = 160_000 / (1 - SAFE_LOAD_TOL) * 1.3  # well above what any measurement vouches for
    host.set_offered_qps(qps)
    opt.begin_retune(qps)
    i, p = opt.suggest()
    assert p == CORNER
    assert (
        "near a point measured safe at this load or above, stepping out from the safe corner"
        in opt.book.pending[i].note
    )
    apply_point(host, p)
    opt.complete(i, host.measure(5.0), qps)
    met = [opt.trials()[-1].point]
    for _ in range(4):  # each later point is near a point measured within the limit at this load
        i, p = opt.suggest()
        pend = opt.book.pending[i]
        if pend.line_t is None:
            assert min(_dist(p, q) for q in met) <= s.safe_radius + 1e-9, (p, met, pend.note)
            assert pend.p_violation is not None and pend.p_violation <= s.safe_delta
        apply_point(host, p)
        rec = opt.complete(i, host.measure(5.0), qps)
        if rec.measurement.percentile(99) <= OBJ.sla_us * (1 - s.sla_margin_pct / 100):
            met.append(p)
    assert len(met) >= 3, "the safe set never grew: the test proves nothing"


def test_within_the_load_tolerance_history_vouches_and_the_corner_is_not_forced() -> None:
    opt, _ = seeded()
    opt.begin_retune(150_000)
    i, p = opt.suggest()
    assert "stepping out from the safe corner" not in opt.book.pending[i].note
    assert opt.book.pending[i].line_t is None
    # with the evidence rule off the model alone decides, even at the far load
    off, _ = seeded(safe_radius=0.0)
    off.begin_retune(400_000)
    assert off.safety.rules.supported(off.model.grid(), off.safety.rules.evidence()).all()


def test_safe_model_error_widens_the_gate_and_is_validated() -> None:
    def filtered(extra: float) -> tuple[float, float]:
        opt, _ = seeded(safe_model_error=extra)
        opt.begin_retune(120_000)
        grid = opt.model.grid_model(opt.book.load, refit=True)
        assert grid is not None
        return float(grid["p_violation"].mean()), float((~grid["unsafe"]).mean())

    pv0, open0 = filtered(0.0)
    pv1, open1 = filtered(0.2)
    assert pv1 > pv0 and open1 < open0  # the same model, a wider error: higher P, fewer points pass
    with pytest.raises(TunerError, match=r"safe_model_error: expected an SD of ln latency in \[0, 1\]"):
        cold_settings(safe_model_error=-0.1)


def test_compute_s_counts_the_stopping_rule_check_before_the_suggestion() -> None:
    opt, _ = seeded(stop_ei_pct=1.0, min_trials=1)
    opt.begin_retune(120_000)
    i, _ = opt.suggest()
    opt.complete(i, meas(300, 30, qps=120_000), 120_000)
    assert opt.stopping.compute_s == 0.0
    opt.should_stop()
    stop_s = opt.stopping.compute_s
    assert stop_s > 0
    j, _ = opt.suggest()
    assert opt.stopping.compute_s == 0.0 and opt.book.pending[j].compute_s > stop_s


def test_a_saturated_window_goes_to_ax_at_the_cap() -> None:
    from tuner.optimize.latscale import LOG_CAP_SEM as LATENCY_CAP_SEM
    from tuner.optimize.latscale import LOG_CAP_X as LATENCY_CAP_X

    opt = Optimizer(SMALL, OBJ, ctx())
    far = opt.metrics(meas(40_000, 30))  # 80 x the SLA: saturated
    assert far["log_latency"] == (pytest.approx(math.log(LATENCY_CAP_X * OBJ.sla_us)), LATENCY_CAP_SEM)
    near = opt.metrics(meas(600, 30))  # over the SLA but under the cap: as measured
    assert near["log_latency"][0] == pytest.approx(math.log(600))
    assert far["power"] == near["power"]
