"""Mergeable latency distributions: what a measured window saw, kept so that windows can be pooled.

A percentile of a finite window is noisy; to grow a window until the percentile is known well enough
(`tuner.optimize.windowing`) the tuner measures it in chunks and pools them. Percentiles cannot be averaged, so
each chunk keeps its whole latency distribution, behind one small protocol (`LatencyDist`):

* `count` -- observations in it (the n behind the confidence interval);
* `quantile_ci(q, confidence)` -- (estimate, low, high) of the q-quantile, with the nonparametric
  order-statistic interval of `core.stats` (Le Boudec thm. 2.1; CONFIRM, Maricq et al. 2018);
* `merge(other)` -- a new distribution of both windows' observations (inputs are not changed).

Two implementations: `SampleDist` keeps the exact samples (the simulator, <= ~60k per window, float32:
4 bytes each) and `HdrDist` keeps an HdrHistogram (the prober; merged with HdrHistogram's `add`, CI
ranks mapped through the cumulative bucket counts, low end at its bucket's lowest value and high end at
its bucket's highest so quantisation never narrows the interval). Pooling assumes what the CI already
assumes: the observations are independent draws of one distribution -- windows at the same operating
point and load (`Measurement.merge_all` checks the point; the caller keeps the load).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

import numpy as np

from core.cache import BoundedCache
from core.stats import quantile_ci_ranks

if TYPE_CHECKING:
    from hdrh.histogram import HdrHistogram

#: Latency percentiles every measurement reports, in percent.
PERCENTILES: tuple[float, ...] = (50.0, 90.0, 95.0, 99.0, 99.9)

#: Latencies are reported in microseconds; an HdrDist's histogram counts nanoseconds by default.
NS_PER_US = 1000.0


@runtime_checkable
class LatencyDist(Protocol):
    """A latency distribution (µs) that can be pooled with another of the same kind of window."""

    @property
    def count(self) -> int:
        """Number of observations."""
        ...

    def quantile_ci(self, q: float, confidence: float = 0.95) -> tuple[float, float, float]:
        """(estimate, low, high) of the q-quantile (0 < q < 1) in µs, order-statistic CI at `confidence`."""
        ...

    def merge(self, other: LatencyDist) -> LatencyDist:
        """A new distribution holding the observations of both."""
        ...


#: Memo of `quantile_ci_ranks` (a pure function of its three numbers: no behaviour state, so one per process
#: is safe): a window loop asks for the same (n, q) more than once.  An entry is ~350 B (key, two ints,
#: slot): 1 MiB keeps ~3,000 of them.  `RANKS_CACHE.stats()` gives its hit rate.
RANKS_CACHE_BYTES = 2**20
RANKS_CACHE: BoundedCache[tuple[int, float, float], tuple[int, int]] = BoundedCache(
    RANKS_CACHE_BYTES, name="latency.ci_ranks"
)


def _ranks(n: int, q: float, confidence: float) -> tuple[int, int]:
    """`quantile_ci_ranks`, memoised in `RANKS_CACHE`."""
    return RANKS_CACHE.get((n, q, confidence), lambda: quantile_ci_ranks(n, q, confidence))


def estimate_rank(n: int, q: float) -> int:
    """0-based rank of the sample q-quantile (the convention of `core.stats.quantile_with_ci`)."""
    return min(max(math.ceil(q * n) - 1, 0), n - 1)


def _check_q(q: float, confidence: float) -> None:
    if not 0.0 < q < 1.0 or not 0.0 < confidence < 1.0:
        raise ValueError(f"quantile {q!r} and confidence {confidence!r} must be in (0, 1)")


def percentile_table(
    dist: LatencyDist, percentiles: Iterable[float], confidence: float = 0.95
) -> tuple[dict[float, float], dict[float, tuple[float, float]]]:
    """(value, CI) dicts keyed by percentile (in %), as `Measurement.latency_us` / `latency_ci_us`."""
    values: dict[float, float] = {}
    cis: dict[float, tuple[float, float]] = {}
    for pct in percentiles:
        est, lo, hi = dist.quantile_ci(float(pct) / 100.0, confidence)
        values[float(pct)] = est
        cis[float(pct)] = (lo, hi)
    return values, cis


# -- exact samples ---------------------------------------------------------------------------------
class SampleDist:
    """Exact latency samples in µs, kept sorted (float32: 4 bytes a sample, ~1e-7 relative rounding).

    `weight` is how many requests each sample stands for (>= 1): the simulator draws at most ~60k
    samples however long the window, and shrinks their deviation from the long-run value to what the
    window's n requests would show, so each sample of an n-request window weighs n / samples. The
    order-statistic ranks are then taken among the `count` = sum of weights observations and mapped to
    the sample holding that rank (for weight 1 this is exactly `core.stats.quantile_with_ci`). Pooled
    windows of different weights keep one weight per sample.
    """

    __slots__ = ("_x", "_weight", "_w")

    def __init__(
        self, samples_us: Sequence[float] | np.ndarray, weight: float = 1.0, _weights: np.ndarray | None = None
    ) -> None:
        x = np.array(samples_us, dtype=np.float32).ravel()  # always a private copy
        if x.size == 0:
            raise ValueError("a latency distribution needs at least one sample")
        if not np.all(np.isfinite(x)) or float(x.min()) < 0.0:
            raise ValueError("latency samples must be finite and >= 0 µs")
        if not (math.isfinite(weight) and weight >= 1.0):
            raise ValueError(f"sample weight {weight!r}: expected requests per sample >= 1")
        w = None
        if _weights is not None:  # internal: per-sample weights, aligned with x
            w = np.array(_weights, dtype=np.float64).ravel()
            if w.shape != x.shape:
                raise ValueError("one weight per sample")
        if x.size > 1 and not bool(np.all(x[1:] >= x[:-1])):
            order = np.argsort(x, kind="stable")
            x = x[order]
            w = None if w is None else w[order]
        x.setflags(write=False)
        self._x = x
        self._weight = float(weight)
        self._w = None if w is None else np.cumsum(w)  # cumulative weights

    @property
    def count(self) -> int:
        """Observations represented: the number of samples times their weight."""
        if self._w is not None:
            return int(round(float(self._w[-1])))
        return int(round(self._x.size * self._weight))

    @property
    def samples_us(self) -> np.ndarray:
        """The sorted samples (read-only view)."""
        return self._x

    @property
    def weights(self) -> np.ndarray:
        """Requests each sorted sample stands for."""
        if self._w is None:
            return np.full(self._x.size, self._weight)
        return np.diff(self._w, prepend=0.0)

    @property
    def nbytes(self) -> int:
        """Memory held by the samples (and per-sample weights, if any)."""
        return int(self._x.nbytes + (0 if self._w is None else self._w.nbytes))

    def _at_rank(self, rank: int) -> float:
        """The sample holding 0-based observation `rank` (of `count`)."""
        n = self._x.size
        if self._w is None:
            i = math.ceil((rank + 1) / self._weight - 1e-9) - 1
        else:
            i = int(np.searchsorted(self._w, rank + 1 - 1e-6))
        return float(self._x[min(max(i, 0), n - 1)])

    def quantile_ci(self, q: float, confidence: float = 0.95) -> tuple[float, float, float]:
        _check_q(q, confidence)
        n = max(self.count, 1)
        lo, hi = _ranks(n, float(q), float(confidence))
        return self._at_rank(estimate_rank(n, q)), self._at_rank(lo), self._at_rank(hi)

    def merge(self, other: LatencyDist) -> LatencyDist:
        if isinstance(other, SampleDist):
            return merge_dists([self, other])
        if isinstance(other, HdrDist):
            return self.to_hdr(other.unit_per_value, other.layout).merge(other)
        raise TypeError(f"cannot merge a SampleDist with {type(other).__name__}")

    def to_hdr(self, unit_per_value: float = 1.0 / NS_PER_US, layout: tuple[int, int, int] | None = None) -> HdrDist:
        """The same samples in an HdrHistogram (values in units of `unit_per_value` µs, e.g. ns).

        A sample of weight w is recorded w times (rounded to whole requests).
        """
        hist = _new_hist(layout or HdrDist.DEFAULT_LAYOUT)
        lowest, highest = hist.lowest_trackable_value, hist.highest_trackable_value
        ints = np.clip(np.rint(self._x.astype(np.float64) / unit_per_value), lowest, highest).astype(np.int64)
        if self._w is None and self._weight == 1.0:
            record_many(hist, ints)
        else:
            cum = np.rint(self._w if self._w is not None else np.arange(1, ints.size + 1) * self._weight)
            record_many(hist, ints, np.diff(cum, prepend=0.0).astype(np.int64))
        return HdrDist(hist, unit_per_value)

    def __repr__(self) -> str:
        return f"SampleDist(samples={self._x.size}, count={self.count})"


# -- HdrHistogram ----------------------------------------------------------------------------------
def _new_hist(layout: tuple[int, int, int]) -> HdrHistogram:
    from hdrh.histogram import HdrHistogram

    return HdrHistogram(*layout)


def record_many(hist: HdrHistogram, values: np.ndarray, counts: np.ndarray | None = None) -> None:
    """Record integer `values` (within the histogram's range) at once: `record_value`'s index math, vectorised.

    `counts` (optional, integers >= 0) records each value that many times. 60k samples take a few ms
    instead of ~100 ms one `record_value` call at a time.
    """
    v = np.asarray(values, dtype=np.int64)
    c = np.ones(v.size, dtype=np.int64) if counts is None else np.asarray(counts, dtype=np.int64)
    if c.shape != v.shape or (c.size and int(c.min()) < 0):
        raise ValueError("one count >= 0 per value")
    keep = c > 0
    v, c = v[keep], c[keep]
    if v.size == 0:
        return
    if int(v.min()) < 0 or int(v.max()) > hist.highest_trackable_value:
        raise ValueError("values outside the histogram's trackable range")
    # bucket = bit_length(v | sub_bucket_mask) - unit_magnitude - (sub_bucket_half_count_magnitude + 1)
    _, bits = np.frexp((v | hist.sub_bucket_mask).astype(np.float64))  # exact bit length below 2**53
    bucket = bits.astype(np.int64) - hist.unit_magnitude - (hist.sub_bucket_half_count_magnitude + 1)
    sub = v >> (bucket + hist.unit_magnitude)
    index = ((bucket + 1) << hist.sub_bucket_half_count_magnitude) + sub - hist.sub_bucket_half_count
    arr = np.ctypeslib.as_array(hist.counts)
    added = np.bincount(index, weights=c, minlength=hist.counts_len)[: hist.counts_len]
    arr[: hist.counts_len] += np.rint(added).astype(arr.dtype)
    hist.total_count += int(c.sum())
    hist.min_value = min(hist.min_value, int(v.min()))
    hist.max_value = max(hist.max_value, int(v.max()))


def _cumulative_counts(hist: HdrHistogram) -> np.ndarray:
    counts = np.ctypeslib.as_array(hist.counts)[: hist.counts_len].astype(np.int64)
    return np.cumsum(counts)


def histogram_quantiles(
    hist: HdrHistogram,
    percentiles: Iterable[float] = PERCENTILES,
    confidence: float = 0.95,
    unit_per_value: float = 1.0 / NS_PER_US,
) -> tuple[int, dict[float, float], dict[float, tuple[float, float]]]:
    """(n, value, CI) per percentile (in %) from a histogram, scaled by `unit_per_value` (ns -> µs default).

    The estimate is the sample quantile at 0-based rank ceil(q n) - 1 (as `core.stats.quantile_with_ci`),
    read as the highest value equivalent to its bucket (the HdrHistogram convention); the CI ranks come
    from `quantile_ci_ranks`, low end at its bucket's lowest value, high end at its bucket's highest.
    """
    cum = _cumulative_counts(hist)
    n = int(cum[-1]) if cum.size else 0
    if n == 0:
        raise ValueError("empty histogram")

    def bucket_low(rank: int) -> int:
        return int(hist.get_value_from_index(int(np.searchsorted(cum, rank + 1))))

    def bucket_high(rank: int) -> int:
        return int(hist.get_highest_equivalent_value(bucket_low(rank)))

    values: dict[float, float] = {}
    cis: dict[float, tuple[float, float]] = {}
    for pct in percentiles:
        q = float(pct) / 100.0
        _check_q(q, confidence)
        lo, hi = _ranks(n, q, float(confidence))
        values[float(pct)] = bucket_high(estimate_rank(n, q)) * unit_per_value
        cis[float(pct)] = (bucket_low(lo) * unit_per_value, bucket_high(hi) * unit_per_value)
    return n, values, cis


class HdrDist:
    """An HdrHistogram of latencies, each count a value in units of `unit_per_value` µs (ns by default).

    Kept encoded (HdrHistogram's compressed V2 form, typically a few kB instead of the ~220 kB counts
    array) so that a `Measurement` holding one is cheap to keep and to pickle across the prober's pipe;
    decoded on demand.
    """

    #: (lowest, highest, significant digits) of the prober's histograms: 1 ns .. 60 s, 3 digits.
    DEFAULT_LAYOUT: tuple[int, int, int] = (1, 60_000_000_000, 3)

    __slots__ = ("_encoded", "_count", "unit_per_value", "layout")

    def __init__(self, hist: HdrHistogram, unit_per_value: float = 1.0 / NS_PER_US) -> None:
        count = int(hist.get_total_count())
        if count <= 0:
            raise ValueError("a latency distribution needs at least one observation")
        if not unit_per_value > 0:
            raise ValueError(f"unit_per_value {unit_per_value!r}: expected > 0")
        self._encoded: bytes = hist.encode()
        self._count = count
        self.unit_per_value = float(unit_per_value)
        self.layout = (
            int(hist.lowest_trackable_value),
            int(hist.highest_trackable_value),
            int(hist.significant_figures),
        )

    @property
    def count(self) -> int:
        return self._count

    @property
    def nbytes(self) -> int:
        """Memory held by the encoded histogram."""
        return len(self._encoded)

    def histogram(self) -> HdrHistogram:
        """A fresh decoded copy of the histogram (changing it does not change this distribution)."""
        from hdrh.histogram import HdrHistogram

        return HdrHistogram.decode(self._encoded)

    def quantile_ci(self, q: float, confidence: float = 0.95) -> tuple[float, float, float]:
        _check_q(q, confidence)
        _, values, cis = histogram_quantiles(self.histogram(), [q * 100.0], confidence, self.unit_per_value)
        (est,), ((lo, hi),) = values.values(), cis.values()
        return est, lo, hi

    def percentiles(
        self, percentiles: Iterable[float], confidence: float = 0.95
    ) -> tuple[dict[float, float], dict[float, tuple[float, float]]]:
        """All of `percentiles` from one decode (faster than `percentile_table`, same numbers)."""
        _, values, cis = histogram_quantiles(self.histogram(), percentiles, confidence, self.unit_per_value)
        return values, cis

    def merge(self, other: LatencyDist) -> LatencyDist:
        if isinstance(other, SampleDist):
            other = other.to_hdr(self.unit_per_value, self.layout)
        if not isinstance(other, HdrDist):
            raise TypeError(f"cannot merge an HdrDist with {type(other).__name__}")
        if other.unit_per_value != self.unit_per_value:
            raise ValueError(
                f"cannot merge histograms in different units ({self.unit_per_value:g} vs "
                f"{other.unit_per_value:g} µs per value)"
            )
        total = _new_hist(self.layout)  # the wider of the two would also do; layouts match in practice
        total.add(self.histogram())
        total.add(other.histogram())
        if int(total.get_total_count()) != self.count + other.count:
            raise ValueError("histogram merge lost counts (values outside the trackable range?)")
        return HdrDist(total, self.unit_per_value)

    def __getstate__(self) -> dict[str, Any]:
        return {"encoded": self._encoded, "count": self._count, "unit": self.unit_per_value, "layout": self.layout}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self._encoded = state["encoded"]
        self._count = state["count"]
        self.unit_per_value = state["unit"]
        self.layout = tuple(state["layout"])

    def encoded(self) -> str:
        """The histogram as HdrHistogram's base64 text (what `from_encoded` reads; JSON-safe)."""
        return self._encoded.decode("ascii")

    @classmethod
    def from_encoded(cls, text: str | bytes, unit_per_value: float = 1.0 / NS_PER_US) -> HdrDist:
        """Inverse of `encoded` (ValueError on a malformed or empty histogram)."""
        from hdrh.histogram import HdrHistogram

        raw = text.encode("ascii") if isinstance(text, str) else bytes(text)
        try:
            hist = HdrHistogram.decode(raw)
        except Exception as exc:  # noqa: BLE001 - hdrh raises assorted errors on bad input
            raise ValueError(f"not an encoded HdrHistogram ({type(exc).__name__})") from None
        if hist is None:
            raise ValueError("not an encoded HdrHistogram")
        return cls(hist, unit_per_value)

    def __repr__(self) -> str:
        return f"HdrDist(count={self.count}, unit={self.unit_per_value:g} µs)"


def merge_dists(dists: Sequence[LatencyDist]) -> LatencyDist:
    """Pool several distributions (left to right); ValueError if there are none."""
    if not dists:
        raise ValueError("nothing to merge")
    if all(isinstance(d, SampleDist) for d in dists):  # one concatenation, not k-1 re-sorts
        samples = [d for d in dists if isinstance(d, SampleDist)]
        x = np.concatenate([d.samples_us for d in samples])
        if all(d._w is None and d._weight == samples[0]._weight for d in samples):
            return SampleDist(x, samples[0]._weight)
        return SampleDist(x, _weights=np.concatenate([d.weights for d in samples]))
    total = dists[0]
    for d in dists[1:]:
        total = total.merge(d)
    return total
