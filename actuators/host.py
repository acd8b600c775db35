"""The `Host` protocol: the one interface the tuner drives, real or simulated.

A host exposes two knobs -- NIC interrupt throttling (ITR, microseconds) and CPU frequency (DVFS, GHz) --
and measures a window: achieved load, latency percentiles and energy. The tuner never knows whether it
drives `actuators.sim.host.SimHost` or `actuators.real.RealHost`; anyone can plug in their own host with
`--host module:factory` where `factory(**options) -> Host`. Abilities a host may have beyond these (a noise-free
model for the oracle, closing, a hardware class, ...) are Protocols of their own in `actuators.abilities`.
"""

from __future__ import annotations

import bisect
import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from functools import cached_property
from typing import TYPE_CHECKING, Any, Protocol, cast, runtime_checkable

from actuators.latency.dist import PERCENTILES
from core.errors import KnobRangeError, TunerError

if TYPE_CHECKING:
    from actuators.latency.dist import LatencyDist

__all__ = [
    "PERCENTILES",
    "AtomicApply",
    "Host",
    "KnobSpace",
    "LoadControl",
    "Measurement",
    "OperatingPoint",
    "apply_point",
]


@dataclass(frozen=True)
class KnobSpace:
    """What a host supports: the allowed ITR values (µs, ascending) and DVFS frequencies (GHz, ascending)."""

    itr_us: tuple[int, ...]
    dvfs_ghz: tuple[float, ...]

    def __post_init__(self) -> None:
        if not self.itr_us or not self.dvfs_ghz:
            raise ValueError("KnobSpace needs at least one ITR value and one DVFS frequency")
        if list(self.itr_us) != sorted(set(self.itr_us)) or list(self.dvfs_ghz) != sorted(set(self.dvfs_ghz)):
            raise ValueError("KnobSpace values must be strictly ascending")

    @classmethod
    def ixgbe(cls, dvfs_ghz: tuple[float, ...], lo: int = 2, hi: int = 1022) -> KnobSpace:
        """ixgbe-style ITR (2 µs steps, `lo`..`hi`) with the given frequencies."""
        return cls(tuple(range(lo, hi + 1, 2)), tuple(dvfs_ghz))

    def check_itr(self, itr_us: int) -> int:
        """Return `itr_us` if the host supports it, else raise `KnobRangeError` saying what is allowed."""
        if isinstance(itr_us, bool) or not isinstance(itr_us, int) or itr_us not in self._itr_set:
            raise KnobRangeError(
                f"ITR {itr_us!r} µs is not supported: expected an integer in "
                f"{self.itr_us[0]}..{self.itr_us[-1]}{self._itr_step_text()}"
            )
        return itr_us

    def check_dvfs(self, ghz: float) -> float:
        """Return the supported frequency equal to `ghz` (to 1 MHz), else raise `KnobRangeError`."""
        try:
            value = float(ghz)
        except (TypeError, ValueError):
            raise KnobRangeError(f"DVFS {ghz!r} is not a number: expected GHz") from None
        i = bisect.bisect_left(self.dvfs_ghz, value - 5e-4)
        if i < len(self.dvfs_ghz) and abs(self.dvfs_ghz[i] - value) <= 5e-4:
            return self.dvfs_ghz[i]
        listed = ", ".join(f"{f:g}" for f in self.dvfs_ghz)
        raise KnobRangeError(f"DVFS {ghz!r} GHz is not available: expected one of {listed}")

    def check(self, point: OperatingPoint) -> OperatingPoint:
        """Validate both knobs of `point`."""
        return OperatingPoint(self.check_itr(point.itr_us), self.check_dvfs(point.dvfs_ghz))

    @cached_property
    def _itr_set(self) -> frozenset[int]:
        return frozenset(self.itr_us)

    def _itr_step_text(self) -> str:
        steps = {b - a for a, b in zip(self.itr_us, self.itr_us[1:])}
        return f" in steps of {steps.pop()}" if len(steps) == 1 else " (host's list)"


@dataclass(frozen=True)
class OperatingPoint:
    """One setting of both knobs."""

    itr_us: int
    dvfs_ghz: float

    def __str__(self) -> str:
        return f"ITR {self.itr_us} µs @ {self.dvfs_ghz:.1f} GHz"


