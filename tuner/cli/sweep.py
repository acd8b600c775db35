"""`tuner sweep`: the static ITR x DVFS sweep of dissertation ch. 5 on any host.

Writes to `--out DIR`: `points.jsonl` (one record per point, appended and flushed as measured),
`sweep.json` (what was asked), `best.json`, `pareto.json` and `heatmap.png`. The host is restored on
every exit path (normal, error, Ctrl-C, SIGTERM).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import signal
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import IO, Any

from core.errors import HostError, InputError, TunerError
from tuner.cli.load import add_load_arguments, host_options_from_args, load_from_args

POINTS = "points.jsonl"
META = "sweep.json"
#: Fields of `sweep.json` that must match for `--resume` to append to an existing sweep.
RESUME_KEYS = ("host", "qps", "load_schedule", "seconds", "settle", "seed")


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


# --------------------------------------------------------------------------- files


def load_points(path: Path, repair: bool) -> list[Any]:
    """Records of an existing `points.jsonl`. A torn last line (killed mid-write) is dropped and, with
    `repair`, cut off the file so appends start on a fresh line; any other bad line is an `InputError`."""
    from tuner.replay.static_sweep import SweepPoint

    data = path.read_bytes()
    points = []
    end_of_good = 0
    lines = data.split(b"\n")
    for lineno, raw in enumerate(lines, start=1):
        last = lineno == len(lines)
        if last and raw.strip() == b"":
            break
        try:
            points.append(SweepPoint.from_json(json.loads(raw)))
        except (ValueError, KeyError, TypeError) as exc:
            if last:  # no trailing newline: a write that never finished
                print(f"tuner: warning: {path}:{lineno}: dropping an incomplete last record", file=sys.stderr)
                if repair:
                    with path.open("r+b") as f:
                        f.truncate(end_of_good)
                break
            raise InputError(
                f"{path}:{lineno}: expected a sweep record (JSON object with itr_us, dvfs_ghz, ...): "
                f"{type(exc).__name__}: {exc}"
            ) from None
        end_of_good += len(raw) + 1
    return points


def _write_json(path: Path, obj: Any) -> None:
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps(obj, indent=2, allow_nan=False) + "\n")
    os.replace(tmp, path)


class PointWriter:
    """Appends one JSON line per point and flushes it, so an interrupted sweep keeps what it measured."""

    def __init__(self, path: Path) -> None:
        self._f: IO[str] = path.open("a", encoding="utf-8")

    def __call__(self, record: Any) -> None:
        self._f.write(json.dumps(record.to_json(), allow_nan=False) + "\n")
        self._f.flush()

    def close(self) -> None:
        self._f.flush()
        os.fsync(self._f.fileno())
        self._f.close()


def write_summaries(
    out: Path, points: list[Any], sla_us: float, pct: float, min_load: float, title: str
) -> dict[str, Any]:
    """Write best.json, pareto.json and heatmap.png for `points`; return best.json's content."""
    from tuner.replay.plots import sweep_heatmap
    from tuner.replay.static_sweep import best_under_sla, summarize_best, sweep_pareto

    best = summarize_best(points, sla_us, pct, min_load)
    _write_json(out / "best.json", best)
    front = sweep_pareto(points, pct, min_load)
    _write_json(
        out / "pareto.json",
        {
            "percentile": pct,
            "objectives": [f"p{pct:g} latency (µs), minimise", "energy_j, minimise"],
            "min_load_ratio": min_load,
            "points_considered": sum(1 for p in points if p.keeps_up(min_load)),
            "points_measured": len(points),
            "front": [p.to_json() for p in front],
        },
    )
    sweep_heatmap(
        points,
        out / "heatmap.png",
        sla_us,
        pct,
        title=title,
        best=best_under_sla(points, sla_us, pct, min_load),
        pareto=front,
    )
    return best


# --------------------------------------------------------------------------- signals / restore


@contextmanager
def _sigterm_as_interrupt() -> Iterator[None]:
    """Treat SIGTERM like Ctrl-C while sweeping, so `finally` blocks (restore) run."""

    def handler(signum: int, frame: Any) -> None:
        raise KeyboardInterrupt

    try:
        old = signal.signal(signal.SIGTERM, handler)
    except ValueError:  # not the main thread
        yield
        return
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, old)


def restore_host(host: Any) -> tuple[BaseException | None, bool]:
    """`host.restore()` with SIGINT/SIGTERM deferred so a second Ctrl-C cannot cut it short.
    Returns (the exception restore raised or None, whether a signal arrived meanwhile)."""
    got: list[int] = []
    saved: dict[int, Any] = {}
    for sig in (signal.SIGINT.value, signal.SIGTERM.value):
        try:
            saved[sig] = signal.signal(sig, lambda s, f: got.append(s))
        except ValueError:
            pass
    try:
        host.restore()
        error: BaseException | None = None
    except Exception as exc:  # noqa: BLE001 - reported to the user, never swallowed silently
        error = exc
    finally:
        for sig, old in saved.items():
            signal.signal(sig, old)
    return error, bool(got)


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


