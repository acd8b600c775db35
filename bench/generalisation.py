"""The default tuner on the zoo (`tuner.replay.zoo.ZOO`): every member of the test half (and, beside it, the tuning
half) x seeds x SLAs through the replay grid -- as Ray tasks on the cluster at --address, serially otherwise --
and per cell the median and worst ratio to the per-window oracle, trials per retune (after the first day where a
day spans several), the highest share of a run's trial time above the SLA, and the significantly
SLA-violating windows, each against its target (`tuner.replay.zoo_cells`). Prints one JSON document.

    .venv/bin/python bench/generalisation.py                                  # 10 seeds x both halves x 3 SLAs
    .venv/bin/python bench/generalisation.py --half test --seeds 3 --hours 12 # reduced
    .venv/bin/python bench/generalisation.py --address ray://head:10001       # on a Ray cluster
    .venv/bin/python bench/generalisation.py --half test --seeds 3 --html out/generalisation.html  # and a page

Reduce with --seeds, --members (comma list of member names), --slas, --hours/--start-hour/--every (a part of
each member's day; a multi-day member keeps its later days only when --hours reaches them, or with --days N: the
same hours of each of its first N days). --html PATH also writes a self-contained page of the cells and runs
(`bench.zoo_page`); the JSON on stdout is the same.
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

from core.errors import TunerError  # noqa: E402
from tuner.cli.replay_grid import VARIANTS  # noqa: E402
from tuner.replay import grid as g  # noqa: E402
from tuner.replay import zoo  # noqa: E402
from tuner.replay import zoo_cells as zc  # noqa: E402

HALVES = ("test", "tuning", "both")


def add_zoo_windows(ap: argparse.ArgumentParser, *, half: str = "both", slas: str = "") -> None:
    """Which members, SLAs and windows of each day (the zoo benchmarks' common flags; `chosen_members`,
    `parse_slas`)."""
    ap.add_argument("--half", default=half, choices=HALVES, help="which half of the zoo (default %(default)s)")
    ap.add_argument("--members", default="", help="comma list of zoo members (default: the half's)")
    ap.add_argument("--slas", default=slas or ",".join(f"{p:g}:{u:g}" for p, u in zc.DEFAULT_SLAS))
    ap.add_argument("--hours", type=float, default=None, help="hours of each member's day (default all)")
    ap.add_argument("--start-hour", type=int, default=0)
    ap.add_argument("--every", type=int, default=1, help="every N-th window of the day (default 1)")


def add_zoo_arguments(ap: argparse.ArgumentParser, *, half: str = "both", seeds: int = 10, slas: str = "") -> None:
    """Which runs of the zoo and where they run: `add_zoo_windows`, the seeds and the engine (the replaying zoo
    benchmarks' common flags; `engine_of`, `seed_range`)."""
    add_zoo_windows(ap, half=half, slas=slas)
    ap.add_argument("--seeds", type=int, default=seeds, help="seeds per cell (default %(default)s)")
    ap.add_argument("--seed0", type=int, default=0)
    ap.add_argument("--engine", default="", choices=("", *g.ENGINES), help="default: ray with --address, else serial")
    ap.add_argument("--address", default=None, help="Ray cluster address")
    ap.add_argument("--num-cpus", type=int, default=2, help="CPUs of a local Ray (--engine ray without --address)")


def add_arguments(ap: argparse.ArgumentParser, *, half: str = "both", seeds: int = 10, slas: str = "") -> None:
    """The zoo run's flags (the ablation benchmark takes the same)."""
    add_zoo_arguments(ap, half=half, seeds=seeds, slas=slas)
    ap.add_argument(
        "--days",
        type=int,
        default=None,
        help="the hours of each of a member's first N days (default: --hours from the start of its first day)",
    )
    ap.add_argument("--trials", type=int, default=30)
    ap.add_argument("--html", default=None, metavar="PATH", help="also write a self-contained page there")


def engine_of(args: argparse.Namespace) -> str:
    """--engine, or by default Ray with --address and serial without."""
    return str(args.engine or ("ray" if args.address else "serial"))


def seed_range(args: argparse.Namespace) -> range:
    """--seed0 .. --seed0 + --seeds - 1; TunerError when --seeds is below 1."""
    if args.seeds < 1:
        raise TunerError(f"--seeds {args.seeds}: expected at least 1")
    return range(args.seed0, args.seed0 + args.seeds)


def chosen_members(args: argparse.Namespace) -> list[zoo.Member]:
    if args.members:
        return [zoo.member(n.strip()) for n in args.members.split(",") if n.strip()]
    return list(zoo.members(None if args.half == "both" else args.half))


def parse_slas(text: str) -> list[tuple[float, float]]:
    try:
        return [(float(a), float(b)) for a, b in (x.split(":") for x in text.split(",") if x.strip())]
    except ValueError:
        raise TunerError(f"--slas {text!r}: expected PERCENTILE:SLA_US,...") from None


def run_zoo(args: argparse.Namespace, variants: list[str]) -> tuple[list[zoo.Member], Any]:
    """The members' runs on the grid for `variants`; (members, `GridReport`)."""
    seeds = seed_range(args)
    unknown = [v for v in variants if v not in VARIANTS]
    if unknown:
        raise TunerError(f"variants {', '.join(unknown)}: expected some of {', '.join(VARIANTS)}")
    members = chosen_members(args)
    specs = zc.member_specs(
        members,
        seeds,
        parse_slas(args.slas),
        [(v, *VARIANTS[v]) for v in variants],
        hours=args.hours,
        start_hour=args.start_hour,
        every=args.every,
        trials=args.trials,
        days=args.days,
    )
    return members, g.run_grid(specs, engine=engine_of(args), address=args.address, num_cpus=args.num_cpus)


def halves(members: list[zoo.Member], cells: list[dict[str, Any]]) -> dict[str, Any]:
    """Per half and SLA (and variant): the cells pooled."""
    half_of = {m.name: m.half for m in members}
    out: dict[str, Any] = {}
    for h in zoo.HALVES:
        groups: dict[str, list[dict[str, Any]]] = {}
        for c in cells:
            if half_of.get(c["member"]) == h:
                groups.setdefault(f"{c['percentile']:g}:{c['sla_us']:g} {c['variant']}", []).append(c)
        if groups:
            out[h] = {k: zc.pooled(v) for k, v in groups.items()}
    return out


def compact(run: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in run.items() if k not in ("windows", "trial_points")}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_arguments(ap)
    ap.add_argument("--variant", default="warm", help="the tuner (default: warm, the defaults)")
    args = ap.parse_args(argv)
    t0 = time.perf_counter()
    try:
        members, report = run_zoo(args, [args.variant])
    except TunerError as exc:
        print(f"bench/generalisation.py: {exc}", file=sys.stderr)
        return 2
    cells = zc.cells(report.runs)
    out = {
        "command": " ".join(["bench/generalisation.py", *(sys.argv[1:] if argv is None else argv)]),
        "members": [{"name": m.name, "plant": m.plant, "day": m.day, "half": m.half} for m in members],
        "seeds": list(seed_range(args)),
        "slas": args.slas,
        "hours": args.hours,
        "start_hour": args.start_hour,
        "every": args.every,
        "days": args.days,
        "variant": args.variant,
        "engine": report.engine,
        "replays": len(report.runs),
        "wall_s": time.perf_counter() - t0,
        "oracle_s": report.oracle_s,
        "halves": halves(members, cells),
        "cells": cells,
        "runs": [compact(r) for r in report.runs],
    }
    if args.html:
        from bench.zoo_page import generalisation_page

        generalisation_page(out, args).write(args.html)
    print(json.dumps(out, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
