"""Benchmark of the simulated host; prints JSON.

    python bench/sim.py                 # speeds + calibration values (JSON)
    python bench/sim.py --calibration   # also print the simulator-vs-dissertation table (markdown) to stderr
    python bench/sim.py --quick         # speeds only
    python bench/sim.py --cells         # CPU per run of the oracle's cells (first runs, refinements), nothing else

Targets (so a 24 h replay with hundreds of trials runs in seconds): a 20 s window at 600K QPS <= 100 ms (static and Linux default mode); a 3600 s hold
window <= 100 ms; expected() over a full ITR x DVFS grid.  `window_20s_*` are medians of repeated windows
at one point (the long-run reference cached); `window_20s_cold_ms` is the first window at each of 5 new
points (it computes that point's expected() cells: the reference the window's noise shrinks towards).
`noise` (not with --quick): p99 mean / SD / mean 95 % CI width over seeds of windows of 20 s, 300 s and
3600 s at 600K, (246, 1.6) -- the noise must keep falling ~1/sqrt(requests) past the simulated sample.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from actuators.host import OperatingPoint, apply_point
from actuators.sim.host import SimHost


def _ms(fn, repeat: int) -> float:
    times = []
    for _ in range(repeat):
        t = time.perf_counter()
        fn()
        times.append((time.perf_counter() - t) * 1000)
    return round(statistics.median(times), 2)


def speeds(repeat: int = 5) -> dict:
    host = SimHost(seed=1)
    host.measure(0.1)  # warm imports (scipy for the CIs)
    out: dict = {"window_20s_ms": {}, "window_20s_default_mode_ms": {}}
    for qps in (200_000, 400_000, 600_000):
        host.set_offered_qps(qps)
        host.restore()
        out["window_20s_default_mode_ms"][str(qps)] = _ms(lambda: host.measure(20.0), repeat)
        apply_point(host, OperatingPoint(300, 1.7))
        out["window_20s_ms"][str(qps)] = _ms(lambda: host.measure(20.0), repeat)
    host.set_offered_qps(600_000)
    out["hold_3600s_ms"] = _ms(lambda: host.measure(3600.0), 3)
    cold: list[float] = []
    host.expected_cache.clear()
    for k in range(5):
        apply_point(host, OperatingPoint(150 + 50 * k, round(1.5 + 0.2 * k, 1)))
        cold.append(_ms(lambda: host.measure(20.0), 1))
    out["window_20s_cold_ms"] = {"600000": round(statistics.median(cold), 1), "600000_max": max(cold)}
    grid = [OperatingPoint(i, f) for i in host.knobs().itr_us for f in host.knobs().dvfs_ghz]
    fresh = SimHost(seed=1)
    t = time.perf_counter()
    fresh.expected(grid, 400_000)
    dt = time.perf_counter() - t
    out["expected_full_grid_points"] = len(grid)
    out["expected_points_per_s_cold"] = round(len(grid) / dt)
    t = time.perf_counter()
    fresh.expected(grid, 400_000)
    out["expected_points_per_s_cached"] = round(len(grid) / (time.perf_counter() - t))

    def default_cold() -> None:
        SimHost(seed=1).expected_default(400_000)  # a fresh host: its own, empty cache

    out["expected_default_cold_ms"] = _ms(default_cold, 3)
    return out


def _cpu_ms(fn, repeat: int) -> float:
    """Least CPU (process) time of `repeat` calls after one warm-up call, in ms: the run's own cost on a
    shared machine."""
    fn()
    times = []
    for _ in range(repeat):
        c = time.process_time()
        fn()
        times.append((time.process_time() - c) * 1000)
    return round(min(times), 1)


def cells(repeat: int = 5) -> dict:
    """CPU per run of the kind the oracle's cells are made of, at 456 kQPS (the bundled day's busiest hours at
    99 % < 200 µs), on the held heap the oracle's search runs on: a first run's draws (40,000 requests), serving
    them at 1 and at 18 frequencies, a 200,000-request refinement run at one frequency (draws + serving) at 2 µs
    and 64 µs, and the first run's p99 batch-means standard errors."""
    import numpy as np

    from actuators.sim.arrivals import draw_arrivals
    from actuators.sim.longrun import _p99_se
    from actuators.sim.model import serve
    from actuators.sim.params import SimParams
    from core.memory import heap_held

    p, lam, one, grid = SimParams(), 456_000 / 16 / 1e6, np.array([1.5]), np.round(np.arange(1.2, 2.95, 0.1), 1)

    def refine(itr: int) -> None:
        serve(p, draw_arrivals(p, lam, itr, 200_000, 4, np.random.default_rng([1, 1])), one, 16)

    with heap_held():
        first = draw_arrivals(p, lam, 64, 40_000, 4, np.random.default_rng(1))
        run = serve(p, first, grid, 16)
        return {
            "first_run_draws_64us_ms": _cpu_ms(
                lambda: draw_arrivals(p, lam, 64, 40_000, 4, np.random.default_rng(1)), repeat
            ),
            "first_run_serve_1f_ms": _cpu_ms(lambda: serve(p, first, one, 16), repeat),
            "first_run_serve_18f_ms": _cpu_ms(lambda: serve(p, first, grid, 16), repeat),
            "refinement_2us_ms": _cpu_ms(lambda: refine(2), repeat),
            "refinement_64us_ms": _cpu_ms(lambda: refine(64), repeat),
            "p99_se_18f_ms": _cpu_ms(lambda: _p99_se(run), repeat),
        }


def noise(seeds: int = 8) -> dict:
    """p99 over `seeds` seeded windows per length at 600K QPS, (246, 1.6)."""
    out: dict[str, Any] = {}
    point = OperatingPoint(246, 1.6)
    for seconds in (20.0, 300.0, 3600.0):
        p99, width = [], []
        for s in range(seeds):
            host = SimHost(seed=100 + s, qps=600_000)
            apply_point(host, point)
            m = host.measure(seconds)
            lo, hi = m.latency_ci_us[99.0]
            p99.append(m.latency_us[99.0])
            width.append(hi - lo)
        out[f"{seconds:g}s"] = {
            "p99_mean_us": round(statistics.fmean(p99), 2),
            "p99_sd_us": round(statistics.stdev(p99), 3),
            "ci95_width_us": round(statistics.fmean(width), 3),
        }
    out["expected_p99_us"] = round(SimHost().expected([point], 600_000)[0].latency_us[99.0], 2)
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--calibration", action="store_true", help="print the calibration table (markdown) to stderr")
    ap.add_argument("--quick", action="store_true", help="speeds only")
    ap.add_argument("--cells", action="store_true", help="CPU per run of the oracle's cells only")
    args = ap.parse_args(argv)
    if args.cells:
        print(json.dumps({"cells_cpu_ms_min_of_5": cells()}, indent=1))
        return 0
    result: dict[str, Any] = {"speed": speeds()}
    if not args.quick:
        from actuators.sim.calibration import calibration, format_table

        result["noise_600k_246_1.6"] = noise()
        t = time.perf_counter()
        cal = calibration(SimHost())
        result["calibration"] = cal
        result["calibration_s"] = round(time.perf_counter() - t, 2)
        if args.calibration:
            print(format_table(cal), file=sys.stderr)
    print(json.dumps(result, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
