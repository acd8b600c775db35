"""Benchmark `tuner replay` on the simulated host over seeds and the three SLA settings of fig. 7.6; prints JSON.

For each SLA (99 % < 500 µs, 90 % < 500 µs, 99 % < 200 µs) and seed, replays the bundled 24 h sample trace
(peak 600 kQPS, hourly windows, 30 trials per retune) under tuner, linux-default and oracle, and reports:
energy saved vs linux-default, ratio to the oracle, steady-state SLA-violating windows, exploration seconds
above the SLA, median compute time per Ax suggestion, and wall time per replay. Targets (why: docs/benchmarks.md):
>= 45 % saved at 99 < 500 with 0 violating windows (the dissertation's tuner saves ~50 % on its 24 h
replay), <= 1.10 x oracle, <= 0.5 s median per suggestion, full 24-window replay <= 300 s.

    .venv/bin/python bench/replay.py [--seeds 5] [--hours 24] [--rewards constrained] [--slas 99:500,90:500,99:200]
    .venv/bin/python bench/replay.py --quick      # 6 windows (hours 12-17), 2 seeds: for iteration
    .venv/bin/python bench/replay.py --every 3    # windows 0, 3, ..., 21 of the day
    .venv/bin/python bench/replay.py --every 6 --tuner warm   # `tuner replay`'s default tuner (cold: dissertation)

The oracle's point per (window load, SLA) does not depend on the seed and is computed once by the replay grid
(`tuner.replay.grid.oracle_memo_for`, cold: each from an empty cell cache, so its time per window is what a
replay pays; JSON "oracle", target <= 1 s per window); `--check-oracle` (either mode) also runs the exhaustive grid
search on every window and SLA and counts the agreements.

Multi-day (does a tuner that remembers need fewer trials after day 0?), `--days N` (N >= 2): the day (after --start-hour/--hours) is repeated N times with seeded
day-to-day noise (`traces.schedule.repeat_days`, `--day-noise 0.05`, `--schedule-seed 0`; the same schedule for
every seed and variant), then `--every` keeps every N-th window of EACH day. Per seed, linux-default and the
oracle run once, and each tuner variant runs on its own host of that seed: `cold` (the dissertation's tuner,
`tuner.replay.run.TUNER_PRESETS`) and `warm` (context + stopping rule + safe exploration + adaptive windows), plus
with `--ablations` warm without one feature each (`warm-no-safety`, `warm-no-evidence` = safe_radius 0,
`warm-no-adaptive`, `warm-no-stop`, `warm-no-context`, `warm-no-guard` = window_guard off, `warm-no-sd-scale`
= safe_sd_scale 1); `--variants warm-headroom` fits latency on the headroom scale. JSON per variant and day
(and over all days): trials per retune, energy vs the oracle and saved vs linux-default, SLA-violating
windows, exploration seconds above the SLA (and % of trial time), trial window time saved vs fixed 20 s
windows; a markdown table goes to stderr at the end.
Default SLA here: 99 % < 500 µs.

    .venv/bin/python bench/replay.py --days 3 --every 3 --seeds 2           # 8 windows a day
    .venv/bin/python bench/replay.py --days 3 --quick                       # every 6th window, 1 seed
    .venv/bin/python bench/replay.py --days 3 --every 3 --ablations
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from core.stats import describe  # noqa: E402
from tuner.replay.grid import oracle_key, oracle_memo_for  # noqa: E402
from tuner.replay.run import WARM_ABLATIONS  # noqa: E402  (light: no Ax, no torch)

TARGETS = {
    "saved_pct_99_500": 45.0,
    "violating_windows_99_500": 0,
    "ratio_to_oracle": 1.10,
    "median_suggest_s": 0.5,
    "replay_wall_s": 300.0,
}
#: Per-run metrics of the single-day mode aggregated over seeds (keys of its rows).
SINGLE_DAY_KEYS = (
    "saved_vs_linux_default_pct",
    "ratio_to_oracle",
    "oracle_saved_vs_linux_default_pct",
    "sla_violating_windows",
    "sla_violating_windows_significant",
    "oracle_sla_violating_windows",
    "oracle_sla_violating_windows_significant",
    "explore_above_sla_s",
    "median_suggest_s",
    "tuner_wall_s",
    "replay_wall_s",
)


def cold_oracle_memo(loads: list[float], slas: list[tuple[float, float]], *, check: bool) -> tuple[dict, dict]:
    """The oracle's point per (load, percentile, SLA) (`replay(oracle_memo=...)`) and its cost and check.

    Each point is computed cold (`tuner.replay.grid.oracle_memo_for`), so its time is what one `tuner replay`
    window pays (wall and process CPU, per window: mean and max). `check`: the exhaustive grid search on every
    load and SLA too, and how many agree (the oracle claims equality, not an approximation).
    """
    memo: dict = {}
    costs = []
    for pct, sla in slas:
        points, cost = oracle_memo_for(sorted(set(loads)), pct, sla, cold=True)
        memo.update(points)
        costs += cost
    info: dict = {
        "windows": len(costs),
        "wall_s_per_window": describe(c.wall_s for c in costs),
        "cpu_s_per_window": describe(c.cpu_s for c in costs),
        "points_per_window": describe(float(c.points) for c in costs),
        "target_s_per_window": 1.0,
    }
    if check:
        info.update(_check_oracle(memo, loads, slas))
    return memo, info


def _check_oracle(memo: dict, loads: list[float], slas: list[tuple[float, float]]) -> dict:
    """The exhaustive search at every load and SLA against the memo's points: how many agree, the misses."""
    from tuner.hosts import make_host
    from tuner.optimize.settings import Objective
    from tuner.replay.oracle import oracle_point

    host = make_host("sim", seed=0)
    agree, misses = 0, []
    for pct, sla in slas:
        for q in sorted(set(loads)):
            full, _ = oracle_point(host, Objective("constrained", pct, sla), q, exhaustive=True)
            fast = memo[oracle_key(q, pct, sla)][0]
            agree += full == fast
            if full != fast:
                misses.append({"qps": round(q), "slo": f"{pct:g}:{sla:g}", "fast": str(fast), "exhaustive": str(full)})
    return {"equals_exhaustive": f"{agree}/{len(slas) * len(set(loads))} windows", "mismatches": misses}


