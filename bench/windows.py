"""Benchmark: statistically sized (adaptive) windows vs fixed 20 s windows on the simulated host; prints JSON.

    python bench/windows.py            # loads 100K..700K x 4 points x 5 repetitions (~2 min)
    python bench/windows.py --quick    # 3 loads x 2 points x 3 repetitions
    python bench/windows.py --reps 10 --ci-pct 5 --min-s 2 --max-s 20

For every (load, point) and repetition (fresh seed) it measures one window three ways: `fixed` (20 s, today),
`adaptive` (the default policy: order-statistic CI of the pooled samples and a batch-means CI across
chunks, both within +-ci_pct) and `adaptive_os` (order statistics only, `batches=1`: the literal
rule). It reports the mean window length, the achieved 95 % CI half-width of the p99 (as the window
reports it), and how often the p99 lands within +-ci_pct of the simulator's noise-free `expected()` p99
and how often the window's reported 95 % CI (what Ax gets as SEM), widened in quadrature by the 95 %
error of `expected()` itself (`Expected.p99_se_us` where the simulator gives it), contains it
(`ci_covers_expected`)
-- the honest checks of whether a window's CI means what it says. `time_saved_pct_vs_fixed` compares
the mean window length with the fixed 20 s. `relevant` = points whose noise-free p99 is <= 2 ms.
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from actuators.host import OperatingPoint, apply_point
from actuators.sim.host import SimHost
from tuner.optimize.windowing import WindowPolicy, measure_window

LOADS = (100_000, 200_000, 300_000, 400_000, 500_000, 600_000, 700_000)
POINTS = (OperatingPoint(10, 2.9), OperatingPoint(100, 2.3), OperatingPoint(250, 1.6), OperatingPoint(500, 2.0))
#: Points whose noise-free p99 is above this are overloaded or far outside any SLA; summarised separately.
RELEVANT_P99_US = 2000.0


def _one(host: SimHost, policy: WindowPolicy, truth: float, truth_se: float, tol: float) -> dict:
    m = measure_window(host, policy)
    p99 = m.percentile(99.0)
    lo, hi = m.latency_ci_us[99.0]
    # the reference has its own error: widen by its 95 % half-width, in quadrature
    ref = 1.96 * truth_se
    low, high = p99 - math.hypot(p99 - lo, ref), p99 + math.hypot(hi - p99, ref)
    return {
        "seconds": m.seconds,
        "half_width_pct": (hi - lo) / 2 / p99 * 100 if p99 > 0 else float("inf"),
        "within": abs(p99 / truth - 1.0) <= tol,
        "err_pct": (p99 / truth - 1.0) * 100,
        "ci_covers": low <= truth <= high,
    }


def _summary(rows: list[dict]) -> dict:
    if not rows:
        return {}
    secs = [r["seconds"] for r in rows]
    return {
        "mean_window_s": round(statistics.fmean(secs), 2),
        "mean_half_width_pct": round(statistics.fmean(r["half_width_pct"] for r in rows), 2),
        "within_ci_pct_of_expected": round(sum(r["within"] for r in rows) / len(rows), 3),
        "mean_abs_err_pct": round(statistics.fmean(abs(r["err_pct"]) for r in rows), 2),
        "ci_covers_expected": round(sum(r["ci_covers"] for r in rows) / len(rows), 3),
        "n": len(rows),
    }


def run(loads, points, reps: int, ci_pct: float, min_s: float, max_s: float, seed: int) -> dict:
    modes = {
        "fixed": WindowPolicy(mode="fixed", max_s=max_s),
        "adaptive": WindowPolicy(mode="adaptive", ci_pct=ci_pct, min_s=min_s, max_s=max_s),
        "adaptive_os": WindowPolicy(mode="adaptive", ci_pct=ci_pct, min_s=min_s, max_s=max_s, batches=1),
    }
    tol = ci_pct / 100.0
    cells = []
    rows: dict[str, dict[str, list[dict]]] = {m: {"all": [], "relevant": []} for m in modes}
    per_load: dict[str, dict[str, list[dict]]] = {m: {} for m in modes}
    for qps in loads:
        ref = SimHost(seed=seed, qps=qps)
        exp = dict(zip(points, ref.expected(list(points), qps)))
        for pt in points:
            truth = exp[pt].latency_us[99.0]
            truth_se = float(getattr(exp[pt], "p99_se_us", 0.0))  # expected()'s own standard error, if known
            cell = {
                "qps": qps,
                "itr_us": pt.itr_us,
                "dvfs_ghz": pt.dvfs_ghz,
                "expected_p99_us": round(truth, 1),
                "expected_p99_se_us": round(truth_se, 2),
            }
            for name, policy in modes.items():
                got = []
                for r in range(reps):
                    host = SimHost(seed=seed + 1000 * r + 7, qps=qps)
                    apply_point(host, pt)
                    got.append(_one(host, policy, truth, truth_se, tol))
                cell[name] = _summary(got)
                rows[name]["all"] += got
                per_load[name].setdefault(str(qps), []).extend(got)
                if truth <= RELEVANT_P99_US:
                    rows[name]["relevant"] += got
            cells.append(cell)
    summary = {}
    for name in modes:
        s = {k: _summary(v) for k, v in rows[name].items()}
        for part in s.values():
            if part:
                part["time_saved_pct_vs_fixed"] = round((1 - part["mean_window_s"] / max_s) * 100, 1)
        s["mean_window_s_by_load"] = {
            q: round(statistics.fmean(r["seconds"] for r in v), 2) for q, v in per_load[name].items()
        }
        s["within_by_load"] = {q: round(sum(r["within"] for r in v) / len(v), 3) for q, v in per_load[name].items()}
        summary[name] = s
    return {
        "policy": {"ci_pct": ci_pct, "min_s": min_s, "max_s": max_s, "confidence": 0.95, "percentile": 99.0},
        "reps": reps,
        "relevant_p99_us_max": RELEVANT_P99_US,
        "summary": summary,
        "cells": cells,
    }


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="3 loads x 2 points x 3 repetitions")
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--ci-pct", type=float, default=5.0)
    ap.add_argument("--min-s", type=float, default=2.0)
    ap.add_argument("--max-s", type=float, default=20.0)
    ap.add_argument("--seed", type=int, default=1)
    args = ap.parse_args()
    loads: tuple[int, ...] = LOADS
    points: tuple[OperatingPoint, ...] = POINTS
    reps = args.reps
    if args.quick:
        loads, points, reps = (100_000, 400_000, 700_000), POINTS[:2], 3
    t = time.perf_counter()
    out = run(loads, points, reps, args.ci_pct, args.min_s, args.max_s, args.seed)
    out["bench_s"] = round(time.perf_counter() - t, 1)
    print(json.dumps(out, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
