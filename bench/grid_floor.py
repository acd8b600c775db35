"""What the tuner's ITR grid and margin cost a tuner that knew the plant: per zoo member x SLA, the cheapest point of
the tuner's ITR candidates (`itr_resolution_us` apart, `settings.itr_candidates`) whose noise-free percentile is
within the limit the tuner holds to (the SLA less `sla_margin_pct`), over the cheapest point of the host's whole
ITR list within the SLA, summed over the day's windows -- and each factor alone (the grid at the SLA, the whole list
at the limit). Noise-free and seed-independent: every point comes from the simulated host's long-run model
(`expected()`, what the oracle policy searches). A drifting plant is skipped (its model moves with the hour).
Prints one JSON document.

The ratio targets compare the tuner with the oracle at the SLA on the host's whole ITR list; a tuner that searched
only its grid and held only points within its limit, exploring for free, would sit at this floor
(docs/optimizer-final-choice.md, "The ITR grid's share, and a step that follows the SLA").

    .venv/bin/python bench/grid_floor.py --half tuning --every 3 --hours 24
    .venv/bin/python bench/grid_floor.py --half test --every 3 --hours 24
    .venv/bin/python bench/grid_floor.py --members bundled --slas 99:200 --resolutions 8,16 --hours 3
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from core.errors import TunerError  # noqa: E402
from tuner.replay import grid as g  # noqa: E402
from tuner.replay import zoo  # noqa: E402
from tuner.replay import zoo_cells as zc  # noqa: E402


def cheapest_w(rows: Sequence[tuple[int, float, float]], itrs: set[int], limit: float) -> float | None:
    """The lowest power (W) of `rows` (itr µs, percentile µs, W) whose ITR is in `itrs` and percentile within
    `limit` µs; None when no such point exists."""
    ok = [w for itr, lat, w in rows if itr in itrs and lat <= limit]
    return min(ok) if ok else None


def member_floor(
    m: zoo.Member, args: argparse.Namespace, slas: list[tuple[float, float]], resolutions: list[int]
) -> list[dict[str, Any]]:
    """One cell per SLA of member `m`: the summed powers of the four searches over its windows and their ratios."""
    from actuators.abilities import ExpectedModel
    from actuators.host import OperatingPoint
    from bench.margin_cost import limit_us
    from tuner.hosts import make_host
    from tuner.optimize.settings import itr_candidates

    host = make_host("sim", seed=0, plant=m.plant)
    if not isinstance(host, ExpectedModel):
        raise TunerError(f"plant {m.plant!r}: its host has no long-run model (expected()) to search")
    knobs = host.knobs()
    points = [OperatingPoint(i, f) for i in knobs.itr_us for f in knobs.dvfs_ghz]
    whole = set(knobs.itr_us)
    grids = {r: set(itr_candidates(knobs.itr_us, r)) for r in resolutions}
    trace = zc.member_trace(m, hours=args.hours, start_hour=args.start_hour, every=args.every)
    limit = {sla: limit_us(sla, args.margin_pct) for _, sla in slas}
    sums: dict[tuple[float, float], dict[str, float]] = {s: {} for s in slas}
    infeasible: dict[tuple[float, float], int] = {s: 0 for s in slas}
    for w in g.trace_windows(trace):
        got = host.expected(points, w.qps)
        for pct, sla in slas:
            rows = [(p.itr_us, e.latency_us[pct], e.power_w) for p, e in zip(points, got)]
            found = {"oracle": cheapest_w(rows, whole, sla), "margin": cheapest_w(rows, whole, limit[sla])}
            for r, itrs in grids.items():
                found[f"grid{r}"] = cheapest_w(rows, itrs, sla)
                found[f"floor{r}"] = cheapest_w(rows, itrs, limit[sla])
            if any(v is None for v in found.values()):
                infeasible[(pct, sla)] += 1  # no point meets the limit at this load: left out of every sum
                continue
            acc = sums[(pct, sla)]
            for k, v in found.items():
                acc[k] = acc.get(k, 0.0) + (v or 0.0) * w.seconds
    out = []
    for (pct, sla), acc in sums.items():
        base = acc.get("oracle")
        cell: dict[str, Any] = {"member": m.name, "half": m.half, "sla": f"{pct:g}:{sla:g}", "limit_us": limit[sla]}
        cell["windows_left_out"] = infeasible[(pct, sla)]
        cell["margin"] = acc["margin"] / base if base else None
        cell["grid"] = {str(r): acc[f"grid{r}"] / base if base else None for r in resolutions}
        cell["floor"] = {str(r): acc[f"floor{r}"] / base if base else None for r in resolutions}
        out.append(cell)
    return out


def summary(cells: list[dict[str, Any]], resolutions: list[int]) -> dict[str, Any]:
    """Per half x SLA: median, min and max of each ratio over the members."""
    groups: dict[str, list[dict[str, Any]]] = {}
    for c in cells:
        groups.setdefault(f"{c['half']} {c['sla']}", []).append(c)

    def stats(vals: list[float]) -> dict[str, float] | None:
        return {"median": statistics.median(vals), "min": min(vals), "max": max(vals)} if vals else None

    out = {}
    for key, cs in groups.items():
        row: dict[str, Any] = {"members": len(cs), "margin": stats([c["margin"] for c in cs if c["margin"]])}
        for r in resolutions:
            row[f"grid {r}"] = stats([c["grid"][str(r)] for c in cs if c["grid"][str(r)]])
            row[f"floor {r}"] = stats([c["floor"][str(r)] for c in cs if c["floor"][str(r)]])
        out[key] = row
    return out


def main(argv: list[str] | None = None) -> int:
    from bench.generalisation import add_zoo_windows, chosen_members, parse_slas
    from bench.margin_cost import add_margin_argument, margin_pct
    from tuner.optimize.settings import TunerSettings

    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    add_zoo_windows(ap)
    ap.add_argument(
        "--resolutions", default=str(TunerSettings().itr_resolution_us), help="ITR grids, µs (default %(default)s)"
    )
    add_margin_argument(ap)
    args = ap.parse_args(argv)
    try:
        margin_pct(args)
        try:
            resolutions = sorted({int(x) for x in args.resolutions.split(",") if x.strip()})
        except ValueError:
            raise TunerError(f"--resolutions {args.resolutions!r}: expected µs,... (whole numbers)") from None
        if not resolutions or min(resolutions) < 1:
            raise TunerError(f"--resolutions {args.resolutions!r}: expected whole numbers of µs >= 1")
        slas = parse_slas(args.slas)
        members = chosen_members(args)
    except TunerError as e:
        print(f"grid_floor: {e}", file=sys.stderr)
        return 2
    t0 = time.perf_counter()
    from actuators.sim.plants import plant

    cells, skipped = [], []
    for m in members:
        if plant(m.plant).drift:
            skipped.append(m.name)
            continue
        cells.extend(member_floor(m, args, slas, resolutions))
    doc = {
        "command": "bench/grid_floor.py " + " ".join(argv if argv is not None else sys.argv[1:]),
        "margin_pct": args.margin_pct,
        "resolutions": resolutions,
        "skipped_drifting": skipped,
        "cells": cells,
        "summary": summary(cells, resolutions),
        "wall_s": round(time.perf_counter() - t0, 1),
    }
    print(json.dumps(doc, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