def parser() -> argparse.ArgumentParser:
    """The bench's options (both modes; see the module docstring)."""
    ap = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    ap.add_argument("--seeds", type=int, default=5)
    ap.add_argument("--seed0", type=int, default=0)
    ap.add_argument("--hours", type=float, default=24.0)
    ap.add_argument("--start-hour", type=int, default=0, help="first window to replay (with --hours)")
    ap.add_argument(
        "--every",
        type=int,
        default=1,
        help="replay every N-th window only (each retune is a fresh experiment, so a subsample of "
        "windows is a fair sample of the day at 1/N of the cost)",
    )
    ap.add_argument("--rewards", default="constrained")
    ap.add_argument("--slas", default=None, help="default 99:500,90:500,99:200 (one day), 99:500 (--days >= 2)")
    ap.add_argument("--trials", type=int, default=30)
    ap.add_argument("--sobol-trials", type=int, default=8)
    ap.add_argument("--itr-resolution", type=int, default=None, help="µs (default: the preset's, 16 warm / 8 cold)")
    ap.add_argument(
        "--sla-margins",
        default=None,
        help="comma list of TunerSettings.sla_margin_pct values to compare, each also as final_margin_pct "
        "(default: the defaults)",
    )
    ap.add_argument("--peak-qps", type=float, default=600_000.0)
    ap.add_argument("--quick", action="store_true", help="6 windows from hour 12, 2 seeds")
    ap.add_argument("--check-oracle", action="store_true")
    ap.add_argument("--days", type=int, default=1, help="multi-day mode when >= 2 (see the module docstring)")
    ap.add_argument("--day-noise", type=float, default=None, help="day-to-day QPS noise sigma (default 0.05)")
    ap.add_argument("--schedule-seed", type=int, default=0, help="seed of the day-to-day noise (default 0)")
    ap.add_argument(
        "--tuner",
        default="cold",
        choices=("cold", "warm"),
        help="single-day: the tuner preset (default cold, the dissertation's; warm = the default of "
        "`tuner replay`, one contextual experiment across the replayed windows)",
    )
    ap.add_argument("--variants", default="cold,warm", help="multi-day: comma list of tuner variants")
    ap.add_argument(
        "--warm-set",
        action="append",
        default=[],
        metavar="FIELD=VALUE",
        help="override a TunerSettings field of the warm tuner (multi-day: every warm variant; "
        "single-day: with --tuner warm); repeatable, e.g. --warm-set stop_ei_pct=2",
    )
    ap.add_argument("--verbose", "-v", action="store_true", help="multi-day: one stderr line per tuner window")
    ap.add_argument(
        "--ablations",
        action="store_true",
        help="multi-day: add warm-no-safety, warm-no-evidence, warm-no-adaptive, warm-no-stop, warm-no-context",
    )
    return ap


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    if args.days >= 2:
        return multi_day(args)
    return single_day(args)


