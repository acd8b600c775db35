"""Adaptive windows and a slowly updating energy source: the window never ends before the source has updated
`energy_updates_needed` times (100 / ci_pct), even past `max_s`; RAPL and the simulator (no count) are unchanged."""

from __future__ import annotations

import dataclasses

import pytest

from tests.tuner.optimize.test_windowing import SampleHost
from tuner.optimize.windowing import ENERGY_WAIT_LIMIT, WindowPolicy, energy_updates_needed, measure_window


class BmcHost(SampleHost):
    """`SampleHost` whose energy source updates every `period_s` (a BMC)."""

    def __init__(self, period_s: float | None, **kw) -> None:
        super().__init__(**kw)
        self.period_s = period_s

    def measure(self, seconds: float):
        m = super().measure(seconds)
        updates = None if self.period_s is None else int(seconds / self.period_s + 1e-9)
        return dataclasses.replace(m, energy_updates=updates, energy_source="ipmi")


def test_updates_needed_follow_the_ci():
    assert energy_updates_needed(WindowPolicy(mode="adaptive", ci_pct=5.0)) == 20
    assert energy_updates_needed(WindowPolicy(mode="adaptive", ci_pct=10.0)) == 10


def test_a_window_waits_for_the_sources_updates_past_max_s():
    policy = WindowPolicy(mode="adaptive", min_s=0.6, max_s=1.2, ci_pct=10.0)
    plain, bmc = SampleHost(rate=50_000, seed=1), BmcHost(0.2, rate=50_000, seed=1)
    m0, m = measure_window(plain, policy), measure_window(bmc, policy)
    assert m0.seconds < 1.2  # the latency CI alone is tight early
    assert m.energy_updates >= 10 and m.seconds == pytest.approx(10 * 0.2) and m.seconds > policy.max_s
    assert m.seconds < 10 * 0.2 + 2 * policy.min_s / policy.batches  # ended as soon as it had them
    assert m.energy_source == "ipmi"


def test_a_continuous_source_is_unchanged_and_a_dead_one_is_bounded():
    policy = WindowPolicy(mode="adaptive", min_s=1.5, max_s=3.0, ci_pct=10.0)
    a, b = SampleHost(rate=50_000, seed=3), BmcHost(None, rate=50_000, seed=3)
    assert measure_window(a, policy).seconds == measure_window(b, policy).seconds  # None: RAPL, the simulator
    short = WindowPolicy(mode="adaptive", min_s=0.3, max_s=0.6, ci_pct=10.0)
    stuck = BmcHost(1e9, rate=20_000, seed=3)  # never updates
    assert measure_window(stuck, short).seconds == pytest.approx(ENERGY_WAIT_LIMIT * short.max_s, abs=0.11)
