"""Pure acquisition math for the optimiser's safety filter and stopping rule (no Ax, no torch).

The model gives, per candidate point, a Gaussian predictive of power (W) and of the latency metric, whose
P(percentile > a limit) comes from `tuner.optimize.latscale.LatencyScale.prob_over`. From those:

* `expected_improvement`: EI of power below `best` (minimisation): (best - m) Phi(z) + s phi(z), z = (best - m) / s
* `constrained_ei`:      EI x P(SLA met) -- the expected power saved by one more trial at a point that must also
                         meet the SLA (Gardner et al. 2014, "Bayesian optimization with inequality constraints")
* `should_stop_ei`:      stop when max constrained EI < pct % of the best measured SLA-meeting power

plus the geometry of safe exploration in normalised knob coordinates (ITR index and DVFS index scaled to
[0, 1]): the line from the safe corner (lowest ITR, highest DVFS) toward the centre, the next step along it,
the safe candidate nearest to a proposal, and which candidates measured evidence allows (`supported`: near a
point that met the limit at this load or above; `vetoed`: next to one that broke the SLA at this load or below).
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np

_SD_FLOOR = 1e-12


def norm_cdf(z: np.ndarray | float) -> np.ndarray:
    """Standard normal CDF, elementwise."""
    from scipy.special import ndtr

    return np.asarray(ndtr(np.asarray(z, dtype=float)))


def norm_pdf(z: np.ndarray | float) -> np.ndarray:
    """Standard normal density, elementwise."""
    z = np.asarray(z, dtype=float)
    return np.exp(-0.5 * z * z) / math.sqrt(2 * math.pi)


def expected_improvement(
    mean: np.ndarray | Sequence[float], sd: np.ndarray | Sequence[float], best: float
) -> np.ndarray:
    """Expected improvement below `best` (minimisation) of a N(mean, sd^2) outcome; max(best - mean, 0) at sd 0."""
    m = np.asarray(mean, dtype=float)
    s = np.asarray(sd, dtype=float)
    gap = best - m
    with np.errstate(divide="ignore", invalid="ignore"):
        z = gap / np.maximum(s, _SD_FLOOR)
    ei = gap * norm_cdf(z) + s * norm_pdf(z)
    ei = np.where(s > _SD_FLOOR, ei, np.maximum(gap, 0.0))
    return np.where(np.isfinite(ei), np.maximum(ei, 0.0), 0.0)


def constrained_ei(
    power_mean: np.ndarray | Sequence[float],
    power_sd: np.ndarray | Sequence[float],
    best_power: float,
    p_violation: np.ndarray | Sequence[float],
) -> np.ndarray:
    """EI of power below `best_power` times the probability the point meets the SLA."""
    return expected_improvement(power_mean, power_sd, best_power) * (1.0 - np.asarray(p_violation, dtype=float))


def should_stop_ei(max_ei: float, best_power: float, stop_pct: float) -> bool:
    """True when the largest expected improvement of one more trial is below `stop_pct` % of `best_power`."""
    return stop_pct > 0 and max_ei < stop_pct / 100.0 * best_power


# ------------------------------------------------------------------------------- safe-exploration geometry


def line_point(t: float) -> tuple[float, float]:
    """Normalised (itr, dvfs) coordinates at `t` in [0, 1] on the line safe corner (0, 1) -> centre (0.5, 0.5)."""
    t = min(max(t, 0.0), 1.0)
    return 0.5 * t, 1.0 - 0.5 * t


#: `next_line_t`: an outward step on the safe line covers at most this share of the headroom left to the limit, as
#: the straight line through the two farthest points measured within it extrapolates.
LINE_AIM = 0.5


def next_line_t(tried: Sequence[tuple[float, bool] | tuple[float, bool, float]], step: float) -> float:
    """Next position on the safe line given earlier (t, met the limit[, latency / limit]) results.

    Start at the corner (t = 0); step outward by `step` past the farthest point that met the limit; once a
    point broke it, bisect between the farthest meeting point and the nearest breaking one. If even the
    corner broke the limit, stay at the corner (it is the safest point there is). With latency ratios for the
    two farthest meeting points, the outward step is shortened so that the straight line through them covers at
    most `LINE_AIM` of the headroom left to the limit: latency grows along the line ever more steeply toward the
    boundary, so a step aimed at the limit itself overshoots it (on the simulated host, aimed at 475 µs from
    409 and 461 µs, it measured 501-506 µs, over the 500 µs SLA). If that step would be under a quarter step
    (the farthest point is already near the limit), the line goes back to the midpoint of the two farthest
    meeting points instead: more data for the first model, none of it near the SLA.
    """
    if not tried:
        return 0.0
    met = sorted((e for e in tried if e[1]), key=lambda e: e[0])
    broke = [e[0] for e in tried if not e[1]]
    if not met:
        return 0.0
    lo = met[-1][0]
    above = [t for t in broke if t > lo]
    if above:
        return 0.5 * (lo + min(above))
    if len(met) >= 2 and len(met[-1]) > 2 and len(met[-2]) > 2 and met[-1][0] > met[-2][0]:
        (t0, _, r0), (t1, _, r1) = met[-2][:3], met[-1][:3]
        slope = (r1 - r0) / (t1 - t0)
        if slope > 0 and math.isfinite(slope):
            aim = LINE_AIM * (1.0 - r1) / slope
            if aim < step / 4:
                return 0.5 * (t0 + t1)
            step = min(step, aim)
    return min(lo + step, 1.0)


def nearest(
    coords: np.ndarray, target: Sequence[float], allowed: np.ndarray, tiebreak: np.ndarray | None = None
) -> int:
    """Index of the allowed row of `coords` (n x d) closest (Euclidean) to `target`; ties by `tiebreak` (lower
    first), then by index. Raises ValueError when nothing is allowed."""
    idx = np.flatnonzero(np.asarray(allowed, dtype=bool))
    if idx.size == 0:
        raise ValueError("no allowed candidate")
    d = np.sqrt(((coords[idx] - np.asarray(target, dtype=float)) ** 2).sum(axis=1))
    tb = np.zeros(idx.size) if tiebreak is None else np.asarray(tiebreak, dtype=float)[idx]
    order = np.lexsort((idx, tb, np.round(d, 12)))
    return int(idx[order[0]])


def supported(
    cand: np.ndarray,
    ev: np.ndarray,
    ev_load: np.ndarray,
    ev_met: np.ndarray,
    load: float | None,
    radius: float,
    load_tol: float,
    itr_down_weight: float = 1.0,
) -> np.ndarray:
    """Which candidates (n x 2 normalised (itr, dvfs) coordinates) lie near measured evidence of safety.

    A candidate is supported when some measured point that met the limit, at a load at least `load` x
    (1 - `load_tol`) (any load when `load` is None), lies within `radius` of it, where raising the frequency
    above the measured point's costs no distance (at a fixed ITR and load, a faster core does not serve
    slower, and at fixed knobs a lower load does not queue longer) and lowering the ITR below it counts
    `itr_down_weight` times (latency climbs steeply that way). This is the expansion step of safe BO
    (SafeOpt, Sui et al. 2015) with the regularity assumed rather than learnt: the GP alone extrapolates
    smoothly into a saturated region it never measured (a point that met the SLA at 460 kQPS was rated safe
    at 525 kQPS and saturated).
    """
    cand = np.asarray(cand, dtype=float).reshape(-1, 2)
    ev = np.asarray(ev, dtype=float).reshape(-1, 2)
    use = np.asarray(ev_met, dtype=bool).copy()
    if load is not None:
        use &= np.asarray(ev_load, dtype=float) >= load * (1.0 - load_tol) - 1e-12
    if not use.any():
        return np.zeros(len(cand), dtype=bool)
    e = ev[use]
    di = cand[:, None, 0] - e[None, :, 0]
    di = np.where(di < 0, di * itr_down_weight, di)
    dj = np.maximum(e[None, :, 1] - cand[:, None, 1], 0.0)
    return ((di * di + dj * dj) <= radius * radius + 1e-12).any(axis=1)


def vetoed(
    cand: np.ndarray,
    ev: np.ndarray,
    ev_load: np.ndarray,
    ev_broke: np.ndarray,
    load: float | None,
    radius: float,
    load_tol: float,
) -> np.ndarray:
    """Which candidates lie next to measured evidence of DANGER: a point that broke the SLA at a load at most
    `load` x (1 + `load_tol`) (any load when `load` is None), at the same or a higher frequency, and within
    `radius` of the candidate in ITR. By the same monotonicity as `supported` (a slower core, a higher load),
    such a candidate is at least as likely to break it; the GP, which smooths a steep climb, may still rate
    it safe (on the simulated host it walked down the ITR axis 8 µs at a time, each step over the SLA).
    """
    cand = np.asarray(cand, dtype=float).reshape(-1, 2)
    ev = np.asarray(ev, dtype=float).reshape(-1, 2)
    use = np.asarray(ev_broke, dtype=bool).copy()
    if load is not None:
        use &= np.asarray(ev_load, dtype=float) <= load * (1.0 + load_tol) + 1e-12
    if not use.any():
        return np.zeros(len(cand), dtype=bool)
    e = ev[use]
    near = np.abs(cand[:, None, 0] - e[None, :, 0]) <= radius + 1e-12
    slower = cand[:, None, 1] <= e[None, :, 1] + 1e-12
    return (near & slower).any(axis=1)
