"""The fleet view: per hardware class and load band, the best known operating point in the store.

Trials are re-scored under one objective (`percentile`, `sla_us`): each measurement holds every percentile.
Loads fall into geometric bands of `band_pct` % (band k holds loads in [base * r^k, base * r^(k+1)),
r = 1 + band_pct/100, base 1 QPS), so a band is as wide, relatively, as the daemon's load-change trigger.
Within a (class, band) trials at the same point are pooled (mean power, mean latency at the percentile);
the best point is the one of lowest mean power whose mean latency meets the SLA. The width is bounded to
[`MIN_BAND_PCT`, `MAX_BAND_PCT`] % (why: at their definitions). Trials of a host flagged as
drifting are left out, as in the class warm start. A band where no point met the SLA is reported with
`point` None, so a scheduler sees that the class has no known safe point there.

`fleet_report` is the whole answer from a store -- the rows, each class's fields, the drifting hosts -- as
`tuner trials fleet` prints it and the daemon's `GetFleetView` RPC returns it (`check_query` validates the
query for both, with one-line errors).
"""

from __future__ import annotations

import math
import statistics
from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from core.errors import InputError
from tuner.store.base import TrialStore
from tuner.store.history import HistoryEntry

#: The default load band width (%): the daemon's default load-change trigger (`tuning.load_change_pct`).
DEFAULT_BAND_PCT = 10.0
#: The band widths (%) a query may ask for. Below 0.1 % a band is narrower than a measured load's own noise
#: (a window's QPS varies by more than that), so bands would split trials of one load apart, and 1 QPS .. 1e10
#: QPS would take ~23,000 bands; near 0 the ratio 1 + pct/100 rounds to 1.0 and the band index divides by 0.
#: Above 1000 % one band spans more than a decade of load, which is no longer "a load" a point is tuned for.
MIN_BAND_PCT = 0.1
MAX_BAND_PCT = 1000.0
#: The longest hardware class id a query may name (ids are 16 hex digits).
MAX_CLASS_CHARS = 64


@dataclass(frozen=True)
class FleetRow:
    """The best known point of one class in one load band."""

    hw_class: str
    qps_low: float
    qps_high: float
    itr_us: int | None
    dvfs_ghz: float | None
    power_w: float | None
    latency_us: float | None
    trials_at_point: int
    trials: int
    hosts: int

    def to_dict(self) -> dict[str, object]:
        return {
            "class": self.hw_class,
            "qps_low": round(self.qps_low, 1),
            "qps_high": round(self.qps_high, 1),
            "point": None if self.itr_us is None else {"itr_us": self.itr_us, "dvfs_ghz": self.dvfs_ghz},
            "power_w": self.power_w,
            "latency_us": self.latency_us,
            "trials_at_point": self.trials_at_point,
            "trials": self.trials,
            "hosts": self.hosts,
        }


def band_of(qps: float, band_pct: float) -> tuple[int, float, float]:
    """(band index, low, high) of the geometric band holding `qps` (loads below 1 QPS in band 0); `InputError`
    for a width outside [`MIN_BAND_PCT`, `MAX_BAND_PCT`] or a load that is not a finite number."""
    check_band(band_pct, "band_pct")
    if not math.isfinite(qps):
        raise InputError(f"qps {qps!r}: expected a finite load")
    r = 1.0 + band_pct / 100.0
    k = math.floor(math.log(min(max(qps, 1.0), 1e300)) / math.log(r))  # 1e300: r ** (k + 1) stays finite
    return k, r**k, r ** (k + 1)


def fleet_view(
    entries: Iterable[HistoryEntry],
    *,
    percentile: float = 99.0,
    sla_us: float = 500.0,
    band_pct: float = 10.0,
    drifting: frozenset[str] = frozenset(),
) -> list[FleetRow]:
    """Best known point per (class, load band), sorted by class then load (see the module docstring)."""
    cells: dict[tuple[str, int], dict[tuple[int, float], list[tuple[float, float]]]] = defaultdict(
        lambda: defaultdict(list)
    )
    hosts: dict[tuple[str, int], set[str]] = defaultdict(set)
    for e in entries:
        m = e.record.measurement
        if e.host in drifting or m is None or percentile not in m.latency_us:
            continue
        p, lat = m.power_w, m.latency_us[percentile]
        if not (math.isfinite(p) and math.isfinite(lat) and math.isfinite(e.record.qps)):
            continue
        k, _, _ = band_of(e.record.qps, band_pct)
        key = (e.hw_class, k)
        cells[key][(e.record.point.itr_us, round(e.record.point.dvfs_ghz, 4))].append((p, lat))
        hosts[key].add(e.host)
    rows = []
    for (cls, k), points in sorted(cells.items()):
        _, lo, hi = band_of((1.0 + band_pct / 100.0) ** (k + 0.5), band_pct)
        best = None
        for point, obs in points.items():
            power = statistics.fmean(o[0] for o in obs)
            lat = statistics.fmean(o[1] for o in obs)
            if lat <= sla_us and (best is None or power < best[1]):
                best = (point, power, lat, len(obs))
        total = sum(len(o) for o in points.values())
        if best is None:
            rows.append(FleetRow(cls, lo, hi, None, None, None, None, 0, total, len(hosts[(cls, k)])))
        else:
            (itr, ghz), power, lat, n = best
            rows.append(FleetRow(cls, lo, hi, itr, ghz, power, lat, n, total, len(hosts[(cls, k)])))
    return rows


