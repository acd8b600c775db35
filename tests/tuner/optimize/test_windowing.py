"""Statistically sized windows: policy validation, fixed/adaptive/fallback behaviour, the stopping rule."""

from __future__ import annotations

import math

import numpy as np
import pytest

from actuators.host import PERCENTILES, KnobSpace, Measurement, OperatingPoint
from actuators.latency.dist import HdrDist, SampleDist
from actuators.sim.host import SimHost
from core.errors import TunerError
from tuner.optimize.windowing import (
    WindowPolicy,
    batch_half_width,
    measure_window,
    next_chunk_s,
    percentile_half_width,
)

POINT = OperatingPoint(100, 2.0)
MEAN_US = 100.0


class SampleHost:
    """A host whose windows hold `rate` exponential latency samples per second (mean 100 µs, 50 W).

    `shift_sd` > 0 scales each window's latencies by a random factor (load bursts: windows differ by
    more than their samples say). `dists=False` gives windows without a distribution (like Prometheus).
    """

    name = "samples"

    def __init__(self, rate: float, seed: int = 0, shift_sd: float = 0.0, dists: bool = True) -> None:
        self.rate, self.shift_sd, self.dists = rate, shift_sd, dists
        self.rng = np.random.default_rng(seed)
        self.asked: list[float] = []

    def knobs(self) -> KnobSpace:
        return KnobSpace.ixgbe((2.0,))

    def point(self) -> OperatingPoint:
        return POINT

    def measure(self, seconds: float) -> Measurement:
        self.asked.append(seconds)
        n = max(int(self.rate * seconds), 1)
        scale = math.exp(self.shift_sd * self.rng.standard_normal()) if self.shift_sd else 1.0
        x = self.rng.exponential(MEAN_US * scale, n)
        d = SampleDist(x)
        lat = {p: d.quantile_ci(p / 100)[0] for p in PERCENTILES}
        ci = {p: d.quantile_ci(p / 100)[1:] for p in PERCENTILES}
        return Measurement(
            seconds=seconds,
            offered_qps=self.rate,
            achieved_qps=self.rate,
            requests=n,
            latency_us=lat,
            latency_ci_us=ci,
            energy_j=50.0 * seconds,
            point=POINT,
            energy_by_zone_j={"package-0": 50.0 * seconds},
            latency_dist=d if self.dists else None,
            ci_known=self.dists,
        )


def test_policy_validation_is_one_line():
    for kwargs, match in [
        ({"mode": "smart"}, "mode"),
        ({"ci_pct": 0}, "ci_pct"),
        ({"percentile": 100}, "percentile"),
        ({"min_s": 30}, "min_s"),
        ({"max_s": math.inf}, "max_s"),
        ({"confidence": 1.0}, "confidence"),
        ({"batches": 0}, "batches"),
    ]:
        with pytest.raises(TunerError, match=match):
            WindowPolicy(**kwargs)


def test_from_settings_reads_tuner_settings_and_caps_min_at_the_window():
    from tuner.optimize.presets import cold_settings

    s = cold_settings(window_s=1.5)
    p = WindowPolicy.from_settings(s, 99.9)
    assert (p.mode, p.percentile, p.max_s, p.min_s) == (getattr(s, "window_mode", "fixed"), 99.9, 1.5, 1.5)


def test_fixed_mode_is_one_window_of_max_s():
    host = SampleHost(rate=1000)
    m = measure_window(host, WindowPolicy(mode="fixed", max_s=7.0))
    assert host.asked == [7.0] and m.seconds == 7.0


def test_adaptive_stops_early_when_the_ci_is_tight_and_covers_all_time_measured():
    host = SampleHost(rate=200_000, seed=1)
    policy = WindowPolicy(mode="adaptive", min_s=2.0, max_s=20.0, ci_pct=5.0)
    m = measure_window(host, policy)
    assert m.seconds == pytest.approx(sum(host.asked)) and m.seconds < 20.0
    assert m.energy_j == pytest.approx(50.0 * m.seconds)
    assert m.requests == m.latency_dist.count == sum(int(200_000 * s) for s in host.asked)
    assert percentile_half_width(m, 99.0) <= 0.05
    lo, hi = m.latency_ci_us[99.0]
    assert lo <= m.percentile(99) <= hi


