"""core.memory: the heap trim is real on glibc and rate-limited in the daemon's loop; the arena cap holds; the oracle's
held heap sets and bounds glibc's thresholds."""

from __future__ import annotations

import os
import platform
import subprocess
import sys
from pathlib import Path

import pytest

from core.memory import (
    M_MMAP_THRESHOLD,
    M_TRIM_THRESHOLD,
    MMAP_THRESHOLD_MAX,
    TRIM_AFTER,
    TRIM_HELD,
    HeapTrimmer,
    heap_held,
    limit_arenas,
    trim_heap,
)

REPO = Path(__file__).resolve().parents[2]


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


ARENA_PROBE = """
import ctypes, sys, threading
from core.memory import limit_arenas
if sys.argv[1] == "cap":
    assert limit_arenas(2, environ={}) is True
gate = threading.Barrier(5)
held = []
def work():
    held.append([bytearray(200_000) for _ in range(5)])  # malloc from this thread's arena
    gate.wait()
threads = [threading.Thread(target=work) for _ in range(4)]
for t in threads:
    t.start()
gate.wait()  # all four threads hold their blocks at once
ctypes.CDLL(None).malloc_stats()  # one "Arena N:" paragraph per arena, on stderr
for t in threads:
    t.join()
"""


@pytest.mark.skipif(sys.platform != "linux" or trim_heap() is None, reason="glibc's malloc only")
def test_limit_arenas_caps_the_arenas_threads_allocate_from() -> None:
    env = {k: v for k, v in os.environ.items() if k != "MALLOC_ARENA_MAX"} | {"PYTHONPATH": str(REPO)}

    def arenas(mode: str) -> int:
        out = subprocess.run(
            [sys.executable, "-c", ARENA_PROBE, mode], env=env, capture_output=True, text=True, check=True, timeout=60
        )
        return sum(1 for line in out.stderr.splitlines() if line.startswith("Arena "))

    assert arenas("free") > 2  # four threads allocating at once get arenas of their own ...
    assert 1 <= arenas("cap") <= 2  # ... and share two under the cap


def test_limit_arenas_leaves_an_operators_malloc_arena_max_alone() -> None:
    assert limit_arenas(2, environ={"MALLOC_ARENA_MAX": "4"}) is False


def test_heap_held_keeps_freed_pages_within_the_block_and_a_bounded_free_heap_after():
    calls: list[tuple[int, int]] = []
    with heap_held(environ={}, mallopt=lambda k, v: calls.append((k, v)) or 1) as held:
        assert held is True
        assert calls == [(M_MMAP_THRESHOLD, MMAP_THRESHOLD_MAX), (M_TRIM_THRESHOLD, TRIM_HELD)]
    assert calls[-1] == (M_TRIM_THRESHOLD, TRIM_AFTER)
    assert TRIM_AFTER < TRIM_HELD


def test_heap_held_leaves_an_operators_malloc_thresholds_alone():
    calls: list[tuple[int, int]] = []
    for env in ({"MALLOC_TRIM_THRESHOLD_": "131072"}, {"GLIBC_TUNABLES": "glibc.malloc.mmap_threshold=4096"}):
        with heap_held(environ=env, mallopt=lambda k, v: calls.append((k, v)) or 1) as held:
            assert held is False
    assert calls == []


@pytest.mark.skipif(platform.libc_ver()[0] != "glibc", reason="glibc's malloc only")
def test_heap_held_takes_on_glibc():
    with heap_held(environ={}) as held:
        assert held is True