def single_day(args: argparse.Namespace) -> int:
    """The single-day benchmark: the tuner, linux-default and the oracle per reward, margin, SLA and seed."""
    from traces.schedule import load_schedule, sample_trace_path
    from tuner.optimize.settings import TunerSettings
    from tuner.replay.run import ReplayWindow

    if args.slas is None:
        args.slas = "99:500,90:500,99:200"
    if args.quick:
        args.hours, args.start_hour, args.seeds = 6.0, 12, min(args.seeds, 2)
    sched = load_schedule(sample_trace_path(), peak_qps=args.peak_qps)
    windows = [ReplayWindow(w.index, w.start_s, w.seconds, w.qps) for w in sched.windows]
    windows = windows[args.start_hour : args.start_hour + int(args.hours)][:: args.every]
    slas = [(float(a), float(b)) for a, b in (x.split(":") for x in args.slas.split(","))]
    out: dict = {
        "command": " ".join(sys.argv),
        "tuner": args.tuner,
        "windows": len(windows),
        "qps": [round(w.qps) for w in windows],
        "targets": TARGETS,
        "runs": [],
        "aggregate": {},
    }
    memo, out["oracle"] = cold_oracle_memo([w.qps for w in windows], slas, check=args.check_oracle)
    margins = [float(x) for x in args.sla_margins.split(",")] if args.sla_margins else [TunerSettings().sla_margin_pct]
    for reward, margin in ((r, m) for r in args.rewards.split(",") for m in margins):
        for pct, sla in slas:
            key = f"{reward} p{pct:g}<{sla:g}" + (f" margin {margin:g}%" if args.sla_margins else "")
            rows = []
            for seed in range(args.seed0, args.seed0 + args.seeds):
                row = single_day_row(args, windows, memo, reward, margin, pct, sla, seed)
                rows.append(row)
                out["runs"].append(row)
                print(json.dumps(row), file=sys.stderr, flush=True)
            out["aggregate"][key] = {k: describe(r[k] for r in rows) for k in SINGLE_DAY_KEYS}
    print(json.dumps(out, indent=2))
    return 0