@dataclass(frozen=True)
class Measurement:
    """What a host measured over one window.

    `latency_us` maps each percentile in `PERCENTILES` to its value; `latency_ci_us` maps it to a
    (low, high) 95 % confidence interval from order statistics (see `core.stats`) -- a p99 of a
    finite sample is noisy, and the optimiser is told how noisy. `point` is None while the OS's own
    policies (adaptive ITR, cpufreq governor) are in charge. `ci_known` is False when the latency source
    gives no CI (an external Prometheus query, a hook): `latency_ci_us` is then a placeholder (v, v) and
    `percentile_sem` returns None ("noise unknown") rather than a fake zero.

    `energy_known` is False when the host cannot measure energy (no RAPL: most VMs): `energy_j` is then a
    0.0 placeholder, `power_w` is NaN and `to_dict` writes `energy_j: null` -- unknown, never a number.

    `latency_dist` (optional) is the window's whole latency distribution (`actuators.latency.dist`:
    exact samples or an HdrHistogram), kept so windows can be pooled with `merge` / `merge_all`; it is
    not serialised by `to_dict` and not compared by `==`. A 1-D array of samples (µs) is accepted and
    wrapped as a `SampleDist` whose samples stand for the window's `requests` (each weighs
    requests / samples, at least 1: a simulator's bounded sample of a long window).
    """

    seconds: float
    offered_qps: float
    achieved_qps: float
    requests: int
    latency_us: dict[float, float]
    latency_ci_us: dict[float, tuple[float, float]]
    energy_j: float
    point: OperatingPoint | None
    energy_by_zone_j: dict[str, float] = field(default_factory=dict)
    ci_known: bool = True
    latency_dist: LatencyDist | None = field(default=None, compare=False, repr=False)
    energy_known: bool = True
    energy_source: str = ""  # the source behind `energy_j` (rapl, ipmi, ...; "" when the host does not say)
    energy_updates: int | None = None  # source updates in the window (None: continuous, e.g. RAPL, the simulator)
    # sources shown beside the tuner's own, never tuned on: total joules by source, and by source and zone
    energy_compare_j: dict[str, float] = field(default_factory=dict)
    energy_compare_by_zone_j: dict[str, dict[str, float]] = field(default_factory=dict)

    def __post_init__(self) -> None:
        dist = self.latency_dist
        if dist is not None and not hasattr(dist, "quantile_ci"):  # raw samples (µs) of the window's requests
            from actuators.latency.dist import SampleDist

            samples = cast("Sequence[float]", dist)  # not a LatencyDist yet: the samples themselves
            n = len(samples)
            object.__setattr__(self, "latency_dist", SampleDist(samples, weight=max(self.requests / max(n, 1), 1.0)))

    @property
    def power_w(self) -> float:
        """Mean package power over the window (NaN when the host cannot measure energy)."""
        if not self.energy_known:
            return math.nan
        return self.energy_j / self.seconds if self.seconds > 0 else 0.0

    @property
    def power_or_none(self) -> float | None:
        """`power_w`, or None when energy is unknown (for JSON, metrics and messages)."""
        return self.power_w if self.energy_known else None

    def to_dict(self) -> dict[str, Any]:
        """JSON-safe dict (percentile keys as strings such as "99.9"); `from_dict` reads it back."""
        return {
            "seconds": self.seconds,
            "offered_qps": self.offered_qps,
            "achieved_qps": self.achieved_qps,
            "requests": self.requests,
            "latency_us": {f"{k:g}": v for k, v in self.latency_us.items()},
            "latency_ci_us": {f"{k:g}": list(v) for k, v in self.latency_ci_us.items()},
            "ci_known": self.ci_known,
            "energy_j": self.energy_j if self.energy_known else None,
            "point": None if self.point is None else {"itr_us": self.point.itr_us, "dvfs_ghz": self.point.dvfs_ghz},
            "energy_by_zone_j": dict(self.energy_by_zone_j),
        } | self._source_dict()

    def _source_dict(self) -> dict[str, Any]:
        """The energy source's fields, written only when the host gave them (older records stay as they were)."""
        out: dict[str, Any] = {}
        if self.energy_source:
            out["energy_source"] = self.energy_source
        if self.energy_updates is not None:
            out["energy_updates"] = self.energy_updates
        if self.energy_compare_j:
            out["energy_compare_j"] = dict(self.energy_compare_j)
            out["energy_compare_by_zone_j"] = {s: dict(z) for s, z in self.energy_compare_by_zone_j.items()}
        return out

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> Measurement:
        """Inverse of `to_dict` (a point may also be given as [itr_us, dvfs_ghz] or an `OperatingPoint`)."""
        point = d.get("point")
        if isinstance(point, OperatingPoint):
            pass
        elif isinstance(point, dict):
            point = OperatingPoint(int(point["itr_us"]), float(point["dvfs_ghz"]))
        elif point is not None:
            point = OperatingPoint(int(point[0]), float(point[1]))
        return cls(
            seconds=float(d["seconds"]),
            offered_qps=float(d["offered_qps"]),
            achieved_qps=float(d["achieved_qps"]),
            requests=int(d["requests"]),
            latency_us={float(k): float(v) for k, v in d["latency_us"].items()},
            latency_ci_us={float(k): (float(v[0]), float(v[1])) for k, v in d["latency_ci_us"].items()},
            energy_j=0.0 if d["energy_j"] is None else float(d["energy_j"]),
            point=point,
            energy_by_zone_j={str(k): float(v) for k, v in d.get("energy_by_zone_j", {}).items()},
            ci_known=bool(d.get("ci_known", True)),
            energy_known=d["energy_j"] is not None,
            energy_source=str(d.get("energy_source", "")),
            energy_updates=None if d.get("energy_updates") is None else int(d["energy_updates"]),
            energy_compare_j={str(s): float(j) for s, j in d.get("energy_compare_j", {}).items()},
            energy_compare_by_zone_j={
                str(s): {str(z): float(j) for z, j in zones.items()}
                for s, zones in d.get("energy_compare_by_zone_j", {}).items()
            },
        )

    @classmethod
    def merge(cls, a: Measurement, b: Measurement, confidence: float = 0.95) -> Measurement:
        """`merge_all([a, b])`: one measurement of two consecutive windows at the same point."""
        return cls.merge_all([a, b], confidence)

    @classmethod
    def merge_all(cls, measurements: Sequence[Measurement], confidence: float = 0.95) -> Measurement:
        """One measurement covering all `measurements` (windows at the same operating point and load).

        Seconds, energy (also per zone) and requests are summed; offered/achieved QPS are totals over
        the total seconds; the latency percentiles and their order-statistic CIs are recomputed from
        the pooled distribution. Refuses (TunerError) windows without `latency_dist`, windows whose CI
        is unknown, and windows at different points (percentiles of a mixture would be meaningless).
        """
        from actuators.latency.dist import HdrDist, merge_dists, percentile_table

        ms = list(measurements)
        if not ms:
            raise TunerError("Measurement.merge_all: no measurements to merge")
        for i, m in enumerate(ms):
            if m.latency_dist is None or not m.ci_known:
                raise TunerError(
                    f"Measurement.merge_all: window {i} has no latency distribution "
                    "(its host or latency source cannot be pooled; measure one window instead)"
                )
            if m.point != ms[0].point:
                raise TunerError(
                    f"Measurement.merge_all: window {i} is at {m.point}, window 0 at {ms[0].point}: "
                    "only windows at the same operating point can be merged"
                )
        if len(ms) == 1:
            return ms[0]
        seconds = sum(m.seconds for m in ms)
        if not seconds > 0 or not math.isfinite(seconds):
            raise TunerError(f"Measurement.merge_all: total window length {seconds!r} s: expected > 0")
        dist = merge_dists([m.latency_dist for m in ms])  # type: ignore[misc]
        pcts = list(ms[0].latency_us)
        if isinstance(dist, HdrDist):
            latency, ci = dist.percentiles(pcts, confidence)
        else:
            latency, ci = percentile_table(dist, pcts, confidence)
        return cls(
            seconds=seconds,
            offered_qps=sum(m.offered_qps * m.seconds for m in ms) / seconds,
            achieved_qps=sum(m.achieved_qps * m.seconds for m in ms) / seconds,
            requests=sum(m.requests for m in ms),
            latency_us=latency,
            latency_ci_us=ci,
            energy_j=sum(m.energy_j for m in ms),
            point=ms[0].point,
            ci_known=True,
            latency_dist=dist,
            **merged_energy(ms),
        )

    def percentile(self, pct: float) -> float:
        """Latency at percentile `pct` (one of `PERCENTILES`)."""
        return self.latency_us[float(pct)]

    def percentile_sem(self, pct: float) -> float | None:
        """Standard error of the percentile, from its 95 % CI half-width (half-width / 1.96); None if unknown."""
        if not self.ci_known:
            return None
        lo, hi = self.latency_ci_us[float(pct)]
        return max(hi - lo, 0.0) / (2 * 1.96)


