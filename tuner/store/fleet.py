"""The fleet view: per hardware class and load band, the best known operating point in the store.

Trials are re-scored under one objective (`percentile`, `sla_us`): each measurement holds every percentile.
Loads fall into geometric bands of `band_pct` % (band k holds loads in [base * r^k, base * r^(k+1)),
r = 1 + band_pct/100, base 1 QPS), so a band is as wide, relatively, as the daemon's load-change trigger.
Within a (class, band) trials at the same point are pooled (mean power, mean latency at the percentile);
the best point is the one of lowest mean power whose mean latency meets the SLA. Trials of a host flagged as
drifting are left out, as in the class warm start. A band where no point met the SLA is reported with
`point` None, so a scheduler sees that the class has no known safe point there.
"""

from __future__ import annotations

import math
import statistics
from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass

from tuner.store.history import HistoryEntry


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
    """(band index, low, high) of the geometric band holding `qps`."""
    r = 1.0 + band_pct / 100.0
    k = math.floor(math.log(max(qps, 1.0)) / math.log(r))
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
        if not (math.isfinite(p) and math.isfinite(lat)):
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


__all__ = ["FleetRow", "band_of", "fleet_view"]
