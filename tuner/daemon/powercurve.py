"""The power curve a scheduler asks for: at each load the model knows, the predicted power and latency percentile
at the best point under an SLA, with their standard errors.

The source is the daemon's prediction tables (one per recent retune: the optimiser's model over a grid of
points, predicted at that retune's load -- in context mode the model's load input, computed in the loop
thread so no RPC ever runs the model). At each table's load the best point is the one of lowest predicted
power whose one-sided 95 % upper bound of the latency (mean + 1.645 SEM) meets the SLA -- the rule
`GetOperatingPoint` applies. Tables of loads within `merge_pct` % of each other are one load (the newest
wins). A load where no point meets the SLA is reported (`meets_sla` False, no point) rather than dropped,
so a scheduler sees where this host cannot hold the SLA. Only tables trained at the requested percentile
can answer: a model of p99 does not predict p90.

Over a range of loads (`load_curve`) the source is the newest retune's multi-load table (`LoadTable`: the
contextual model, which saw every trial, predicted at a grid of loads from 0 to `context_max_qps` by the
optimiser worker, `tuner.optimize.loadtable`). At a load between two grid loads every point's predicted
latency, power and standard errors are interpolated linearly, then the same rule picks the best point.
Linear in µs: where a point nears saturation its tail latency is convex in the load (a queue's
~1/(capacity - load)) and the chord between two grid loads over-states it, the safe side of an SLA; elsewhere,
on the simulated host, the chord and the model's own prediction at the load differ by well under 1 %
(`bench/power_curve.py`, docs/trial-store.md). The table keeps only the points that can be best: those on the
frontier of (upper latency bound, power) at some grid load -- every SLA's best point at a grid load is among
them; between grid loads a point dominated at both neighbours is left out (it could win only by the
interpolation's own error). Each curve point says whether its load lies outside the loads this host's trials
were measured at, less or more `MEASURED_TOL` (`extrapolated`: the model extrapolates there; its standard
errors grow, its mean can be wrong in shape). Loads above the table (past `context_max_qps`, where the model's
load input saturates) are answered with no point.
"""

from __future__ import annotations

import bisect
import math
from array import array
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from actuators.host import OperatingPoint
from core.errors import InputError

Z_95 = 1.645
#: Most loads one range request may ask for (each costs a pass over the table's points).
MAX_CURVE_POINTS = 200
#: Loads of a range request that leaves `points` at 0.
DEFAULT_CURVE_POINTS = 20
#: Largest load a request may name (requests/s), as `GetOperatingPoint`.
MAX_QPS = 1e10
#: A load within this share of the measured loads' range counts as measured (a window's offered load
#: jitters around the load asked for: the simulated host's 200k QPS windows measure 200.3k).
MEASURED_TOL = 0.02


@dataclass(frozen=True)
class CurvePoint:
    qps: float
    point: OperatingPoint | None
    power_w: float
    power_sem_w: float
    latency_us: float
    latency_sem_us: float
    meets_sla: bool
    source: str
    extrapolated: bool = False  # the load lies outside the loads this host's trials were measured at


@dataclass(frozen=True)
class Curve:
    """A `GetPowerCurve` answer: the curve, a note, and the loads the answering model saw measured."""

    sla_us: float
    percentile: float
    points: list[CurvePoint]
    note: str
    measured_qps: tuple[float, float] | None = None


@dataclass(frozen=True)
class LoadTable:
    """One retune's model at a grid of loads (ascending), over the points that can be best (module docstring):
    per field one row per load, one value per point."""

    retune_id: str
    percentile: float
    loads_qps: tuple[float, ...]
    points: tuple[OperatingPoint, ...]
    latency_us: tuple[array, ...]
    latency_sem: tuple[array, ...]
    power_w: tuple[array, ...]
    power_sem: tuple[array, ...]
    measured_qps: tuple[float, float] | None


