"""`StoppingRule` alone, judging predictions the test chooses (no optimiser facade, no fitted model): stop once one
more trial is not expected to save `stop_ei_pct` % of the best power, ignore points the safety gate refuses,
the early answers and the compute it carries into the next suggestion."""

from __future__ import annotations

from typing import Any

import numpy as np

from actuators.host import KnobSpace, OperatingPoint
from tests.optimize_fakes import MEMBER_SETTINGS as BASE
from tuner.optimize.decision import Decision
from tuner.optimize.experiment import ExperimentModel, GridPrediction
from tuner.optimize.records import STATUS_COMPLETED, TrialRecord
from tuner.optimize.safe_exploration import SafeExploration
from tuner.optimize.settings import Objective, TunerSettings
from tuner.optimize.stopping import StoppingRule
from tuner.optimize.trial_book import TrialBook

SPACE = KnobSpace(tuple(range(2, 403, 16)), (1.2, 1.6, 2.0, 2.4, 2.9))
OBJ = Objective("constrained", 99, 500)
HELD = Decision(OperatingPoint(2, 2.9), None, True, "the test's held point")


def _rule(**kw: Any) -> StoppingRule:
    settings = TunerSettings(**{**BASE, "stop_ei_pct": 1.0, **kw})
    model, book = ExperimentModel(SPACE, OBJ, settings), TrialBook()
    return StoppingRule(model, SafeExploration(model, book), book)


def _grid(power: list[float], unsafe: list[bool]) -> GridPrediction:
    n = len(power)
    return GridPrediction(
        cells=[(i, 0) for i in range(n)],
        mu=np.zeros(n),
        sd=np.ones(n),
        power=np.array(power),
        power_sd=np.full(n, 0.5),
        p_violation=np.zeros(n),
        p_unmet=np.zeros(n),
        unsafe=np.array(unsafe),
    )


def test_it_stops_when_no_point_is_expected_to_save_the_share_of_the_best_power() -> None:
    rule = _rule()
    stop, why = rule.judge(_grid([50.0, 60.0], [False, False]), 40.0, HELD)
    assert stop and why.startswith("expected improvement of one more trial") and rule.refine is None
    stop, why = rule.judge(_grid([50.0, 30.0], [False, False]), 40.0, HELD)  # ~10 W below 40 W at cell 1
    assert not stop and why.startswith("expected improvement") and ">=" in why


def test_with_safe_exploration_points_the_gate_refuses_do_not_keep_a_retune_going() -> None:
    rule = _rule(safe_delta=0.1)
    stop, _ = rule.judge(_grid([30.0, 60.0], [True, False]), 40.0, HELD)
    assert stop  # the 10 W saving lies at a point the safety filter would never try
    stop, _ = rule.judge(_grid([30.0, 60.0], [False, False]), 40.0, HELD)
    assert not stop


def test_early_answers_budget_off_and_compute_carried_to_the_next_suggestion() -> None:
    rule = _rule(stop_ei_pct=0.0)
    assert rule.should_stop() == (False, "stopping rule off")
    spent = rule.take_compute_s()
    assert spent > 0 and rule.take_compute_s() == 0.0
    rule.book.records = {
        k: TrialRecord(k, OperatingPoint(2, 2.9), 1e5, STATUS_COMPLETED, None, None, None) for k in range(8)
    }
    assert rule.should_stop() == (True, "trial budget reached (8 of 8)")
    rule.refine, rule.compute_s = object(), 1.0  # type: ignore[assignment]
    rule.reset()
    assert rule.refine is None and rule.compute_s == 0.0
