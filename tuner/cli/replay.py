"""`tuner replay [TRACE]`: replay a day of load against a host under the tuner and the baselines, write a report.

Defaults: the bundled synthetic 24 h sample trace, the simulated host, peak 600 kQPS (the dissertation's
Twitter replay on a 16-core E5-2690 spans roughly 200-600 kQPS), hourly windows, 30 trials per retune, one day.
`--days N` repeats the day with seeded day-to-day noise (`traces.schedule.repeat_days`); `--tuner cold|warm`
and the learning flags choose between the dissertation's cold tuner and the contextual one.
"""

from __future__ import annotations

import argparse
import math
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

from core.errors import TunerError
from tuner.cli.load import add_load_arguments, load_from_args
from tuner.optimize.latscale import KINDS as LATENCY_METRICS  # `latency_metric` values

if TYPE_CHECKING:  # imported where used: the CLI starts without them
    from traces.schedule import Schedule
    from tuner.optimize.settings import Objective, TunerSettings

#: Default peak of the replayed schedule (QPS); see the module docstring.
DEFAULT_PEAK_QPS = 600_000.0


#: The tuner `tuner replay` runs unless `--tuner` says otherwise: the 3-day benchmark (docs/benchmarks.md)
#: showed every learning feature helps, so "warm"; "cold" is the dissertation's tuner.
DEFAULT_PRESET = "warm"


