"""Does this host still behave like its hardware class? A test on the residuals of the class model.

The class model is local: the prediction for one of this host's trials comes from its `k` (32) nearest trials
of the *other* hosts of the class, of log power and log latency (at the trial's own objective percentile).
Nearness is measured in the units the response changes over: 10 % of load, 0.2 GHz and 64 µs of ITR count
one each (summed), and only neighbours within `radius` (3) such units count. A trial is tested only where
the class has evidence around it: at least `min_neighbours` neighbours, bracketing it along every feature
(some at or below it and some at or above, `bracket` = 0.25 units of slack). The prediction is a local
linear fit over them (least squares, a small ridge penalty on the slopes; `local_linear`), not their median.
Both matter on a steep surface -- latency near its cliff at a tight SLA: a host's trials often lie to one
side of the class's (a second host exploring lower ITRs than the first did), and a median of neighbours that
all lie on one side is biased by the slope times the offset (a line extrapolated past them, less so). Measured
on two simulated hosts of one class at p99 < 200 µs (`bench/fleet.py`, seeds 0 and 1): the median over
every neighbour within 3 units flagged the healthy second host (latency "shifted" -14 %, |t| 4.4 over 38
trials); the bracketed local fit does not (-1.7 %, |t| 2.1 over 26).

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
    k: int = 32
    radius: float = 3.0
    min_neighbours: int = 3
    min_trials: int = 5
    t_crit: float = 3.5
    power_margin: float = 0.05
    latency_margin: float = 0.10
    # the class's prediction: a local linear fit over the neighbours (ridge on the slopes), else their median
    local_linear: bool = True
    ridge: float = 0.01
    # a trial is tested only where the neighbours bracket it along every feature (this many units of slack)
    bracket: float = 0.25


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


def _inside(f: tuple[float, float, float], near: list[tuple[float, float, float]], tol: float) -> bool:
    """Whether the neighbours bracket `f` along every feature (some at or below it and some at or above it,
    `tol` units of slack): the class's evidence is around the trial, and the fit interpolates."""
    return all(min(g[j] for g in near) <= f[j] + tol and max(g[j] for g in near) >= f[j] - tol for j in range(len(f)))


def _local_fit(
    f: tuple[float, float, float], near: list[tuple[tuple[float, float, float], float]], ridge: float
) -> float:
    """The class's prediction at features `f` from its neighbours `near` ((features, response) pairs): a
    local linear fit, y ~ a + b . (g - f), least squares with a ridge penalty `ridge` on the slopes b (not on
    a), whose intercept a is the prediction. The slopes take out the first-order bias of neighbours that lie
    to one side of the trial on a sloped surface (near a latency cliff, all of them at higher ITR, say); the
    penalty keeps them at 0 along a direction the neighbours do not span (all at one frequency), where the
    fit falls back to the neighbours' mean."""
    import numpy as np

    x = np.array([[1.0, *(gi - fi for gi, fi in zip(g, f, strict=True))] for g, _ in near])
    y = np.array([v for _, v in near])
    pen = np.diag([0.0, ridge, ridge, ridge])
    beta = np.linalg.solve(x.T @ x + pen, x.T @ y)
    return float(beta[0])


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
            (
                (d, g, r)
                for (g, r, pct) in pts
                if pct == e.objective.percentile
                and (d := sum(abs(a - b) for a, b in zip(f, g, strict=True))) <= s.radius
            ),
            key=lambda t: t[0],
        )[: s.k]
        if len(near) < s.min_neighbours or not _inside(f, [g for _, g, _ in near], s.bracket):
            continue
        for name, y, idx in (("power", pw, 0), ("latency", lat, 1)):
            obs = [(g, v) for _, g, r in near if (v := r[idx]) is not None]
            if y is None or len(obs) < s.min_neighbours:
                continue
            if s.local_linear:
                pred = _local_fit(f, obs, s.ridge)
            else:
                pred = statistics.median(v for _, v in obs)
            resid[name].append(y - pred)
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
