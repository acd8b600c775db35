"""Pure statistics: quantiles and their nonparametric (order-statistic) confidence intervals.

For n i.i.d. samples the number below the true q-quantile is Binomial(n, q), so the interval between
order statistics X(l) and X(u) with l = Binom.ppf(a/2) and u = Binom.ppf(1-a/2)+1 covers the
q-quantile with probability >= 1-a, whatever the distribution (Le Boudec, "Performance Evaluation",
thm. 2.1; used by CONFIRM, Maricq et al. 2018).
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Iterable, Sequence

import numpy as np


def describe(values: Iterable[float | None]) -> dict[str, float] | None:
    """Mean, count, minimum and maximum of `values` (None values dropped); None when nothing is left."""
    vals = [float(v) for v in values if v is not None]
    if not vals:
        return None
    return {"mean": statistics.fmean(vals), "n": len(vals), "min": min(vals), "max": max(vals)}


def quantile_ci_ranks(n: int, q: float, confidence: float = 0.95) -> tuple[int, int]:
    """0-based ranks (lo, hi) into n sorted samples that bracket the q-quantile with `confidence`.

    Ranks are clamped to [0, n-1]; with too few samples the interval is the whole sample range
    (the CI is then not really achieved -- callers can tell by `quantile_ci_achievable`).
    """
    from scipy.stats import binom  # scipy import is slow-ish; keep module import light

    if n <= 0:
        raise ValueError("need at least one sample")
    if not 0.0 < q < 1.0 or not 0.0 < confidence < 1.0:
        raise ValueError("q and confidence must be in (0, 1)")
    alpha = 1.0 - confidence
    lo = int(binom.ppf(alpha / 2, n, q))  # count of samples below -> 1-based rank lo is X(lo)
    hi = int(binom.ppf(1 - alpha / 2, n, q)) + 1
    return max(lo - 1, 0), min(hi - 1, n - 1)


def quantile_ci_achievable(n: int, q: float, confidence: float = 0.95) -> bool:
    """Whether n samples are enough for a two-sided CI of the q-quantile at `confidence`."""
    alpha = 1.0 - confidence
    # need P(all n below) <= a/2 and P(none below) <= a/2
    return n > 0 and n * math.log(q) <= math.log(alpha / 2) and n * math.log1p(-q) <= math.log(alpha / 2)


def quantile_with_ci(
    samples: Sequence[float] | np.ndarray, q: float, confidence: float = 0.95, presorted: bool = False
) -> tuple[float, float, float]:
    """(estimate, ci_low, ci_high) of the q-quantile of `samples` (order-statistic CI)."""
    x = np.asarray(samples, dtype=float)
    if not presorted:
        x = np.sort(x)
    n = x.size
    lo, hi = quantile_ci_ranks(n, q, confidence)
    est = x[min(max(math.ceil(q * n) - 1, 0), n - 1)]
    return float(est), float(x[lo]), float(x[hi])


def relative_half_width(estimate: float, lo: float, hi: float) -> float:
    """Half-width of [lo, hi] relative to `estimate` (inf when the estimate is 0)."""
    return (hi - lo) / 2 / estimate if estimate > 0 else math.inf


def percentiles_inplace(x: np.ndarray, q: Sequence[float]) -> np.ndarray:
    """`np.percentile(x, q)` (method "linear") of a 1-D float array without NaNs, equal bit for bit, reordering
    `x` in place.

    numpy partitions once at every order statistic it needs (with the minimum and maximum), which on a few
    hundred thousand values costs ~10 x one partition; here each needed order statistic is selected in turn
    from the values above the previous one, so the work shrinks as the ranks climb (a tail percentile's two
    neighbours cost a fraction of a pass).  The interpolation is numpy's (`_lerp`: from the lower neighbour
    below gamma 0.5, from the upper one at or above), op for op."""
    n = x.shape[0]
    if n == 0:
        raise ValueError("percentiles of an empty sample")
    virtual = (n - 1) * np.true_divide(np.asarray(q, dtype=float), 100)
    lower = np.floor(virtual)
    upper = lower + 1
    lower[virtual >= n - 1] = -1  # past the top: the maximum, as numpy
    upper[virtual >= n - 1] = -1
    lower[virtual < 0] = 0
    upper[virtual < 0] = 0
    lo_i, up_i = lower.astype(np.intp), upper.astype(np.intp)
    gamma = np.asarray(virtual - lo_i, dtype=virtual.dtype)
    start = 0
    for rank in sorted({int(r) % n for r in (*lo_i, *up_i)}):
        x[start:].partition(rank - start)  # x[rank] is the rank-th smallest; everything after it is larger
        start = rank + 1
    a, b = x[lo_i], x[up_i]
    diff = b - a
    out: np.ndarray = np.add(a, diff * gamma)
    np.subtract(b, diff * (1 - gamma), out=out, where=gamma >= 0.5)
    return out
