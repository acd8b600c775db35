"""The replay oracle's fast search gives the exhaustive grid's point on the simulated host's Monte-Carlo cells."""

from __future__ import annotations

import pytest

from actuators.abilities import ExpectedAnchors, ExpectedModel
from actuators.host import KnobSpace, OperatingPoint
from actuators.sim.host import ITR_ANCHORS, SimHost
from tuner.optimize.settings import Objective
from tuner.replay.oracle import oracle_point


class _SubGrid(ExpectedModel, ExpectedAnchors):
    """The simulated host's model on a smaller knob grid, anchors included (the exhaustive search stays cheap)."""

    def __init__(self, host: SimHost, knobs: KnobSpace) -> None:
        self._host, self._knobs = host, knobs

    def knobs(self) -> KnobSpace:
        return self._knobs

    def expected_itr_anchors(self) -> tuple[int, ...]:
        return self._host.expected_itr_anchors()

    def expected(self, points, qps):
        return self._host.expected(points, qps)


SUB = KnobSpace.ixgbe((1.2, 1.4, 1.6, 2.9), lo=60, hi=480)


@pytest.fixture(scope="module")
def sim() -> SimHost:
    """One simulated host for the module: its cells are pure functions of the load, so cases share them."""
    return SimHost(seed=0)


@pytest.mark.parametrize(
    ("qps", "pct", "sla"),
    [
        (330_000.0, 99.0, 500.0),  # light: the slowest frequency passes, the boundary at a high ITR
        (560_000.0, 99.0, 200.0),  # tight SLA near saturation: slow frequencies fail, the boundary at a low ITR
        (500_000.0, 90.0, 500.0),  # another percentile
        (500_000.0, 99.9, 40.0),  # no point meets the SLA: the lowest latency
    ],
)
def test_fast_oracle_equals_exhaustive_on_sim_cells(sim: SimHost, qps: float, pct: float, sla: float) -> None:
    host = _SubGrid(sim, SUB)
    obj = Objective("constrained", pct, sla)
    fast, how = oracle_point(host, obj, qps)
    full, _ = oracle_point(host, obj, qps, exhaustive=True)
    assert fast == full, how
    assert ("no point meets the SLA" in how) == (sla == 40.0)


def test_fast_oracle_uses_a_fraction_of_the_full_grid() -> None:
    """On the full 511 x 18 knob grid the model has 54 x 18 = 972 cells; the search asks for well under 100."""
    host = SimHost(seed=0)
    point, how = oracle_point(host, Objective("constrained", 99, 500), 400_000.0)
    cells = host.expected_cache.cells.stats().entries
    assert 0 < cells < 100
    assert "largest feasible ITR per frequency" in how
    # the answer meets the SLA, and the next ITR up at its frequency does not (it is the boundary's)
    lat = host.expected([point, OperatingPoint(point.itr_us + 2, point.dvfs_ghz)], 400_000.0)
    assert lat[0].latency_us[99.0] <= 500.0 < lat[1].latency_us[99.0]


def test_expected_is_linear_between_anchors() -> None:
    """What the search relies on: between two anchors `expected()` interpolates linearly in ITR."""
    host = SimHost(seed=0)
    lo, hi = ITR_ANCHORS[20], ITR_ANCHORS[21]
    mid = (lo + hi) // 2
    a, m, b = host.expected([OperatingPoint(i, 1.5) for i in (lo, mid, hi)], 300_000.0)
    w = (mid - lo) / (hi - lo)
    assert m.power_w == pytest.approx((1 - w) * a.power_w + w * b.power_w, rel=1e-12)
    assert m.latency_us[99.0] == pytest.approx((1 - w) * a.latency_us[99.0] + w * b.latency_us[99.0], rel=1e-12)


def test_a_noisy_percentile_island_at_the_failing_frequency_is_found(sim: SimHost) -> None:
    """p99.9 near saturation moves ~10 % between neighbouring anchors: at 1.2 GHz on this load (a window of the
    noisy 3-day schedule) anchors 100-144 pass below failing ones that make the boundary search take the
    minimum as passed; the fastest failing frequency's close call is scanned anchor by anchor."""
    host = _SubGrid(sim, KnobSpace.ixgbe((1.2, 1.3, 2.9), lo=40, hi=400))
    obj = Objective("constrained", 99.9, 500.0)
    fast, how = oracle_point(host, obj, 457_907.973301403)
    full, _ = oracle_point(host, obj, 457_907.973301403, exhaustive=True)
    assert fast == full, how
    assert full.dvfs_ghz == 1.2  # the island is the answer, not a side point