def run(args: argparse.Namespace) -> int:
    from actuators.host import LoadControl
    from tuner.hosts import make_host, parse_load_option
    from tuner.replay.static_sweep import (
        SweepConfig,
        grid,
        parse_dvfs_spec,
        parse_itr_spec,
        parse_percentile,
        percentile_key,
        run_sweep,
    )

    # Everything about the arguments is checked before the host is built or touched.
    config = SweepConfig(
        seconds=_number(args.seconds, "--seconds"), settle=_number(args.settle, "--settle", positive=False)
    )
    sla_us = _number(args.sla_us, "--sla-us")
    pct = parse_percentile(args.percentile)
    min_load = _number(args.min_load, "--min-load", at_most=1.0)
    qps = None if args.qps is None else _number(args.qps, "--qps")
    schedule = None if args.load_schedule is None else parse_load_option(args.load_schedule, "--load-schedule")
    if schedule is not None and qps is not None:
        raise TunerError("--load-schedule and --qps: give one (a moving load or a fixed one)")
    out: Path = args.out
    if out.exists() and not out.is_dir():
        raise TunerError(f"--out {str(out)!r} exists and is not a directory")
    points_path, meta_path = out / POINTS, out / META
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
    previous: list[Any] = []
    if args.resume and points_path.exists():
        try:
            old_meta = json.loads(meta_path.read_text())
        except (OSError, ValueError) as exc:
            raise InputError(f"{meta_path}: cannot resume: {exc}") from None
        diff = [k for k in RESUME_KEYS if old_meta.get(k) != meta[k]]
        if diff:
            k = diff[0]
            raise TunerError(
                f"--resume: {k} {meta[k]!r} differs from {old_meta.get(k)!r} in {meta_path}; "
                f"points would not be comparable (use another --out)"
            )
        previous = load_points(points_path, repair=True)
    elif points_path.exists() and points_path.stat().st_size > 0:
        raise TunerError(f"{points_path} already holds a sweep: pass --resume to continue it, or choose another --out")

    host_options: dict[str, Any] = host_options_from_args(args)
    if args.seed is not None:
        host_options["seed"] = args.seed
    load = load_from_args(args)
    if schedule is not None:
        host_options["load_schedule"] = schedule
    if load is not None:
        host_options["load"] = load
    host = make_host(args.host, **host_options)
    failure: BaseException | None = None
    measured = list(previous)
    todo_count = 0
    started = time.monotonic()
    try:
        with _sigterm_as_interrupt():
            knobs = host.knobs()
            itrs = parse_itr_spec(args.itr, knobs)
            freqs = parse_dvfs_spec(args.dvfs, knobs)
            if qps is not None and not isinstance(host, LoadControl):
                raise TunerError(
                    f"--qps: host {host.name!r} cannot set its offered load (no set_offered_qps); "
                    f"omit --qps to record the host's own load"
                )
            done = {(p.itr_us, round(p.dvfs_ghz, 3)) for p in previous}
            full = grid(itrs, freqs)
            todo = [p for p in full if (p.itr_us, round(p.dvfs_ghz, 3)) not in done]
            todo_count = len(todo)
            out.mkdir(parents=True, exist_ok=True)
            if not previous:
                points_path.write_text("")
            _write_json(
                meta_path,
                {**meta, "host_name": host.name, "points": len(full), "itr_us": list(itrs), "dvfs_ghz": list(freqs)},
            )
            if qps is not None and isinstance(host, LoadControl):  # checked above: --qps needs it
                host.set_offered_qps(qps)
            writer = PointWriter(points_path)
            key = percentile_key(pct)
            try:
                with _progress(len(full), len(full) - len(todo)) as update:

                    def sink(record: Any) -> None:
                        writer(record)
                        measured.append(record)
                        update(
                            f"last {record.itr_us} µs @ {record.dvfs_ghz:g} GHz: "
                            f"{key[:-3]} {record.latency(pct):.0f} µs, {record.energy_j:.0f} J",
                            advance=1,
                        )

                    run_sweep(host, todo, config, sink, on_start=lambda i, p: update(f"measuring {p}"))
            finally:
                writer.close()
    except BaseException as exc:  # noqa: BLE001 - re-raised below once the host is restored
        failure = exc
    if load is not None:
        load.stop()
    restore_error, signalled = restore_host(host)
    if signalled and failure is None:
        failure = KeyboardInterrupt()
    new = len(measured) - len(previous)
    best = None
    if measured:
        title = (
            f"{host.name}"
            + (f" @ {qps / 1000:g}K QPS" if qps else "")
            + f": energy per point, SLA p{pct:g} <= {sla_us:g} µs"
        )
        try:
            best = write_summaries(out, measured, sla_us, pct, min_load, title)
        except Exception as exc:
            if failure is None:
                raise
            print(f"tuner: warning: could not write summaries: {exc}", file=sys.stderr)
    elapsed = time.monotonic() - started
    if restore_error is not None:
        msg = f"host {host.name!r}: restore failed: {type(restore_error).__name__}: {restore_error}"
        if failure is None:
            raise HostError(msg)
        print(f"tuner: error: {msg}", file=sys.stderr)
    if isinstance(failure, KeyboardInterrupt):
        print(
            f"tuner: interrupted after {new} of {todo_count} points; host restored; {out}/{POINTS} keeps "
            f"{len(measured)} points (rerun with --resume to continue)",
            file=sys.stderr,
        )
        return 130
    if failure is not None:
        if measured:
            print(
                f"tuner: sweep stopped after {new} of {todo_count} points; host restored; "
                f"{len(measured)} points kept in {out}/{POINTS}",
                file=sys.stderr,
            )
        raise failure

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
