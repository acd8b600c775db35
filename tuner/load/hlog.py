"""HdrHistogram interval logs (`.hlog`, log format 1.3): written per second by `tuner load`, added by `merge`.

Values are nanoseconds (the prober's unit too); the interval-max column is in milliseconds (the jHiccup /
HistogramLogProcessor convention, `max_value_unit_ratio` 1e6). Latency intervals are untagged, so standard tools
(HistogramLogProcessor, `hdrh.log.HistogramLogReader`) read them as the log's histogram; the generator's own send
lag goes into the same file as intervals tagged `send_lag`, which those tools skip unless asked for the tag.
Timestamps are relative to the `#[StartTime: ...]` / `#[BaseTime: ...]` lines (seconds since the epoch).
"""

from __future__ import annotations

import os
from collections import defaultdict
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import TextIO

from hdrh.histogram import HdrHistogram
from hdrh.log import HistogramLogReader

from core.errors import InputError
from tuner.load.hist import new_histogram

LAG_TAG = "send_lag"
_MAX_RATIO = 1e6  # ns -> ms in the interval-max column


class HlogWriter:
    """Writes interval histograms to an open text file, one line each, flushed as written."""

    def __init__(self, out: TextIO, start_epoch_s: float, comment: str = "") -> None:
        self.out = out
        self.start = start_epoch_s
        stamp = datetime.fromtimestamp(start_epoch_s, UTC).isoformat(" ")
        if comment:
            out.write(f"#{comment}\n")
        out.write("#[Histogram log format version 1.3]\n")
        out.write(f"#[StartTime: {start_epoch_s:.3f} (seconds since epoch), {stamp}]\n")
        out.write(f"#[BaseTime: {start_epoch_s:.3f} (seconds since epoch)]\n")
        out.write('"StartTimestamp","Interval_Length","Interval_Max","Interval_Compressed_Histogram"\n')
        out.flush()

    def write(self, start_s: float, length_s: float, hist: HdrHistogram, tag: str | None = None) -> None:
        """One interval `start_s` seconds after the start; empty histograms are written too (a quiet second)."""
        prefix = f"Tag={tag}," if tag else ""
        payload = hist.encode().decode()
        self.out.write(f"{prefix}{start_s:.3f},{length_s:.3f},{hist.get_max_value() / _MAX_RATIO:.3f},{payload}\n")
        self.out.flush()


@dataclass
class LogIntervals:
    """A log read back: start time and, per tag (None = untagged), the histograms keyed by absolute second."""

    path: str
    start_epoch_s: float
    by_tag: dict[str | None, dict[int, HdrHistogram]] = field(default_factory=lambda: defaultdict(dict))


def read_log(path: str | os.PathLike[str]) -> LogIntervals:
    """Every interval of `path`, keyed by the absolute (epoch) second nearest its start; InputError if unreadable."""
    name = os.fspath(path)
    try:
        reader = HistogramLogReader(name, new_histogram())
    except OSError as exc:
        raise InputError(f"{name}: cannot read: {exc.strerror}") from None
    out = LogIntervals(name, 0.0)
    try:
        while True:
            try:
                hist = reader.get_next_interval_histogram()
            except (ValueError, TypeError) as exc:
                raise InputError(f"{name}: not an HdrHistogram interval log ({exc})") from None
            if hist is None:
                break
            sec = round(hist.get_start_time_stamp() / 1000.0)  # shards started within a second align
            slot = out.by_tag[hist.get_tag()]
            if sec in slot:
                slot[sec].add(hist)
            else:
                slot[sec] = hist
        out.start_epoch_s = reader.get_start_time_sec()
    finally:
        reader.close()
    if not any(out.by_tag.values()):
        raise InputError(f"{name}: no interval histograms (expected an .hlog written by `tuner load`)")
    return out


def merge_logs(paths: list[str], out: TextIO) -> dict[str | None, HdrHistogram]:
    """Add the logs' intervals second by second (shards run at the same time on several machines) and write the
    merged log to `out`; returns the totals per tag."""
    logs = [read_log(p) for p in paths]
    start = min(s for log in logs for by_sec in log.by_tag.values() for s in by_sec)
    writer = HlogWriter(out, start, comment=f"merged by tuner load merge from {len(logs)} logs")
    totals: dict[str | None, HdrHistogram] = {}
    tags = sorted({t for log in logs for t in log.by_tag}, key=lambda t: (t is not None, t or ""))
    for tag in tags:
        total = totals[tag] = new_histogram()
        seconds = sorted({s for log in logs for s in log.by_tag.get(tag, {})})
        for sec in seconds:
            hist = new_histogram()
            for log in logs:
                part = log.by_tag.get(tag, {}).get(sec)
                if part is not None:
                    hist.add(part)
            total.add(hist)
            writer.write(sec - start, 1.0, hist, tag)
    return totals
