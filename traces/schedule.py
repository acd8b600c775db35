"""A trace as a load schedule: its request rate binned into windows (default 24 hourly bins) and scaled.

Only full windows are kept (a trailing part shorter than one window is dropped). `peak_qps` scales the trace so
that its busiest window's mean equals `peak_qps`; `scale` multiplies the trace's own rate; give at most one.
`start_s` begins the schedule that many seconds after the trace's first row (e.g. 86400 for the second day of
a week-long trace, as the dissertation replays one 24-hour slice); window times are from the schedule's start.
A trace split over several files (as published: clusterN.0.zst, clusterN.1.zst, ...) is given as a list.

`repeat_days` turns one day of windows into a multi-day schedule with day-to-day noise (the 3-day replay benchmark).
"""

from __future__ import annotations

import math
import os
import pathlib
from collections.abc import Sequence
from dataclasses import dataclass
from importlib import resources

from core.errors import InputError, TunerError
from traces.parser import DEFAULT_MAX_SPAN_S, DEFAULT_TOLERANCE_S
from traces.series import TraceStats, trace_stats

#: File name of the bundled synthetic sample trace (see traces/data/README.md).
SAMPLE_TRACE = "twitter-cluster52-synthetic-24h.csv.zst"


@dataclass(frozen=True)
class Window:
    """One bin of the load schedule."""

    index: int
    start_s: float  # seconds from trace start (from the schedule's start when `start_s` was given)
    seconds: float  # bin length (always a full bin)
    qps: float  # mean offered QPS in the bin after scaling
    day: int = 0  # which repetition of the day (see `repeat_days`)


@dataclass(frozen=True)
class Schedule:
    windows: tuple[Window, ...]
    source: str  # path (several files joined with ' + ')
    scale: float  # factor applied to the trace's own rate
    raw_peak_qps: float  # the trace's own peak bin rate
    days: int = 1  # repetitions of the binned trace (see `repeat_days`)

    @property
    def peak_qps(self) -> float:
        return max(w.qps for w in self.windows)


#: Default day-to-day noise of `repeat_days`: sigma of the per-window lognormal QPS factor (5 %).
DEFAULT_DAY_NOISE = 0.05


def repeat_days(
    schedule: Schedule, days: int, *, noise: float = DEFAULT_DAY_NOISE, seed: int = 0, max_qps: float | None = None
) -> Schedule:
    """`schedule` repeated `days` times back to back, each later day with per-window multiplicative noise.

    Day 0 is `schedule` unchanged (so `days=1` is the schedule itself). On day d >= 1, window i's QPS is
    `qps_i * exp(noise * z - noise**2 / 2)` with z ~ N(0, 1) drawn per (day, window) from a generator seeded
    by `seed` -- a lognormal factor with mean 1 and a coefficient of variation of ~`noise` (0.05 = 5 %) --
    then clipped to `max_qps` (default: the schedule's peak, so a noisy day never asks for more than the
    busiest window the schedule was scaled to). Windows are re-indexed 0..days*n-1, `start_s` continues
    across days (a day lasts from the first window's start to the last window's end), and each carries its
    `day`. The noise of day d does not depend on `days` (the first 2 days of a 3-day schedule are the 2-day one).
    Pure: the same arguments give the same schedule.
    """
    import numpy as np

    if isinstance(days, bool) or not isinstance(days, int) or days < 1:
        raise TunerError(f"days must be an integer >= 1, got {days!r}")
    if not (isinstance(noise, (int, float)) and math.isfinite(noise) and 0 <= noise <= 1):
        raise TunerError(f"day noise must be a fraction in [0, 1] (0.05 = 5 %), got {noise!r}")
    base = schedule.windows
    if schedule.days != 1:
        raise TunerError(f"the schedule already spans {schedule.days} days: repeat a one-day schedule")
    if not base:
        raise TunerError("the schedule has no window to repeat")
    cap = schedule.peak_qps if max_qps is None else float(max_qps)
    if not (cap > 0 and math.isfinite(cap)):
        raise TunerError(f"max_qps must be finite and > 0, got {max_qps!r}")
    t0 = base[0].start_s
    day_s = base[-1].start_s + base[-1].seconds - t0
    rng = np.random.default_rng(seed)
    out: list[Window] = []
    for day in range(days):
        if day == 0:
            factors = np.ones(len(base))
        else:
            factors = np.exp(noise * rng.standard_normal(len(base)) - noise**2 / 2)
        for w, f in zip(base, factors):
            qps = w.qps if day == 0 else min(w.qps * float(f), cap)
            out.append(Window(index=len(out), start_s=w.start_s + day * day_s, seconds=w.seconds, qps=qps, day=day))
    return Schedule(
        windows=tuple(out), source=schedule.source, scale=schedule.scale, raw_peak_qps=schedule.raw_peak_qps, days=days
    )


