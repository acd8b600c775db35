"""`tuner load merge`: add interval logs (`.hlog`) second by second; the log format itself lives in
`actuators.latency.hlog` (the prober writes the same logs)."""

from __future__ import annotations

from typing import TextIO

from hdrh.histogram import HdrHistogram

from actuators.latency.hlog import HlogWriter, read_log
from tuner.load.hist import new_histogram

__all__ = ["merge_logs"]


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
