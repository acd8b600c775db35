"""Rewards: formulas, the SLA condition of eq. 7.2 (sign issue), delta-method SEM, registry."""

from __future__ import annotations

import math

import pytest

import reward
from reward import REGISTRY, constrained, edp, get_reward, latency, sla_linear, sla_penalty


def test_registry_names_and_default() -> None:
    assert set(reward.REWARDS) == {"constrained", "sla-linear", "edp", "latency"}
    assert reward.DEFAULT_REWARD in REGISTRY
    assert REGISTRY["constrained"].constrained and not REGISTRY["sla-linear"].constrained
    with pytest.raises(
        ValueError, match="unknown reward 'energy': expected one of constrained, edp, latency, sla-linear"
    ):
        get_reward("energy")


def test_penalty_is_one_under_and_linear_over_the_sla() -> None:
    assert sla_penalty(100.0, 500.0) == 1.0
    assert sla_penalty(500.0, 500.0) == 1.0
    assert sla_penalty(501.0, 500.0) == 2.0
    assert sla_penalty(600.0, 500.0) == 101.0


def test_sla_linear_matches_eq_7_2_above_and_is_energy_below() -> None:
    assert sla_linear(40.0, 600.0, 500.0) == pytest.approx(40.0 * (600 - 500 + 1))
    assert sla_linear(40.0, 300.0, 500.0) == 40.0
    assert sla_linear(40.0, 500.0, 500.0) == 40.0


def test_sign_issue_of_the_printed_formula() -> None:
    """Printed eq. 7.2 without its condition goes negative under the SLA; ours never does."""
    printed = 40.0 * (300.0 - 500.0 + 1)
    assert printed < 0
    assert sla_linear(40.0, 300.0, 500.0) > 0
    # under the SLA, lower energy always wins, whatever the latency
    assert sla_linear(30.0, 490.0, 500.0) < sla_linear(31.0, 10.0, 500.0)


def test_edp_latency_constrained_share_the_sla_handling() -> None:
    assert edp(40.0, 300.0, 500.0) == 40.0 * 300.0
    assert edp(40.0, 700.0, 500.0) == 40.0 * 700.0 * 201.0
    assert latency(40.0, 300.0, 500.0) == 300.0
    assert latency(99.0, 700.0, 500.0) == 700.0 * 201.0
    assert constrained(40.0, 10_000.0, 500.0) == 40.0  # feasibility is an Ax constraint, not in the value


def test_reward_object_calls_fn_and_sem_by_delta_method() -> None:
    r = get_reward("sla-linear")
    assert r(40.0, 600.0, 500.0) == sla_linear(40.0, 600.0, 500.0)
    # above the SLA: dR/dJ = g = 101, dR/dp = J = 40
    assert r.sem(40.0, 0.4, 600.0, 5.0, 500.0) == pytest.approx(math.hypot(101 * 0.4, 40 * 5.0), rel=1e-4)
    # below the SLA latency noise does not move the reward
    assert r.sem(40.0, 0.4, 300.0, 5.0, 500.0) == pytest.approx(0.4, rel=1e-4)
    e = get_reward("edp")
    assert e.sem(40.0, 0.4, 300.0, 3.0, 500.0) == pytest.approx(math.hypot(300 * 0.4, 40 * 3.0), rel=1e-4)
