"""core.memory: the heap trim is real on glibc and rate-limited in the daemon's loop."""

from __future__ import annotations

import platform

from core.memory import HeapTrimmer, trim_heap


def test_trim_heap_calls_glibc_malloc_trim_where_there_is_one():
    result = trim_heap()
    if platform.libc_ver()[0] == "glibc":
        assert isinstance(result, bool)
    else:
        assert result is None


def test_the_trimmer_trims_at_most_once_per_interval():
    now = [0.0]
    trims: list[float] = []
    trimmer = HeapTrimmer(every_s=60.0, trim=lambda: trims.append(now[0]) or True, clock=lambda: now[0])
    for t in (0.0, 5.0, 59.9, 60.0, 61.0, 130.0):
        now[0] = t
        trimmer.maybe()
    assert trims == [0.0, 60.0, 130.0]
    assert trimmer.calls == 3
