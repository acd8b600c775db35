"""The replay oracle's fast search gives the exhaustive grid's point on the simulated host's Monte-Carlo cells."""

from __future__ import annotations

import numpy as np
import pytest

from actuators.host import KnobSpace, OperatingPoint
from actuators.sim.arrivals import _seg_cumsum_and_sum
from actuators.sim.host import ITR_ANCHORS, SimHost
from actuators.sim.model import _menu_prediction
from tuner.optimize.settings import Objective
from tuner.replay.oracle import oracle_point


class _SubGrid:
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


def _seg_cumsum(x: np.ndarray, starts: np.ndarray, idx: np.ndarray) -> np.ndarray:
    c = np.cumsum(x)
    return c - np.concatenate(([0.0], c))[starts][idx]


def _seg_sum(x: np.ndarray, starts: np.ndarray, counts: np.ndarray) -> np.ndarray:
    c = np.concatenate((np.zeros(x.shape[:-1] + (1,)), np.cumsum(x, axis=-1)), axis=-1)
    return c[..., starts + counts] - c[..., starts]


def test_one_cumulative_sum_gives_the_same_segment_sums_bit_for_bit() -> None:
    """The simulator's segmented sums (one cumulative sum for both) equal the two separate ones exactly, so the
    model's cells and the replay's energies did not move."""
    rng = np.random.default_rng(3)
    counts = rng.integers(0, 5, size=200)
    starts = np.concatenate(([0], np.cumsum(counts)[:-1]))
    idx = np.repeat(np.arange(counts.size), counts)
    for x in (rng.exponential(size=int(counts.sum())), rng.exponential(size=(3, int(counts.sum())))):
        run, tot = _seg_cumsum_and_sum(x, starts, counts)
        ref_run = _seg_cumsum(x, starts, idx) if x.ndim == 1 else np.stack([_seg_cumsum(r, starts, idx) for r in x])
        assert np.array_equal(run, ref_run)
        assert np.array_equal(tot, _seg_sum(x, starts, counts))


def _menu_reference(gaps: np.ndarray, idled: np.ndarray, history: int) -> np.ndarray:
    """The menu governor's prediction as first written: one gather per lag over the whole grid."""
    k = gaps.shape[-1]
    g2, v2 = gaps.reshape(-1, k), idled.reshape(-1, k)
    flat = np.concatenate((g2[v2], [1e9]))
    row_start = np.concatenate(([0], np.cumsum(v2.sum(axis=1))[:-1]))[:, None]
    before = np.cumsum(v2, axis=1) - v2
    pred = np.full(g2.shape, 1e9)
    for lag in range(1, history + 1):
        pos = before - lag
        pred = np.minimum(pred, np.where(pos >= 0, flat[row_start + np.maximum(pos, 0)], 1e9))
    return pred.reshape(gaps.shape)


@pytest.mark.parametrize(
    ("shape", "p_idle"), [((1, 4, 3000), 0.7), ((3, 4, 200), 0.2), ((2, 1, 5), 1.0), ((1, 2, 6), 0.0)]
)
def test_menu_prediction_is_the_shortest_of_the_last_actual_gaps_bit_for_bit(shape: tuple, p_idle: float) -> None:
    rng = np.random.default_rng(11)
    gaps, idled = rng.exponential(size=shape) * 50.0, rng.random(shape) < p_idle
    assert np.array_equal(_menu_prediction(gaps, idled, 4), _menu_reference(gaps, idled, 4))


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
