"""The replay oracle's cost per window, cold, and its equality with the exhaustive grid search (JSON on stdout).

Target: <= 1 s per window (the oracle is one of the replay's four policies; the old search cost 0.4-1.6 s CPU
per window at 99 % < 500 µs and ~1.6 s on average at 200 µs) and the same point as `--oracle-exhaustive` on every
window. Each window's oracle runs on an EMPTY model-cell cache (`host.expected_cache.clear()`), so its time is what
a replay pays when nothing else has asked for those cells (in `tuner replay` the tuner's measured points warm a few
of them). Reported per day and SLA: CPU (process) and wall seconds per window (mean, max), model cells per window,
and each window over the target (`over_target`: its index in the day, load, CPU s, cells).

Days (the oracle depends only on each window's load, not on the host's seed):
* `bundled`: the bundled 24 h sample trace at `--peak-qps` (217-600 kQPS hourly);
* `noisy-sN`: days 1 and 2 of the 3-day schedule with the 5 % day-to-day noise seeded by N (`--schedule-seeds`);
* `twopeak`: a day of another shape -- two peaks (10:00 and 20:00, the later one at `--peak-qps`) and a deep
  night trough, hourly -- so the loads fall elsewhere than the sample's;
* `--trace FILE` adds a day from any trace (`traces.schedule.load_schedule`, scaled to `--peak-qps`).

`--check` also runs the exhaustive search on every window (full 54 x 18 model grid per load, ~5-15 s each) and
reports how many agree.

    nice -n 10 .venv/bin/python bench/oracle.py --check                  # all days, 99:500,90:500,99:200,99.9:500
    nice -n 10 .venv/bin/python bench/oracle.py --days bundled --slas 99:500
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from core.stats import describe  # noqa: E402

if TYPE_CHECKING:
    from actuators.sim.host import SimHost

TARGET_S = 1.0


def twopeak_day(peak_qps: float) -> list[float]:
    """Hourly mean loads of a two-peak day: a morning peak at 10:00 (85 % of the evening one), the evening peak
    at 20:00 (= `peak_qps`), a night trough near 03:00 at ~25 %."""
    raw = []
    for h in range(24):
        t = h + 0.5
        morning = 0.85 * math.exp(-(((t - 10.0) / 2.5) ** 2))
        evening = math.exp(-(((t - 20.0) / 2.5) ** 2))
        night = 0.25 + 0.1 * math.cos(2 * math.pi * (t - 15.0) / 24.0)
        raw.append(max(morning, evening, night))
    top = max(raw)
    return [peak_qps * r / top for r in raw]


def days(args: argparse.Namespace) -> dict[str, list[float]]:
    from traces.schedule import load_schedule, repeat_days, sample_trace_path

    base = load_schedule(sample_trace_path(), peak_qps=args.peak_qps)
    want = args.days.split(",")
    out: dict[str, list[float]] = {}
    if "bundled" in want:
        out["bundled"] = [w.qps for w in base.windows]
    if "noisy" in want:
        for s in (int(x) for x in args.schedule_seeds.split(",")):
            full = repeat_days(base, 3, seed=s)
            out[f"noisy-s{s}"] = [w.qps for w in full.windows if w.day >= 1]
    if "twopeak" in want:
        out["twopeak"] = twopeak_day(args.peak_qps)
    if args.trace:
        out[args.trace] = [w.qps for w in load_schedule(args.trace, peak_qps=args.peak_qps).windows]
    return out


def _stats(values: list[float]) -> dict[str, float]:
    d = describe(values)
    assert d is not None
    return {"mean": round(d["mean"], 3), "max": round(d["max"], 3), "n": d["n"]}


def parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    ap.add_argument("--days", default="bundled,noisy,twopeak", help="comma list of bundled, noisy, twopeak")
    ap.add_argument("--schedule-seeds", default="0", help="seeds of the noisy days (comma list)")
    ap.add_argument("--trace", default=None, help="also a day from this trace file")
    ap.add_argument("--slas", default="99:500,90:500,99:200,99.9:500", help="percentile:µs list")
    ap.add_argument("--peak-qps", type=float, default=600_000.0)
    ap.add_argument("--every", type=int, default=1, help="every N-th window of each day only")
    ap.add_argument("--check", action="store_true", help="also the exhaustive search on every window")
    ap.add_argument("--seed-check", type=int, default=7, help="another host seed: its oracle must give the same point")
    return ap


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    from actuators.sim.host import SimHost

    slas = [(float(p), float(s)) for p, s in (x.split(":") for x in args.slas.split(","))]
    host = SimHost(seed=0)
    out: dict = {"command": " ".join(sys.argv), "target_s_per_window": TARGET_S, "days": {}, "by_sla": {}}
    out["kernel_load_cpu_s"] = load_kernels(host)
    every: dict[str, dict[str, list[float]]] = {f"{p:g}:{s:g}": {"cpu": [], "wall": []} for p, s in slas}
    agree_all = total_all = 0
    for name, loads in days(args).items():
        loads = loads[:: args.every]
        day: dict = {"qps": [round(q) for q in loads], "slas": {}}
        fast_points: dict[str, list] = {}
        for pct, sla in slas:
            key = f"{pct:g}:{sla:g}"
            row, fast_points[key], cpu, wall = cold_day(host, loads, pct, sla, args.every)
            every[key]["cpu"] += cpu
            every[key]["wall"] += wall
            day["slas"][key] = row
            print(json.dumps({"day": name, "sla": key, **row}), file=sys.stderr, flush=True)
        if args.check:
            agree, total = check_day(host, name, loads, slas, fast_points, day)
            agree_all, total_all = agree_all + agree, total_all + total
        out["days"][name] = day
    for key, v in every.items():
        out["by_sla"][key] = {"cpu_s": _stats(v["cpu"]), "wall_s": _stats(v["wall"])}
    out["host_seed_check"] = host_seed_check(host, args, slas[0])
    worst = max(v["cpu_s"]["max"] for v in out["by_sla"].values())
    out["max_cpu_s_per_window"] = worst
    out["target_met"] = worst <= TARGET_S
    if args.check:
        out["equals_exhaustive"] = f"{agree_all}/{total_all} windows x SLAs"
    print(json.dumps(out, indent=1))
    return 0


def load_kernels(host: SimHost) -> float:
    """The simulator's compiled kernels load (or, on a fresh installation, compile) at their first call: a cost
    per process, not per window -- paid here, reported apart (CPU seconds)."""
    from actuators.host import OperatingPoint

    c0 = time.process_time()
    knobs = host.knobs()
    host.expected([OperatingPoint(knobs.itr_us[-1], knobs.dvfs_ghz[-1])], 100_000.0)
    host.expected_cache.clear()
    return round(time.process_time() - c0, 3)


def cold_day(
    host: SimHost, loads: list[float], pct: float, sla: float, every: int
) -> tuple[dict, list, list[float], list[float]]:
    """The oracle at each load of a day from an empty cell cache: the day's row, its points, CPU and wall s."""
    from tuner.optimize.settings import Objective
    from tuner.replay.oracle import oracle_point

    obj = Objective("constrained", pct, sla)
    cpu: list[float] = []
    wall: list[float] = []
    cells: list[int] = []
    points = []
    for q in loads:
        host.expected_cache.clear()
        t0, c0 = time.perf_counter(), time.process_time()
        point, _ = oracle_point(host, obj, q)
        wall.append(time.perf_counter() - t0)
        cpu.append(time.process_time() - c0)
        cells.append(host.expected_cache.cells.stats().entries)
        points.append(point)
    row: dict = {"cpu_s": _stats(cpu), "wall_s": _stats(wall), "cells": _stats([float(c) for c in cells])}
    # the windows over the target, with their load: which ones miss it and where they sit on the day
    row["over_target"] = [
        {"window": i * every, "qps": round(q), "cpu_s": round(c, 3), "cells": n}
        for i, (q, c, n) in enumerate(zip(loads, cpu, cells, strict=True))
        if c > TARGET_S
    ]
    return row, points, cpu, wall


