"""`tuner replay-grid`: seeds x SLAs x traces x tuner variants of `tuner replay` on the simulated host, serially
or as Ray tasks (`--engine ray`: a local Ray, or a cluster with `--address`), gathered in one JSON report with
95 % confidence intervals over seeds (`tuner.replay.grid`)."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from core.errors import TunerError
from tuner.optimize.presets import WARM_ABLATIONS, WARM_ADDITIONS
from tuner.optimize.table import TUNER_TABLE, by_name

#: Tuner variants: a preset of `tuner.optimize.presets.TUNER_PRESETS` plus TunerSettings overrides (warm, cold,
#: warm's ablations, and the presets that add one feature to warm).
VARIANTS: dict[str, tuple[str, dict[str, Any]]] = {
    "warm": ("warm", {}),
    "cold": ("cold", {}),
    **{name: ("warm", dict(over)) for name, over in {**WARM_ABLATIONS, **WARM_ADDITIONS}.items()},
}


def register(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser(
        "replay-grid",
        help="many replays (seeds x SLAs x traces x tuner variants), serially or on Ray, one report",
        description=__doc__,
    )
    add_arguments(p)
    p.add_argument("--engine", default="auto", choices=("auto", "serial", "ray"), help="auto: Ray if installed")
    p.add_argument("--out", type=Path, default=None, help="write the JSON report here (default: stdout)")
    p.set_defaults(func=run)


def add_arguments(p: argparse.ArgumentParser) -> None:
    """The grid's flags (shared with bench/replay_grid.py)."""
    p.add_argument("--seeds", type=int, default=2, help="seeds per cell (default 2)")
    p.add_argument("--seed0", type=int, default=0)
    p.add_argument(
        "--traces",
        default="noon:12:2,night:0:2",
        help="NAME:START_HOUR:HOURS[:EVERY[:PATH]],... (default: two 2-hour windows of the bundled sample day); "
        "PATH day:NAME is a day of the zoo (tuner.replay.zoo, e.g. day:two-peaks)",
    )
    p.add_argument("--plant", default="bundled", help="the simulated plant (actuators.sim.plants; default bundled)")
    p.add_argument("--slas", default="99:500,99:200", help="PERCENTILE:SLA_US,... (default %(default)s)")
    p.add_argument("--variants", default="warm,cold", help=f"comma list of {', '.join(VARIANTS)}")
    trials = by_name(TUNER_TABLE)["trials"]
    p.add_argument("--trials", type=int, default=trials.default, help=f"{trials.doc} (default {trials.default})")
    p.add_argument("--policies", default="tuner,linux-default,oracle")
    p.add_argument("--peak-qps", type=float, default=600_000.0)
    p.add_argument("--num-cpus", type=int, default=2, help="CPUs of a local Ray (default 2)")
    p.add_argument("--address", default=None, help="Ray cluster address (default: start a local Ray)")


def parse_traces(text: str, peak_qps: float) -> list[Any]:
    from tuner.replay.grid import TraceSpec

    out = []
    for item in text.split(","):
        parts = item.strip().split(":", 4)
        if len(parts) < 3 or not parts[0]:
            raise TunerError(f"--traces {item!r}: expected NAME:START_HOUR:HOURS[:EVERY[:PATH]]")
        try:
            every = int(parts[3]) if len(parts) > 3 and parts[3] else 1
            start, hours = int(parts[1]), float(parts[2])
        except ValueError:
            raise TunerError(f"--traces {item!r}: START_HOUR and EVERY are integers, HOURS a number") from None
        if start < 0 or not hours > 0 or every < 1:
            raise TunerError(f"--traces {item!r}: expected START_HOUR >= 0, HOURS > 0, EVERY >= 1")
        path = parts[4] if len(parts) > 4 else ""
        day = path.removeprefix("day:") if path.startswith("day:") else ""
        out.append(TraceSpec(parts[0], "" if day else path, start, hours, every, peak_qps, day))
    return out


def specs_from(args: argparse.Namespace) -> list[Any]:
    """The grid of `args` (one-line TunerError on a bad flag)."""
    from tuner.replay.grid import grid

    names = [v.strip() for v in args.variants.split(",") if v.strip()]
    unknown = [v for v in names if v not in VARIANTS]
    if unknown:
        raise TunerError(f"--variants {','.join(unknown)}: expected some of {', '.join(VARIANTS)}")
    try:
        slas = [(float(a), float(b)) for a, b in (x.split(":") for x in args.slas.split(","))]
    except ValueError:
        raise TunerError(f"--slas {args.slas!r}: expected PERCENTILE:SLA_US,...") from None
    if args.seeds < 1:
        raise TunerError(f"--seeds {args.seeds}: expected at least 1")
    from actuators.sim.plants import plant

    plant(args.plant)  # one line naming the plants
    return grid(
        parse_traces(args.traces, args.peak_qps),
        range(args.seed0, args.seed0 + args.seeds),
        slas,
        [(v, *VARIANTS[v]) for v in names],
        trials=args.trials,
        policies=[p.strip() for p in args.policies.split(",")],
        plant=args.plant,
    )


def run(args: argparse.Namespace) -> int:
    from tuner.replay.grid import run_grid

    report = run_grid(specs_from(args), engine=args.engine, address=args.address, num_cpus=args.num_cpus)
    text = json.dumps(report.to_json(), indent=2)
    if args.out is None:
        print(text)
    else:
        args.out.write_text(text + "\n")
        print(f"{len(report.runs)} replays ({report.engine}, {report.wall_s:.1f} s) -> {args.out}", file=sys.stderr)
    return 0