def single_day_row(
    args: argparse.Namespace,
    windows: list,
    memo: dict,
    reward: str,
    margin: float,
    pct: float,
    sla: float,
    seed: int,
) -> dict:
    """One seed's replay under the tuner, linux-default and the oracle: the row of the single-day JSON."""
    from tuner.hosts import make_host
    from tuner.optimize.settings import Objective, TunerSettings
    from tuner.replay.run import preset_settings, replay
    from tuner.replay.summary import policy_summary

    # --sla-margins moves both margins: the one exploration aims within and the final choice's
    margins_kw: dict[str, Any] = {"final_margin_pct": margin} if args.sla_margins else {}
    base = TunerSettings(
        trials=args.trials, sobol_trials=args.sobol_trials, seed=seed, sla_margin_pct=margin, **margins_kw
    )
    settings = preset_settings(
        args.tuner,
        base,
        trials=args.trials,
        **({"itr_resolution_us": args.itr_resolution} if args.itr_resolution else {}),
        **(warm_overrides(args) if args.tuner == "warm" else {}),
    )
    t0 = time.perf_counter()
    res = replay(
        lambda: make_host("sim", seed=seed),
        windows,
        Objective(reward, pct, sla),
        settings,
        policies=("tuner", "linux-default", "oracle"),
        host_label="sim",
        oracle_memo=memo,
    )
    wall = time.perf_counter() - t0
    s, oracle = policy_summary(res, "tuner"), policy_summary(res, "oracle")
    return {
        "reward": reward,
        "sla_margin_pct": margin,
        "percentile": pct,
        "sla_us": sla,
        "seed": seed,
        "saved_vs_linux_default_pct": s["saved_vs_linux_default_pct"],
        "ratio_to_oracle": s["ratio_to_oracle"],
        "oracle_saved_vs_linux_default_pct": oracle["saved_vs_linux_default_pct"],
        "sla_violating_windows": s["sla_violating_windows"],
        "sla_violating_windows_significant": s["sla_violating_windows_significant"],
        "oracle_sla_violating_windows": oracle["sla_violating_windows"],
        "oracle_sla_violating_windows_significant": oracle["sla_violating_windows_significant"],
        "linux_default_sla_violating_windows": policy_summary(res, "linux-default")["sla_violating_windows"],
        "explore_above_sla_s": s["explore_above_sla_s"],
        "explore_s": s["explore_s"],
        "trials": s["trials"],
        "failed_trials": s["failed_trials"],
        "median_suggest_s": s["median_suggest_s"],
        "tuner_wall_s": s["wall_s"],
        "replay_wall_s": wall,
    }


#: Multi-day variants: a preset of `tuner.replay.run.TUNER_PRESETS` plus field overrides (the ablations).
#: (The ablations are also `tuner replay --preset NAME`: `tuner.replay.run.WARM_ABLATIONS`.)
VARIANTS: dict[str, tuple[str, dict]] = {
    "cold": ("cold", {}),
    "warm": ("warm", {}),
    **{name: ("warm", dict(over)) for name, over in WARM_ABLATIONS.items()},
}
ABLATIONS = (
    "warm-no-safety",
    "warm-no-evidence",
    "warm-no-adaptive",
    "warm-no-stop",
    "warm-no-context",
    "warm-no-guard",
    "warm-no-sd-scale",
)
#: Per-day metrics reported for each variant (keys of `tuner.replay.summary.policy_summary`).
DAY_KEYS = (
    "trials_per_retune",
    "ratio_to_oracle",
    "saved_vs_linux_default_pct",
    "sla_violating_windows",
    "sla_violating_windows_significant",
    "explore_above_sla_s",
    "explore_s",
    "explore_above_sla_pct",
    "explore_above_sla_pct_of_time",
    "window_saved_s",
    "window_saved_pct",
    "energy_j",
    "failed_trials",
    "median_suggest_s",
    "gated_trials",
    "gated_expected_over",
    "gated_over",
)