def test_adaptive_grows_until_the_ci_is_within_target():
    host = SampleHost(rate=300, seed=2)  # 600 samples in 2 s: a p99 CI far wider than +-5 %
    policy = WindowPolicy(mode="adaptive", min_s=2.0, max_s=200.0, ci_pct=5.0)
    m = measure_window(host, policy)
    assert len(host.asked) > 3 and 2.0 < m.seconds < 200.0
    assert percentile_half_width(m, 99.0) <= 0.05
    # and it did not overshoot wildly: the window before the last one was not yet good enough
    assert m.seconds < 3 * _seconds_needed(300, 0.05)


def _seconds_needed(rate: float, target: float) -> float:
    """Seconds at which the p99 half-width of an exponential sample first drops under `target`."""
    from core.stats import quantile_ci_ranks

    q = 0.99
    for n in range(500, 10_000_000, 250):
        lo, hi = quantile_ci_ranks(n, q)
        # ranks -> exponential quantiles: -ln(1 - r/n)
        width = (-math.log1p(-(hi + 1) / (n + 1)) + math.log1p(-(lo + 1) / (n + 1))) / 2 / -math.log1p(-q)
        if width <= target:
            return n / rate
    raise AssertionError


def test_adaptive_stops_at_max_s_when_the_ci_stays_wide():
    host = SampleHost(rate=50, seed=3)
    m = measure_window(host, WindowPolicy(mode="adaptive", min_s=1.0, max_s=10.0))
    assert m.seconds == pytest.approx(10.0) and sum(host.asked) == pytest.approx(10.0)
    assert percentile_half_width(m, 99.0) > 0.05


def test_adaptive_ends_a_window_whose_estimate_is_above_the_limit():
    # p99 of exponential(100 µs) is ~460 µs; with 50 samples a second its CI stays wider than +-5 % for 10 s
    wide = WindowPolicy(mode="adaptive", min_s=1.0, max_s=10.0, stop_above_us=250.0)
    host = SampleHost(rate=50, seed=3)
    m = measure_window(host, wide)
    assert m.seconds == pytest.approx(1.0) and sum(host.asked) == pytest.approx(1.0)  # min_s, then stop
    assert m.latency_us[99.0] > 250.0
    # a limit the estimate stays under leaves the window as it was: grown to max_s
    host = SampleHost(rate=50, seed=3)
    assert measure_window(
        host, WindowPolicy(mode="adaptive", min_s=1.0, max_s=10.0, stop_above_us=5000.0)
    ).seconds == pytest.approx(10.0)
    with pytest.raises(TunerError, match="stop_above_us"):
        WindowPolicy(mode="adaptive", stop_above_us=0.0)


def test_the_guard_ends_a_window_after_the_first_chunk_wholly_over_the_sla():
    # p99 of exponential(100 µs) is ~460 µs; at 20,000 samples a second one 1/3 s chunk pins it within a few %
    guard = WindowPolicy(mode="adaptive", min_s=1.0, max_s=10.0, abort_above_us=400.0)
    host = SampleHost(rate=20_000, seed=1)
    m = measure_window(host, guard)
    assert len(host.asked) == 1 and m.seconds == pytest.approx(1.0 / 3)  # one chunk, not min_s
    assert m.latency_ci_us[99.0][0] > 400.0
    # an SLA inside the CI (estimate above, lower end below) is not a confident violation: min_s at least
    host = SampleHost(rate=50, seed=3)
    m = measure_window(host, WindowPolicy(mode="adaptive", min_s=1.0, max_s=10.0, abort_above_us=440.0))
    assert sum(host.asked) >= 1.0 - 1e-9
    # an SLA the percentile stays under: the window is sized by its CI as without the guard
    plain = measure_window(SampleHost(rate=20_000, seed=1), WindowPolicy(mode="adaptive", min_s=1.0, max_s=10.0))
    again = measure_window(
        SampleHost(rate=20_000, seed=1), WindowPolicy(mode="adaptive", min_s=1.0, max_s=10.0, abort_above_us=900.0)
    )
    assert again.seconds == pytest.approx(plain.seconds) and plain.seconds >= 1.0
    with pytest.raises(TunerError, match="abort_above_us"):
        WindowPolicy(mode="adaptive", abort_above_us=-1.0)


