"""Values the daemon passes around: the rows its state and RPC share (trials, decisions, windows: dicts
whose points are `OperatingPoint`s; a point becomes [itr_us, dvfs_ghz] only in JSON files, `point_list` /
`point_from`), measurement dicts, the knob space within the configured bounds, the safe corner, and a run-time
policy validated field by field."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from actuators.host import KnobSpace, Measurement, OperatingPoint
from core.errors import InputError, TunerError
from tuner.config import ALLOWED_PERCENTILES, KnobBounds, PolicyConfig, known_rewards

VERSION = "0.1.0"


def point_list(p: OperatingPoint | None) -> list | None:
    """A point as JSON files hold it: [itr_us, dvfs_ghz] (None stays None)."""
    return [p.itr_us, p.dvfs_ghz] if p is not None else None


def point_from(v: Any) -> OperatingPoint | None:
    """A point read from a JSON file ([itr_us, dvfs_ghz], or None); an `OperatingPoint` passes through."""
    if isinstance(v, OperatingPoint):
        return v
    return OperatingPoint(int(v[0]), float(v[1])) if v else None


def measurement_dict(m: Measurement, when: float) -> dict[str, Any]:
    """`Measurement.to_dict` plus power and time, with the point as an `OperatingPoint` (None: the OS's); with
    sources compared beside the tuner's own, `power_by_source_w` shows them side by side (None: unknown)."""
    out = {**m.to_dict(), "power_w": m.power_or_none, "point": m.point, "time": when}
    if m.energy_compare_j:
        sources: dict[str, float | None] = {m.energy_source or "rapl": m.power_or_none}
        for source, joules in m.energy_compare_j.items():
            sources[source] = joules / m.seconds if m.seconds > 0 else None
        out["power_by_source_w"] = sources
    return out


def latency_at(md: dict[str, Any], pct: float) -> float | None:
    v = md.get("latency_us", {}).get(f"{pct:g}")
    return float(v) if v is not None else None


def latency_sem_at(md: dict[str, Any], pct: float) -> float:
    ci = md.get("latency_ci_us", {}).get(f"{pct:g}")
    return max(ci[1] - ci[0], 0.0) / (2 * 1.96) if ci else 0.0


def bounded_space(space: KnobSpace, bounds: KnobBounds) -> KnobSpace:
    """The host's knob space restricted to the configured bounds; `TunerError` if nothing is left."""
    itr = tuple(v for v in space.itr_us if bounds.itr_us[0] <= v <= bounds.itr_us[1])
    ghz = tuple(v for v in space.dvfs_ghz if bounds.dvfs_ghz[0] - 5e-4 <= v <= bounds.dvfs_ghz[1] + 5e-4)
    if not itr:
        raise TunerError(
            f"knobs.itr_us: expected bounds overlapping the host's ITR range "
            f"{space.itr_us[0]}..{space.itr_us[-1]} µs, got {list(bounds.itr_us)}"
        )
    if not ghz:
        raise TunerError(
            f"knobs.dvfs_ghz: expected bounds overlapping the host's frequencies "
            f"{space.dvfs_ghz[0]:g}..{space.dvfs_ghz[-1]:g} GHz, got {list(bounds.dvfs_ghz)}"
        )
    return KnobSpace(itr, ghz)


def safe_corner(space: KnobSpace) -> OperatingPoint:
    """Lowest latency the knobs allow: minimum interrupt delay, maximum frequency."""
    return OperatingPoint(space.itr_us[0], space.dvfs_ghz[-1])


def validate_policy(sla_us: Any, percentile: Any, reward: Any) -> PolicyConfig:
    """A policy from run-time input; `InputError` naming the first bad field."""
    if (
        isinstance(sla_us, bool)
        or not isinstance(sla_us, (int, float))
        or not math.isfinite(sla_us)
        or not 0 < sla_us <= 1e9
    ):
        raise InputError(f"sla_us: expected a finite number of microseconds in (0, 1e9], got {sla_us!r}")
    if (
        isinstance(percentile, bool)
        or not isinstance(percentile, (int, float))
        or not any(abs(percentile - p) < 1e-9 for p in ALLOWED_PERCENTILES)
    ):
        raise InputError(
            "percentile: expected one of " + ", ".join(f"{p:g}" for p in ALLOWED_PERCENTILES) + f", got {percentile!r}"
        )
    names = known_rewards()
    if reward not in names:
        raise InputError(f"reward: expected one of {', '.join(names)}, got {reward!r}")
    pct = next(p for p in ALLOWED_PERCENTILES if abs(percentile - p) < 1e-9)
    return PolicyConfig(reward=str(reward), sla_us=float(sla_us), percentile=pct)


def mean_sem(values: list[float], sems: list[float] | None) -> tuple[float, float]:
    n = len(values)
    mean = sum(values) / n
    if n > 1:
        var = sum((v - mean) ** 2 for v in values) / (n - 1)
        return mean, math.sqrt(var / n)
    return mean, (sems[0] if sems else 0.0)


def describe(row: dict[str, Any], pct: float) -> str:
    md = row.get("measurement")
    p = row["point"]
    if not md:
        return f"{p}: {row.get('error')}"
    lat = latency_at(md, pct)
    power = "power unknown" if md.get("power_w") is None else f"{md['power_w']:.1f} W"
    return f"{p}: {md['offered_qps']:.0f} QPS, p{pct:g} {lat:.0f} µs, {power}"


@dataclass(frozen=True)
class ModelTable:
    """Predictions of one finished retune's model over a grid, computed once in the loop thread."""

    retune_id: str
    tuned_qps: float
    percentile: float
    points: tuple[OperatingPoint, ...]
    latency_us: tuple[float, ...]
    latency_sem: tuple[float, ...]
    power_w: tuple[float, ...]
    power_sem: tuple[float, ...]