def multi_day(args: argparse.Namespace) -> int:
    """The multi-day benchmark: cold vs warm tuner (and ablations) over a multi-day noisy schedule."""
    from dataclasses import asdict

    from tuner.optimize.settings import Objective, TunerSettings
    from tuner.replay.run import preset_settings

    if args.quick:
        args.every, args.seeds = max(args.every, 6), min(args.seeds, 1)
    names = [v.strip() for v in args.variants.split(",") if v.strip()]
    if args.ablations:
        names += [a for a in ABLATIONS if a not in names]
    unknown = [v for v in names if v not in VARIANTS]
    if unknown:
        print(
            f"bench/replay.py: unknown variant(s) {', '.join(unknown)}: expected {', '.join(VARIANTS)}", file=sys.stderr
        )
        return 2
    pct, sla = (float(x) for x in (args.slas or "99:500").split(",")[0].split(":"))
    obj = Objective("constrained", pct, sla)
    windows, noise = multi_day_windows(args)
    out: dict = {
        "command": " ".join(sys.argv),
        "days": args.days,
        "day_noise": noise,
        "schedule_seed": args.schedule_seed,
        "objective": obj.describe(),
        "windows_per_day": len(windows) // args.days,
        "qps": {d: [round(w.qps) for w in windows if w.day == d] for d in range(args.days)},
        "variants": {},
        "runs": [],
        "aggregate": {},
    }
    memo, out["oracle"] = cold_oracle_memo([w.qps for w in windows], [(pct, sla)], check=args.check_oracle)
    base_settings = TunerSettings(trials=args.trials, sobol_trials=args.sobol_trials)
    for name in names:
        st = preset_settings(VARIANTS[name][0], base_settings, **variant_fields(args, name))
        out["variants"][name] = {k: v for k, v in asdict(st).items() if k != "seed"}
    rows: dict[str, list[dict]] = {n: [] for n in names}
    for seed in range(args.seed0, args.seed0 + args.seeds):
        for row in multi_day_seed(args, names, windows, obj, memo, base_settings, seed):
            rows[row["variant"]].append(row)
            out["runs"].append(row)
    for name in names:
        out["aggregate"][name] = {
            "per_day": [
                {"day": d, **{k: describe(r["per_day"][d][k] for r in rows[name]) for k in DAY_KEYS}}
                for d in range(args.days)
            ],
            "total": {k: describe(r["total"][k] for r in rows[name]) for k in DAY_KEYS},
            "wall_s": describe(r["wall_s"] for r in rows[name]),
        }
    print(json.dumps(out, indent=2))
    print(markdown_table(out), file=sys.stderr)
    return 0


def multi_day_windows(args: argparse.Namespace) -> tuple[list, float]:
    """The replayed windows: the day (after --start-hour/--hours) repeated --days times with seeded noise,
    every --every-th window of each day; and the noise's sigma."""
    from traces.schedule import DEFAULT_DAY_NOISE, load_schedule, repeat_days, sample_trace_path
    from tuner.replay.run import ReplayWindow

    day = load_schedule(sample_trace_path(), peak_qps=args.peak_qps, hours=args.start_hour + args.hours)
    day = type(day)(
        windows=day.windows[args.start_hour :], source=day.source, scale=day.scale, raw_peak_qps=day.raw_peak_qps
    )
    noise = DEFAULT_DAY_NOISE if args.day_noise is None else args.day_noise
    full = repeat_days(day, args.days, noise=noise, seed=args.schedule_seed)
    per_day = len(day.windows)
    windows = [
        ReplayWindow(w.index, w.start_s, w.seconds, w.qps, w.day)
        for w in full.windows
        if (w.index % per_day) % args.every == 0
    ]
    return windows, noise


def variant_fields(args: argparse.Namespace, name: str) -> dict:
    """The TunerSettings overrides of a variant: trials, --itr-resolution, --warm-set (warm ones), its own."""
    preset, over = VARIANTS[name]
    explicit = {"itr_resolution_us": args.itr_resolution} if args.itr_resolution else {}
    return {"trials": args.trials, **explicit, **(warm_overrides(args) if preset == "warm" else {}), **over}


def multi_day_seed(
    args: argparse.Namespace, names: list[str], windows: list, obj: Any, memo: dict, base_settings: Any, seed: int
) -> list[dict]:
    """One seed: linux-default and the oracle once, then each variant on its own host; a row per variant."""
    from tuner.hosts import make_host
    from tuner.replay.run import PolicyResult, preset_settings, replay
    from tuner.replay.summary import day_summaries

    t0 = time.perf_counter()
    base = replay(
        lambda: make_host("sim", seed=seed),
        windows,
        obj,
        replace_seed(base_settings, seed),
        policies=("linux-default", "oracle"),
        host_label="sim",
        oracle_memo=memo,
    )
    print(
        json.dumps({"seed": seed, "baselines_wall_s": round(time.perf_counter() - t0, 1)}), file=sys.stderr, flush=True
    )
    rows = []
    for name in names:
        st = preset_settings(VARIANTS[name][0], replace_seed(base_settings, seed), **variant_fields(args, name))
        t0 = time.perf_counter()
        res = replay(
            lambda: make_host("sim", seed=seed),
            windows,
            obj,
            st,
            policies=("tuner",),
            host_label="sim",
            progress=_window_progress(name, seed, t0) if args.verbose else None,
        )
        wall = time.perf_counter() - t0
        res.policies = {"tuner": res.policies["tuner"], **{p: base.policies[p] for p in base.policies}}
        assert all(isinstance(p, PolicyResult) for p in res.policies.values())
        days = [{"day": d["day"], **{k: d["policies"]["tuner"][k] for k in DAY_KEYS}} for d in day_summaries(res)]
        rows.append({"variant": name, "seed": seed, "wall_s": wall, "per_day": days, "total": policy_summary_keys(res)})
        brief = [{k: (round(v, 3) if isinstance(v, float) else v) for k, v in d.items()} for d in days]
        print(
            json.dumps({"variant": name, "seed": seed, "wall_s": round(wall, 1), "per_day": brief}),
            file=sys.stderr,
            flush=True,
        )
    return rows