def power_curve(
    tables: Sequence[Any], sla_us: float, percentile: float, *, z: float = Z_95, merge_pct: float = 1.0
) -> tuple[list[CurvePoint], str]:
    """(curve points by load, a note): see the module docstring. `tables` have `retune_id`, `tuned_qps`,
    `percentile`, `points` and per point `latency_us`, `latency_sem`, `power_w`, `power_sem`, oldest first."""
    usable = [t for t in tables if abs(t.percentile - percentile) <= 1e-9 and math.isfinite(t.tuned_qps)]
    skipped = len(tables) - len(usable)
    note = ""
    if skipped:
        others = sorted({f"p{t.percentile:g}" for t in tables if t not in usable})
        note = f"{skipped} model(s) of other percentiles left out ({', '.join(others)})"
    by_load: list[Any] = []
    for t in usable:  # oldest first: a newer table at (nearly) the same load replaces the older
        same = [i for i, u in enumerate(by_load) if abs(u.tuned_qps - t.tuned_qps) <= merge_pct / 100 * t.tuned_qps]
        for i in reversed(same):
            del by_load[i]
        by_load.append(t)
    out = []
    for t in sorted(by_load, key=lambda t: t.tuned_qps):
        ok = [
            i
            for i in range(len(t.points))
            if math.isfinite(t.latency_us[i])
            and math.isfinite(t.power_w[i])
            and t.latency_us[i] + z * (t.latency_sem[i] if math.isfinite(t.latency_sem[i]) else math.inf) <= sla_us
        ]
        if not ok:
            out.append(
                CurvePoint(t.tuned_qps, None, math.nan, math.nan, math.nan, math.nan, False, f"model {t.retune_id}")
            )
            continue
        i = min(ok, key=lambda j: t.power_w[j])
        out.append(
            CurvePoint(
                t.tuned_qps,
                t.points[i],
                t.power_w[i],
                t.power_sem[i],
                t.latency_us[i],
                t.latency_sem[i],
                True,
                f"model {t.retune_id}",
            )
        )
    if not out:
        note = (note + "; " if note else "") + "no model yet (the first retune has not finished)"
    return out, note


FIELDS = ("latency_us", "latency_sem", "power_w", "power_sem")


def frontier(upper: Sequence[float], power: Sequence[float]) -> list[int]:
    """Indices of the points no other point beats in both upper latency bound and power (non-finite skipped):
    for any SLA, the cheapest point whose bound meets it is one of them."""
    ok = [i for i in range(len(upper)) if math.isfinite(upper[i]) and math.isfinite(power[i])]
    out, best = [], math.inf
    for i in sorted(ok, key=lambda j: (upper[j], power[j])):
        if power[i] < best:
            out.append(i)
            best = power[i]
    return out


def reduce_table(retune_id: str, percentile: float, data: dict[str, Any], *, z: float = Z_95) -> LoadTable:
    """A `LoadTable` from the optimiser's plain table (`tuner.optimize.loadtable.predict_loads`, or `table_dict`'s
    output), keeping the points on the frontier at some load; `ValueError` (or `KeyError`/`TypeError`) if it is
    malformed."""
    loads = [float(q) for q in data["loads_qps"]]
    if len(loads) < 2 or any(not math.isfinite(q) for q in loads) or any(b <= a for a, b in zip(loads, loads[1:])):
        raise ValueError(f"loads_qps: expected >= 2 ascending finite loads, got {loads[:4]}...")
    points = [OperatingPoint(int(a), float(b)) for a, b in data["points"]]
    rows = {f: [[float(v) for v in row] for row in data[f]] for f in FIELDS}
    for f, table in rows.items():
        if len(table) != len(loads) or any(len(row) != len(points) for row in table):
            raise ValueError(f"{f}: expected {len(loads)} rows of {len(points)} values")
    keep: set[int] = set()
    for i in range(len(loads)):
        upper = [m + z * s for m, s in zip(rows["latency_us"][i], rows["latency_sem"][i])]
        keep.update(frontier(upper, rows["power_w"][i]))
    idx = sorted(keep)
    cols = {f: tuple(array("d", (row[j] for j in idx)) for row in rows[f]) for f in FIELDS}
    measured = data.get("measured_qps")
    return LoadTable(
        retune_id,
        float(percentile),
        tuple(loads),
        tuple(points[j] for j in idx),
        cols["latency_us"],
        cols["latency_sem"],
        cols["power_w"],
        cols["power_sem"],
        (float(measured[0]), float(measured[1])) if measured else None,
    )


def table_dict(t: LoadTable) -> dict[str, Any]:
    """`t` as JSON-able data (six significant digits) that `reduce_table` reads back unchanged."""
    return {
        "retune_id": t.retune_id,
        "percentile": t.percentile,
        "loads_qps": list(t.loads_qps),
        "points": [[p.itr_us, p.dvfs_ghz] for p in t.points],
        **{f: [[float(f"{v:.6g}") for v in row] for row in getattr(t, f)] for f in FIELDS},
        "measured_qps": list(t.measured_qps) if t.measured_qps else None,
    }


def _qps_field(name: str, v: Any) -> float:
    if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v) or not 0 <= v <= MAX_QPS:
        raise InputError(f"{name}: expected a finite load in [0, {MAX_QPS:g}] requests/s (0 = default), got {v!r}")
    return float(v)


