"""HdrHistogram interval logs (`.hlog`, log format 1.3): written per second by `tuner load` and by the standalone
prober (`python -m actuators.latency.prober --hlog`), read back to compare them or to add shards' logs.

Values are nanoseconds; the interval-max column is in milliseconds (the jHiccup / HistogramLogProcessor
convention, `max_value_unit_ratio` 1e6). Latency intervals (from the *scheduled* send time) are untagged, so
standard tools (HistogramLogProcessor, `hdrh.log.HistogramLogReader`) read them as the log's histogram; the
client's own send lag goes into the same file as intervals tagged `send_lag`, the response time (from the
*actual* send to the reply read) as `response`, and the service time as `service`: for requests sent on time
(send lag <= 100 µs), from the send to the kernel's receive stamp of the reply (SO_TIMESTAMPNS), so the
client's send lag, its wake-up and the clumps it sends after a stall are all left out. Those tools skip tagged intervals unless asked for the tag. Timestamps are relative to the `#[StartTime: ...]` / `#[BaseTime: ...]` lines (seconds since the epoch).
"""

from __future__ import annotations

import os
from collections import defaultdict
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import TextIO

import numpy as np
from hdrh.histogram import HdrHistogram
from hdrh.log import HistogramLogReader

from actuators.latency.engine import new_histogram
from core.errors import InputError

#: Tag of the send-lag intervals (actual minus scheduled send time).
LAG_TAG = "send_lag"
#: Tag of the response-time intervals (reply read minus *actual* send time: the send lag taken out).
RESPONSE_TAG = "response"
#: Tag of the service-time intervals: requests sent on time (within `ON_TIME_NS` of schedule), the kernel's
#: receive stamp of the reply minus the send -- the client's send lag, wake-up and own clumps all left out.
SERVICE_TAG = "service"
#: Send lag up to which a request counts in the service time (ns).
ON_TIME_NS = 100_000
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


def write_sample_log(
    out: TextIO, samples: list[tuple[int, int, int, int]], base_epoch_s: float | None = None, comment: str = ""
) -> int:
    """Write probe samples -- (intended, sent, done, received) ns since the epoch -- as one-second intervals from
    `base_epoch_s` (default: the first intended time): latency (done - intended, untagged), response time
    (done - sent, `response`) and service time (received - sent, `service`, probes sent within `ON_TIME_NS`)
    by completion second, send lag (sent - intended, `send_lag`) by send second, the binning `tuner load` uses. Give two clients the same base and their intervals cover the same seconds.
    Returns the number of intervals per tag."""
    from actuators.latency.dist import record_many

    rows = np.asarray(samples, dtype=np.int64).reshape(-1, 4)
    if base_epoch_s is None:
        base_epoch_s = float(rows[0, 0]) / 1e9 if rows.size else 0.0
    writer = HlogWriter(out, base_epoch_s, comment=comment)
    if not rows.size:
        return 0
    base_ns = int(round(base_epoch_s * 1e9))
    intended, sent, done, received = rows[:, 0], rows[:, 1], rows[:, 2], rows[:, 3]
    done_sec = (done - base_ns) // 1_000_000_000
    sent_sec = (sent - base_ns) // 1_000_000_000
    first = int(min(done_sec.min(), sent_sec.min()))
    last = int(max(done_sec.max(), sent_sec.max()))
    on_time = (sent - intended <= ON_TIME_NS) & (received >= 0)  # received < 0: the send was interrupted
    for sec in range(first, last + 1):
        for tag, values, at in (
            (None, done - intended, done_sec),
            (LAG_TAG, sent - intended, sent_sec),
            (RESPONSE_TAG, done - sent, done_sec),
            (SERVICE_TAG, received - sent, np.where(on_time, done_sec, first - 1)),
        ):
            hist = new_histogram()
            part = values[at == sec]
            if part.size:
                record_many(hist, np.clip(part, 1, hist.highest_trackable_value))
            writer.write(float(sec), 1.0, hist, tag)
    return last - first + 1
