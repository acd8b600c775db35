"""`ExperimentModel` alone (no safety filter, no stopping rule, no trial books): the knob grid, the metrics a
window is reported with, predictions only once a model is fitted, the safety gate's verdict, the data bound."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from actuators.host import PERCENTILES, KnobSpace, Measurement, OperatingPoint, apply_point
from tests.fakes import FakeHost
from tests.optimize_fakes import MEMBER_SETTINGS as BASE
from tuner.optimize.experiment import ExperimentModel
from tuner.optimize.settings import Objective, TunerSettings

SPACE = KnobSpace(tuple(range(2, 403, 16)), (1.2, 1.6, 2.0, 2.4, 2.9))  # 26 ITR x 5 DVFS
OBJ = Objective("constrained", 99, 500)


def _settings(**kw: Any) -> TunerSettings:
    return TunerSettings(**{**BASE, **kw})


def _window(p99: float, power: float) -> Measurement:
    lat = {p: p99 * p / 99.0 for p in PERCENTILES}
    return Measurement(
        seconds=5.0,
        offered_qps=1e5,
        achieved_qps=1e5,
        requests=500_000,
        latency_us=lat,
        latency_ci_us={p: (v * 0.98, v * 1.02) for p, v in lat.items()},
        energy_j=power * 5.0,
        point=None,
    )


def _complete(model: ExperimentModel, cells: list[tuple[int, int]]) -> list[int]:
    """Measure each cell on the fake host and report it to Ax; the Ax trial indices."""
    host = FakeHost(knobs=SPACE)
    out = []
    for cell in cells:
        apply_point(host, model.grid_point(cell))
        ax_index = model.attach(cell, None)
        model.complete_ax(ax_index, model.metrics(host.measure(5.0)))
        out.append(ax_index)
    return out


SPREAD = [(0, 4), (25, 0), (12, 2), (6, 3), (20, 1), (3, 0), (17, 4), (9, 1), (24, 3)]


def test_grid_cells_points_and_parameters_map_onto_each_other() -> None:
    model = ExperimentModel(SPACE, OBJ, _settings())
    last = len(model.itr) - 1
    assert len(model.grid()) == len(model.itr) * len(SPACE.dvfs_ghz)
    for cell in model.grid():
        point = model.grid_point(cell)
        assert model.cell_of(point) == cell
        assert model.to_point(model.cell_params(cell, None)) == point
        assert model.to_params(point, None) == model.cell_params(cell, None)
    assert model.coords([(0, 0), (last, 4)]).tolist() == [[0.0, 0.0], [1.0, 1.0]]
    assert model.cell_at((1.0, 0.0)) == (last, 0)
    assert model.cell_of(OperatingPoint(SPACE.itr_us[1] + 2, 2.0)) == (1, 2)  # off-grid ITR: the nearest


def test_the_itr_grid_is_finer_at_a_tight_sla() -> None:
    fine = KnobSpace(tuple(range(2, 403, 2)), (1.2, 2.9))  # a host with 2 µs ITR steps
    assert len(ExperimentModel(fine, OBJ, _settings(itr_resolution_us=16, itr_resolution_sla_pct=4.0)).itr) == 26
    tight = Objective("constrained", 99, 200)
    model = ExperimentModel(fine, tight, _settings(itr_resolution_us=16, itr_resolution_sla_pct=4.0))
    assert model.itr[:3] == (2, 10, 18) and len(model.itr) == 51  # 8 µs: 16 µs would be 8 % of 200 µs
    assert len(ExperimentModel(fine, tight, _settings(itr_resolution_us=16, itr_resolution_sla_pct=0.0)).itr) == 26


def test_metrics_refuse_a_window_ax_cannot_model() -> None:
    model = ExperimentModel(SPACE, OBJ, _settings())
    data = model.metrics(_window(200.0, 30.0))
    assert set(data) == {"power", model.scale.metric}
    with pytest.raises(ValueError, match="non-finite or non-positive"):
        model.metrics(_window(0.0, 30.0))


def test_no_prediction_in_the_sobol_phase_then_one_per_cell_with_the_gate_verdict() -> None:
    model = ExperimentModel(SPACE, OBJ, _settings(safe_delta=0.1))
    _complete(model, SPREAD[:3])
    assert model.grid_model(None, refit=True) is None and not model.fitted  # 3 trials < the Sobol budget of 4
    _complete(model, SPREAD[3:6])
    grid = model.grid_model(None, refit=True)
    assert grid is not None and model.fitted and model.hyper_fit == (id(model.client), 6)
    n = len(model.grid())
    assert grid["cells"] == model.grid() and all(np.shape(grid[k]) == (n,) for k in ("mu", "power", "unsafe"))
    pv, p_unmet = grid["p_violation"], grid["p_unmet"]
    assert ((pv >= 0) & (pv <= 1)).all() and ((p_unmet >= 0) & (p_unmet <= 1)).all()
    np.testing.assert_array_equal(grid["unsafe"], (pv > 0.1) | (p_unmet > model.settings.safe_limit_delta))
    # a cell asked alone gets the same answer as in the whole grid
    k = model.grid().index(SPREAD[0])
    one = model.grid_model(None, refit=False, cells=[SPREAD[0]])
    assert one is not None and one["p_violation"][0] == pytest.approx(pv[k])


def test_the_gate_passes_everything_without_safe_exploration() -> None:
    model = ExperimentModel(SPACE, OBJ, _settings(safe_delta=0.0))
    assert not model.unsafe(np.array([0.0, 0.9]), np.array([1.0, 1.0])).any()
    gated = ExperimentModel(SPACE, OBJ, _settings(safe_delta=0.1))
    assert gated.unsafe(np.array([0.05, 0.2, 0.05]), np.array([0.05, 0.05, 0.2])).tolist() == [False, True, True]


def test_the_limit_test_of_the_gate_has_its_own_threshold() -> None:
    pv, p_unmet = np.array([0.01, 0.01, 0.2, 0.01]), np.array([0.04, 0.3, 0.01, 0.6])
    same = ExperimentModel(SPACE, OBJ, _settings(safe_delta=0.05))
    assert same.unsafe(pv, p_unmet).tolist() == [False, True, True, True]
    loose = ExperimentModel(SPACE, OBJ, _settings(safe_delta=0.05, safe_limit_delta=0.5))
    assert loose.unsafe(pv, p_unmet).tolist() == [False, False, True, True]
    sla_only = ExperimentModel(SPACE, OBJ, _settings(safe_delta=0.05, safe_limit_delta=1.0))
    assert sla_only.unsafe(pv, p_unmet).tolist() == [False, False, True, False]


def test_prune_rebuilds_the_experiment_from_the_newest_trials_past_the_bound() -> None:
    model = ExperimentModel(SPACE, OBJ, _settings(history_max_trials=8))
    _complete(model, SPREAD[:8])
    before = model.client
    model.prune()
    assert model.client is before  # within the bound: untouched
    _complete(model, SPREAD[8:])
    newest = [dict(model.client._experiment.trials[t].arm.parameters) for t in model.observed()[-6:]]
    model.prune()
    assert model.client is not before and len(model.observed()) == 6  # 3/4 of the bound
    kept = [dict(model.client._experiment.trials[t].arm.parameters) for t in model.observed()]
    assert kept == newest
