"""A static sweep run into an output directory: `tuner sweep`'s work, callable without the command line.

`points.jsonl` gets one record per point, appended and flushed as measured, so an interrupted sweep keeps every
point it finished; `sweep.json` says what was asked, and a resumed sweep continues only one whose host, load,
window and seed match; `best.json`, `pareto.json` and `heatmap.png` summarise whatever was measured. SIGTERM is
taken as Ctrl-C while sweeping, and the host is restored on every exit path (normal, error, Ctrl-C, SIGTERM), with
SIGINT and SIGTERM deferred meanwhile so a second Ctrl-C cannot cut the restore short.
"""

from __future__ import annotations

import json
import os
import signal
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

from actuators.abilities import Closable
from actuators.host import Host, LoadControl
from core.errors import InputError, TunerError
from tuner.replay.static_sweep import (
    SweepConfig,
    SweepPoint,
    best_under_sla,
    grid,
    parse_dvfs_spec,
    parse_itr_spec,
    percentile_key,
    run_sweep,
    summarize_best,
    sweep_pareto,
)

POINTS = "points.jsonl"
META = "sweep.json"
#: Fields of `sweep.json` that must match for a resumed sweep to append to an existing one.
RESUME_KEYS = ("host", "qps", "load_schedule", "seconds", "settle", "seed")

#: `progress(total, done)`: a context yielding `update(text, advance)`, called as points start and end.
Progress = Callable[[int, int], AbstractContextManager[Callable[..., None]]]


# --------------------------------------------------------------------------- files


def load_points(path: Path, repair: bool) -> list[SweepPoint]:
    """Records of an existing `points.jsonl`. A torn last line (killed mid-write) is dropped and, with
    `repair`, cut off the file so appends start on a fresh line; any other bad line is an `InputError`."""
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

    def __call__(self, record: SweepPoint) -> None:
        self._f.write(json.dumps(record.to_json(), allow_nan=False) + "\n")
        self._f.flush()

    def close(self) -> None:
        self._f.flush()
        os.fsync(self._f.fileno())
        self._f.close()


def write_summaries(
    out: Path, points: list[SweepPoint], sla_us: float, pct: float, min_load: float, title: str
) -> dict[str, Any]:
    """Write best.json, pareto.json and heatmap.png for `points`; return best.json's content."""
    from tuner.replay.plots import sweep_heatmap

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
def sigterm_as_interrupt() -> Iterator[None]:
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


def restore_host(host: Host) -> tuple[BaseException | None, bool]:
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


# --------------------------------------------------------------------------- the session


@dataclass(frozen=True)
class SweepPlan:
    """A checked sweep request: the output directory, what `sweep.json` records, how each point is measured, the
    grid specs (`parse_itr_spec` / `parse_dvfs_spec`), the offered load and the SLA the summaries judge by."""

    out: Path
    meta: dict[str, Any]
    config: SweepConfig
    itr: str
    dvfs: str
    qps: float | None
    sla_us: float
    percentile: float
    min_load: float

    def previous_points(self, resume: bool) -> list[SweepPoint]:
        """The points a resumed sweep already measured ([] for a new one); refuses to mix sweeps."""
        out = self.out
        if out.exists() and not out.is_dir():
            raise TunerError(f"--out {str(out)!r} exists and is not a directory")
        points_path, meta_path = out / POINTS, out / META
        if resume and points_path.exists():
            try:
                old_meta = json.loads(meta_path.read_text())
            except (OSError, ValueError) as exc:
                raise InputError(f"{meta_path}: cannot resume: {exc}") from None
            diff = [k for k in RESUME_KEYS if old_meta.get(k) != self.meta[k]]
            if diff:
                k = diff[0]
                raise TunerError(
                    f"--resume: {k} {self.meta[k]!r} differs from {old_meta.get(k)!r} in {meta_path}; "
                    f"points would not be comparable (use another --out)"
                )
            return load_points(points_path, repair=True)
        if points_path.exists() and points_path.stat().st_size > 0:
            raise TunerError(
                f"{points_path} already holds a sweep: pass --resume to continue it, or choose another --out"
            )
        return []


