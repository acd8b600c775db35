"""Do two latency clients agree? Percentiles of two interval logs compared over the same seconds, with confidence
intervals that allow for autocorrelation.

Latencies measured one after another are not independent draws: a queue that builds, a client or server that is
descheduled for a few milliseconds, raises many consecutive samples together. The order-statistic CI of a
percentile (`histogram_quantiles`, `core.stats`) assumes independence (Le Boudec; Antoniou et al. recommend
checking it, e.g. by autocorrelation) and is far too narrow when the tail comes in bursts: 10 of 1,000 samples
above the p99 may be one 20 ms stall. Here the CI comes from a *block bootstrap* over whole seconds (Künsch
1989): resample the common seconds with replacement, pool their histograms, read the percentile; seconds are the
blocks, so any dependence shorter than a second is kept inside a block. Both clients are resampled with the
*same* seconds (they watched the same server at the same time), which gives a paired CI of their difference too.
`dependence` reports the per-second percentiles' lag-1 autocorrelation: if it is large, one-second blocks are
too short and the CIs too narrow, say so rather than trust them.

Pure functions over HdrHistograms (ns values): no I/O; `tuner load` and the prober's `--hlog` write the inputs.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

if TYPE_CHECKING:
    from hdrh.histogram import HdrHistogram


@dataclass(frozen=True)
class Quantile:
    """A percentile in µs with its 95 % CIs: block bootstrap over seconds, and order statistics (iid)."""

    value_us: float
    ci_us: tuple[float, float]  # block bootstrap (seconds resampled)
    iid_ci_us: tuple[float, float]  # order-statistic CI, as if every sample were independent
    count: int


@dataclass(frozen=True)
class Agreement:
    """Two clients' percentile over the same `seconds` (the common seconds where both recorded samples)."""

    percentile: float
    seconds: int
    a: Quantile
    b: Quantile
    diff_us: float  # a - b
    diff_ci_us: tuple[float, float]  # paired block bootstrap
    dependence: float | None  # lag-1 autocorrelation of the per-second percentiles (a's and b's, mean)

    @property
    def cis_overlap(self) -> bool:
        """The two block-bootstrap CIs overlap."""
        return self.a.ci_us[0] <= self.b.ci_us[1] and self.b.ci_us[0] <= self.a.ci_us[1]

    @property
    def iid_cis_overlap(self) -> bool:
        return self.a.iid_ci_us[0] <= self.b.iid_ci_us[1] and self.b.iid_ci_us[0] <= self.a.iid_ci_us[1]

    @property
    def diff_contains_zero(self) -> bool:
        return self.diff_ci_us[0] <= 0.0 <= self.diff_ci_us[1]

    def as_dict(self) -> dict[str, Any]:
        def q(x: Quantile) -> dict[str, Any]:
            return {
                "us": round(x.value_us, 1),
                "ci_us": [round(v, 1) for v in x.ci_us],
                "iid_ci_us": [round(v, 1) for v in x.iid_ci_us],
                "samples": x.count,
            }

        return {
            "percentile": self.percentile,
            "seconds": self.seconds,
            "a": q(self.a),
            "b": q(self.b),
            "diff_us": round(self.diff_us, 1),
            "diff_ci_us": [round(v, 1) for v in self.diff_ci_us],
            "cis_overlap": self.cis_overlap,
            "iid_cis_overlap": self.iid_cis_overlap,
            "diff_ci_contains_zero": self.diff_contains_zero,
            "lag1_autocorrelation": None if self.dependence is None else round(self.dependence, 3),
        }


def _matrix(hists: list[HdrHistogram], columns: np.ndarray) -> np.ndarray:
    rows = []
    for h in hists:
        counts = np.ctypeslib.as_array(h.counts)[: h.counts_len]
        rows.append(counts[columns].astype(np.float64))
    return np.vstack(rows)


