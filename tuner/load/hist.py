"""Histogram helpers shared by the generator's aggregator, its logs and its summary (nanoseconds in, µs out)."""

from __future__ import annotations

import numpy as np
from hdrh.histogram import HdrHistogram

from actuators.latency.dist import histogram_quantiles, record_many

#: The latency prober's histogram layout: 1 ns .. 60 s, 3 significant digits (<= 0.1 % quantisation).
HIST_LOWEST_NS = 1
HIST_HIGHEST_NS = 60_000_000_000
HIST_DIGITS = 3

#: Percentiles the generator reports (in %).
REPORTED = (50.0, 99.0, 99.9)


def new_histogram() -> HdrHistogram:
    """An empty nanosecond histogram with the prober's layout (1 ns .. 60 s, 3 significant digits)."""
    return HdrHistogram(HIST_LOWEST_NS, HIST_HIGHEST_NS, HIST_DIGITS)


def record_ns(hist: HdrHistogram, values_ns: np.ndarray) -> None:
    """Record nanosecond values, clamped into the histogram's range (0 -> 1 ns, > 60 s -> 60 s)."""
    if values_ns.size:
        record_many(hist, np.clip(values_ns, HIST_LOWEST_NS, HIST_HIGHEST_NS))


def percentiles_us(hist: HdrHistogram, pcts: tuple[float, ...] = REPORTED) -> dict[str, dict[str, float]] | None:
    """{"p99": {"us": v, "ci_low_us": lo, "ci_high_us": hi}, ...} (95 % order-statistic CIs); None if empty."""
    if hist.get_total_count() == 0:
        return None
    _, values, cis = histogram_quantiles(hist, pcts)
    return {
        f"p{p:g}": {"us": round(values[p], 3), "ci_low_us": round(cis[p][0], 3), "ci_high_us": round(cis[p][1], 3)}
        for p in pcts
    }