def register(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser(
        "replay",
        help="replay a trace's load on a host: tuner vs linux-default, static-performance and the oracle",
        description="Bin a trace into windows; for each window set the host's load, retune with Ax (exploration "
        "energy counts), hold the chosen point for the rest of the window; run the same schedule under "
        "linux-default, static-performance and the oracle; write summary.json, windows.csv and PNGs to --out.",
    )
    p.add_argument("trace", nargs="?", default=None, help="trace file (plain/.gz/.zst); default: the bundled sample")
    p.add_argument("--host", default="sim", help="'sim' (default), 'real' with --load-command, or 'module:factory'")
    add_load_arguments(p)
    p.add_argument("--hours", type=str, default="24", help="hours of the trace to replay (default 24)")
    p.add_argument("--bin", type=str, default="3600", help="window length in seconds (default 3600)")
    p.add_argument(
        "--peak-qps",
        type=str,
        default=None,
        help=f"scale the trace so its busiest window has this mean QPS (default {DEFAULT_PEAK_QPS:.0f})",
    )
    p.add_argument("--reward", default=None, help="constrained (default), sla-linear, edp or latency")
    p.add_argument("--sla-us", type=str, default="500", help="tail-latency SLA in µs (default 500)")
    p.add_argument("--percentile", type=str, default="99", help="50, 90, 95, 99 (default) or 99.9")
    p.add_argument("--trials", type=str, default=None, help="(max) trials per retune (default 30)")
    p.add_argument("--sobol-trials", type=str, default="8", help="quasi-random trials before the GP (default 8)")
    p.add_argument("--settle", type=str, default="1", help="settle time per trial, s (default 1)")
    p.add_argument("--window", type=str, default="20", help="measurement window per trial, s (default 20)")
    p.add_argument(
        "--itr-resolution",
        type=str,
        default=None,
        help="ITR grid the optimiser searches, µs (default: 16 for --tuner warm, 8 for cold; 2 = every "
        "ixgbe value, several times slower per suggestion)",
    )
    p.add_argument(
        "--oracle-exhaustive",
        action="store_true",
        help="oracle searches the full knob grid, not each frequency's largest feasible ITR (slow on a sim host)",
    )
    p.add_argument("--seed", type=int, default=0, help="seed for the host and the optimiser (default 0)")
    p.add_argument(
        "--policies",
        default="tuner,linux-default,static-performance,oracle",
        help="comma list of tuner, linux-default, static-performance, oracle (default: all)",
    )
    p.add_argument("--out", type=Path, default=Path("out"), help="output directory (default ./out)")
    g = p.add_argument_group("multi-day schedule")
    g.add_argument(
        "--days",
        type=str,
        default="1",
        help="repeat the replayed day N times (default 1); day 0 is the trace, later days add noise",
    )
    g.add_argument(
        "--day-noise",
        type=str,
        default=None,
        help="sigma of the per-window lognormal QPS factor on days >= 1, seeded by --seed "
        "(default 0.05 = 5 %%; clipped to the peak)",
    )
    t = p.add_argument_group("tuner (a preset first, then each flag overrides it)")
    t.add_argument(
        "--tuner",
        dest="preset",
        default=DEFAULT_PRESET,
        metavar="cold|warm",
        help="warm (default, chosen by the 3-day benchmark): context + stopping rule + safe exploration "
        "+ adaptive windows; cold: the dissertation's tuner (fresh experiment per window, 30 "
        "trials, every option below off)",
    )
    t.add_argument(
        "--context",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="offered QPS as a model input; ONE experiment for the whole replay (all windows, days)",
    )
    t.add_argument("--context-max-qps", type=str, default=None, help="QPS normaliser of the load input (default 1e6)")
    t.add_argument("--history-max-trials", type=str, default=None, help="trials the contextual model keeps (100)")
    t.add_argument("--min-trials", type=str, default=None, help="trials per retune before it may stop (default 2)")
    t.add_argument(
        "--stop-ei-pct",
        type=str,
        default=None,
        help="stop a retune when one more trial's expected improvement < this %% of power (0 = off)",
    )
    t.add_argument(
        "--safe-delta",
        type=str,
        default=None,
        help="only try points whose modelled P(percentile > SLA) <= this (0 = off, e.g. 0.05)",
    )
    t.add_argument(
        "--safe-radius",
        type=str,
        default=None,
        help="with --safe-delta: only try points within this normalised knob distance of one measured "
        "within the SLA at this load or up to ~11 %% below (0 = off; default 0.2)",
    )
    t.add_argument(
        "--safe-model-error",
        type=str,
        default=None,
        help="with --safe-delta: SD of ln latency added to the model's in P(SLA broken) (default 0)",
    )
    t.add_argument(
        "--safe-sd-scale",
        type=str,
        default=None,
        help="with --safe-delta: factor on the model's SD in P(SLA broken) (1 = as it is; warm: 2)",
    )
    t.add_argument(
        "--latency-metric",
        default=None,
        metavar="log|headroom",
        help="the scale the model fits the percentile on: ln µs (default) or SLA / µs",
    )
    t.add_argument(
        "--window-mode",
        default=None,
        metavar="fixed|adaptive",
        help="fixed --window s per trial, or adaptive: grow until the percentile's CI is within "
        "+-window-ci-pct (max --window s)",
    )
    t.add_argument(
        "--window-guard",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="adaptive windows: end a trial after any chunk whose CI is wholly above the SLA (default on)",
    )
    t.add_argument("--window-ci-pct", type=str, default=None, help="adaptive windows: CI half-width target, %% (5)")
    t.add_argument("--window-min-s", type=str, default=None, help="adaptive windows: minimum seconds (2)")
    t.add_argument(
        "--history",
        type=Path,
        default=None,
        metavar="FILE",
        help="seed the contextual tuner with earlier trials (tuner.trial/v1 JSON lines)",
    )
    t.add_argument(
        "--save-trials",
        type=Path,
        default=None,
        metavar="FILE",
        help="also write the tuner's trials to FILE (they always go to OUT/trials.jsonl)",
    )
    p.add_argument(
        "--quiet",
        "-q",
        action="store_true",
        help="no progress bar and no per-window table (the summary is still printed)",
    )
    p.add_argument(
        "--json",
        action="store_true",
        help="print the summary as JSON (what OUT/summary.json holds) instead of the tables",
    )
    p.set_defaults(func=run)


def _num(text: str, flag: str, *, integer: bool = False, minimum: float | None = None, strict: bool = True) -> float:
    try:
        value = int(text) if integer else float(text)
    except (TypeError, ValueError):
        raise TunerError(f"{flag} {text!r}: expected {'an integer' if integer else 'a number'}") from None
    if not math.isfinite(value) or (minimum is not None and (value <= minimum if strict else value < minimum)):
        raise TunerError(f"{flag} {text!r}: expected a number {'>' if strict else '>='} {minimum:g}")
    return value


#: `--window-mode` values (TunerSettings.window_mode).
WINDOW_MODES = ("fixed", "adaptive")


def tuner_settings(args: argparse.Namespace) -> TunerSettings:
    """TunerSettings from the flags: defaults, then the `--tuner` preset, then every flag given explicitly."""
    from tuner.optimize.settings import TunerSettings
    from tuner.replay.run import TUNER_PRESETS, preset_settings

    base: dict[str, Any] = {
        "sobol_trials": int(_num(args.sobol_trials, "--sobol-trials", integer=True, minimum=1, strict=False)),
        "settle_s": _num(args.settle, "--settle", minimum=0, strict=False),
        "window_s": _num(args.window, "--window", minimum=0),
        "seed": args.seed,
    }
    explicit: dict[str, Any] = {}
    if args.itr_resolution is not None:
        explicit["itr_resolution_us"] = int(
            _num(args.itr_resolution, "--itr-resolution", integer=True, minimum=1, strict=False)
        )
    if args.trials is not None:
        explicit["trials"] = int(_num(args.trials, "--trials", integer=True, minimum=1, strict=False))
    if args.context is not None:
        explicit["context"] = bool(args.context)
    if args.context_max_qps is not None:
        explicit["context_max_qps"] = _num(args.context_max_qps, "--context-max-qps", minimum=0)
    if args.history_max_trials is not None:
        explicit["history_max_trials"] = int(
            _num(args.history_max_trials, "--history-max-trials", integer=True, minimum=1, strict=False)
        )
    if args.min_trials is not None:
        explicit["min_trials"] = int(_num(args.min_trials, "--min-trials", integer=True, minimum=1, strict=False))
    if args.stop_ei_pct is not None:
        explicit["stop_ei_pct"] = _num(args.stop_ei_pct, "--stop-ei-pct", minimum=0, strict=False)
    for field, flag, lo, hi, closed, what in (  # bounded safety settings: [lo, hi) or [lo, hi]
        ("safe_delta", "--safe-delta", 0.0, 1.0, False, "a probability in [0, 1) (0 = off)"),
        ("safe_radius", "--safe-radius", 0.0, 2.0, True, "a normalised knob distance in [0, 2] (0 = off)"),
        ("safe_model_error", "--safe-model-error", 0.0, 1.0, True, "an SD of ln latency in [0, 1] (0 = off)"),
        ("safe_sd_scale", "--safe-sd-scale", 1.0, 10.0, True, "a factor in [1, 10]"),
    ):
        text = getattr(args, field)
        if text is None:
            continue
        value = _num(text, flag, minimum=lo, strict=False)
        if value > hi or (value == hi and not closed):
            raise TunerError(f"{flag} {text!r}: expected {what}")
        explicit[field] = value
    if args.latency_metric is not None:
        if args.latency_metric not in LATENCY_METRICS:
            raise TunerError(f"--latency-metric {args.latency_metric!r}: expected one of {', '.join(LATENCY_METRICS)}")
        explicit["latency_metric"] = args.latency_metric
    if args.window_mode is not None:
        if args.window_mode not in WINDOW_MODES:
            raise TunerError(f"--window-mode {args.window_mode!r}: expected one of {', '.join(WINDOW_MODES)}")
        explicit["window_mode"] = args.window_mode
    if args.window_guard is not None:
        explicit["window_guard"] = bool(args.window_guard)
    if args.window_ci_pct is not None:
        explicit["window_ci_pct"] = _num(args.window_ci_pct, "--window-ci-pct", minimum=0)
    if args.window_min_s is not None:
        explicit["window_min_s"] = _num(args.window_min_s, "--window-min-s", minimum=0)
    if args.preset is not None and args.preset not in TUNER_PRESETS:
        raise TunerError(f"--tuner {args.preset!r}: expected one of {', '.join(TUNER_PRESETS)}")
    try:
        if args.preset is not None:  # always, from the command line (default DEFAULT_PRESET)
            return preset_settings(args.preset, TunerSettings(**base), **explicit)
        return TunerSettings(**{**base, **explicit})
    except TypeError as exc:  # a flag for a TunerSettings field this build does not have
        raise TunerError(f"tuner settings: {exc}") from None


def run(args: argparse.Namespace) -> int:
    from reward import DEFAULT_REWARD
    from tuner.optimize.settings import Objective
    from tuner.replay.run import parse_policies

    try:
        sla = float(args.sla_us)
    except ValueError:
        raise TunerError(f"--sla-us {args.sla_us!r}: expected a positive number of µs") from None
    try:
        pct = float(args.percentile.rstrip("%").lstrip("pP"))
    except ValueError:
        pct = args.percentile
    objective = Objective(reward=args.reward or DEFAULT_REWARD, percentile=pct, sla_us=sla)
    settings = tuner_settings(args)
    policies = parse_policies(args.policies)
    hours = _num(args.hours, "--hours", minimum=0)
    bin_s = _num(args.bin, "--bin", minimum=0)
    peak = DEFAULT_PEAK_QPS if args.peak_qps is None else _num(args.peak_qps, "--peak-qps", minimum=0)
    n_days = int(_num(args.days, "--days", integer=True, minimum=1, strict=False))
    from traces.schedule import DEFAULT_DAY_NOISE, load_schedule, repeat_days, sample_trace_path

    noise = (
        DEFAULT_DAY_NOISE if args.day_noise is None else _num(args.day_noise, "--day-noise", minimum=0, strict=False)
    )
    if noise > 1:
        raise TunerError(f"--day-noise {args.day_noise!r}: expected a fraction in [0, 1] (0.05 = 5 %)")
    if args.history is not None and not getattr(settings, "context", False):
        raise TunerError(
            "--history needs the contextual tuner (--context or --tuner warm): the cold tuner starts "
            "a fresh experiment per window"
        )
    if args.history is not None and not args.history.is_file():
        raise TunerError(f"--history {args.history}: no such file")

    trace = Path(args.trace) if args.trace else sample_trace_path()
    if not trace.exists():
        raise TunerError(f"{trace}: no such trace file")
    schedule = load_schedule(trace, bin_s=bin_s, hours=hours, peak_qps=peak)
    if n_days > 1:
        schedule = repeat_days(schedule, n_days, noise=noise, seed=args.seed)
    load = load_from_args(args)
    try:
        return execute(
            args.host,
            schedule,
            objective,
            settings,
            policies,
            args.out,
            quiet=args.quiet,
            as_json=args.json,
            source=str(trace) if args.trace else f"{trace.name} (bundled sample)",
            oracle_exhaustive=args.oracle_exhaustive,
            history_path=args.history,
            save_trials=args.save_trials,
            day_noise=noise if n_days > 1 else None,
            host_options=None if load is None else {"load": load},
        )
    finally:
        if load is not None:
            load.stop()


def execute(
    host_spec: str,
    schedule: Schedule,
    objective: Objective,
    settings: TunerSettings,
    policies: tuple[str, ...],
    out: Path,
    *,
    quiet: bool = False,
    as_json: bool = False,
    source: str = "",
    oracle_exhaustive: bool = False,
    history_path: Path | None = None,
    save_trials: Path | None = None,
    day_noise: float | None = None,
    host_options: dict | None = None,
) -> int:
    """Run the replay with a progress bar, print the report and write the files (and `save_trials`)."""
    from rich.console import Console

    from actuators.host import LoadControl
    from tuner.cli.output import print_json, table_console
    from tuner.hosts import make_host
    from tuner.replay.report import print_report, summary, write_files, write_trials
    from tuner.replay.run import ReplayWindow, replay

    seed = settings.seed
    first = make_host(host_spec, seed=seed, **(host_options or {}))
    if not isinstance(first, LoadControl):
        raise TunerError(
            f"--host {host_spec!r}: the host cannot set its offered load (no set_offered_qps); "
            "replay needs load control, e.g. --host sim, or --host real with --load-command"
        )
    spare = [first]
    history: list = []
    if history_path is not None:
        from tuner.store.history import read_trials

        history = read_trials(history_path, space=first.knobs())

    def factory():
        return spare.pop() if spare else make_host(host_spec, seed=seed, **(host_options or {}))

    windows = tuple(ReplayWindow(w.index, w.start_s, w.seconds, w.qps, w.day) for w in schedule.windows)
    console = Console(stderr=True)
    t0 = time.perf_counter()
    if quiet or not console.is_terminal:
        result = replay(
            factory,
            windows,
            objective,
            settings,
            policies=policies,
            host_label=host_spec,
            source=source,
            oracle_exhaustive=oracle_exhaustive,
            history=history,
        )
    else:
        from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

        with Progress(
            TextColumn("[bold]replay[/] {task.description}"),
            BarColumn(),
            MofNCompleteColumn(),
            TimeElapsedColumn(),
            console=console,
        ) as prog:
            task = prog.add_task("", total=len(windows) * len(policies))

            def progress(policy: str, index: int, rec: object) -> None:
                if rec is None:
                    prog.advance(task)
                    prog.update(task, description=f"{policy} window {index}")
                else:
                    prog.update(task, description=f"{policy} window {index} trial {rec.index + 1}")  # type: ignore[attr-defined]

            result = replay(
                factory,
                windows,
                objective,
                settings,
                policies=policies,
                progress=progress,
                host_label=host_spec,
                source=source,
                oracle_exhaustive=oracle_exhaustive,
                history=history,
            )
    result.meta["peak_qps_target"] = schedule.peak_qps
    result.meta["trace_scale"] = schedule.scale
    result.meta["total_wall_s"] = time.perf_counter() - t0
    if day_noise is not None:
        result.meta["day_noise"] = day_noise
    if history_path is not None:
        result.meta["history"] = {"file": str(history_path), "trials": len(history)}
    paths = write_files(result, out)
    if save_trials is not None:
        save_trials.parent.mkdir(parents=True, exist_ok=True)
        n = write_trials(result, save_trials)
        print(f"saved {n} completed tuner trial(s) to {save_trials}", file=sys.stderr if as_json else sys.stdout)
    if as_json:
        print_json(summary(result))
    else:
        print_report(result, table_console(), per_window=not quiet)
    print(f"wrote {', '.join(str(p) for p in paths)}", file=sys.stderr if as_json else sys.stdout)
    return 0
