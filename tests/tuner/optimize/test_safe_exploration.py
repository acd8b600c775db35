"""`SafeExploration` alone, over a model whose predictions the test chooses (no optimiser facade, no stopping
rule): the safe line before a model, Ax's proposal kept or replaced by what the predictions allow, the evidence
rules from measured trials and held windows."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from actuators.host import KnobSpace, apply_point
from tests.fakes import FakeHost
from tests.optimize_fakes import MEMBER_SETTINGS as BASE
from tuner.optimize.experiment import ExperimentModel, GridPrediction
from tuner.optimize.records import Cell, Pending
from tuner.optimize.safe_exploration import SafeExploration
from tuner.optimize.settings import Objective, TunerSettings
from tuner.optimize.trial_book import TrialBook

SPACE = KnobSpace(tuple(range(2, 403, 16)), (1.2, 1.6, 2.0, 2.4, 2.9))  # 26 ITR x 5 DVFS
OBJ = Objective("constrained", 99, 500)
DELTA = 0.1


def _filter(**kw: Any) -> SafeExploration:
    settings = TunerSettings(**{**BASE, "safe_delta": DELTA, **kw})
    return SafeExploration(ExperimentModel(SPACE, OBJ, settings), TrialBook())


def _predict(model: ExperimentModel, p_violation: Any) -> Any:
    """A stand-in for `grid_model`: P(SLA broken) `p_violation(cell)`, power rising with the frequency."""

    def grid_model(load: float | None, *, refit: bool, cells: list[Cell] | None = None) -> GridPrediction | None:
        cells = model.grid() if cells is None else list(cells)
        pv = np.array([p_violation(c) for c in cells], dtype=float)
        return GridPrediction(
            cells=cells,
            mu=np.zeros(len(cells)),
            sd=np.ones(len(cells)),
            power=np.array([20.0 + 10.0 * j for _, j in cells]),
            power_sd=np.ones(len(cells)),
            p_violation=pv,
            p_unmet=pv,
            unsafe=model.unsafe(pv, pv),
        )

    return grid_model


def _proposal(safety: SafeExploration, cell: Cell) -> Pending:
    ax_index = safety.model.attach(cell, None)  # as Ax's own proposal would be
    return Pending(safety.model.grid_point(cell), 0.0, ax_index, None)


def _status(safety: SafeExploration, ax_index: int) -> str:
    return safety.model.client._experiment.trials[ax_index].status.name


def test_with_no_model_the_first_point_is_the_safe_corner_on_the_safe_line() -> None:
    safety = _filter()
    pend = safety.safe_start()
    assert safety.model.cell_of(pend.point) == (0, len(SPACE.dvfs_ghz) - 1)  # lowest ITR, highest frequency
    assert pend.line_t == 0.0 and pend.note.startswith("safe start") and pend.p_violation is None
    assert pend.ax_index in safety.model.client._experiment.trials  # attached to Ax as a trial of its own


def test_a_proposal_the_predictions_pass_is_kept_with_its_probability(monkeypatch: pytest.MonkeyPatch) -> None:
    safety = _filter(safe_radius=0.0)  # no evidence rule: the gate alone
    monkeypatch.setattr(safety.model, "grid_model", _predict(safety.model, lambda c: 0.02))
    prop = _proposal(safety, (10, 2))
    assert safety.filter(prop) is prop and prop.p_violation == pytest.approx(0.02)
    assert _status(safety, prop.ax_index) != "ABANDONED"


def test_a_proposal_over_delta_is_abandoned_for_an_allowed_point(monkeypatch: pytest.MonkeyPatch) -> None:
    safety = _filter(safe_radius=0.0)
    # the short ITRs at low frequencies are predicted to break the SLA
    monkeypatch.setattr(
        safety.model, "grid_model", _predict(safety.model, lambda c: 0.9 if c[0] + 4 * c[1] < 12 else 0.01)
    )
    prop = _proposal(safety, (2, 1))
    sub = safety.filter(prop)
    assert _status(safety, prop.ax_index) == "ABANDONED"
    cell = safety.model.cell_of(sub.point)
    assert cell[0] + 4 * cell[1] >= 12 and sub.p_violation == pytest.approx(0.01)
    assert sub.note.startswith(f"Ax proposed {prop.point}") and "instead" in sub.note
    assert sub.ax_index != prop.ax_index and _status(safety, sub.ax_index) != "ABANDONED"


def test_with_every_point_over_delta_it_steps_out_from_the_safe_corner(monkeypatch: pytest.MonkeyPatch) -> None:
    safety = _filter(safe_radius=0.0)
    monkeypatch.setattr(safety.model, "grid_model", _predict(safety.model, lambda c: 0.9))
    sub = safety.filter(_proposal(safety, (10, 2)))
    assert "stepping out from the safe corner" in sub.note and sub.line_t == 0.0
    assert sub.p_violation == pytest.approx(0.9)


def test_evidence_allows_points_near_a_trial_within_the_limit_but_not_next_to_a_held_window_over_the_sla() -> None:
    safety = _filter(safe_radius=0.2)
    model = safety.model
    host = FakeHost(knobs=SPACE)
    corner = (0, len(SPACE.dvfs_ghz) - 1)
    apply_point(host, model.grid_point(corner))
    model.complete_ax(model.attach(corner, None), model.metrics(host.measure(5.0)))  # ~110 µs: within the limit
    cells = [corner, (2, 4), (3, 4), (25, 0)]
    rules = safety.rules
    assert rules.supported(cells, rules.evidence()).tolist() == [True, True, True, False]
    safety.book.held_broke.append(((3, 4), 0.0))  # a held window over the SLA there vetoes its ITR neighbours
    assert rules.supported(cells, rules.evidence()).tolist() == [True, False, False, False]  # corner: 3 steps off
    assert rules.evidence_trials()[-1] < 0  # the held window: no Ax trial
