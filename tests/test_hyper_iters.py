"""`TunerSettings.hyper_iters`: the GP's hyperparameters re-optimised on every new trial, warm-started from the
last fit and stopped after a few L-BFGS iterations, with Ax's own fit from its defaults once per retune load;
the option is validated, caps the iterations it says, and stays close to Ax's full fit."""

from __future__ import annotations

import numpy as np
import pytest

from actuators.host import apply_point
from core.errors import TunerError
from tests.fakes import FakeHost
from tests.test_contextual import OBJ, SMALL, ctx, history
from tuner.optimize.axsetup import no_warnings
from tuner.optimize.optimizer import Optimizer
from tuner.optimize.settings import TunerSettings
from tuner.optimize.surrogate import GridPredictor, botorch_adapter, refit

QPS = 120_000


def _fits(monkeypatch: pytest.MonkeyPatch) -> dict[str, list]:
    """Record Ax's fits from its defaults (`fit_botorch_model`) and the capped fits' L-BFGS options."""
    import botorch.fit
    from ax.generators.torch.botorch_modular import surrogate

    seen: dict[str, list] = {"ax": [], "capped": []}
    real_ax, real_mll = surrogate.fit_botorch_model, botorch.fit.fit_gpytorch_mll

    def ax_fit(*a, **k):
        seen["ax"].append(1)
        return real_ax(*a, **k)

    def mll_fit(mll, *a, **k):
        seen["capped"].append(k.get("optimizer_kwargs"))
        return real_mll(mll, *a, **k)

    monkeypatch.setattr(surrogate, "fit_botorch_model", ax_fit)
    monkeypatch.setattr(botorch.fit, "fit_gpytorch_mll", mll_fit)
    return seen


def _trial(opt: Optimizer, host: FakeHost, cell: tuple[int, int]) -> None:
    i = opt._attach(cell)
    apply_point(host, opt._grid_point(cell))
    opt._complete_ax(i, opt.metrics(host.measure(5.0)))


def test_hyper_iters_is_validated() -> None:
    for bad in (-1, 1.5, True, "3"):
        with pytest.raises(TunerError, match="hyper_iters must be an integer >= 0"):
            TunerSettings(hyper_iters=bad)  # type: ignore[arg-type]
    assert TunerSettings().hyper_iters == 0


def test_capped_warm_refits_every_trial_and_axs_own_fit_once_per_retune_load(monkeypatch: pytest.MonkeyPatch) -> None:
    seen = _fits(monkeypatch)
    host = FakeHost(qps=QPS, knobs=SMALL)
    opt = Optimizer(SMALL, OBJ, ctx(trials=20, hyper_iters=3))
    opt.add_history(history(14))
    opt.begin_retune(QPS)
    with no_warnings(1):
        opt.fit_model()
    assert len(seen["ax"]) == 1 and not seen["capped"]  # Ax's own fit first
    for k in range(3):  # each new trial: hyperparameters warm-started and re-optimised, at most 3 iterations
        _trial(opt, host, (3 + 5 * k, k))
        with no_warnings(1):
            opt.fit_model()
        assert len(seen["ax"]) == 1 and len(seen["capped"]) == k + 1
        assert seen["capped"][-1] == {"options": {"maxiter": 3}}
        assert opt._hyper_fit is not None and opt._hyper_fit[1] == 15 + k
    with no_warnings(1):
        opt.fit_model()  # no new data, same retune: nothing
    assert len(seen["ax"]) == 1 and len(seen["capped"]) == 3
    opt.begin_retune(2 * QPS)  # a new load: Ax's own fit from its defaults before its first suggestion, same data
    with no_warnings(1):
        opt.fit_model()
    assert len(seen["ax"]) == 2 and len(seen["capped"]) == 3
    # off (the default): Ax's own fit on every new trial, no capped fit
    seen["ax"].clear()
    plain = Optimizer(SMALL, OBJ, ctx(trials=20))
    plain.add_history(history(14))
    plain.begin_retune(QPS)
    for k in range(2):
        _trial(plain, host, (3 + 5 * k, k))
        with no_warnings(1):
            plain.fit_model()
    assert len(seen["ax"]) == 2 and len(seen["capped"]) == 3


def test_capped_refits_stay_close_to_axs_full_fit() -> None:
    """Three more trials, each refitted with 3 warm-started iterations, against Ax's own fit from its defaults on
    the same data: the grid's means within 0.5 of Ax's SD and the SDs within 25 % (the fake host's surface is
    smooth; where new data move the likelihood's optimum far, the capped fit catches up over a few trials)."""
    host = FakeHost(qps=QPS, knobs=SMALL)
    capped = Optimizer(SMALL, OBJ, ctx(trials=20, hyper_iters=3))
    capped.add_history(history(14))
    capped.begin_retune(QPS)
    with no_warnings(1):
        capped.fit_model()
    gs, exp = capped._client._generation_strategy, capped._client._experiment
    for cell in ((3, 4), (10, 2), (18, 3)):
        _trial(capped, host, cell)
        with no_warnings(1):
            capped.fit_model()
    assert capped._hyper_fit is not None and capped._hyper_fit[1] == 17
    params = [capped._cell_params(c, capped._load) for c in capped._grid()]
    ours = GridPredictor().predict(botorch_adapter(gs), params)
    with no_warnings(1):
        assert refit(gs, exp, hyper=True, warm=False, fresh=True) == "cold"  # Ax's own fit, same data
    full = GridPredictor().predict(botorch_adapter(gs), params)
    for metric, (mu, sd) in full.items():
        assert np.max(np.abs(ours[metric][0] - mu) / sd) < 0.5, metric
        assert np.max(np.abs(np.log(ours[metric][1] / sd))) < np.log(1.25), metric
