"""The pure rules of `tuner.optimize.settings`: the ITR grid's step at an SLA and the candidates it leaves."""

from __future__ import annotations

import pytest

from tuner.optimize.settings import itr_candidates, itr_step_us


@pytest.mark.parametrize(
    ("sla_us", "step"),
    [(1000, 16), (500, 16), (400, 16), (399, 8), (300, 8), (200, 8), (199, 4), (100, 4), (60, 2), (10, 2)],
)
def test_the_itr_step_is_halved_while_it_is_over_4_pct_of_the_sla(sla_us: float, step: int) -> None:
    assert itr_step_us(16, 4.0, sla_us) == step


def test_the_itr_step_stays_as_set_with_the_rule_off_and_never_goes_below_2_us() -> None:
    assert itr_step_us(16, 0.0, 200) == 16
    assert itr_step_us(3, 4.0, 10) == 2 and itr_step_us(2, 4.0, 10) == 2 and itr_step_us(1, 4.0, 10) == 1


def test_candidates_are_thinned_to_the_step_from_the_lowest_itr() -> None:
    assert itr_candidates(tuple(range(2, 60, 2)), 16) == (2, 18, 34, 50)
    assert itr_candidates(tuple(range(2, 60, 2)), 8) == (2, 10, 18, 26, 34, 42, 50, 58)
