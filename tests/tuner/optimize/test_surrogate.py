"""The Ax model kept across suggestions (`tuner.optimize.surrogate`): batched grid predictions equal Ax's own,
a warm-started refit proposes what a fresh fit on the same data proposes, hyperparameters are re-optimised
when new data surprise the model, and the grid acquisition tries only what safe exploration allows."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

from actuators.host import OperatingPoint, apply_point
from core.errors import TunerError
from tests.fakes import FakeHost
from tests.optimize_fakes import OBJ, SMALL, ctx, history, meas
from tuner.optimize.axsetup import no_warnings
from tuner.optimize.optimizer import Optimizer
from tuner.optimize.presets import cold_settings
from tuner.optimize.surrogate import GridPredictor, botorch_adapter, refit

QPS = 120_000


def _fitted(n: int = 14, **kw) -> Optimizer:
    opt = Optimizer(SMALL, OBJ, ctx(trials=20, **kw))
    opt.add_history(history(n))
    opt.begin_retune(QPS)
    with no_warnings(1):
        opt.model.fit_model()
    return opt


def test_batched_grid_predictions_equal_ax_client_predict() -> None:
    opt = _fitted()
    adapter = botorch_adapter(opt.model.client._generation_strategy)
    assert adapter is not None
    params = [opt.model.cell_params(c, opt.book.load) for c in opt.model.grid()]
    ours = GridPredictor().predict(adapter, params)
    theirs = opt.model.client.predict(params)
    assert set(ours) == set(theirs[0])
    for metric, (mu, sd) in ours.items():
        np.testing.assert_allclose(mu, [t[metric][0] for t in theirs], rtol=1e-9, atol=1e-9)
        np.testing.assert_allclose(sd, [t[metric][1] for t in theirs], rtol=1e-7, atol=1e-9)


def _predict_grid(opt: Optimizer) -> dict[str, tuple[np.ndarray, np.ndarray]]:
    adapter = botorch_adapter(opt.model.client._generation_strategy)
    return GridPredictor().predict(adapter, [opt.model.cell_params(c, opt.book.load) for c in opt.model.grid()])


def test_a_warm_started_refit_proposes_what_a_fresh_fit_proposes() -> None:
    host = FakeHost(qps=QPS, knobs=SMALL)
    warm = _fitted(refit_every=1)
    gs, exp = warm.model.client._generation_strategy, warm.model.client._experiment
    new = [OperatingPoint(SMALL.itr_us[k], SMALL.dvfs_ghz[j]) for k, j in ((3, 4), (10, 2), (18, 3))]
    records = history(14)
    for p in new:  # three more trials, each refitted from the last fit's hyperparameters
        i = warm.model.attach(warm.model.cell_of(p), warm.book.load)
        apply_point(host, p)
        warm.model.client.complete_trial(trial_index=i, raw_data=warm.metrics(host.measure(5.0)))
        with no_warnings(1):
            assert refit(gs, exp, hyper=True) == "warm"
    # a fresh optimiser (Ax's own cold fit) on the same data
    fresh = Optimizer(SMALL, OBJ, ctx(trials=20))
    with no_warnings():
        for ti in sorted(exp.trials):
            rows = exp.lookup_data(trial_indices=[ti]).df
            raw = {str(r["metric_name"]): (float(r["mean"]), float(r["sem"])) for _, r in rows.iterrows()}
            j = fresh.model.client.attach_trial(parameters=dict(exp.trials[ti].arm.parameters))
            fresh.model.client.complete_trial(trial_index=j, raw_data=raw)
    fresh.begin_retune(QPS)
    with no_warnings(1):
        fresh.model.fit_model()
    assert len(fresh.model.observed()) == len(warm.model.observed()) == len(records) + len(new)
    a, b = _predict_grid(warm), _predict_grid(fresh)
    for metric in a:
        np.testing.assert_allclose(a[metric][0], b[metric][0], atol=0.02 * np.abs(b[metric][0]).max())
        np.testing.assert_allclose(a[metric][1], b[metric][1], rtol=0.2, atol=1e-3)
    # and the same next point: the grid acquisition's choice over what safe exploration allows
    for opt in (warm, fresh):
        opt.model.settings = replace(opt.settings, safe_delta=0.05, acquisition="grid")
    assert warm.safety.filter(None).point == fresh.safety.filter(None).point


def test_hyperparameters_are_reoptimised_when_new_data_surprise_the_model() -> None:
    opt = _fitted(refit_every=100)
    first = opt.model.hyper_fit
    assert first is not None and first[1] == 14
    at = OperatingPoint(SMALL.itr_us[-1], SMALL.dvfs_ghz[0])
    pred = opt.predict([at], QPS)[0]
    # a measurement the model expected: no new hyperparameters (the GP is conditioned on it with the old ones)
    j = opt.model.attach(opt.model.cell_of(at), opt.book.load)
    opt.model.complete_ax(j, opt.metrics(meas(pred.latency_us, pred.power_w, qps=QPS)))
    with no_warnings(1):
        opt.model.fit_model()
    assert opt.model.hyper_fit == first
    # one far above it (a saturated point where the model saw none): re-optimised at once
    j = opt.model.attach(opt.model.cell_of(at), opt.book.load)
    opt.model.complete_ax(j, opt.metrics(meas(4 * pred.latency_us, pred.power_w, qps=QPS)))
    with no_warnings(1):
        opt.model.fit_model()
    assert opt.model.hyper_fit is not None and opt.model.hyper_fit[1] == 16


def test_grid_acquisition_tries_only_points_the_filter_allows() -> None:
    host = FakeHost(qps=QPS, knobs=SMALL)
    s = ctx(trials=5, safe_delta=0.05, safe_sd_scale=2.0, acquisition="grid")
    opt = Optimizer(SMALL, OBJ, s)
    opt.add_history(history(14))
    opt.begin_retune(QPS)
    for _ in range(s.trials):
        i, p = opt.suggest()
        pend = opt.book.pending[i]
        assert pend.p_violation is not None and pend.p_violation <= s.safe_delta
        assert "Ax proposed" not in pend.note  # Ax's own generation was not asked
        cells = opt.safety.rules.near_cells(opt.safety.rules.evidence())
        assert opt.model.cell_of(p) in cells
        apply_point(host, p)
        opt.complete(i, host.measure(s.window_s), QPS)


def test_cei_acquisition_tries_the_allowed_point_of_largest_constrained_ei_without_asking_ax(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from ax import Client

    def never(*a, **k):  # the fast path must not run Ax's own generation (qLogNEI over the whole grid)
        raise AssertionError("get_next_trials called")

    monkeypatch.setattr(Client, "get_next_trials", never)
    host = FakeHost(qps=QPS, knobs=SMALL)
    s = ctx(trials=5, safe_delta=0.05, safe_sd_scale=2.0, acquisition="cei", refit_every=5)
    opt = Optimizer(SMALL, OBJ, s)
    opt.add_history(history(14))
    opt.begin_retune(QPS)
    chosen = 0
    for _ in range(s.trials):
        with no_warnings(1):
            opt.model.fit_model()
        cells = opt.safety.rules.near_cells(opt.safety.rules.evidence())
        grid = opt.model.grid_model(opt.book.load, refit=False, cells=cells)
        assert grid is not None
        allowed = ~grid["unsafe"]
        seen = {opt.model.cell_of(r.point) for r in opt.retune_trials()}
        fresh = allowed & np.array([c not in seen for c in cells])
        allowed = fresh if fresh.any() else allowed
        incumbent = opt.safety.incumbent_w(grid, allowed)
        i, p = opt.suggest()
        pend = opt.book.pending[i]
        assert opt.model.cell_of(p) in [c for c, ok in zip(cells, allowed) if ok]
        assert pend.p_violation is not None and pend.p_violation <= s.safe_delta
        if incumbent is not None and "largest expected improvement" in pend.note:
            ei = opt.safety.ei(grid, incumbent) * allowed
            assert ei[cells.index(opt.model.cell_of(p))] == pytest.approx(float(ei.max()))
            chosen += 1
        apply_point(host, p)
        opt.complete(i, host.measure(s.window_s), QPS)
        opt.should_stop()
    assert chosen >= 3


def test_cei_tries_what_the_filter_substitutes_for_a_refused_ax_proposal() -> None:
    # the default ("cei") skips Ax's whole-grid proposal; with "ax" the filter refuses that proposal on almost
    # every trial and tries the allowed point of largest constrained EI instead -- the point "cei" tries directly
    host = FakeHost(qps=QPS, knobs=SMALL)
    kw = dict(trials=4, safe_delta=0.05, safe_sd_scale=2.0, stop_ei_pct=1.0)
    ax, cei = (Optimizer(SMALL, OBJ, ctx(acquisition=a, **kw)) for a in ("ax", "cei"))
    for opt in (ax, cei):
        opt.add_history(history(14))
        opt.begin_retune(QPS)
    compared = 0
    for _ in range(kw["trials"]):
        i, p = ax.suggest()
        j, q = cei.suggest()
        if "instead" not in ax.book.pending[i].note:
            break  # Ax's own proposal passed the filter: from here the two may differ
        assert q == p and cei.book.pending[j].p_violation == pytest.approx(ax.book.pending[i].p_violation)
        compared += 1
        apply_point(host, p)
        m = host.measure(5.0)
        ax.complete(i, m, QPS)
        cei.complete(j, m, QPS)
    assert compared >= 3


def test_acquisition_is_validated() -> None:
    with pytest.raises(TunerError, match="acquisition: expected one of 'ax', 'grid', 'cei', got 'qei'"):
        cold_settings(acquisition="qei")