def warm_overrides(args: argparse.Namespace) -> dict:
    """`--warm-set FIELD=VALUE` items as TunerSettings overrides (JSON values; bare words as strings)."""
    over: dict = {}
    for item in args.warm_set:
        key, _, text = item.partition("=")
        try:
            over[key.strip()] = json.loads(text)
        except json.JSONDecodeError:
            over[key.strip()] = text.strip()
    return over


def _window_progress(name: str, seed: int, t0: float) -> Any:
    """Progress callback: one stderr line per finished window (its trials and the wall time so far)."""
    count = {"trials": 0}

    def progress(policy: str, index: int, rec: object) -> None:
        if rec is not None:
            count["trials"] += 1
            return
        print(
            json.dumps(
                {
                    "variant": name,
                    "seed": seed,
                    "window": index,
                    "trials": count["trials"],
                    "wall_s": round(time.perf_counter() - t0, 1),
                }
            ),
            file=sys.stderr,
            flush=True,
        )
        count["trials"] = 0

    return progress


def replace_seed(settings: Any, seed: int) -> Any:
    from dataclasses import replace

    return replace(settings, seed=seed)


def policy_summary_keys(res: Any) -> dict:
    from tuner.replay.summary import policy_summary

    s = policy_summary(res, "tuner")
    return {k: s[k] for k in DAY_KEYS}


def _m(stat: dict | None, spec: str, pct: bool = False) -> str:
    if stat is None:
        return "-"
    return format(stat["mean"], spec) + ("%" if pct else "")


def markdown_table(out: dict) -> str:
    """The per-day table of docs/benchmarks.md: one row per variant and day, means over seeds."""
    lines = [
        "| variant | day | trials / retune | x oracle energy | saved vs linux-default | SLA-violating windows "
        "(significant), sum over seeds | explore s > SLA (% of trial time; % of all time) | trial window time "
        "saved vs fixed |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for name, agg in out["aggregate"].items():
        for d in [*agg["per_day"], {"day": "all", **agg["total"]}]:
            v, vs = d["sla_violating_windows"], d["sla_violating_windows_significant"]
            days = out["days"] if d["day"] == "all" else 1
            count = (
                (f"{v['mean'] * v['n']:.0f} ({vs['mean'] * vs['n']:.0f}) of {out['windows_per_day'] * days * v['n']}")
                if v and vs
                else "-"
            )
            lines.append(
                f"| {name} | {d['day']} | {_m(d['trials_per_retune'], '.1f')} | "
                f"{_m(d['ratio_to_oracle'], '.3f')} | {_m(d['saved_vs_linux_default_pct'], '.1f', True)} | "
                f"{count} | {_m(d['explore_above_sla_s'], '.1f')} "
                f"({_m(d['explore_above_sla_pct'], '.1f', True)}; "
                f"{_m(d['explore_above_sla_pct_of_time'], '.2f', True)}) | "
                f"{_m(d['window_saved_s'], '.0f')} s ({_m(d['window_saved_pct'], '.0f', True)}) |"
            )
    return "\n".join(lines)


if __name__ == "__main__":
    sys.exit(main())
