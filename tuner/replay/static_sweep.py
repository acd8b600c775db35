"""Static ITR x DVFS sweep (dissertation ch. 5): grid parsing, the sweep loop, and pure result analysis.

The loop (`run_sweep`) drives any `Host`: for each grid point it sets both knobs through `apply_point`,
lets the host settle, measures one window and hands the record to a sink (the CLI appends it to a JSON
lines file and flushes, so an interrupted sweep keeps every point it finished). The analysis functions
(`pareto_front`, `best_under_sla`, `parse_itr_spec`, `parse_dvfs_spec`) are pure.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from decimal import Decimal, InvalidOperation
from typing import Any, TypeVar

from actuators.host import PERCENTILES, Host, KnobSpace, Measurement, OperatingPoint, apply_point
from core.errors import HostError, KnobRangeError, TunerError

T = TypeVar("T")

#: A point "keeps up" when it serves at least this share of the offered load; points that drop load
#: save energy by not doing the work, so they are never the optimum and are left off the Pareto front.
DEFAULT_MIN_LOAD_RATIO = 0.95


# --------------------------------------------------------------------------- grid parsing (pure)

_INT = re.compile(r"[+-]?\d+")


def _parse_int(text: str, flag: str, spec: str) -> int:
    text = text.strip()
    if not _INT.fullmatch(text):
        raise TunerError(f"{flag} {spec!r}: {text!r} is not an integer (µs)")
    return int(text)


def _parse_decimal(text: str, flag: str, spec: str) -> Decimal:
    text = text.strip()
    try:
        value = Decimal(text)
    except InvalidOperation:
        raise TunerError(f"{flag} {spec!r}: {text!r} is not a number (GHz)") from None
    if not value.is_finite():
        raise TunerError(f"{flag} {spec!r}: {text!r} is not a finite number (GHz)")
    return value


def _no_duplicates(values: Sequence[T], flag: str, spec: str) -> tuple[T, ...]:
    seen: set[T] = set()
    for v in values:
        if v in seen:
            raise TunerError(f"{flag} {spec!r}: value {v:g} is listed twice")
        seen.add(v)
    return tuple(values)


def parse_itr_spec(spec: str, knobs: KnobSpace) -> tuple[int, ...]:
    """ITR values (µs) named by `spec`, each checked against `knobs`.

    Forms: `all` (every value the host supports), `LO:HI:STEP` (LO, LO+STEP, ... up to and including HI;
    STEP > 0), `LO:HI` (the host's values in [LO, HI]), or a comma list `A,B,C` (a single value is a
    list of one). Raises `TunerError` (one line) on a malformed spec and `KnobRangeError` on a value
    the host does not support -- before anything is set.
    """
    flag = "--itr"
    text = spec.strip()
    if not text:
        raise TunerError(f"{flag} {spec!r}: expected 'all', LO:HI[:STEP] or a comma list of µs")
    if text.lower() == "all":
        return tuple(knobs.itr_us)
    if ":" in text:
        parts = text.split(":")
        if len(parts) not in (2, 3):
            raise TunerError(f"{flag} {spec!r}: expected LO:HI or LO:HI:STEP")
        lo, hi = (_parse_int(p, flag, spec) for p in parts[:2])
        if lo > hi:
            raise TunerError(f"{flag} {spec!r}: LO {lo} is greater than HI {hi}")
        if len(parts) == 2:
            values = tuple(v for v in knobs.itr_us if lo <= v <= hi)
            if not values:
                raise KnobRangeError(
                    f"{flag} {spec!r}: the host supports no ITR in {lo}..{hi} "
                    f"(it supports {knobs.itr_us[0]}..{knobs.itr_us[-1]})"
                )
            return values
        step = _parse_int(parts[2], flag, spec)
        if step <= 0:
            raise TunerError(f"{flag} {spec!r}: STEP must be a positive integer, got {step}")
        values = tuple(range(lo, hi + 1, step))
    else:
        values = _no_duplicates([_parse_int(p, flag, spec) for p in text.split(",")], flag, spec)
    for v in values:
        _checked(knobs.check_itr, v, flag, spec)
    return values


def parse_dvfs_spec(spec: str, knobs: KnobSpace) -> tuple[float, ...]:
    """DVFS frequencies (GHz) named by `spec`, each mapped to the host's own value.

    Forms: `all`, `LO:HI:STEP` (decimal arithmetic, so 1.2:2.9:0.1 is exactly 18 values; HI included
    when on the grid), `LO:HI` (the host's frequencies in [LO, HI]), or a comma list `1.2,1.3`.
    Raises `TunerError` on a malformed spec and `KnobRangeError` on a frequency the host lacks.
    """
    flag = "--dvfs"
    text = spec.strip()
    if not text:
        raise TunerError(f"{flag} {spec!r}: expected 'all', LO:HI[:STEP] or a comma list of GHz")
    if text.lower() == "all":
        return tuple(knobs.dvfs_ghz)
    if ":" in text:
        parts = text.split(":")
        if len(parts) not in (2, 3):
            raise TunerError(f"{flag} {spec!r}: expected LO:HI or LO:HI:STEP")
        lo, hi = (_parse_decimal(p, flag, spec) for p in parts[:2])
        if lo > hi:
            raise TunerError(f"{flag} {spec!r}: LO {lo} is greater than HI {hi}")
        if len(parts) == 2:
            eps = 5e-4
            found = tuple(f for f in knobs.dvfs_ghz if float(lo) - eps <= f <= float(hi) + eps)
            if not found:
                listed = ", ".join(f"{f:g}" for f in knobs.dvfs_ghz)
                raise KnobRangeError(f"{flag} {spec!r}: the host has no frequency in {lo}..{hi} GHz ({listed})")
            return found
        step = _parse_decimal(parts[2], flag, spec)
        if step <= 0:
            raise TunerError(f"{flag} {spec!r}: STEP must be positive, got {step}")
        n = int((hi - lo) / step) + 1
        if n > 100_000:
            raise TunerError(f"{flag} {spec!r}: {n} frequencies is not a plausible range")
        wanted = [float(lo + i * step) for i in range(n)]
    else:
        wanted = list(_no_duplicates([float(_parse_decimal(p, flag, spec)) for p in text.split(",")], flag, spec))
    values = tuple(_checked(knobs.check_dvfs, v, flag, spec) for v in wanted)
    return _no_duplicates(values, flag, spec)


def _checked(check: Callable[[Any], T], value: Any, flag: str, spec: str) -> T:
    try:
        return check(value)
    except KnobRangeError as exc:
        raise KnobRangeError(f"{flag} {spec!r}: {exc}") from None


def grid(itr_us: Sequence[int], dvfs_ghz: Sequence[float]) -> list[OperatingPoint]:
    """Sweep order: frequency in the outer loop (the slower knob to change on real hardware), ITR inner."""
    return [OperatingPoint(i, f) for f in dvfs_ghz for i in itr_us]


# --------------------------------------------------------------------------- records


def percentile_key(pct: float) -> str:
    """JSON key of a latency percentile: 50 -> `p50_us`, 99.9 -> `p999_us`."""
    return "p" + f"{float(pct):g}".replace(".", "") + "_us"


def parse_percentile(text: str | float) -> float:
    """One of `PERCENTILES`, else `TunerError`."""
    try:
        value = float(text)
    except (TypeError, ValueError):
        value = math.nan
    for p in PERCENTILES:
        if abs(value - p) < 1e-9:
            return p
    listed = ", ".join(f"{p:g}" for p in PERCENTILES)
    raise TunerError(f"--percentile {text!r}: expected one of {listed}")


def _finite_or_none(x: float) -> float | None:
    return float(x) if x is not None and math.isfinite(x) else None


@dataclass(frozen=True)
class SweepPoint:
    """One measured grid point, as written to (and read back from) the JSON lines file.

    `latency_us`/`latency_ci_us` are keyed by percentile; a latency the host could not measure (no
    requests) is `inf` in memory and `null` on disk.
    """

    itr_us: int
    dvfs_ghz: float
    qps: float
    achieved_qps: float
    latency_us: dict[float, float]
    latency_ci_us: dict[float, tuple[float, float]]
    energy_j: float
    power_w: float
    seconds: float
    requests: int
    energy_by_zone_j: dict[str, float] = field(default_factory=dict)

    @property
    def point(self) -> OperatingPoint:
        return OperatingPoint(self.itr_us, self.dvfs_ghz)

    def latency(self, pct: float) -> float:
        """Latency at `pct` (µs); `inf` if not measured."""
        return self.latency_us.get(float(pct), math.inf)

    def keeps_up(self, min_load_ratio: float = DEFAULT_MIN_LOAD_RATIO) -> bool:
        """Whether the point served at least `min_load_ratio` of the offered load (True if none offered)."""
        return self.qps <= 0 or self.achieved_qps >= min_load_ratio * self.qps

    @classmethod
    def from_measurement(cls, point: OperatingPoint, m: Measurement) -> SweepPoint:
        return cls(
            itr_us=point.itr_us,
            dvfs_ghz=point.dvfs_ghz,
            qps=float(m.offered_qps),
            achieved_qps=float(m.achieved_qps),
            latency_us={float(p): float(v) if math.isfinite(v) else math.inf for p, v in m.latency_us.items()},
            latency_ci_us={float(p): (float(lo), float(hi)) for p, (lo, hi) in m.latency_ci_us.items()},
            energy_j=float(m.energy_j),
            power_w=float(m.power_w),
            seconds=float(m.seconds),
            requests=int(m.requests),
            energy_by_zone_j=dict(m.energy_by_zone_j),
        )

    def to_json(self) -> dict[str, Any]:
        """Flat JSON object: `itr_us, dvfs_ghz, qps, achieved_qps, pNN_us, pNN_ci_us, energy_j, ...`."""
        out: dict[str, Any] = {
            "itr_us": self.itr_us,
            "dvfs_ghz": self.dvfs_ghz,
            "qps": self.qps,
            "achieved_qps": self.achieved_qps,
        }
        for p in sorted(self.latency_us):
            out[percentile_key(p)] = _finite_or_none(self.latency_us[p])
        for p in sorted(self.latency_ci_us):
            lo, hi = self.latency_ci_us[p]
            out[percentile_key(p).replace("_us", "_ci_us")] = [_finite_or_none(lo), _finite_or_none(hi)]
        out.update(energy_j=self.energy_j, power_w=self.power_w, seconds=self.seconds, requests=self.requests)
        if self.energy_by_zone_j:
            out["energy_by_zone_j"] = dict(self.energy_by_zone_j)
        return out

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> SweepPoint:
        """Inverse of `to_json`; raises `KeyError`/`TypeError`/`ValueError` on a malformed record."""
        lat: dict[float, float] = {}
        ci: dict[float, tuple[float, float]] = {}
        for p in PERCENTILES:
            k = percentile_key(p)
            if k in d:
                lat[p] = math.inf if d[k] is None else float(d[k])
            kc = k.replace("_us", "_ci_us")
            if kc in d:
                lo, hi = d[kc]
                ci[p] = (math.inf if lo is None else float(lo), math.inf if hi is None else float(hi))
        itr = d["itr_us"]
        if isinstance(itr, bool) or not isinstance(itr, int):
            raise TypeError("itr_us must be an integer")
        return cls(
            itr_us=itr,
            dvfs_ghz=float(d["dvfs_ghz"]),
            qps=float(d["qps"]),
            achieved_qps=float(d["achieved_qps"]),
            latency_us=lat,
            latency_ci_us=ci,
            energy_j=float(d["energy_j"]),
            power_w=float(d["power_w"]),
            seconds=float(d["seconds"]),
            requests=int(d["requests"]),
            energy_by_zone_j={str(k): float(v) for k, v in d.get("energy_by_zone_j", {}).items()},
        )


# --------------------------------------------------------------------------- analysis (pure)


def pareto_front(items: Iterable[T], objectives: Callable[[T], tuple[float, float]]) -> list[T]:
    """Non-dominated items when both objectives are minimised, ordered by the first objective.

    `a` dominates `b` when a is no worse in both objectives and strictly better in one; exact ties
    are kept (neither dominates the other). Items with a non-finite objective are left out.
    """
    scored = [(objectives(it), i, it) for i, it in enumerate(items)]
    scored = [s for s in scored if math.isfinite(s[0][0]) and math.isfinite(s[0][1])]
    scored.sort(key=lambda s: (s[0][0], s[0][1], s[1]))
    front: list[T] = []
    best_second = math.inf
    last: tuple[float, float] | None = None
    for (a, b), _, it in scored:
        if b < best_second or (last is not None and (a, b) == last):
            front.append(it)
            best_second = b
            last = (a, b)
    return front


def sweep_pareto(
    points: Iterable[SweepPoint], percentile: float, min_load_ratio: float = DEFAULT_MIN_LOAD_RATIO
) -> list[SweepPoint]:
    """Pareto front of (latency at `percentile`, energy) over the points that keep up with the load."""
    return pareto_front(
        (p for p in points if p.keeps_up(min_load_ratio)), lambda p: (p.latency(percentile), p.energy_j)
    )


def best_under_sla(
    points: Iterable[SweepPoint],
    sla_us: float,
    percentile: float,
    min_load_ratio: float = DEFAULT_MIN_LOAD_RATIO,
) -> SweepPoint | None:
    """The lowest-energy point whose latency at `percentile` is <= `sla_us` and that keeps up with the load.

    Energy ties go to the lower latency, then the lower ITR, then the lower frequency. None when no
    point meets the SLA.
    """
    ok = [p for p in points if p.latency(percentile) <= sla_us and p.keeps_up(min_load_ratio)]
    if not ok:
        return None
    return min(ok, key=lambda p: (p.energy_j, p.latency(percentile), p.itr_us, p.dvfs_ghz))


def summarize_best(
    points: Sequence[SweepPoint], sla_us: float, percentile: float, min_load_ratio: float = DEFAULT_MIN_LOAD_RATIO
) -> dict[str, Any]:
    """The content of `best.json`: the energy-optimal point under the SLA, or a statement that none met it."""
    best = best_under_sla(points, sla_us, percentile, min_load_ratio)
    meeting = sum(1 for p in points if p.latency(percentile) <= sla_us and p.keeps_up(min_load_ratio))
    out: dict[str, Any] = {
        "sla_us": sla_us,
        "percentile": percentile,
        "min_load_ratio": min_load_ratio,
        "points_measured": len(points),
        "points_meeting_sla": meeting,
        "met": best is not None,
    }
    if best is None:
        finite = [p for p in points if math.isfinite(p.latency(percentile))]
        lowest = min(finite, key=lambda p: p.latency(percentile)) if finite else None
        out["message"] = (
            f"no measured point met p{percentile:g} <= {sla_us:g} µs while serving >= "
            f"{min_load_ratio:.0%} of the offered load"
        )
        out["lowest_latency"] = lowest.to_json() if lowest else None
        return out
    out["best"] = best.to_json()
    ci = best.latency_ci_us.get(float(percentile))
    # A point estimate under the SLA whose CI upper bound is above it may be a lucky window.
    out["sla_met_at_ci_upper_bound"] = None if ci is None else bool(ci[1] <= sla_us)
    worst = max(points, key=lambda p: p.energy_j)
    out["energy_saved_vs_worst_point"] = 1.0 - best.energy_j / worst.energy_j if worst.energy_j > 0 else None
    return out


# --------------------------------------------------------------------------- the loop


@dataclass(frozen=True)
class SweepConfig:
    """How to measure each point: settle time (discarded) and window length, in seconds."""

    seconds: float = 20.0
    settle: float = 1.0

    def __post_init__(self) -> None:
        if not (math.isfinite(self.seconds) and self.seconds > 0):
            raise TunerError(f"--seconds {self.seconds!r}: expected a positive number of seconds")
        if not (math.isfinite(self.settle) and self.settle >= 0):
            raise TunerError(f"--settle {self.settle!r}: expected a non-negative number of seconds")


def run_sweep(
    host: Host,
    points: Sequence[OperatingPoint],
    config: SweepConfig,
    sink: Callable[[SweepPoint], None],
    on_start: Callable[[int, OperatingPoint], None] | None = None,
) -> list[SweepPoint]:
    """Measure every point in order and pass each record to `sink` as soon as it is measured.

    Validates the whole grid against the host's knobs first, so a bad value is refused before any
    knob is set. Does not restore the host: the caller owns that (it must, on every exit path).
    """
    knobs = host.knobs()
    checked = [knobs.check(p) for p in points]
    results: list[SweepPoint] = []
    for i, point in enumerate(checked):
        if on_start is not None:
            on_start(i, point)
        applied = apply_point(host, point)
        if config.settle > 0:
            host.measure(config.settle)
        m = host.measure(config.seconds)
        if m.point is not None and (
            m.point.itr_us != applied.itr_us or abs(m.point.dvfs_ghz - applied.dvfs_ghz) > 5e-4
        ):
            raise HostError(f"host {host.name!r} measured at {m.point} after being set to {applied}")
        record = SweepPoint.from_measurement(applied, m)
        sink(record)
        results.append(record)
    return results