@dataclass(frozen=True)
class FleetReport:
    """`fleet_view`'s rows over a store, with the query, each class's fields and the hosts left out."""

    location: str
    percentile: float
    sla_us: float
    band_pct: float
    rows: list[FleetRow]
    classes: dict[str, dict[str, Any]] = field(default_factory=dict)
    drifting: list[str] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        """What `tuner trials fleet --json` prints."""
        return {
            "store": self.location,
            "objective": {"percentile": self.percentile, "sla_us": self.sla_us},
            "band_pct": self.band_pct,
            "drifting_hosts": list(self.drifting),
            "classes": dict(self.classes),
            "bands": [r.to_dict() for r in self.rows],
        }


def _show(v: object) -> str:
    return f"{v:g}" if isinstance(v, (int, float)) and not isinstance(v, bool) else repr(v)[:40]


def check_band(band_pct: Any, name: str) -> None:
    """`InputError` naming the field `name` unless `band_pct` is a width in [`MIN_BAND_PCT`, `MAX_BAND_PCT`] %."""
    if (
        isinstance(band_pct, bool)
        or not isinstance(band_pct, (int, float))
        or not MIN_BAND_PCT <= band_pct <= MAX_BAND_PCT
    ):
        raise InputError(f"{name} {_show(band_pct)}: expected a band width in [{MIN_BAND_PCT:g}, {MAX_BAND_PCT:g}] %")


def check_class(hw_class: Any, name: str) -> None:
    """`InputError` naming the field `name` unless `hw_class` is a class id of at most `MAX_CLASS_CHARS`
    printable characters (ids are 16 hex digits; empty = every class)."""
    if not isinstance(hw_class, str) or len(hw_class) > MAX_CLASS_CHARS or not hw_class.isprintable():
        raise InputError(
            f"{name} {_show(hw_class)}: expected a class id of at most {MAX_CLASS_CHARS} printable characters"
        )


def check_query(percentile: float, sla_us: float, band_pct: float, *, names: tuple[str, str, str]) -> None:
    """`InputError` (one line, naming the field by `names` = its names for percentile, SLA, band) unless the
    percentile is one the host measures, the SLA a finite number > 0 and the band width in [`MIN_BAND_PCT`,
    `MAX_BAND_PCT`] %."""
    from actuators.host import PERCENTILES

    if isinstance(percentile, bool) or percentile not in PERCENTILES:
        raise InputError(f"{names[0]} {_show(percentile)}: expected one of {', '.join(f'{p:g}' for p in PERCENTILES)}")
    if isinstance(sla_us, bool) or not isinstance(sla_us, (int, float)) or not (math.isfinite(sla_us) and sla_us > 0):
        raise InputError(f"{names[1]} {_show(sla_us)}: expected a number > 0")
    check_band(band_pct, names[2])


def fleet_report(
    store: TrialStore,
    *,
    percentile: float = 99.0,
    sla_us: float = 500.0,
    band_pct: float = DEFAULT_BAND_PCT,
    hw_class: str | None = None,
) -> FleetReport:
    """The fleet view of everything in `store` (of one `hw_class` if given): reads every stored trial of it,
    so its cost grows with the store (`docs/trial-store.md`)."""
    infos = store.hosts()
    drifting = frozenset(h.host for h in infos if h.drift)
    rows = fleet_view(
        store.read(hw_class=hw_class or None),
        percentile=percentile,
        sla_us=sla_us,
        band_pct=band_pct,
        drifting=drifting,
    )
    labels = {h.hw_class: h.hw for h in infos}
    classes = {c: labels.get(c, {}) for c in sorted({r.hw_class for r in rows})}
    return FleetReport(store.location, percentile, sla_us, band_pct, rows, classes, sorted(drifting))


__all__ = [
    "DEFAULT_BAND_PCT",
    "MAX_BAND_PCT",
    "MIN_BAND_PCT",
    "FleetReport",
    "FleetRow",
    "MAX_CLASS_CHARS",
    "band_of",
    "check_band",
    "check_class",
    "check_query",
    "fleet_report",
    "fleet_view",
]
