"""The power curve from the daemon's prediction tables: best point per load under an SLA, with uncertainty."""

from __future__ import annotations

import math
from dataclasses import dataclass

from actuators.host import OperatingPoint
from tuner.daemon.powercurve import power_curve


@dataclass(frozen=True)
class Table:
    retune_id: str
    tuned_qps: float
    percentile: float
    points: tuple
    latency_us: tuple
    latency_sem: tuple
    power_w: tuple
    power_sem: tuple


def _table(rid: str, qps: float, scale: float = 1.0, pct: float = 99.0) -> Table:
    pts = (OperatingPoint(50, 2.8), OperatingPoint(200, 2.0), OperatingPoint(400, 1.2))
    lat = tuple(v * qps / 2e5 for v in (120.0, 300.0, 480.0))
    return Table(rid, qps, pct, pts, lat, (5.0, 10.0, 20.0), tuple(v * scale for v in (90.0, 70.0, 50.0)), (1.0,) * 3)


def test_best_point_per_load_with_the_upper_bound_rule() -> None:
    curve, note = power_curve([_table("r1", 2e5), _table("r2", 1e5)], sla_us=500.0, percentile=99.0)
    assert note == "" and [c.qps for c in curve] == [1e5, 2e5]  # ascending load
    low, high = curve
    assert low.point == OperatingPoint(400, 1.2) and low.power_w == 50.0 and low.meets_sla
    # at 200k the cheapest (480 + 1.645*20 = 513 > 500) is not safe enough: the next one is
    assert high.point == OperatingPoint(200, 2.0) and (high.latency_us, high.latency_sem_us) == (300.0, 10.0)
    assert high.source == "model r1"


def test_unmet_loads_reported_newest_table_wins_other_percentiles_left_out() -> None:
    tables = [_table("old", 2e5, scale=2.0), _table("new", 2.01e5), _table("hot", 6e5), _table("p90", 3e5, pct=90.0)]
    curve, note = power_curve(tables, sla_us=200.0, percentile=99.0)
    assert [c.source for c in curve] == ["model new", "model hot"]
    assert curve[0].power_w == 90.0  # the new table's scale, not the old one's doubled power
    assert not curve[1].meets_sla and curve[1].point is None and math.isnan(curve[1].power_w)
    assert note == "1 model(s) of other percentiles left out (p90)"
    empty, note = power_curve([], sla_us=500.0, percentile=99.0)
    assert empty == [] and note.startswith("no model yet")
