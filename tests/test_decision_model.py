"""Choosing the held point: with `rank_by_model` the retune's measured points that met the SLA are ranked by the
model's power at this load, not by each one's own noisy reading; and `safe_limit_p` relaxes only the limit
half of the safety gate, never P(SLA broken)."""

from __future__ import annotations

import numpy as np
import pytest

from actuators.host import OperatingPoint
from core.errors import TunerError
from tests.test_contextual import OBJ, SMALL, ctx, meas
from tuner.optimize.optimizer import Optimizer
from tuner.optimize.records import Pending
from tuner.optimize.settings import TunerSettings

Q = 100_000.0


def _measured(**kw) -> Optimizer:
    """Eight trials on a smooth power trend (less power at a lower frequency and a longer ITR), all within the
    SLA; the one at ITR 290 @ 1.6 GHz read 0.8 W (~1.6 SEM) under its trend (a noisy window), below the truly cheapest one."""
    opt = Optimizer(SMALL, OBJ, ctx(trials=20, sobol_trials=4, **kw))
    opt.begin_retune(Q)
    noisy = OperatingPoint(290, 1.6)
    for itr, ghz in ((306, 1.6), (290, 1.6), (274, 1.6), (258, 1.6), (306, 2.0), (290, 2.0), (274, 2.0), (258, 2.0)):
        p = OperatingPoint(itr, ghz)
        watts = 20.0 + 20.0 * ghz - 0.02 * itr - (0.8 if p == noisy else 0.0)
        i = opt._next_index
        opt._next_index += 1
        opt._pending[i] = Pending(p, 0.0, opt._attach(opt._cell_of(p)), opt._load)
        opt.complete(i, meas(300.0 + itr / 4, watts, qps=Q), Q)
    return opt


def test_by_measurement_the_noisy_reading_wins() -> None:
    d = _measured().best()
    assert d.point == OperatingPoint(290, 1.6)
    assert "ranked by the model" not in d.reason


def test_ranked_by_model_power_holds_the_point_the_model_finds_cheapest() -> None:
    opt = _measured(rank_by_model=True)
    d = opt.best()
    assert d.met_sla and "ranked by the model's power" in d.reason
    cells = [opt._cell_of(r.point) for r in opt.retune_trials()]
    grid = opt._grid_model(opt._load, refit=True, cells=cells)
    assert grid is not None
    assert d.point == opt._grid_point(cells[int(np.argmin(grid["power"]))])
    assert d.point == OperatingPoint(306, 1.6)  # the trend's cheapest, not the noisy reading
    assert d.measurement is not None and d.measurement.power_w == pytest.approx(20 + 32 - 0.02 * 306)


def test_ranking_never_holds_a_point_measured_over_the_limit() -> None:
    opt = _measured(rank_by_model=True)
    p = OperatingPoint(402, 1.2)  # the cheapest of all by far, but measured over the SLA
    i = opt._next_index
    opt._next_index += 1
    opt._pending[i] = Pending(p, 0.0, opt._attach(opt._cell_of(p)), opt._load)
    opt.complete(i, meas(620.0, 30.0, qps=Q), Q)
    assert opt.best().point != p


def test_limit_gate_is_relaxed_alone() -> None:
    pv = np.array([0.01, 0.01, 0.2])
    p_unmet = np.array([0.01, 0.3, 0.3])
    strict = Optimizer(SMALL, OBJ, ctx(safe_delta=0.05))
    loose = Optimizer(SMALL, OBJ, ctx(safe_delta=0.05, safe_limit_p=0.5))
    assert strict._unsafe(pv, p_unmet).tolist() == [False, True, True]
    assert loose._unsafe(pv, p_unmet).tolist() == [False, False, True]  # P(SLA broken) 0.2 > δ still refused


def test_safe_limit_p_is_validated_in_one_line() -> None:
    with pytest.raises(TunerError, match=r"safe_limit_p must be a probability in \[0, 1\)") as exc:
        TunerSettings(safe_limit_p=1.0)
    assert "\n" not in str(exc.value)
