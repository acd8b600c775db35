"""`tuner replay [TRACE]`: replay a day of load against a host under the tuner and the baselines, write a report.

Defaults: the bundled synthetic 24 h sample trace, the simulated host, peak 600 kQPS (the dissertation's
Twitter replay on a 16-core E5-2690 spans roughly 200-600 kQPS), hourly windows, 30 trials per retune, one day.
`--days N` repeats the day with seeded day-to-day noise (`traces.schedule.repeat_days`); `--preset NAME`
(`tuner.optimize.presets.TUNER_PRESETS`: warm = the defaults, cold and warm's ablations) chooses the tuner, and
the tuner's flags (one per row of the settings table, `tuner.cli.replay_settings`) override it. Every flag can
also come from a `[replay]` table (`--config FILE`, `tuner.cli.replay_config`): the defaults, then the preset,
then the file, then the command line. Rarely used flags are left out of `--help`; docs/replay.md lists them all.
"""

from __future__ import annotations

import argparse
import shlex
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any, NamedTuple

from core.errors import TunerError
from tuner.cli.load import add_load_arguments, host_options_from_args, load_from_args
from tuner.cli.replay_settings import add_setting_flags, parse_number, tuner_settings

if TYPE_CHECKING:  # imported where used: the CLI starts without them
    from actuators.host import Host
    from traces.schedule import Schedule
    from tuner.optimize.settings import Objective, TunerSettings

#: Default peak of the replayed schedule (QPS); see the module docstring.
DEFAULT_PEAK_QPS = 600_000.0


#: Flags (by dest) that stay out of `--help` besides the tuner settings' own (each row says whether it is shown):
#: knobs for experiments, all documented in docs/replay.md and settable in a `[replay]` config file.
RARE = frozenset({"oracle_exhaustive", "day_noise"})