def _quantile_rows(cum: np.ndarray, q: float) -> np.ndarray:
    """Index of the bucket holding the q-quantile (0-based rank ceil(q n) - 1) for each row of cumulative counts."""
    n = cum[:, -1]
    rank = np.maximum(np.ceil(q * n) - 1, 0)
    return np.array([int(np.searchsorted(c, r + 1)) for c, r in zip(cum, rank, strict=True)])


def _lag1(series: np.ndarray) -> float | None:
    if series.size < 4 or float(np.std(series)) == 0.0:
        return None
    x = series - series.mean()
    return float(np.dot(x[:-1], x[1:]) / np.dot(x, x))


def compare(
    a: dict[int, HdrHistogram],
    b: dict[int, HdrHistogram],
    percentile: float = 99.0,
    *,
    seconds: list[int] | None = None,
    resamples: int = 2000,
    confidence: float = 0.95,
    seed: int = 0,
) -> Agreement:
    """Compare the `percentile` of two clients' per-second histograms (keyed by epoch second) over the seconds
    both recorded (or `seconds`, a subset). ValueError if fewer than 3 common seconds."""
    from actuators.latency.dist import histogram_quantiles
    from actuators.latency.engine import new_histogram

    common = sorted(
        s
        for s in (seconds if seconds is not None else set(a) & set(b))
        if s in a and s in b and a[s].get_total_count() and b[s].get_total_count()
    )
    if len(common) < 3:
        raise ValueError(f"need at least 3 seconds both clients recorded, got {len(common)}")
    q = percentile / 100.0
    ha, hb = [a[s] for s in common], [b[s] for s in common]
    nonzero = np.zeros(ha[0].counts_len, dtype=bool)
    for h in ha + hb:
        nonzero |= np.ctypeslib.as_array(h.counts)[: h.counts_len] > 0
    columns = np.flatnonzero(nonzero)
    ref = ha[0]
    high_ns = np.array([ref.get_highest_equivalent_value(ref.get_value_from_index(int(i))) for i in columns], float)
    ma, mb = _matrix(ha, columns), _matrix(hb, columns)
    rng = np.random.default_rng(seed)
    k = len(common)
    weights = np.stack([np.bincount(rng.integers(0, k, size=k), minlength=k) for _ in range(resamples)]).astype(float)
    boot_a = high_ns[_quantile_rows(np.cumsum(weights @ ma, axis=1), q)] / 1e3
    boot_b = high_ns[_quantile_rows(np.cumsum(weights @ mb, axis=1), q)] / 1e3
    tail = (1.0 - confidence) / 2.0

    def interval(x: np.ndarray) -> tuple[float, float]:
        return float(np.quantile(x, tail)), float(np.quantile(x, 1.0 - tail))

    def pooled(hists: list[HdrHistogram], boot: np.ndarray) -> Quantile:
        total = new_histogram()
        for h in hists:
            total.add(h)
        n, values, cis = histogram_quantiles(total, (percentile,), confidence)
        return Quantile(values[percentile], interval(boot), cis[percentile], n)

    qa, qb = pooled(ha, boot_a), pooled(hb, boot_b)
    per_a = np.array([h.get_value_at_percentile(percentile) for h in ha], float)
    per_b = np.array([h.get_value_at_percentile(percentile) for h in hb], float)
    deps = [d for d in (_lag1(np.log(per_a)), _lag1(np.log(per_b))) if d is not None]
    return Agreement(
        percentile=percentile,
        seconds=k,
        a=qa,
        b=qb,
        diff_us=qa.value_us - qb.value_us,
        diff_ci_us=interval(boot_a - boot_b),
        dependence=float(np.mean(deps)) if deps else None,
    )


def effective_samples(n: int, iid_ci: tuple[float, float], ci: tuple[float, float]) -> float:
    """How many independent samples an interval as wide as `ci` would stand for, given that `n` gave `iid_ci`
    (width scales as 1/sqrt(n)): n x (iid width / width)^2."""
    w_iid, w = iid_ci[1] - iid_ci[0], ci[1] - ci[0]
    return float(n) if w <= 0 else n * (w_iid / w) ** 2 if math.isfinite(w) else 0.0