def curve_loads(qps_min: Any, qps_max: Any, points: Any, table: LoadTable | None) -> list[float]:
    """The loads a range request asks for: `points` loads evenly from `qps_min` to `qps_max` (one when they are
    equal). 0 = default: the table's lowest load above 0, its highest, `DEFAULT_CURVE_POINTS` loads (with no
    table, qps_min / qps_max must be given). `InputError` naming the first bad field."""
    lo, hi = _qps_field("qps_min", qps_min), _qps_field("qps_max", qps_max)
    if isinstance(points, bool) or not isinstance(points, int) or not 0 <= points <= MAX_CURVE_POINTS:
        raise InputError(
            f"points: expected a count in [0, {MAX_CURVE_POINTS}] (0 = {DEFAULT_CURVE_POINTS}), got {points!r}"
        )
    if table is not None:
        lo = lo or next((q for q in table.loads_qps if q > 0), table.loads_qps[-1])
    if not hi:  # unset: the table's highest load (a qps_min above it is one load, answered as beyond the table)
        hi = max(lo, table.loads_qps[-1]) if table is not None else lo
    if lo > hi:
        raise InputError(f"qps_min: expected at most qps_max ({hi:g}), got {lo:g}")
    if lo == hi:
        return [lo] if lo > 0 else []
    n = points or DEFAULT_CURVE_POINTS
    if n < 2:
        raise InputError(f"points: expected >= 2 for the range {lo:g}..{hi:g} requests/s, got {n}")
    return [lo + (hi - lo) * k / (n - 1) for k in range(n)]


def load_curve(table: LoadTable, loads: Sequence[float], sla_us: float, *, z: float = Z_95) -> list[CurvePoint]:
    """The best point at each of `loads` from `table` (see the module docstring), in the order given."""
    grid = table.loads_qps
    measured = table.measured_qps
    out = []
    for q in loads:
        outside = measured is None or not measured[0] * (1 - MEASURED_TOL) <= q <= measured[1] * (1 + MEASURED_TOL)
        src = f"model {table.retune_id}"
        if q > grid[-1] * (1 + 1e-12) or q < grid[0]:
            beyond = f"{src}: beyond its loads ({grid[0]:.0f}..{grid[-1]:.0f} QPS)"
            out.append(CurvePoint(q, None, math.nan, math.nan, math.nan, math.nan, False, beyond, True))
            continue
        k = min(max(bisect.bisect_right(grid, q) - 1, 0), len(grid) - 2)
        w = min(max((q - grid[k]) / (grid[k + 1] - grid[k]), 0.0), 1.0)
        if w in (0.0, 1.0):
            k, w = (k, 0.0) if w == 0.0 else (k + 1, 0.0)
            src += f" at {grid[k]:.0f} QPS"
        else:
            src += f", interpolated {grid[k]:.0f}..{grid[k + 1]:.0f} QPS"
        k1 = min(k + 1, len(grid) - 1)
        lat0, lat1, sem0, sem1 = table.latency_us[k], table.latency_us[k1], table.latency_sem[k], table.latency_sem[k1]
        pw0, pw1 = table.power_w[k], table.power_w[k1]
        # the upper bound is linear in the interpolated values: interpolated at once; the rest for the chosen point
        if w == 0.0:
            ok = [i for i, (m, e) in enumerate(zip(lat0, sem0)) if m + z * e <= sla_us]
        else:
            v = 1 - w
            ok = [
                i
                for i, (m0, e0, m1, e1) in enumerate(zip(lat0, sem0, lat1, sem1))
                if v * (m0 + z * e0) + w * (m1 + z * e1) <= sla_us
            ]
        if not ok:
            out.append(CurvePoint(q, None, math.nan, math.nan, math.nan, math.nan, False, src, outside))
            continue
        if w == 0.0:  # at a grid load its row alone (a non-finite neighbour must not leak in through 0 x NaN)
            i = min(ok, key=lambda j: pw0[j])
            values = [getattr(table, f)[k][i] for f in FIELDS]
        else:
            i = min(ok, key=lambda j: (1 - w) * pw0[j] + w * pw1[j])
            values = [(1 - w) * getattr(table, f)[k][i] + w * getattr(table, f)[k1][i] for f in FIELDS]
        lat_i, sem_i, pw_i, pw_sem_i = values
        out.append(CurvePoint(q, table.points[i], pw_i, pw_sem_i, lat_i, sem_i, True, src, outside))
    return out


__all__ = [
    "DEFAULT_CURVE_POINTS",
    "MAX_CURVE_POINTS",
    "Z_95",
    "Curve",
    "CurvePoint",
    "LoadTable",
    "curve_loads",
    "frontier",
    "load_curve",
    "power_curve",
    "reduce_table",
    "table_dict",
]
