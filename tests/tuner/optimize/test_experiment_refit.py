"""The GP's hyperparameters re-optimised only when due (`TunerSettings.refit_every`), the model refitted on all
data in between: fewer `fit_gpytorch_mll` runs, the same data in the model, predictions that follow new data."""

from __future__ import annotations

import math

import pytest

from actuators.host import OperatingPoint
from core.errors import TunerError
from tests.optimize_fakes import OBJ, SMALL, ctx, history, meas
from tuner.optimize.optimizer import Optimizer
from tuner.optimize.presets import cold_settings


def _count_hyper_fits(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    from ax.generators.torch.botorch_modular import surrogate

    calls = [0]
    real = surrogate.fit_botorch_model

    def counted(*a, **k):
        calls[0] += 1
        return real(*a, **k)

    monkeypatch.setattr(surrogate, "fit_botorch_model", counted)
    return calls


def _run(opt: Optimizer, n: int) -> None:
    opt.begin_retune(120_000)
    for k in range(n):
        i, p = opt.suggest()
        opt.complete(i, meas(200.0 + 40 * k, 30.0 + k, qps=120_000), 120_000)
        opt.should_stop()


def test_refit_every_k_optimises_hyperparameters_less_often_and_uses_all_data(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from tuner.optimize import experiment

    monkeypatch.setattr(experiment, "SURPRISE_Z", math.inf)  # refit_every alone (these made-up windows surprise the GP)
    calls = _count_hyper_fits(monkeypatch)
    every = Optimizer(SMALL, OBJ, ctx(trials=20, refit_every=1))
    every.add_history(history(10))
    _run(every, 4)
    n_every = calls[0]
    calls[0] = 0
    sparse = Optimizer(SMALL, OBJ, ctx(trials=20, refit_every=10))
    sparse.add_history(history(10))
    _run(sparse, 4)
    assert n_every >= 4  # one per new datum (2 metrics in one batched GP)
    assert calls[0] < n_every
    # the model Ax generates from is fitted on the current data (so `get_next_trials` reuses it as it is)
    sparse.model.fit_model()
    adapter = sparse.model.client._generation_strategy._curr.generator_specs[0]._fitted_adapter
    data, _ = adapter._process_and_transform_data(experiment=sparse.model.client._experiment)
    assert data == adapter._last_experiment_data


def test_a_model_refitted_without_new_hyperparameters_still_follows_new_data() -> None:
    opt = Optimizer(SMALL, OBJ, ctx(trials=20, refit_every=100))
    opt.add_history(history(10))
    opt.begin_retune(120_000)
    opt.model.fit_model()  # first fit (hyperparameters)
    at = OperatingPoint(SMALL.itr_us[-1], SMALL.dvfs_ghz[0])
    before = opt.predict([at], 120_000)[0].latency_us
    for _ in range(2):  # two measurements far above the model's mean at one point, same hyperparameters
        j = opt.model.attach(opt.model.cell_of(at), opt.book.load)
        opt.model.client.complete_trial(trial_index=j, raw_data=opt.metrics(meas(4 * before, 30.0, qps=120_000)))
    opt.model.fit_model()
    assert opt.model.hyper_fit is not None and opt.model.hyper_fit[1] == 10  # no new hyperparameters
    after = opt.predict([at], 120_000)[0].latency_us
    assert after > 1.5 * before


def test_refit_every_is_validated() -> None:
    with pytest.raises(TunerError, match="refit_every: expected 1..1000 trials, got 0"):
        cold_settings(refit_every=0)
