"""`tuner replay [TRACE]`: replay a day of load against a host under the tuner and the baselines, write a report.

Defaults: the bundled synthetic 24 h sample trace, the simulated host, peak 600 kQPS (the dissertation's
Twitter replay on a 16-core E5-2690 spans roughly 200-600 kQPS), hourly windows, 30 trials per retune.
"""

from __future__ import annotations

import argparse
import math
import sys
import time
from pathlib import Path

from tuner.errors import TunerError

#: Default peak of the replayed schedule (QPS); see the module docstring.
DEFAULT_PEAK_QPS = 600_000.0


def register(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser(
        "replay",
        help="replay a trace's load on a host: tuner vs linux-default, static-performance and the oracle",
        description="Bin a trace into windows; for each window set the host's load, retune with Ax (exploration "
        "energy counts), hold the chosen point for the rest of the window; run the same schedule under "
        "linux-default, static-performance and the oracle; write summary.json, windows.csv and PNGs to --out.",
    )
    p.add_argument("trace", nargs="?", default=None, help="trace file (plain/.gz/.zst); default: the bundled sample")
    p.add_argument("--host", default="sim", help="'sim' (default) or 'module:factory' (needs set_offered_qps)")
    p.add_argument("--hours", type=str, default="24", help="hours of the trace to replay (default 24)")
    p.add_argument("--bin", type=str, default="3600", help="window length in seconds (default 3600)")
    p.add_argument("--peak-qps", type=str, default=None,
                   help=f"scale the trace so its busiest window has this mean QPS (default {DEFAULT_PEAK_QPS:.0f})")
    p.add_argument("--reward", default=None, help="constrained (default), sla-linear, edp or latency")
    p.add_argument("--sla-us", type=str, default="500", help="tail-latency SLA in µs (default 500)")
    p.add_argument("--percentile", type=str, default="99", help="50, 90, 95, 99 (default) or 99.9")
    p.add_argument("--trials", type=str, default="30", help="trials per retune (default 30)")
    p.add_argument("--sobol-trials", type=str, default="8", help="quasi-random trials before the GP (default 8)")
    p.add_argument("--settle", type=str, default="1", help="settle time per trial, s (default 1)")
    p.add_argument("--window", type=str, default="20", help="measurement window per trial, s (default 20)")
    p.add_argument("--itr-resolution", type=str, default="8",
                   help="ITR grid the optimiser searches, µs (default 8; 2 = every ixgbe value, ~3x slower per suggestion)")
    p.add_argument("--oracle-exhaustive", action="store_true",
                   help="oracle evaluates every ITR value instead of coarse-to-fine (slow on the simulated host)")
    p.add_argument("--seed", type=int, default=0, help="seed for the host and the optimiser (default 0)")
    p.add_argument("--policies", default="tuner,linux-default,static-performance,oracle",
                   help="comma list of tuner, linux-default, static-performance, oracle (default: all)")
    p.add_argument("--out", type=Path, default=Path("out"), help="output directory (default ./out)")
    p.add_argument("--quiet", "-q", action="store_true", help="no progress bar and no per-window table (the summary is still printed)")
    p.set_defaults(func=run)


def _num(text: str, flag: str, *, integer: bool = False, minimum: float | None = None, strict: bool = True) -> float:
    try:
        value = int(text) if integer else float(text)
    except (TypeError, ValueError):
        raise TunerError(f"{flag} {text!r}: expected {'an integer' if integer else 'a number'}") from None
    if not math.isfinite(value) or (minimum is not None and (value <= minimum if strict else value < minimum)):
        raise TunerError(f"{flag} {text!r}: expected a number {'>' if strict else '>='} {minimum:g}")
    return value


def run(args: argparse.Namespace) -> int:
    from reward import DEFAULT_REWARD
    from tuner.optimizer import Objective, TunerSettings
    from tuner.replay import parse_policies

    try:
        sla = float(args.sla_us)
    except ValueError:
        raise TunerError(f"--sla-us {args.sla_us!r}: expected a positive number of µs") from None
    try:
        pct = float(args.percentile.rstrip("%").lstrip("pP"))
    except ValueError:
        pct = args.percentile
    objective = Objective(reward=args.reward or DEFAULT_REWARD, percentile=pct, sla_us=sla)
    settings = TunerSettings(
        trials=int(_num(args.trials, "--trials", integer=True, minimum=1, strict=False)),
        sobol_trials=int(_num(args.sobol_trials, "--sobol-trials", integer=True, minimum=1, strict=False)),
        settle_s=_num(args.settle, "--settle", minimum=0, strict=False),
        window_s=_num(args.window, "--window", minimum=0),
        seed=args.seed,
        itr_resolution_us=int(_num(args.itr_resolution, "--itr-resolution", integer=True, minimum=1, strict=False)),
    )
    policies = parse_policies(args.policies)
    hours = _num(args.hours, "--hours", minimum=0)
    bin_s = _num(args.bin, "--bin", minimum=0)
    peak = DEFAULT_PEAK_QPS if args.peak_qps is None else _num(args.peak_qps, "--peak-qps", minimum=0)

    from traces.schedule import load_schedule, sample_trace_path

    trace = Path(args.trace) if args.trace else sample_trace_path()
    if not trace.exists():
        raise TunerError(f"{trace}: no such trace file")
    schedule = load_schedule(trace, bin_s=bin_s, hours=hours, peak_qps=peak)
    return execute(args.host, schedule, objective, settings, policies, args.out, quiet=args.quiet,
                   source=str(trace) if args.trace else f"{trace.name} (bundled sample)",
                   oracle_exhaustive=args.oracle_exhaustive)


def execute(host_spec: str, schedule: object, objective: object, settings: object, policies: tuple[str, ...],
            out: Path, *, quiet: bool = False, source: str = "", oracle_exhaustive: bool = False) -> int:
    """Run the replay with a progress bar, print the report and write the files."""
    from rich.console import Console

    from actuators.host import LoadControl
    from tuner.hosts import make_host
    from tuner.replay import replay
    from tuner.report import print_report, write_files

    seed = settings.seed  # type: ignore[attr-defined]
    first = make_host(host_spec, seed=seed)
    if not isinstance(first, LoadControl):
        raise TunerError(f"--host {host_spec!r}: the host cannot set its offered load (no set_offered_qps); "
                         "replay needs load control, e.g. --host sim")
    spare = [first]

    def factory():  # type: ignore[no-untyped-def]
        return spare.pop() if spare else make_host(host_spec, seed=seed)

    windows = schedule.windows  # type: ignore[attr-defined]
    console = Console(stderr=True)
    out_console = Console()
    t0 = time.perf_counter()
    if quiet or not console.is_terminal:
        result = replay(factory, windows, objective, settings, policies=policies,  # type: ignore[arg-type]
                        host_label=host_spec, source=source,
                        oracle_exhaustive=oracle_exhaustive)
    else:
        from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

        with Progress(TextColumn("[bold]replay[/] {task.description}"), BarColumn(), MofNCompleteColumn(),
                      TimeElapsedColumn(), console=console) as prog:
            task = prog.add_task("", total=len(windows) * len(policies))

            def progress(policy: str, index: int, rec: object) -> None:
                if rec is None:
                    prog.advance(task)
                    prog.update(task, description=f"{policy} window {index}")
                else:
                    prog.update(task, description=f"{policy} window {index} trial {rec.index + 1}")  # type: ignore[attr-defined]

            result = replay(factory, windows, objective, settings, policies=policies,  # type: ignore[arg-type]
                            progress=progress, host_label=host_spec, source=source,
                        oracle_exhaustive=oracle_exhaustive)
    result.meta["peak_qps_target"] = schedule.peak_qps  # type: ignore[attr-defined]
    result.meta["trace_scale"] = schedule.scale  # type: ignore[attr-defined]
    result.meta["total_wall_s"] = time.perf_counter() - t0
    paths = write_files(result, out)
    print_report(result, out_console, per_window=not quiet)
    print(f"wrote {', '.join(str(p) for p in paths)}", file=sys.stdout)
    return 0