def register(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser(
        "replay",
        help="replay a trace's load on a host: tuner vs linux-default, static-performance and the oracle",
        description="Bin a trace into windows; for each window set the host's load, retune with Ax (exploration "
        "energy counts), hold the chosen point for the rest of the window; run the same schedule under "
        "linux-default, static-performance and the oracle; write summary.json, windows.csv and PNGs to --out.",
    )
    _add_replay_arguments(p)
    hidden = _add_tuner_arguments(p)
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
    p.set_defaults(func=run, _replay=_defer_defaults(p, RARE | hidden))


def _add_replay_arguments(p: argparse.ArgumentParser) -> None:
    """What to replay, on which host, against which SLA and policies, and where to write it."""
    p.add_argument("trace", nargs="?", default=None, help="trace file (plain/.gz/.zst); default: the bundled sample")
    p.add_argument("--host", default="sim", help="'sim' (default), 'real' with --load-command, or 'module:factory'")
    add_load_arguments(p)
    p.add_argument(
        "--plant",
        default=None,
        metavar="NAME",
        help="with --host sim: a plant of the zoo (actuators.sim.plants: bundled, e5-2650, silo, ...; default bundled)",
    )
    p.add_argument(
        "--day",
        default=None,
        metavar="NAME",
        help="a day of the zoo instead of a trace file (sample, two-peaks, flat-high, spiky, noisy-3, no-return)",
    )
    p.add_argument("--hours", type=str, default=None, help="hours of the trace to replay (default 24, a day's all)")
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
    p.add_argument(
        "--oracle-exhaustive",
        action="store_true",
        help="oracle searches the full knob grid, not each frequency's largest feasible ITR (slow on a sim host)",
    )
    p.add_argument(
        "--policies",
        default="auto",
        help="comma list of tuner, linux-default, static-performance, oracle, oracle-hourly (default: the first "
        "four; with --bin under an hour oracle-hourly, the hour's best static point, instead of oracle)",
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


def _add_tuner_arguments(p: argparse.ArgumentParser) -> set[str]:
    """The preset, the `[replay]` file, the trial files, and one flag per tuner setting (`add_setting_flags`);
    returns the dests of the settings' flags left out of `--help`."""
    from tuner.optimize.presets import DEFAULT_PRESET, WARM_ABLATIONS, WARM_ADDITIONS

    t = p.add_argument_group(
        "tuner (a preset first, then --config's [replay] table, then each flag overrides it; more flags: "
        "docs/replay.md)"
    )
    t.add_argument(
        "--preset",
        "--tuner",
        dest="preset",
        default=DEFAULT_PRESET,
        metavar="NAME",
        help=f"{DEFAULT_PRESET} (default, chosen by the 3-day benchmark): context + stopping rule + safe "
        "exploration + adaptive windows; cold: the dissertation's tuner (fresh experiment per window, 30 trials); "
        f"{', '.join(WARM_ABLATIONS)}: warm without one feature (the "
        "benchmark's ablations; warm-grid: Ax's acquisition over the allowed points only); "
        f"{', '.join(WARM_ADDITIONS)}: warm with one more (docs/optimizer-safety.md)",
    )
    t.add_argument(
        "--config",
        type=Path,
        default=None,
        metavar="FILE",
        help="read options from the [replay] table of a TOML file (keys = flag names, e.g. sla_us = 200)",
    )
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
    return add_setting_flags(t)


class Deferred(NamedTuple):
    """What `run` needs to resolve the options: each dest's default, flag -> dest, dest -> action; and each
    dest's help (also of the flags left out of `--help`, for the options reference in docs/replay.md)."""

    defaults: dict[str, object]
    flags: dict[str, str]
    actions: dict[str, argparse.Action]
    helps: dict[str, str]


def _defer_defaults(p: argparse.ArgumentParser, hidden: set[str] | frozenset[str]) -> Deferred:
    """Each option's default kept aside and replaced by None, so that `run` knows what the command line set (CLI
    over file over preset); the `hidden` flags leave `--help`."""
    d = Deferred({}, {}, {}, {})
    for action in p._actions:
        if action.dest == "help":
            continue
        d.defaults[action.dest] = action.default
        action.default = None
        d.actions[action.dest] = action
        d.flags.update({s: action.dest for s in action.option_strings})
        d.helps[action.dest] = str(action.help or "")
        if action.dest in hidden:
            action.help = argparse.SUPPRESS
    return d


def run(args: argparse.Namespace) -> int:
    """Resolve every option (default < preset < `--config` file < command line), then replay."""
    from tuner.cli import replay_config

    defaults, flags, actions, _ = args._replay
    given = {dest for dest in defaults if getattr(args, dest) is not None}
    in_file = replay_config.load(args.config, actions) if args.config is not None else {}
    for dest, default in defaults.items():
        if dest not in given:
            setattr(args, dest, in_file[dest].value if dest in in_file else default)
    from_file = {dest: fv.line for dest, fv in in_file.items() if dest not in given}
    try:
        return _run(args)
    except TunerError as exc:
        raise replay_config.attribute(exc, args.config, from_file, flags) from None


def _run(args: argparse.Namespace) -> int:
    from tuner.replay.run import default_policies, fine_window_hold, parse_policies

    objective = _objective(args)
    settings = tuner_settings(args)
    hours = None if args.hours is None else parse_number(args.hours, "--hours", minimum=0)
    bin_s = parse_number(args.bin, "--bin", minimum=0)
    policies = default_policies(bin_s) if args.policies == "auto" else parse_policies(args.policies)
    settings = fine_window_hold(settings, bin_s, explicit=args.hold_max_p is not None)
    if args.history is not None and not settings.context:
        raise TunerError(
            "--history needs the contextual tuner (--context or --tuner warm): the cold tuner starts "
            "a fresh experiment per window"
        )
    if args.history is not None and not args.history.is_file():
        raise TunerError(f"--history {args.history}: no such file")
    schedule, source, day_noise = _schedule(args, hours, bin_s, settings.seed)
    load = load_from_args(args)
    plant = _plant_option(args)
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
            source=source,
            oracle_exhaustive=args.oracle_exhaustive,
            history_path=args.history,
            save_trials=args.save_trials,
            day_noise=day_noise,
            host_options={**host_options_from_args(args), **({} if load is None else {"load": load}), **plant},
            command=shlex.join(["tuner", *getattr(args, "_argv", ["replay"])]),
        )
    finally:
        if load is not None:
            load.stop()


def _objective(args: argparse.Namespace) -> Objective:
    """The reward, percentile and SLA of the flags; an error names the flag (or the config key) it came from."""
    from reward import DEFAULT_REWARD
    from tuner.optimize.settings import Objective

    try:
        sla = float(args.sla_us)
    except ValueError:
        raise TunerError(f"--sla-us {args.sla_us!r}: expected a positive number of µs") from None
    try:
        pct = float(args.percentile.rstrip("%").lstrip("pP"))
    except ValueError:
        pct = args.percentile
    try:
        return Objective(reward=args.reward or DEFAULT_REWARD, percentile=pct, sla_us=sla)
    except TunerError as exc:
        text = str(exc)
        flag = "--reward" if "reward" in text else "--percentile" if "percentile" in text else "--sla-us"
        raise TunerError(f"{flag}: {text}") from None


def _plant_option(args: argparse.Namespace) -> dict[str, str]:
    """`--plant` as the sim host's `plant` option ({} when not given); refused for another host."""
    if args.plant is None:
        return {}
    from actuators.sim.plants import plant

    plant(args.plant)  # a one-line error naming the plants
    if args.host != "sim":
        raise TunerError(f"--plant {args.plant}: only with --host sim (a plant is a simulated host)")
    return {"plant": args.plant}


def _default_peak(args: argparse.Namespace) -> float:
    """The plant's peak (`actuators.sim.plants.Plant.peak_qps`) with --plant, else `DEFAULT_PEAK_QPS`."""
    if args.plant is None:
        return DEFAULT_PEAK_QPS
    from actuators.sim.plants import plant

    return plant(args.plant).peak_qps


def _schedule(
    args: argparse.Namespace, hours: float | None, bin_s: float, seed: int
) -> tuple[Schedule, str, float | None]:
    """The binned trace or zoo day (repeated over `--days` with seeded noise), its description, the day noise."""
    from traces.schedule import DEFAULT_DAY_NOISE, load_schedule, repeat_days, sample_trace_path

    peak = _default_peak(args) if args.peak_qps is None else parse_number(args.peak_qps, "--peak-qps", minimum=0)
    n_days = int(parse_number(args.days, "--days", integer=True, minimum=1, strict=False))
    noise = (
        DEFAULT_DAY_NOISE
        if args.day_noise is None
        else parse_number(args.day_noise, "--day-noise", minimum=0, strict=False)
    )
    if noise > 1:
        raise TunerError(f"--day-noise {args.day_noise!r}: expected a fraction in [0, 1] (0.05 = 5 %)")
    if args.day is not None:
        from tuner.replay.zoo import day_names, day_schedule

        if args.trace:
            raise TunerError(f"--day {args.day}: give a trace file or --day, not both")
        if args.day not in day_names():
            raise TunerError(f"--day {args.day!r}: expected one of {', '.join(day_names())}")
        schedule = day_schedule(args.day, bin_s=bin_s, hours=hours if hours is not None else None, peak_qps=peak)
        source = schedule.source
    else:
        trace = Path(args.trace) if args.trace else sample_trace_path()
        if not trace.exists():
            raise TunerError(f"{trace}: no such trace file")
        schedule = load_schedule(trace, bin_s=bin_s, hours=24.0 if hours is None else hours, peak_qps=peak)
        source = str(trace) if args.trace else f"{trace.name} (bundled sample)"
    if n_days > 1:
        if schedule.days != 1:
            raise TunerError(f"--days {n_days}: day {args.day} already spans {schedule.days} days")
        schedule = repeat_days(schedule, n_days, noise=noise, seed=seed)
    return schedule, source, noise if n_days > 1 else None


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
    command: str | None = None,
) -> int:
    """Run the replay with a progress bar, print the report and write the files (and `save_trials`); `command` is
    shown on top of report.html."""
    from tuner.replay.run import ReplayWindow

    factory, first = _host_factory(host_spec, settings.seed, host_options or {})
    history: list = []
    if history_path is not None:
        from tuner.store.history import read_trials

        history = read_trials(history_path, space=first.knobs())
    windows = tuple(ReplayWindow(w.index, w.start_s, w.seconds, w.qps, w.day) for w in schedule.windows)
    t0 = time.perf_counter()
    kw: dict[str, Any] = dict(
        policies=policies, host_label=host_spec, source=source, oracle_exhaustive=oracle_exhaustive, history=history
    )
    result = _replay_with_progress(factory, windows, objective, settings, quiet=quiet, **kw)
    result.meta["peak_qps_target"] = schedule.peak_qps
    result.meta["trace_scale"] = schedule.scale
    result.meta["total_wall_s"] = time.perf_counter() - t0
    if day_noise is not None:
        result.meta["day_noise"] = day_noise
    if history_path is not None:
        result.meta["history"] = {"file": str(history_path), "trials": len(history)}
    _write_outputs(result, out, save_trials=save_trials, as_json=as_json, quiet=quiet, command=command)
    return 0


