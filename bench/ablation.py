"""Each default feature of the tuner turned off, on the zoo's tuning half (`tuner.replay.zoo.ZOO`): the default
(`warm`) and one preset per feature (`tuner.optimize.presets.WARM_ABLATIONS`) over the same members x seeds x
SLAs through the replay grid; per ablation the median and worst ratio to the per-window oracle, pooled over the
members, and paired against the default run of the same (member, seed, SLA): the median and worst change. A
feature that helps only the bundled plant shows up as an ablation that is no worse elsewhere. Prints one JSON.

    .venv/bin/python bench/ablation.py                                   # 3 seeds, 99:500, every ablation
    .venv/bin/python bench/ablation.py --seeds 1 --every 3 --members bundled,e5-2650-two-peaks
    .venv/bin/python bench/ablation.py --seeds 1 --every 3 --html out/ablation.html  # and a page

The features and their presets: the 16 µs ITR grid (warm-itr-8), the new-peak step (warm-no-peak-step), a retune's
first trial at a proven point (warm-no-first-proven) and the end of a broken proof's readings (warm-no-proof-reset),
the constrained-EI acquisition (warm-ax), the stopping rule
(warm-no-stop) and its descending trial (warm-no-descend), the margins (warm-no-sla-margin, warm-no-final-margin), safe exploration (warm-no-safety,
warm-no-evidence, warm-no-sd-scale), adaptive windows and their guards (warm-no-adaptive, warm-no-guard,
warm-no-settle-guard), the safe start's walk down in frequency (warm-no-step-down), the load as context
(warm-no-context). The hold rule (`hold_max_p`) acts only in windows under an hour, which the zoo's hourly days do
not have: not ablated here.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from bench.generalisation import add_arguments, compact, run_zoo, seed_range  # noqa: E402
from core.errors import TunerError  # noqa: E402
from tuner.replay import zoo_cells as zc  # noqa: E402

ABLATIONS = (
    "warm-itr-8",
    "warm-no-peak-step",
    "warm-no-first-proven",
    "warm-no-proof-reset",
    "warm-no-descend",
    "warm-ax",
    "warm-no-stop",
    "warm-no-sla-margin",
    "warm-no-final-margin",
    "warm-no-safety",
    "warm-no-evidence",
    "warm-no-sd-scale",
    "warm-no-adaptive",
    "warm-no-guard",
    "warm-no-settle-guard",
    "warm-no-step-down",
    "warm-no-context",
)


def paired(runs: list[dict[str, Any]], variant: str) -> dict[str, Any]:
    """`variant`'s ratio to the oracle against warm's in the same (member, seed, SLA), pooled."""

    def key(r: dict[str, Any]) -> tuple[Any, ...]:
        return (r["trace"], r["seed"], r["percentile"], r["sla_us"])

    base = {key(r): r["summary"]["ratio_to_oracle"] for r in runs if r["variant"] == "warm"}
    mine = [r for r in runs if r["variant"] == variant]
    ratios = [r["summary"]["ratio_to_oracle"] for r in mine if r["summary"]["ratio_to_oracle"] is not None]
    deltas = [
        r["summary"]["ratio_to_oracle"] - base[key(r)]
        for r in mine
        if r["summary"]["ratio_to_oracle"] is not None and base.get(key(r)) is not None
    ]
    return {
        "variant": variant,
        "runs": len(mine),
        "ratio_median": statistics.median(ratios) if ratios else None,
        "ratio_worst": max(ratios) if ratios else None,
        "delta_vs_warm_median": statistics.median(deltas) if deltas else None,
        "delta_vs_warm_worst": max(deltas) if deltas else None,
        "worse_than_warm_runs": sum(1 for d in deltas if d > 0),
        "trials_per_retune_median": statistics.median(t)
        if (t := [r["summary"]["trials_per_retune"] for r in mine if r["summary"]["trials_per_retune"] is not None])
        else None,
        "explore_above_sla_pct_worst": max((r["summary"]["explore_above_sla_pct"] or 0.0 for r in mine), default=None),
        "sla_violating_windows_significant": sum(
            int(r["summary"]["sla_violating_windows_significant"] or 0) for r in mine
        ),
    }


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_arguments(ap, half="tuning", seeds=3, slas="99:500")
    ap.add_argument("--ablations", default=",".join(ABLATIONS), help="comma list of presets (default: all)")
    args = ap.parse_args(argv)
    variants = ["warm", *(a.strip() for a in args.ablations.split(",") if a.strip() and a.strip() != "warm")]
    t0 = time.perf_counter()
    try:
        members, report = run_zoo(args, variants)
    except TunerError as exc:
        print(f"bench/ablation.py: {exc}", file=sys.stderr)
        return 2
    out = {
        "command": " ".join(["bench/ablation.py", *(sys.argv[1:] if argv is None else argv)]),
        "members": [m.name for m in members],
        "seeds": list(seed_range(args)),
        "slas": args.slas,
        "hours": args.hours,
        "every": args.every,
        "days": args.days,
        "engine": report.engine,
        "replays": len(report.runs),
        "wall_s": time.perf_counter() - t0,
        "ablations": [paired(report.runs, v) for v in variants],
        "cells": zc.cells(report.runs),
        "runs": [compact(r) for r in report.runs],
    }
    if args.html:
        from bench.zoo_page import ablation_page

        ablation_page(out, args).write(args.html)
    print(json.dumps(out, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