def sample_trace_path() -> pathlib.Path:
    """The bundled 24-hour synthetic sample trace (package data)."""
    return pathlib.Path(str(resources.files("traces") / "data" / SAMPLE_TRACE))


def scale_factor(raw_peak_qps: float, *, peak_qps: float | None = None, scale: float | None = None) -> float:
    """The factor that maps the trace's own rate to the schedule's rate."""
    if peak_qps is not None and scale is not None:
        raise TunerError("give a target peak QPS or a scale factor, not both")
    if peak_qps is not None:
        if not (peak_qps > 0 and math.isfinite(peak_qps)):
            raise TunerError(f"peak QPS must be finite and > 0, got {peak_qps}")
        return float(peak_qps) / raw_peak_qps
    if scale is not None:
        if not (scale > 0 and math.isfinite(scale)):
            raise TunerError(f"scale factor must be finite and > 0, got {scale}")
        return float(scale)
    return 1.0


def schedule_from_stats(
    stats: TraceStats, *, hours: float | None = None, peak_qps: float | None = None, scale: float | None = None
) -> Schedule:
    bin_s = stats.bin_s
    full = stats.full_bins
    if hours is not None:
        if not hours > 0:
            raise TunerError(f"hours must be > 0, got {hours}")
        want = int(hours * 3600 // bin_s)
        if want == 0:
            raise InputError(f"{stats.path}: {hours:g} h is shorter than one {bin_s} s window")
        if want > len(full):
            raise InputError(
                f"{stats.path}: trace covers {len(full)} full {bin_s} s window(s) "
                f"({stats.seconds} s), fewer than the {want} that {hours:g} h needs"
            )
        full = full[:want]
    if not full:
        raise InputError(f"{stats.path}: trace covers {stats.seconds} s, shorter than one {bin_s} s window")
    raw_peak = max(b.qps for b in full)
    factor = scale_factor(raw_peak, peak_qps=peak_qps, scale=scale)
    windows = tuple(
        Window(index=b.index, start_s=float(b.start_s), seconds=float(b.seconds), qps=b.qps * factor) for b in full
    )
    return Schedule(windows=windows, source=stats.path, scale=factor, raw_peak_qps=raw_peak)


def load_schedule(
    path: str | os.PathLike[str] | Sequence[str | os.PathLike[str]],
    *,
    bin_s: float = 3600.0,
    hours: float | None = None,
    peak_qps: float | None = None,
    scale: float | None = None,
    skip_bad: bool = False,
    tolerance_s: float = DEFAULT_TOLERANCE_S,
    max_span_s: int = DEFAULT_MAX_SPAN_S,
    start_s: float = 0.0,
) -> Schedule:
    """Read a trace (plain, .gz or .zst) and bin its request rate into a scaled load schedule."""
    scale_factor(1.0, peak_qps=peak_qps, scale=scale)  # refuse bad arguments before reading a large file
    if hours is not None and not (hours > 0 and math.isfinite(hours)):
        raise TunerError(f"hours must be finite and > 0, got {hours}")
    max_s = None if hours is None else hours * 3600
    stats = trace_stats(
        path,
        bin_s=bin_s,
        skip_bad=skip_bad,
        tolerance_s=tolerance_s,
        max_seconds=max_s,
        max_span_s=max_span_s,
        start_s=start_s,
    )
    return schedule_from_stats(stats, hours=hours, peak_qps=peak_qps, scale=scale)
