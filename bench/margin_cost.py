"""What the tuner's own margin costs on the zoo: the per-window oracle at the limit the tuner holds to (the SLA less
`sla_margin_pct`, 5 % by default) over the per-window oracle at the SLA, per member x seed x SLA, through the replay
grid (Ray tasks on the cluster at --address, serially otherwise). Prints one JSON document.

The ratio targets compare the tuner with the oracle at the SLA; a tuner that knew the plant exactly, explored for
free and kept the margin would still sit at this ratio. Dividing a run's ratio by it leaves what exploration, model
error and the held points' CI cost (docs/optimizer-final-choice.md, "What the 5 % margin costs").

    .venv/bin/python bench/margin_cost.py --half tuning --seeds 4 --every 3 --hours 24 --engine ray
    .venv/bin/python bench/margin_cost.py --half test --seeds 5 --every 3 --hours 24 --engine ray
    .venv/bin/python bench/margin_cost.py --members bundled --seeds 1 --slas 99:200 --hours 3
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

from core.errors import TunerError  # noqa: E402
from tuner.replay import grid as g  # noqa: E402
from tuner.replay import zoo  # noqa: E402
from tuner.replay import zoo_cells as zc  # noqa: E402


def limit_us(sla_us: float, margin_pct: float) -> float:
    """The limit the tuner holds to at `sla_us` with `sla_margin_pct` = `margin_pct` (`settings.met_limit_us`)."""
    from tuner.optimize.settings import TunerSettings, met_limit_us

    return met_limit_us(sla_us, TunerSettings(sla_margin_pct=margin_pct))


def add_margin_argument(ap: argparse.ArgumentParser) -> None:
    """--margin-pct: the tuner's margin, by default its own `sla_margin_pct` (checked by `margin_pct`)."""
    from tuner.optimize.settings import TunerSettings

    ap.add_argument(
        "--margin-pct",
        type=float,
        default=TunerSettings().sla_margin_pct,
        help="the tuner's margin, %% (default: the tuner's sla_margin_pct, %(default)s)",
    )


def margin_pct(args: argparse.Namespace) -> float:
    """--margin-pct; TunerError unless it is in (0, 100)."""
    if not 0 < args.margin_pct < 100:
        raise TunerError(f"--margin-pct {args.margin_pct:g}: expected a percentage in (0, 100)")
    return float(args.margin_pct)


def specs(args: argparse.Namespace, members: list[zoo.Member]) -> list[g.RunSpec]:
    """Two oracle-only runs per member x seed x SLA: at the SLA (variant "sla") and at the limit ("limit")."""
    from bench.generalisation import parse_slas, seed_range

    seeds = seed_range(args)
    margin = margin_pct(args)
    out = []
    for m in members:
        trace = zc.member_trace(m, hours=args.hours, start_hour=args.start_hour, every=args.every)
        for seed in seeds:
            for pct, sla in parse_slas(args.slas):
                for variant, at in (("sla", sla), ("limit", limit_us(sla, margin))):
                    out.append(g.RunSpec(trace, seed, pct, at, variant=variant, policies=("oracle",), plant=m.plant))
    return out


def pairs(runs: list[dict[str, Any]], margin_pct: float) -> list[dict[str, Any]]:
    """Per member x seed x SLA: both oracles' energy and the limit's over the SLA's."""
    energy = {
        (r["trace"], r["seed"], r["percentile"], r["sla_us"], r["variant"]): sum(
            w["energy_j"] for w in r["windows"]["oracle"]
        )
        for r in runs
    }
    out = []
    for (member, seed, pct, sla, variant), e_sla in sorted(energy.items()):
        if variant != "sla":
            continue
        limit = limit_us(sla, margin_pct)
        e_limit = energy[(member, seed, pct, limit, "limit")]
        out.append(
            {
                "member": member,
                "seed": seed,
                "sla": f"{pct:g}:{sla:g}",
                "limit_us": limit,
                "oracle_j": e_sla,
                "limit_oracle_j": e_limit,
                "ratio": e_limit / e_sla,
            }
        )
    return out


def summary(rows: list[dict[str, Any]], half_of: dict[str, str]) -> dict[str, Any]:
    """Median, min and max of the ratio per half and SLA, and per member and SLA."""
    groups: dict[str, dict[str, list[float]]] = {"halves": {}, "members": {}}
    for r in rows:
        groups["halves"].setdefault(f"{half_of[r['member']]} {r['sla']}", []).append(r["ratio"])
        groups["members"].setdefault(f"{r['member']} {r['sla']}", []).append(r["ratio"])
    return {
        kind: {
            k: {"runs": len(v), "median": statistics.median(v), "min": min(v), "max": max(v)}
            for k, v in sorted(by.items())
        }
        for kind, by in groups.items()
    }


def main(argv: list[str] | None = None) -> int:
    from bench.generalisation import add_zoo_arguments, chosen_members, engine_of

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_zoo_arguments(ap, seeds=4)
    add_margin_argument(ap)
    args = ap.parse_args(argv)
    t0 = time.perf_counter()
    try:
        members = chosen_members(args)
        report = g.run_grid(specs(args, members), engine=engine_of(args), address=args.address, num_cpus=args.num_cpus)
    except TunerError as exc:
        print(f"bench/margin_cost.py: {exc}", file=sys.stderr)
        return 2
    rows = pairs(report.runs, args.margin_pct)
    out = {
        "command": " ".join(["bench/margin_cost.py", *(sys.argv[1:] if argv is None else argv)]),
        "members": [{"name": m.name, "plant": m.plant, "day": m.day, "half": m.half} for m in members],
        "margin_pct": args.margin_pct,
        "engine": report.engine,
        "wall_s": time.perf_counter() - t0,
        "summary": summary(rows, {m.name: m.half for m in members}),
        "runs": rows,
    }
    print(json.dumps(out, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