@dataclass
class SweepOutcome:
    """How a session ended: every point now in the file, how many were measured now of how many to do, the best
    point (best.json's content) if any was measured, the error that stopped it (a `KeyboardInterrupt` for Ctrl-C or
    SIGTERM) and the one the restore raised, and warnings to show."""

    measured: list[SweepPoint]
    new: int
    todo: int
    elapsed_s: float
    best: dict[str, Any] | None = None
    failure: BaseException | None = None
    restore_error: BaseException | None = None
    warnings: list[str] = field(default_factory=list)


@contextmanager
def _no_progress(total: int, done: int) -> Iterator[Callable[..., None]]:
    yield lambda text="", advance=0: None


def run_session(
    host: Host,
    plan: SweepPlan,
    previous: list[SweepPoint],
    *,
    load: Closable | None = None,
    progress: Progress = _no_progress,
) -> SweepOutcome:
    """Measure the plan's points not in `previous` on `host`, appending each to the points file, then stop `load`
    (the load generator), restore the host and write the summaries. Never raises for a failed measurement: the
    outcome carries it (the caller reports it once the host is restored)."""
    started = time.monotonic()
    outcome = SweepOutcome(measured=list(previous), new=0, todo=0, elapsed_s=0.0)
    try:
        with sigterm_as_interrupt():
            _measure(host, plan, previous, outcome, progress)
    except BaseException as exc:  # noqa: BLE001 - handed to the caller once the host is restored
        outcome.failure = exc
    if load is not None:
        load.close()
    outcome.restore_error, signalled = restore_host(host)
    if signalled and outcome.failure is None:
        outcome.failure = KeyboardInterrupt()
    failure, measured = outcome.failure, outcome.measured
    outcome.new = len(measured) - len(previous)
    if measured:
        qps, pct, sla_us = plan.qps, plan.percentile, plan.sla_us
        title = (
            f"{host.name}"
            + (f" @ {qps / 1000:g}K QPS" if qps else "")
            + f": energy per point, SLA p{pct:g} <= {sla_us:g} µs"
        )
        try:
            outcome.best = write_summaries(plan.out, measured, sla_us, pct, plan.min_load, title)
        except Exception as exc:
            if failure is None:
                raise
            outcome.warnings.append(f"could not write summaries: {exc}")
    outcome.elapsed_s = time.monotonic() - started
    return outcome


def _measure(
    host: Host, plan: SweepPlan, previous: list[SweepPoint], outcome: SweepOutcome, progress: Progress
) -> None:
    """Check the grid against the host, write sweep.json, set the load and measure the points still to do
    (`outcome.todo` of them, each appended to `outcome.measured` as it is measured)."""
    knobs = host.knobs()
    itrs = parse_itr_spec(plan.itr, knobs)
    freqs = parse_dvfs_spec(plan.dvfs, knobs)
    if plan.qps is not None and not isinstance(host, LoadControl):
        raise TunerError(
            f"--qps: host {host.name!r} cannot set its offered load (no set_offered_qps); "
            f"omit --qps to record the host's own load"
        )
    done = {(p.itr_us, round(p.dvfs_ghz, 3)) for p in previous}
    full = grid(itrs, freqs)
    todo = [p for p in full if (p.itr_us, round(p.dvfs_ghz, 3)) not in done]
    outcome.todo = len(todo)
    out = plan.out
    out.mkdir(parents=True, exist_ok=True)
    points_path = out / POINTS
    if not previous:
        points_path.write_text("")
    _write_json(
        out / META,
        {**plan.meta, "host_name": host.name, "points": len(full), "itr_us": list(itrs), "dvfs_ghz": list(freqs)},
    )
    if plan.qps is not None and isinstance(host, LoadControl):  # checked above: a load needs it
        host.set_offered_qps(plan.qps)
    writer = PointWriter(points_path)
    pct = plan.percentile
    key = percentile_key(pct)
    try:
        with progress(len(full), len(full) - len(todo)) as update:

            def sink(record: SweepPoint) -> None:
                writer(record)
                outcome.measured.append(record)
                update(
                    f"last {record.itr_us} µs @ {record.dvfs_ghz:g} GHz: "
                    f"{key[:-3]} {record.latency(pct):.0f} µs, {record.energy_j:.0f} J",
                    advance=1,
                )

            run_sweep(host, todo, plan.config, sink, on_start=lambda i, p: update(f"measuring {p}"))
    finally:
        writer.close()
