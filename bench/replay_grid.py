"""Replays at scale: seeds x SLAs x traces x tuner variants on the simulated host, serially and/or as Ray tasks;
prints one JSON report (every run, the aggregate over seeds with 95 % confidence intervals, wall times).

    .venv/bin/python bench/replay_grid.py --engine both      # 16 replays serially, then on a local 2-CPU Ray
    .venv/bin/python bench/replay_grid.py --engine ray --seeds 8 --traces noon:12:2,night:0:2 --slas 99:500,99:200
    .venv/bin/python bench/replay_grid.py --engine ray --address ray://head:10001   # a Ray cluster

`--engine both` is the equality target: the same runs serially in this process and as Ray tasks (local Ray
of --num-cpus CPUs unless --address), compared run for run (every window's energy and point, every trial's
point, each run's summary; wall times excluded), with both wall times. A trace is NAME:START_HOUR:HOURS[:EVERY]
of the bundled sample day (or NAME:START:HOURS:EVERY:PATH for a trace file). Without Ray installed,
`--engine auto` runs serially.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from core.errors import TunerError  # noqa: E402
from tuner.cli import replay_grid as cli  # noqa: E402
from tuner.replay import grid as g  # noqa: E402


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--engine", default="both", choices=(*g.ENGINES, "both"))
    cli.add_arguments(ap)
    args = ap.parse_args(argv)
    try:
        specs = cli.specs_from(args)
        engines = ("serial", "ray") if args.engine == "both" else (args.engine,)
        reports = {e: g.run_grid(specs, engine=e, address=args.address, num_cpus=args.num_cpus) for e in engines}
    except TunerError as exc:
        print(f"bench/replay_grid.py: {exc}", file=sys.stderr)
        return 2
    out: dict = {
        "command": " ".join(sys.argv),
        "replays": len(specs),
        "grid": {
            "traces": args.traces,
            "seeds": list(range(args.seed0, args.seed0 + args.seeds)),
            "slas": args.slas,
            "variants": args.variants,
            "trials": args.trials,
            "policies": args.policies,
        },
        "wall_s": {e: r.wall_s for e, r in reports.items()},
        "oracle_s": {e: r.oracle_s for e, r in reports.items()},
        "run_wall_s_sum": {e: sum(x["wall_s"] for x in r.runs) for e, r in reports.items()},
    }
    if len(reports) == 2:
        a, b = reports["serial"].runs, reports["ray"].runs
        differ = [
            i for i, (x, y) in enumerate(zip(a, b, strict=True)) if g.deterministic_part(x) != g.deterministic_part(y)
        ]
        out["identical_runs"] = f"{len(a) - len(differ)}/{len(a)}"
        out["differing_runs"] = [a[i] | {"windows": None} for i in differ]
        out["speedup"] = reports["serial"].wall_s / reports["ray"].wall_s
    last = reports[engines[-1]]
    out["engine"] = last.engine
    out["aggregate"] = last.aggregate
    out["runs"] = [{k: v for k, v in r.items() if k not in ("windows", "trial_points")} for r in last.runs]
    print(json.dumps(out, indent=2))
    return 0 if not out.get("differing_runs") else 1


if __name__ == "__main__":
    sys.exit(main())