def _host_factory(host_spec: str, seed: int, host_options: dict) -> tuple[Callable[[], Host], Host]:
    """A factory of hosts for the policies (the first one built here, checked for load control) and that host.
    Hosts with a long-run memo (the simulator) share it: the oracle and the tuner ask for the same cells."""
    from actuators.abilities import ExpectedCacheShared
    from actuators.host import LoadControl
    from tuner.hosts import make_host

    first = make_host(host_spec, seed=seed, **host_options)
    if not isinstance(first, LoadControl):
        raise TunerError(
            f"--host {host_spec!r}: the host cannot set its offered load (no set_offered_qps); "
            "replay needs load control, e.g. --host sim, or --host real with --load-command"
        )
    spare = [first]
    share = {"cache": first.expected_cache} if isinstance(first, ExpectedCacheShared) else {}

    def factory() -> Host:
        return spare.pop() if spare else make_host(host_spec, seed=seed, **share, **host_options)

    return factory, first


def _replay_with_progress(
    factory: Callable[[], Host],
    windows: tuple,
    objective: Objective,
    settings: TunerSettings,
    *,
    quiet: bool,
    **kw: Any,
) -> Any:
    """`tuner.replay.run.replay`, with a progress bar on a terminal unless `quiet`."""
    from rich.console import Console

    from tuner.replay.run import replay

    console = Console(stderr=True)
    if quiet or not console.is_terminal:
        return replay(factory, windows, objective, settings, **kw)
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    with Progress(
        TextColumn("[bold]replay[/] {task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        console=console,
    ) as prog:
        task = prog.add_task("", total=len(windows) * len(kw["policies"]))

        def progress(policy: str, index: int, rec: object) -> None:
            if rec is None:
                prog.advance(task)
                prog.update(task, description=f"{policy} window {index}")
            else:
                prog.update(task, description=f"{policy} window {index} trial {rec.index + 1}")  # type: ignore[attr-defined]

        return replay(factory, windows, objective, settings, progress=progress, **kw)


def _write_outputs(
    result: Any, out: Path, *, save_trials: Path | None, as_json: bool, quiet: bool, command: str | None = None
) -> None:
    """The files under `out` (and `save_trials`), then the report (or the JSON summary) on stdout."""
    from tuner.cli.output import print_json, table_console
    from tuner.replay.report import print_report, summary, write_files, write_trials

    paths = write_files(result, out, command=command)
    if save_trials is not None:
        save_trials.parent.mkdir(parents=True, exist_ok=True)
        n = write_trials(result, save_trials)
        print(f"saved {n} completed tuner trial(s) to {save_trials}", file=sys.stderr if as_json else sys.stdout)
    if as_json:
        print_json(summary(result))
    else:
        print_report(result, table_console(), per_window=not quiet)
    print(f"wrote {', '.join(str(p) for p in paths)}", file=sys.stderr if as_json else sys.stdout)