def _sum_zones(parts: Sequence[dict[str, float]]) -> dict[str, float]:
    zones: dict[str, float] = {}
    for part in parts:
        for z, j in part.items():
            zones[z] = zones.get(z, 0.0) + j
    return zones


def merged_energy(ms: Sequence[Measurement]) -> dict[str, Any]:
    """The energy fields of consecutive windows pooled into one (zones, updates and compared sources summed)."""
    updates = [m.energy_updates for m in ms]
    sources = sorted({s for m in ms for s in m.energy_compare_by_zone_j})
    return {
        "energy_by_zone_j": _sum_zones([m.energy_by_zone_j for m in ms]),
        "energy_known": all(m.energy_known for m in ms),
        "energy_source": ms[0].energy_source,
        "energy_updates": None if any(u is None for u in updates) else sum(u for u in updates if u is not None),
        "energy_compare_j": _sum_zones([m.energy_compare_j for m in ms]),
        "energy_compare_by_zone_j": {
            s: _sum_zones([m.energy_compare_by_zone_j.get(s, {}) for m in ms]) for s in sources
        },
    }


@runtime_checkable
class Host(Protocol):
    """A machine whose ITR and DVFS the tuner drives.

    Implementations refuse out-of-range values (via `KnobSpace.check_*`) before anything reaches
    hardware, remember the original settings before their first write, and put them back on `restore`.
    """

    name: str

    def knobs(self) -> KnobSpace:
        """The ITR values and DVFS frequencies this host supports."""
        ...

    def set_itr(self, itr_us: int) -> None:
        """Turn adaptive interrupt moderation off and set a static ITR (µs); verify by reading back."""
        ...

    def set_dvfs(self, ghz: float) -> None:
        """Pin all tuned cores to `ghz`; verify by reading back."""
        ...

    def point(self) -> OperatingPoint | None:
        """The knobs as read back from the host, or None while the OS's own policies are in charge."""
        ...

    def restore(self) -> None:
        """Put back the settings found before the first write (adaptive ITR, governor, ...). Idempotent."""
        ...

    def offered_qps(self) -> float:
        """The offered load right now (requests/s)."""
        ...

    def measure(self, seconds: float) -> Measurement:
        """Measure a window of `seconds` at the current knobs and load."""
        ...


