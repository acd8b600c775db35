"""Benchmark `tuner replay` on the simulated host over seeds and the three SLA settings of fig. 7.6; prints JSON.

For each SLA (99 % < 500 µs, 90 % < 500 µs, 99 % < 200 µs) and seed, replays the bundled 24 h sample trace
(peak 600 kQPS, hourly windows, 30 trials per retune) under tuner, linux-default and oracle, and reports:
energy saved vs linux-default, ratio to the oracle, steady-state SLA-violating windows, exploration seconds
above the SLA, median compute time per Ax suggestion, and wall time per replay. Targets (issue 3):
>= 45 % saved at 99 < 500 with 0 violating windows, <= 1.10 x oracle, <= 0.5 s median per suggestion,
full 24-window replay <= 300 s.

    .venv/bin/python bench/replay.py [--seeds 5] [--hours 24] [--rewards constrained] [--slas 99:500,90:500,99:200]
    .venv/bin/python bench/replay.py --quick      # 6 windows (hours 12-17), 2 seeds: for iteration
    .venv/bin/python bench/replay.py --every 3    # windows 0, 3, ..., 21 of the day

The oracle's point per (window load, SLA) does not depend on the seed and is computed once (coarse-to-fine;
`--check-oracle` also compares it with the exhaustive grid on the first SLA's windows).
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

TARGETS = {"saved_pct_99_500": 45.0, "violating_windows_99_500": 0, "ratio_to_oracle": 1.10,
           "median_suggest_s": 0.5, "replay_wall_s": 300.0}


def _stats(values: list[float]) -> dict[str, float] | None:
    vals = [v for v in values if v is not None]
    if not vals:
        return None
    return {"mean": statistics.fmean(vals), "min": min(vals), "max": max(vals), "n": len(vals)}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seeds", type=int, default=5)
    ap.add_argument("--seed0", type=int, default=0)
    ap.add_argument("--hours", type=float, default=24.0)
    ap.add_argument("--start-hour", type=int, default=0, help="first window to replay (with --hours)")
    ap.add_argument("--every", type=int, default=1,
                    help="replay every N-th window only (each retune is a fresh experiment, so a subsample of "
                         "windows is a fair sample of the day at 1/N of the cost)")
    ap.add_argument("--rewards", default="constrained")
    ap.add_argument("--slas", default="99:500,90:500,99:200")
    ap.add_argument("--trials", type=int, default=30)
    ap.add_argument("--sobol-trials", type=int, default=8)
    ap.add_argument("--itr-resolution", type=int, default=8)
    ap.add_argument("--sla-margins", default=None,
                    help="comma list of TunerSettings.sla_margin_pct values to compare (default: the default)")
    ap.add_argument("--peak-qps", type=float, default=600_000.0)
    ap.add_argument("--quick", action="store_true", help="6 windows from hour 12, 2 seeds")
    ap.add_argument("--check-oracle", action="store_true")
    args = ap.parse_args(argv)
    if args.quick:
        args.hours, args.start_hour, args.seeds = 6.0, 12, min(args.seeds, 2)

    from tuner.hosts import make_host
    from tuner.optimizer import Objective, TunerSettings
    from tuner.replay import ReplayWindow, oracle_point, policy_summary, replay
    from traces.schedule import load_schedule, sample_trace_path

    sched = load_schedule(sample_trace_path(), peak_qps=args.peak_qps)
    windows = [ReplayWindow(w.index, w.start_s, w.seconds, w.qps) for w in sched.windows]
    windows = windows[args.start_hour:args.start_hour + int(args.hours)][::args.every]
    slas = [(float(a), float(b)) for a, b in (x.split(":") for x in args.slas.split(","))]
    out: dict = {"command": " ".join(sys.argv), "windows": len(windows),
                 "qps": [round(w.qps) for w in windows], "targets": TARGETS, "runs": [], "aggregate": {}}

    memo: dict = {}
    oracle_host = make_host("sim", seed=0)
    t_oracle = time.perf_counter()
    for pct, sla in slas:
        for w in windows:
            memo[(round(w.qps, 6), pct, sla)] = oracle_point(oracle_host, Objective("constrained", pct, sla), w.qps)
    out["oracle_compute_s"] = time.perf_counter() - t_oracle
    if args.check_oracle:
        pct, sla = slas[0]
        agree = []
        for w in windows:
            full, _ = oracle_point(oracle_host, Objective("constrained", pct, sla), w.qps, exhaustive=True)
            agree.append(full == memo[(round(w.qps, 6), pct, sla)][0])
        out["oracle_coarse_equals_exhaustive"] = f"{sum(agree)}/{len(agree)} windows"

    from tuner.optimizer import TunerSettings as _TS

    margins = [float(x) for x in args.sla_margins.split(",")] if args.sla_margins else [_TS().sla_margin_pct]
    for reward, margin in ((r, m) for r in args.rewards.split(",") for m in margins):
        for pct, sla in slas:
            key = f"{reward} p{pct:g}<{sla:g}" + (f" margin {margin:g}%" if args.sla_margins else "")
            rows = []
            for seed in range(args.seed0, args.seed0 + args.seeds):
                obj = Objective(reward, pct, sla)
                settings = TunerSettings(trials=args.trials, sobol_trials=args.sobol_trials, seed=seed,
                                         itr_resolution_us=args.itr_resolution, sla_margin_pct=margin)
                t0 = time.perf_counter()
                res = replay(lambda seed=seed: make_host("sim", seed=seed), windows, obj, settings,
                             policies=("tuner", "linux-default", "oracle"), host_label="sim",
                             oracle_memo=memo)
                wall = time.perf_counter() - t0
                s = policy_summary(res, "tuner")
                row = {"reward": reward, "sla_margin_pct": margin, "percentile": pct, "sla_us": sla, "seed": seed,
                       "saved_vs_linux_default_pct": s["saved_vs_linux_default_pct"],
                       "ratio_to_oracle": s["ratio_to_oracle"],
                       "oracle_saved_vs_linux_default_pct": policy_summary(res, "oracle")["saved_vs_linux_default_pct"],
                       "sla_violating_windows": s["sla_violating_windows"],
                       "sla_violating_windows_significant": s["sla_violating_windows_significant"],
                       "oracle_sla_violating_windows": policy_summary(res, "oracle")["sla_violating_windows"],
                       "oracle_sla_violating_windows_significant":
                           policy_summary(res, "oracle")["sla_violating_windows_significant"],
                       "linux_default_sla_violating_windows": policy_summary(res, "linux-default")["sla_violating_windows"],
                       "explore_above_sla_s": s["explore_above_sla_s"],
                       "explore_s": s["explore_s"],
                       "trials": s["trials"], "failed_trials": s["failed_trials"],
                       "median_suggest_s": s["median_suggest_s"],
                       "tuner_wall_s": s["wall_s"], "replay_wall_s": wall}
                rows.append(row)
                out["runs"].append(row)
                print(json.dumps(row), file=sys.stderr, flush=True)
            out["aggregate"][key] = {
                k: _stats([r[k] for r in rows])
                for k in ("saved_vs_linux_default_pct", "ratio_to_oracle", "oracle_saved_vs_linux_default_pct",
                          "sla_violating_windows", "sla_violating_windows_significant",
                          "oracle_sla_violating_windows", "oracle_sla_violating_windows_significant",
                          "explore_above_sla_s", "median_suggest_s", "tuner_wall_s",
                          "replay_wall_s")
            }
    print(json.dumps(out, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
