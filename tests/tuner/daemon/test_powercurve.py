"""The power curve from the daemon's prediction tables: best point per load under an SLA, with uncertainty."""

from __future__ import annotations

import math
from dataclasses import dataclass

import pytest

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


# ------------------------------------------------------------------------------------------------ over a range of loads


def _raw(points=((50, 2.8), (200, 2.0), (400, 1.2), (400, 2.8)), loads=(0.0, 1e5, 2e5, 4e5)) -> dict:
    """A plain multi-load table: latency 100/200/400 µs x (1 + load/1e5), SE 10 %; power 90/70/50 W + load/1e4;
    the fourth point is dominated everywhere (slow and costly)."""
    base_lat, base_pw = (100.0, 200.0, 400.0, 500.0), (90.0, 70.0, 50.0, 95.0)
    lat = [[b * (1 + q / 1e5) for b in base_lat] for q in loads]
    return {
        "loads_qps": list(loads),
        "points": [list(p) for p in points],
        "latency_us": lat,
        "latency_sem": [[v * 0.1 for v in row] for row in lat],
        "power_w": [[b + q / 1e4 for b in base_pw] for q in loads],
        "power_sem": [[1.0] * 4 for _ in loads],
        "measured_qps": [1e5, 2e5],
    }


def test_table_keeps_the_frontier_points_and_round_trips():
    from tuner.daemon.powercurve import frontier, reduce_table, table_dict

    assert frontier([1.0, 2.0, 3.0, 2.5], [9.0, 5.0, 1.0, 6.0]) == [0, 1, 2]
    assert frontier([1.0, math.nan], [1.0, 0.5]) == [0]
    t = reduce_table("r7", 99.0, _raw())
    assert t.points == (OperatingPoint(50, 2.8), OperatingPoint(200, 2.0), OperatingPoint(400, 1.2))
    assert len(t.latency_us) == 4 and all(len(row) == 3 for row in t.power_w)
    again = reduce_table("r7", 99.0, table_dict(t))
    assert again.points == t.points and again.measured_qps == (1e5, 2e5)
    assert [list(r) for r in again.latency_us] == [list(r) for r in t.latency_us]
    with pytest.raises(ValueError, match="loads_qps"):
        reduce_table("r7", 99.0, {**_raw(), "loads_qps": [0.0, 2e5, 1e5, 4e5]})
    with pytest.raises(ValueError, match="power_w"):
        reduce_table("r7", 99.0, {**_raw(), "power_w": [[1.0]] * 4})


def test_load_curve_at_grid_loads_between_them_and_beyond():
    from tuner.daemon.powercurve import load_curve, reduce_table

    t = reduce_table("r7", 99.0, _raw())
    c = load_curve(t, [1e5, 1.5e5, 3e5, 4e5, 5e5], sla_us=500.0)
    # 100k: latency 200/400/800 (+ 1.645 x 10 %): only the 200 µs point meets 500 -> ITR 200 at 2.0 GHz
    assert c[0].point == OperatingPoint(200, 2.0) and c[0].power_w == pytest.approx(80.0)
    assert c[0].source == "model r7 at 100000 QPS" and not c[0].extrapolated
    # 150k: halfway between 100k and 200k, latency 250 / 500 / 1000 µs: ITR 200's bound is now over 500 µs
    mid = c[1]
    assert mid.point == OperatingPoint(50, 2.8) and mid.latency_us == pytest.approx(250.0)
    assert mid.power_w == pytest.approx(105.0) and mid.latency_sem_us == pytest.approx(25.0)
    assert mid.source == "model r7, interpolated 100000..200000 QPS" and not mid.extrapolated
    # 300k: outside the measured 100k..200k -> extrapolated; 400k: latency 500/1000/2000, nothing meets 500
    assert c[2].extrapolated and c[2].meets_sla and c[2].point == OperatingPoint(50, 2.8)
    assert not c[3].meets_sla and c[3].point is None and c[3].extrapolated
    # 500k: past the table's loads -> no point, said so
    assert not c[4].meets_sla and c[4].point is None and "beyond its loads (0..400000 QPS)" in c[4].source


def test_a_non_finite_prediction_never_leaks_into_a_neighbouring_load():
    from tuner.daemon.powercurve import load_curve, reduce_table

    raw = _raw()
    raw["latency_us"][3] = [math.nan] * 4  # the model gave nothing usable at 400k
    raw["power_w"][3] = [math.nan] * 4
    c = load_curve(reduce_table("r7", 99.0, raw), [2e5, 3e5], sla_us=500.0)
    assert c[0].meets_sla and math.isfinite(c[0].power_w) and math.isfinite(c[0].latency_us)  # 200k: its own row
    assert not c[1].meets_sla and c[1].point is None  # between 200k and 400k: nothing known, nothing recommended


@pytest.mark.parametrize(
    "lo, hi, n, expect",
    [
        (0, 0, 0, [5e4 * k for k in range(1, 21)]),  # the table's loads above 0 up to its top, 20 points
        (1e5, 3e5, 3, [1e5, 2e5, 3e5]),
        (2e5, 2e5, 0, [2e5]),  # one load
        (2e5, 2e5, 7, [2e5]),
        (9e5, 0, 2, [9e5, 1e6]),  # qps_max unset: the table's top
        (2e6, 0, 0, [2e6]),  # above the table: one load (answered as beyond it)
    ],
)
def test_curve_loads_defaults(lo, hi, n, expect):
    from tuner.daemon.powercurve import curve_loads, reduce_table

    raw = _raw(loads=tuple(5e4 * k for k in range(21)))
    assert curve_loads(lo, hi, n, reduce_table("r", 99.0, raw)) == pytest.approx(expect)


@pytest.mark.parametrize(
    "lo, hi, n, word",
    [
        (3e5, 1e5, 0, "qps_min: expected at most qps_max"),
        (-1.0, 1e5, 0, "qps_min: expected a finite load"),
        (0.0, float("nan"), 0, "qps_max: expected a finite load"),
        (0.0, 1e11, 0, "qps_max"),
        (1e5, 2e5, 201, "points: expected a count in [0, 200]"),
        (1e5, 2e5, 1, "points: expected >= 2"),
        (1e5, 2e5, 2.5, "points"),
        (True, 2e5, 3, "qps_min"),
    ],
)
def test_curve_loads_bad_input_is_one_line_naming_the_field(lo, hi, n, word):
    from core.errors import InputError
    from tuner.daemon.powercurve import curve_loads

    with pytest.raises(InputError) as err:
        curve_loads(lo, hi, n, None)
    assert str(err.value).startswith(word.split(":")[0]) and word in str(err.value) and "\n" not in str(err.value)