def test_batch_check_catches_windows_that_differ_more_than_their_samples_say():
    # each window is shifted by ~8 %: the pooled order-statistic CI is tight, the windows are not
    pooled_only = WindowPolicy(mode="adaptive", min_s=2.0, max_s=20.0, batches=1)
    with_batches = WindowPolicy(mode="adaptive", min_s=2.0, max_s=20.0, batches=3)
    a, b = SampleHost(rate=200_000, seed=4, shift_sd=0.08), SampleHost(rate=200_000, seed=4, shift_sd=0.08)
    short, long = measure_window(a, pooled_only), measure_window(b, with_batches)
    assert short.seconds == pytest.approx(2.0) and long.seconds == pytest.approx(20.0)
    # ...and the CI it reports (Ax's SEM) is widened to what the windows' disagreement says
    lo, hi = long.latency_ci_us[99.0]
    pooled_lo, pooled_hi = long.latency_dist.quantile_ci(0.99)[1:]
    assert (hi - lo) > 2 * (pooled_hi - pooled_lo)
    assert lo <= long.percentile(99) <= hi
    # without burst noise the batch check costs nothing extra
    c = SampleHost(rate=200_000, seed=5)
    assert measure_window(c, with_batches).seconds == pytest.approx(2.0) and len(c.asked) == 3


def test_adaptive_p99_covers_the_truth_at_about_the_nominal_rate():
    # the sequential look (stop as soon as the CI is narrow) must not wreck coverage on i.i.d. data
    truth = -MEAN_US * math.log(0.01)
    hits, reps = 0, 120
    for seed in range(reps):
        m = measure_window(
            SampleHost(rate=400, seed=100 + seed), WindowPolicy(mode="adaptive", min_s=2.0, max_s=100.0, ci_pct=8.0)
        )
        lo, hi = m.latency_ci_us[99.0]
        hits += lo <= truth <= hi
    assert hits / reps >= 0.9


def test_hosts_without_distributions_fall_back_to_one_fixed_window():
    host = SampleHost(rate=1000, dists=False)
    m = measure_window(host, WindowPolicy(mode="adaptive", min_s=3.0, max_s=20.0))
    assert host.asked == [pytest.approx(1.0), pytest.approx(19.0)]
    assert m.seconds == pytest.approx(20.0) and m.energy_j == pytest.approx(1000.0)
    assert m.ci_known is False and m.latency_dist is None and m.requests == 1000 + 19000


def test_next_chunk_and_batch_half_width_are_pure_math():
    # h = 2 * target after 2 s: need ~ 2 * 4 * 1.2 = 9.6 s in total -> 7.6 s more (if growth allows)
    assert next_chunk_s(2.0, 0.10, 0.05, 18.0, 1.0, max_growth=10.0) == pytest.approx(7.6)
    assert next_chunk_s(2.0, 0.10, 0.05, 18.0, 1.0) == 2.0  # by default the window at most doubles
    assert next_chunk_s(2.0, 0.06, 0.05, 18.0, 1.0) == pytest.approx(2.0 * (1.44 * 1.2 - 1))  # less needed
    assert next_chunk_s(2.0, math.inf, 0.05, 18.0, 1.0) == 2.0  # unknown width: double
    assert next_chunk_s(2.0, 0.051, 0.05, 18.0, 1.0) == 1.0  # at least min chunk
    assert next_chunk_s(2.0, 0.5, 0.05, 18.0, 1.0, max_growth=100) == 18.0  # never past max
    assert next_chunk_s(2.0, 0.1, 0.05, 2.5, 1.0) == 2.5  # would leave a sliver: take the rest
    assert next_chunk_s(2.0, 0.1, 0.05, 0.0, 1.0) == 0.0
    from scipy.stats import t

    # equal lengths: plain t interval of the mean of [90, 100, 110] relative to 100
    assert batch_half_width([90, 100, 110], [1, 1, 1], 100.0) == pytest.approx(
        t.ppf(0.975, 2) * 10 / math.sqrt(3) / 100
    )
    assert batch_half_width([100.0], [1.0], 100.0) == math.inf
    assert batch_half_width([100, 100], [1, 3], 100.0) == 0.0


def test_simulated_host_adaptive_window_is_shorter_and_agrees_with_a_long_one():
    host = SimHost(seed=7, qps=300_000)
    host.set_itr(100)
    host.set_dvfs(2.0)
    t0 = host.clock_s()
    m = measure_window(host, WindowPolicy(mode="adaptive"))
    assert host.clock_s() - t0 == pytest.approx(m.seconds) and m.seconds < 20.0
    assert isinstance(m.latency_dist, HdrDist) and m.latency_dist.nbytes < 20_000  # kept compact
    assert m.latency_dist.quantile_ci(0.99)[0] == pytest.approx(m.percentile(99), rel=2e-3)
    truth = host.expected([OperatingPoint(100, 2.0)], 300_000)[0].latency_us[99.0]
    assert abs(m.percentile(99) / truth - 1) <= 0.05
