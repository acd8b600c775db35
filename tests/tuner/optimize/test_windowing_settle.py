"""The guarded settle: a trial's settle in two halves, the second ending the trial when clearly over the SLA."""

from __future__ import annotations

import math
from dataclasses import replace

import numpy as np
import pytest

from actuators.host import PERCENTILES, Measurement, OperatingPoint
from actuators.latency.dist import SampleDist
from tuner.optimize.presets import preset_settings
from tuner.optimize.windowing import WindowPolicy, guarded_settle, settle_guard_policy

POINT = OperatingPoint(100, 2.0)
GUARD = WindowPolicy(mode="adaptive", min_s=2.0, max_s=20.0, abort_above_us=400.0)


class Halves:
    """`measure` callable: 20,000 exponential latency samples a second (mean 100 µs: p99 ~460 µs), the k-th call's
    scaled by `scales[k]` (a backlog drained, a point that breaks the SLA); `dists=False`: no distribution."""

    def __init__(self, scales: tuple[float, ...] = (1.0, 1.0), dists: bool = True) -> None:
        self.scales, self.dists = scales, dists
        self.rng = np.random.default_rng(4)
        self.asked: list[float] = []

    def __call__(self, seconds: float) -> Measurement:
        scale = self.scales[min(len(self.asked), len(self.scales) - 1)]
        self.asked.append(seconds)
        n = max(int(20_000 * seconds), 1)
        d = SampleDist(self.rng.exponential(100.0 * scale, n))
        return Measurement(
            seconds=seconds,
            offered_qps=20_000.0,
            achieved_qps=20_000.0,
            requests=n,
            latency_us={p: d.quantile_ci(p / 100)[0] for p in PERCENTILES},
            latency_ci_us={p: d.quantile_ci(p / 100)[1:] for p in PERCENTILES},
            energy_j=50.0 * seconds,
            point=POINT,
            latency_dist=d if self.dists else None,
            ci_known=self.dists,
        )


def test_a_point_clearly_over_the_sla_ends_in_the_settles_second_half():
    measure = Halves()
    settle, window = guarded_settle(measure, 1.0, GUARD)
    assert measure.asked == [0.5, 0.5]  # two halves, and no window after them
    assert settle is not None and window is not None
    assert settle.seconds == pytest.approx(0.5) and window.seconds == pytest.approx(0.5)
    assert window.latency_ci_us[99.0][0] > 400.0  # the second half alone: its CI wholly above the SLA
    assert settle.energy_j + window.energy_j == pytest.approx(50.0)  # every second is counted once


def test_a_point_within_the_sla_settles_as_before_and_gets_its_window():
    measure = Halves()
    settle, window = guarded_settle(measure, 1.0, replace(GUARD, abort_above_us=900.0))
    assert window is None and settle is not None
    assert settle.seconds == pytest.approx(1.0) and settle.requests == 20_000  # the halves pooled
    assert settle.latency_dist is not None and settle.latency_dist.count == 20_000


def test_the_first_half_is_never_judged_a_backlog_there_does_not_end_the_trial():
    # the first half reads 3x (a queue the previous point left), the second as the point really is (~460 µs)
    measure = Halves(scales=(3.0, 1.0))
    settle, window = guarded_settle(measure, 1.0, replace(GUARD, abort_above_us=600.0))
    assert window is None and settle is not None and settle.seconds == pytest.approx(1.0)
    # the same host, a second half over the SLA: ended, the backlog half kept as the settle
    measure = Halves(scales=(1.0, 3.0))
    settle, window = guarded_settle(measure, 1.0, replace(GUARD, abort_above_us=600.0))
    assert window is not None and window.latency_us[99.0] > 1000.0 and settle.latency_us[99.0] < 600.0


def test_without_a_guard_or_a_distribution_the_settle_is_one_unjudged_window():
    measure = Halves()
    settle, window = guarded_settle(measure, 1.0, None)
    assert measure.asked == [1.0] and window is None and settle.seconds == 1.0
    measure = Halves()
    settle, window = guarded_settle(measure, 1.0, replace(GUARD, abort_above_us=None))
    assert measure.asked == [1.0] and window is None
    # a latency source without samples (Prometheus, a hook): no CI to judge by, the halves joined, never ended
    measure = Halves(scales=(5.0, 5.0), dists=False)
    settle, window = guarded_settle(measure, 1.0, GUARD)
    assert measure.asked == [0.5, 0.5] and window is None
    assert settle.seconds == pytest.approx(1.0) and settle.requests == 20_000 and settle.latency_dist is None
    measure = Halves()
    assert guarded_settle(measure, 0.0, GUARD) == (None, None) and measure.asked == []


def test_the_guard_is_the_adaptive_windows_own_and_follows_the_settings():
    warm = preset_settings("warm")
    assert warm.settle_guard and warm.window_guard  # both on by default
    assert settle_guard_policy(warm, GUARD) is GUARD
    assert settle_guard_policy(replace(warm, settle_guard=False), GUARD) is None
    assert settle_guard_policy(warm, replace(GUARD, abort_above_us=None)) is None  # window_guard off
    assert settle_guard_policy(warm, replace(GUARD, mode="fixed")) is None
    assert not preset_settings("warm-no-settle-guard").settle_guard
    assert math.isclose(preset_settings("warm-no-settle-guard").settle_s, warm.settle_s)
