"""`tuner sweep`: the static ITR x DVFS sweep of dissertation ch. 5 on any host.

Writes to `--out DIR`: `points.jsonl` (one record per point, appended and flushed as measured),
`sweep.json` (what was asked), `best.json`, `pareto.json` and `heatmap.png`. The host is restored on
every exit path (normal, error, Ctrl-C, SIGTERM). This module parses and prints; the sweep run itself is
`tuner.replay.sweep_session`.
"""

from __future__ import annotations

import argparse
import math
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any

from core.errors import HostError, TunerError
from tuner.cli.load import add_load_arguments, host_options_from_args, load_from_args

if TYPE_CHECKING:
    from tuner.replay.sweep_session import SweepOutcome, SweepPlan


def register(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser(
        "sweep",
        help="static ITR x DVFS sweep: every point's latency and energy, the optimum under an SLA, Pareto front, heatmap",
        description="Measure every (ITR, DVFS) point of a grid on a host (dissertation ch. 5) and write "
        "points.jsonl, best.json, pareto.json and heatmap.png to --out.",
    )
    p.add_argument("--host", default="sim", help="'sim', 'real' or 'module:factory' (default: sim)")
    p.add_argument(
        "--qps",
        type=str,
        default=None,
        help="offered load in requests/s (needs a host with load control); omit to record the host's own load",
    )
    p.add_argument(
        "--itr",
        default="all",
        help="ITR values in µs: 'all' (default), LO:HI:STEP (e.g. 2:1022:2, HI included), LO:HI, or A,B,C",
    )
    p.add_argument(
        "--dvfs",
        default="all",
        help="frequencies in GHz: 'all' (default), LO:HI:STEP (e.g. 1.2:2.9:0.1), LO:HI, or 1.2,1.3",
    )
    p.add_argument("--seconds", type=str, default="20", help="measurement window per point, s (default 20)")
    p.add_argument("--settle", type=str, default="1", help="time to settle after setting a point, s (default 1)")
    p.add_argument("--sla-us", type=str, default="500", help="tail-latency SLA in µs (default 500)")
    p.add_argument("--percentile", type=str, default="99", help="SLA percentile: 50, 90, 95, 99 or 99.9 (default 99)")
    p.add_argument(
        "--min-load",
        type=str,
        default="0.95",
        help="a point counts only if it serves at least this share of the offered load (default 0.95)",
    )
    p.add_argument("--seed", type=int, default=None, help="seed passed to the host factory (simulated hosts)")
    add_load_arguments(p)
    p.add_argument(
        "--load-schedule",
        default=None,
        help="a moving load for the simulated host: a TOML inline table, e.g. "
        "'{shape=\"sine\", low=100000, high=600000, period_s=600}'; each point records the load it ran at "
        "(see docs/simulated-host-load.md); not with --qps",
    )
    p.add_argument("--out", required=True, type=Path, help="output directory")
    p.add_argument(
        "--resume", action="store_true", help="append to an existing sweep in --out, skipping points already measured"
    )
    p.add_argument(
        "--json",
        action="store_true",
        help="print the result (points, the best point as in OUT/best.json) as JSON instead of text",
    )
    p.set_defaults(func=run)


def _number(text: str, flag: str, *, positive: bool = True, at_most: float | None = None) -> float:
    try:
        value = float(text)
    except (TypeError, ValueError):
        value = math.nan
    if not math.isfinite(value) or (value <= 0 if positive else value < 0) or (at_most is not None and value > at_most):
        bound = "a positive" if positive else "a non-negative"
        extra = f" <= {at_most:g}" if at_most is not None else ""
        raise TunerError(f"{flag} {text!r}: expected {bound} number{extra}")
    return value


# --------------------------------------------------------------------------- progress


@contextmanager
def _progress(total: int, done: int, every_s: float = 60.0) -> Iterator[Callable[..., None]]:
    """A rich progress bar on stderr; when stderr is not a terminal (nohup, systemd), one plain line at
    most every `every_s` seconds instead. Yields `update(text, advance)`."""
    if not sys.stderr.isatty():
        state = {"done": done, "last": time.monotonic()}

        def plain(text: str = "", advance: int = 0) -> None:
            state["done"] += advance
            now = time.monotonic()
            if advance and now - state["last"] >= every_s:
                state["last"] = now
                print(f"sweep: {state['done']}/{total} points; {text}", file=sys.stderr, flush=True)

        yield plain
        return
    from rich.console import Console
    from rich.progress import (
        BarColumn,
        MofNCompleteColumn,
        Progress,
        TextColumn,
        TimeElapsedColumn,
        TimeRemainingColumn,
    )

    with Progress(
        TextColumn("[bold]sweep"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        TimeRemainingColumn(),
        TextColumn("{task.description}"),
        console=Console(stderr=True),
        transient=False,
    ) as prog:
        task = prog.add_task("", total=total, completed=done)

        def update(text: str = "", advance: int = 0) -> None:
            prog.update(task, description=text, advance=advance)

        yield update


# --------------------------------------------------------------------------- run


def _plan(args: argparse.Namespace) -> SweepPlan:
    """The arguments checked, before any host is built or touched."""
    from tuner.replay.static_sweep import SweepConfig, parse_percentile
    from tuner.replay.sweep_session import SweepPlan

    config = SweepConfig(
        seconds=_number(args.seconds, "--seconds"), settle=_number(args.settle, "--settle", positive=False)
    )
    sla_us = _number(args.sla_us, "--sla-us")
    pct = parse_percentile(args.percentile)
    min_load = _number(args.min_load, "--min-load", at_most=1.0)
    qps = None if args.qps is None else _number(args.qps, "--qps")
    meta = {
        "host": args.host,
        "qps": qps,
        "load_schedule": args.load_schedule,
        "seconds": config.seconds,
        "settle": config.settle,
        "seed": args.seed,
        "itr": args.itr,
        "dvfs": args.dvfs,
        "sla_us": sla_us,
        "percentile": pct,
        "min_load_ratio": min_load,
    }
    return SweepPlan(args.out, meta, config, args.itr, args.dvfs, qps, sla_us, pct, min_load)


def run(args: argparse.Namespace) -> int:
    from tuner.hosts import make_host, parse_load_option
    from tuner.replay.sweep_session import run_session

    plan = _plan(args)
    schedule = None if args.load_schedule is None else parse_load_option(args.load_schedule, "--load-schedule")
    if schedule is not None and plan.qps is not None:
        raise TunerError("--load-schedule and --qps: give one (a moving load or a fixed one)")
    previous = plan.previous_points(args.resume)
    host_options: dict[str, Any] = host_options_from_args(args)
    if args.seed is not None:
        host_options["seed"] = args.seed
    load = load_from_args(args)
    if schedule is not None:
        host_options["load_schedule"] = schedule
    if load is not None:
        host_options["load"] = load
    host = make_host(args.host, **host_options)
    outcome = run_session(host, plan, previous, load=load, progress=_progress)
    return _report(args, plan, host.name, outcome)


def _report(args: argparse.Namespace, plan: SweepPlan, host_name: str, outcome: SweepOutcome) -> int:
    """Say how the sweep ended (exit status 130 when interrupted; a failure re-raised once reported)."""
    from tuner.replay.static_sweep import percentile_key
    from tuner.replay.sweep_session import POINTS

    for warning in outcome.warnings:
        print(f"tuner: warning: {warning}", file=sys.stderr)
    out, measured, new, failure = plan.out, outcome.measured, outcome.new, outcome.failure
    if outcome.restore_error is not None:
        err = outcome.restore_error
        msg = f"host {host_name!r}: restore failed: {type(err).__name__}: {err}"
        if failure is None:
            raise HostError(msg)
        print(f"tuner: error: {msg}", file=sys.stderr)
    if isinstance(failure, KeyboardInterrupt):
        print(
            f"tuner: interrupted after {new} of {outcome.todo} points; host restored; {out}/{POINTS} keeps "
            f"{len(measured)} points (rerun with --resume to continue)",
            file=sys.stderr,
        )
        return 130
    if failure is not None:
        if measured:
            print(
                f"tuner: sweep stopped after {new} of {outcome.todo} points; host restored; "
                f"{len(measured)} points kept in {out}/{POINTS}",
                file=sys.stderr,
            )
        raise failure
    best, elapsed, pct, sla_us = outcome.best, outcome.elapsed_s, plan.percentile, plan.sla_us
    if args.json:
        from tuner.cli.output import print_json

        print_json({"out": str(out), "points": len(measured), "measured_now": new, "elapsed_s": elapsed, "best": best})
        return 0
    print(f"sweep: {len(measured)} points ({new} measured now) in {elapsed:.1f} s -> {out}")
    if best is not None:
        if best["met"]:
            b = best["best"]
            print(
                f"best under p{pct:g} <= {sla_us:g} µs: ITR {b['itr_us']} µs @ {b['dvfs_ghz']:g} GHz: "
                f"p{pct:g} {b[percentile_key(pct)]:.0f} µs, {b['energy_j']:.1f} J ({b['power_w']:.1f} W)"
            )
        else:
            print(f"best: {best['message']}")
    return 0