def check_day(
    host: SimHost, name: str, loads: list[float], slas: list[tuple[float, float]], fast_points: dict, day: dict
) -> tuple[int, int]:
    """The exhaustive search at every load and SLA of a day against the cold search's points (recorded in
    `day`): how many agree, of how many."""
    from tuner.optimize.settings import Objective
    from tuner.replay.oracle import oracle_point

    agree_all = total_all = 0
    for i, q in enumerate(loads):
        host.expected_cache.clear()  # the full grid once per load serves every SLA's exhaustive search
        for pct, sla in slas:
            key = f"{pct:g}:{sla:g}"
            full, _ = oracle_point(host, Objective("constrained", pct, sla), q, exhaustive=True)
            fast = fast_points[key][i]  # the cold search's point
            agree = fast == full
            misses = day["slas"][key].setdefault("mismatches", [])
            if not agree:
                misses.append({"qps": round(q), "fast": str(fast), "exhaustive": str(full)})
            day["slas"][key]["equal"] = day["slas"][key].get("equal", 0) + int(agree)
            agree_all += int(agree)
            total_all += 1
        print(json.dumps({"day": name, "checked_window": i}), file=sys.stderr, flush=True)
    return agree_all, total_all


def host_seed_check(host: SimHost, args: argparse.Namespace, sla: tuple[float, float]) -> dict:
    """The host's seed moves its measurements' noise, not its model: another seed's oracle gives the same point."""
    from actuators.sim.host import SimHost
    from tuner.optimize.settings import Objective
    from tuner.replay.oracle import oracle_point

    other = SimHost(seed=args.seed_check)
    obj = Objective("constrained", *sla)
    q = max(q for loads in days(args).values() for q in loads)
    same = oracle_point(host, obj, q)[0] == oracle_point(other, obj, q)[0]
    return {"seeds": [0, args.seed_check], "qps": round(q), "same_point": same}


if __name__ == "__main__":
    raise SystemExit(main())