@runtime_checkable
class LoadControl(Protocol):
    """A host whose offered load can be set (the simulator; a real host with a load generator)."""

    def set_offered_qps(self, qps: float) -> None:
        """Drive the host at `qps` requests/s from now on."""
        ...


@runtime_checkable
class AtomicApply(Protocol):
    """A host that sets both knobs in one call, all or nothing (`RealHost` rolls DVFS back if ITR fails)."""

    def apply(self, itr_us: int | None = None, dvfs_ghz: float | None = None) -> list[str]:
        """Set the given knobs in one transaction; returns read-back warnings."""
        ...


def apply_point(host: Host, point: OperatingPoint) -> OperatingPoint:
    """Validate `point` against the host's knobs, then set ITR and DVFS.

    A host with the `AtomicApply` ability (`apply(itr_us=, dvfs_ghz=)`) gets both knobs in one call, so it can make the pair
    all-or-nothing (`RealHost` rolls DVFS back if the ITR write fails).
    """
    checked = host.knobs().check(point)
    if isinstance(host, AtomicApply):
        host.apply(itr_us=checked.itr_us, dvfs_ghz=checked.dvfs_ghz)
        return checked
    host.set_itr(checked.itr_us)
    host.set_dvfs(checked.dvfs_ghz)
    return checked
