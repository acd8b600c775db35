"""Does this host still behave like its hardware class? A test on the residuals of the class model.

The class model is local and non-parametric: the prediction for one of this host's trials is the median, over
its `k` nearest trials of the *other* hosts of the class, of log power and log latency (at the trial's own
objective percentile). Nearness is measured in the units the response changes over: 10 % of load, 0.2 GHz
and 64 µs of ITR count one each, and only neighbours within `radius` such units count; a trial with fewer
than `min_neighbours` of them is not tested (the class has no evidence there).

For each metric, the residuals r_i = y_host - y_class (log units, i.e. relative) of the n tested trials get
a one-sample t-test of mean zero: t = mean(r) / (sd(r) / sqrt(n)). Over a class of identical machines the
residual is noise of either sign (the measurement noise of both sides and the local spread of the
neighbours) and t stays small; a host whose power or latency is shifted (a failing fan, a different BIOS
power profile, a NIC firmware change) gives residuals of one sign and a large |t|. The host drifts when, for
either metric, |t| > `t_crit` (3.5: two-sided p ~ 0.001 per metric for n >= 10, Bonferroni over the two
metrics keeps the false-alarm rate under ~0.3 % per test) AND the mean shift exceeds a practical margin
(`power_margin` 5 %, `latency_margin` 10 %): with many trials a t-test finds shifts too small to matter, and
a class is useful as long as its points stay near-optimal for the host. Fewer than `min_trials` tested
trials: no verdict (not drifting, statistic None).

Assumptions, stated: residuals of different trials are independent (trials are separate windows); their
distribution is roughly symmetric (log scale). The test sees a shift of the level, not a change of shape
that cancels out across the knob space -- that is what the margins and the two metrics are for.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence
from dataclasses import dataclass, field

from tuner.store.history import HistoryEntry

LOAD_UNIT = math.log(1.10)  # 10 % of load
GHZ_UNIT = 0.2
ITR_UNIT_US = 64.0


@dataclass(frozen=True)
class DriftSettings:
    k: int = 8
    radius: float = 3.0
    min_neighbours: int = 3
    min_trials: int = 5
    t_crit: float = 3.5
    power_margin: float = 0.05
    latency_margin: float = 0.10


@dataclass(frozen=True)
class DriftResult:
    """The verdict: `drifting`, the largest |t| over the metrics (`t`, None with too few trials), the
    tested trials `n`, and per metric (power, latency) its t and mean relative shift."""

    drifting: bool
    t: float | None
    n: int
    metrics: dict[str, dict[str, float]] = field(default_factory=dict)


def _features(e: HistoryEntry) -> tuple[float, float, float] | None:
    q = e.record.qps
    if not (q > 0 and math.isfinite(q)):
        return None
    return (math.log(q) / LOAD_UNIT, e.record.point.dvfs_ghz / GHZ_UNIT, e.record.point.itr_us / ITR_UNIT_US)


def _responses(e: HistoryEntry) -> tuple[float | None, float | None]:
    m = e.record.measurement
    if m is None:
        return None, None
    p = m.power_w
    lat = m.latency_us.get(e.objective.percentile)
    return (
        math.log(p) if p > 0 and math.isfinite(p) else None,
        math.log(lat) if lat is not None and lat > 0 and math.isfinite(lat) else None,
    )


def drift_test(
    own: Sequence[HistoryEntry], peers: Sequence[HistoryEntry], settings: DriftSettings | None = None
) -> DriftResult:
    """Test this host's trials `own` against its class's other hosts' trials `peers` (module docstring)."""
    s = settings or DriftSettings()
    pts = [(f, _responses(e), e.objective.percentile) for e in peers if (f := _features(e)) is not None]
    resid: dict[str, list[float]] = {"power": [], "latency": []}
    for e in own:
        f = _features(e)
        if f is None:
            continue
        pw, lat = _responses(e)
        near = sorted(
            (d, r)
            for (g, r, pct) in pts
            if pct == e.objective.percentile and (d := sum(abs(a - b) for a, b in zip(f, g, strict=True))) <= s.radius
        )[: s.k]
        if len(near) < s.min_neighbours:
            continue
        for name, y, idx in (("power", pw, 0), ("latency", lat, 1)):
            ys: list[float] = [v for _, r in near if (v := r[idx]) is not None]
            if y is not None and len(ys) >= s.min_neighbours:
                resid[name].append(y - statistics.median(ys))
    n = max(len(v) for v in resid.values())
    if n < s.min_trials:
        return DriftResult(False, None, n)
    drifting, worst, metrics = False, 0.0, {}
    for name, r in resid.items():
        if len(r) < s.min_trials:
            continue
        mean = statistics.fmean(r)
        sd = statistics.stdev(r)
        t = mean / (sd / math.sqrt(len(r))) if sd > 0 else (0.0 if mean == 0 else math.copysign(math.inf, mean))
        shift = math.expm1(mean)  # relative: +0.08 = 8 % above the class
        margin = s.power_margin if name == "power" else s.latency_margin
        metrics[name] = {"t": t, "shift": shift, "n": float(len(r))}
        worst = max(worst, abs(t))
        drifting = drifting or (abs(t) > s.t_crit and abs(shift) > margin)
    return DriftResult(drifting, worst, n, metrics)


__all__ = ["DriftResult", "DriftSettings", "drift_test"]
