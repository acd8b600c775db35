"""A trace as a load schedule: its request rate binned into windows (default 24 hourly bins) and scaled.

Only full windows are kept (a trailing part shorter than one window is dropped). `peak_qps` scales the trace so
that its busiest window's mean equals `peak_qps`; `scale` multiplies the trace's own rate; give at most one.
`start_s` begins the schedule that many seconds after the trace's first row (e.g. 86400 for the second day of
a week-long trace, as the dissertation replays one 24-hour slice); window times are from the schedule's start.
A trace split over several files (as published: clusterN.0.zst, clusterN.1.zst, ...) is given as a list.
"""

from __future__ import annotations

import math
import os
import pathlib
from collections.abc import Sequence
from dataclasses import dataclass
from importlib import resources

from traces.parser import DEFAULT_MAX_SPAN_S, DEFAULT_TOLERANCE_S
from traces.series import TraceStats, trace_stats
from tuner.errors import InputError, TunerError

#: File name of the bundled synthetic sample trace (see traces/data/README.md).
SAMPLE_TRACE = "twitter-cluster52-synthetic-24h.csv.zst"


@dataclass(frozen=True)
class Window:
    """One bin of the load schedule."""

    index: int
    start_s: float  # seconds from trace start (from the schedule's start when `start_s` was given)
    seconds: float  # bin length (always a full bin)
    qps: float  # mean offered QPS in the bin after scaling


@dataclass(frozen=True)
class Schedule:
    windows: tuple[Window, ...]
    source: str  # path (several files joined with ' + ')
    scale: float  # factor applied to the trace's own rate
    raw_peak_qps: float  # the trace's own peak bin rate

    @property
    def peak_qps(self) -> float:
        return max(w.qps for w in self.windows)


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
            raise InputError(f"{stats.path}: trace covers {len(full)} full {bin_s} s window(s) "
                             f"({stats.seconds} s), fewer than the {want} that {hours:g} h needs")
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
    stats = trace_stats(path, bin_s=bin_s, skip_bad=skip_bad, tolerance_s=tolerance_s, max_seconds=max_s,
                        max_span_s=max_span_s, start_s=start_s)
    return schedule_from_stats(stats, hours=hours, peak_qps=peak_qps, scale=scale)
