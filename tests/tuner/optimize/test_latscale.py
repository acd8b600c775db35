"""The latency scale the GP fits (ln µs or SLA / µs), its probabilities, and the optimiser's use of it and of
the safety check's SD factor."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest
from scipy.stats import norm

from actuators.host import OperatingPoint
from core.errors import TunerError
from tests.optimize_fakes import OBJ, SMALL, ctx, meas, seeded
from tuner.optimize.latscale import HEADROOM_FLOOR, LOG_CAP_SEM, LOG_CAP_X, LatencyScale
from tuner.optimize.optimizer import Optimizer
from tuner.optimize.presets import cold_settings

LOG = LatencyScale("log", 500.0)
HEAD = LatencyScale("headroom", 500.0)


def test_values_and_sems_by_the_delta_method() -> None:
    assert LOG.metric == "log_latency" and HEAD.metric == "latency_headroom"
    assert LOG.value(400.0, 8.0) == (pytest.approx(math.log(400.0)), pytest.approx(0.02))
    assert LOG.value(400.0, None) == pytest.approx(math.log(400.0))  # no CI: a bare mean
    # far over the SLA (saturated): ln of the cap, with its fixed SEM
    assert LOG.value(40_000.0, 100.0) == (pytest.approx(math.log(LOG_CAP_X * 500.0)), LOG_CAP_SEM)
    assert HEAD.value(400.0, 8.0) == (pytest.approx(1.25), pytest.approx(1.25 * 0.02))
    assert HEAD.value(400.0, None) == pytest.approx(1.25)
    # saturation is an honest value near 0 on the headroom scale: no cap
    assert HEAD.value(50_000.0, 1000.0)[0] == pytest.approx(0.01)
    assert LOG.constraint() == f"log_latency <= {math.log(500.0)!r}"
    assert HEAD.constraint() == "latency_headroom >= 1.0"


def test_back_to_microseconds() -> None:
    for p in (30.0, 499.0, 1800.0):
        for sc in (LOG, HEAD):
            v = sc.value(p, 1.0)[0]
            assert sc.to_us(v) == pytest.approx(p)
    assert HEAD.to_us(-0.2) == pytest.approx(500.0 / HEADROOM_FLOOR)  # a negative headroom: saturated
    lat, sd = HEAD.latency_mean_sd(1.25, 0.05)
    assert lat == pytest.approx(400.0) and sd == pytest.approx(400.0 * 0.05 / 1.25)
    lat, sd = LOG.latency_mean_sd(math.log(400.0), 0.1)
    assert lat == pytest.approx(400.0) and sd == pytest.approx(40.0)
    assert math.isfinite(HEAD.latency_mean_sd(-1.0, 0.1)[0])


def test_prob_over_is_the_gaussian_tail_on_each_scale() -> None:
    mu_log, sd_log = np.array([math.log(400.0), math.log(520.0)]), np.array([0.1, 0.2])
    want = 1 - norm.cdf((math.log(500.0) - mu_log) / sd_log)
    assert LOG.prob_over(mu_log, sd_log, 500.0) == pytest.approx(want)
    mu_h, sd_h = np.array([1.25, 0.9]), np.array([0.1, 0.3])
    # percentile > 475 µs  <=>  headroom < 500 / 475
    want = norm.cdf((500.0 / 475.0 - mu_h) / sd_h)
    assert HEAD.prob_over(mu_h, sd_h, 475.0) == pytest.approx(want)
    # no SD: a 0/1 step (1 on the limit); no prediction: over
    assert LOG.prob_over([math.log(500.0), math.log(499.0)], [0.0, 0.0], 500.0).tolist() == [1.0, 0.0]
    assert HEAD.prob_over([1.0, 1.01], [0.0, 0.0], 500.0).tolist() == [1.0, 0.0]
    assert HEAD.prob_over([math.nan], [0.1], 500.0).tolist() == [1.0]
    # the model-error allowance widens both: a point inside the limit gets a higher P
    for sc, mu, sd in ((LOG, math.log(400.0), 0.05), (HEAD, 1.25, 0.05)):
        assert sc.prob_over([mu], [sd], 500.0, 0.2)[0] > sc.prob_over([mu], [sd], 500.0)[0]


def test_bad_scales_are_refused_in_one_line() -> None:
    with pytest.raises(TunerError, match="latency_metric 'raw'"):
        LatencyScale("raw", 500.0)
    with pytest.raises(TunerError, match="latency_metric: expected one of 'log', 'headroom', got 'raw'"):
        cold_settings(latency_metric="raw")
    for bad in (0.5, 11.0, math.nan):
        with pytest.raises(TunerError, match=r"safe_sd_scale: expected (a number|a factor in \[1, 10\])"):
            cold_settings(safe_sd_scale=bad)


def test_the_optimizer_fits_headroom_when_asked_and_predicts_in_microseconds() -> None:
    s = ctx(latency_metric="headroom")
    opt = Optimizer(SMALL, OBJ, s)
    data = opt.metrics(meas(400, 30))
    assert set(data) == {"power", "latency_headroom"} and data["latency_headroom"][0] == pytest.approx(1.25)
    cfg = opt.model.client._experiment.optimization_config
    assert [list(c.metric_names) for c in cfg.outcome_constraints] == [["latency_headroom"]]
    assert cfg.outcome_constraints[0].bound == pytest.approx(1.0)
    head, _ = seeded(latency_metric="headroom")
    head.begin_retune(120_000)
    log, _ = seeded()
    log.begin_retune(120_000)
    pts = [OperatingPoint(SMALL.itr_us[0], SMALL.dvfs_ghz[-1]), OperatingPoint(SMALL.itr_us[-1], SMALL.dvfs_ghz[0])]
    for o in (head, log):
        assert o.model.grid_model(o.book.load, refit=True) is not None  # past the Sobol phase: a fitted model
    ph, pl = head.predict(pts, 120_000), log.predict(pts, 120_000)
    for a, b in zip(ph, pl):  # the same data on two scales: predictions of the same size, in µs
        assert a.latency_us > 0 and b.latency_us > 0 and 0.5 < a.latency_us / b.latency_us < 2.0
    grid = head.model.grid_model(head.book.load, refit=False)
    assert grid is not None and (grid["p_violation"] >= 0).all() and (grid["p_violation"] <= 1).all()


def test_a_state_saved_before_the_latency_metric_existed_stays_on_the_log_scale() -> None:
    opt, _ = seeded()
    d = json.loads(opt.to_json())
    del d["settings"]["latency_metric"]
    back = Optimizer.from_json(json.dumps(d))
    assert back.settings.latency_metric == "log"
    back.begin_retune(120_000)
    assert back.model.grid_model(back.book.load, refit=True) is not None
    assert back.predict([OperatingPoint(SMALL.itr_us[0], SMALL.dvfs_ghz[-1])], 120_000)[0].latency_us > 0


def test_the_sd_scale_widens_the_safety_check_by_that_factor() -> None:
    def gate(scale: float) -> dict:
        opt, _ = seeded(safe_sd_scale=scale)
        opt.begin_retune(120_000)
        grid = opt.model.grid_model(opt.book.load, refit=True)
        assert grid is not None
        return grid

    one, three = gate(1.0), gate(3.0)
    assert np.allclose(one["mu"], three["mu"]) and np.allclose(one["sd"], three["sd"])  # the same model
    want = LOG.prob_over(three["mu"], 3.0 * three["sd"], OBJ.sla_us)
    assert three["p_violation"] == pytest.approx(want)
    assert (~three["unsafe"]).sum() < (~one["unsafe"]).sum()  # fewer points pass
