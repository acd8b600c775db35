"""Hand the allocator's free pages back to the OS now and then, so a long-running process's RSS tracks what it
holds.

CPython frees into glibc's malloc, which keeps freed pages resident in its arenas (one per thread that
allocated, up to 8 x cores) until the top of an arena happens to be free.  A daemon that allocates per window
(measurements, JSON encoding of its state, gRPC replies) on several threads then shows an RSS that swings by
tens of MB with no change in what it holds, and a leak hides in that noise.  `malloc_trim(0)` releases every
free page of every arena (glibc >= 2.8 also madvises pages in the middle of the heap).  Elsewhere (musl,
macOS) there is no such call and `trim_heap` does nothing.

`limit_arenas` caps the arenas a process makes (`mallopt(M_ARENA_MAX)`, as `MALLOC_ARENA_MAX` would): with a
dozen threads (gRPC, metrics, the loop) each arena keeps its own free pages, and which arena a thread lands in
moves the RSS by ~10 MB between otherwise identical hours.  Python threads take turns under the GIL, so a
couple of arenas cost no contention.

`heap_held` is the other way round, for a burst of numpy work (the replay oracle's simulator cells): by default
glibc maps each array over its (dynamic) mmap threshold afresh and hands freed pages at the top of the heap
back, so every new array of a few MB is page-faulted in again -- a third of the oracle's CPU time was the
kernel zeroing pages.  Within the block arrays up to 32 MiB come from the heap and freed pages stay resident,
and after it up to 256 MiB of free heap stays for the next block.  Values never depend on it.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import os
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field

#: glibc's `mallopt` parameter for the arena cap (malloc.h).
M_ARENA_MAX = -8
#: Arenas a long-running process keeps when the environment does not say (`MALLOC_ARENA_MAX`).
ARENAS = 2
#: glibc's `mallopt` parameters for the heap's trim and mmap thresholds (malloc.h).
M_TRIM_THRESHOLD = -1
M_MMAP_THRESHOLD = -3
#: The largest mmap threshold glibc accepts on 64-bit (its dynamic threshold's ceiling, 4 MiB x sizeof(long)).
MMAP_THRESHOLD_MAX = 32 * 2**20
#: Trim threshold within `heap_held` (keep every freed page) and after it: free heap up to this stays resident
#: for the next block (the oracle's search peaks at ~150-200 MB; trimming it after each window cost ~0.1-0.3 s
#: CPU of page faults in the next).
TRIM_HELD = 2**31 - 1
TRIM_AFTER = 256 * 2**20
#: Environment settings of those thresholds that an operator may have made (then `heap_held` leaves them be).
MALLOC_ENV = ("MALLOC_MMAP_THRESHOLD_", "MALLOC_TRIM_THRESHOLD_", "MALLOC_TOP_PAD_")


def _libc() -> ctypes.CDLL | None:
    name = ctypes.util.find_library("c")
    try:
        return ctypes.CDLL(name) if name else None
    except OSError:
        return None


def limit_arenas(n: int = ARENAS, environ: dict[str, str] | None = None) -> bool | None:
    """Cap glibc's malloc arenas at `n` for threads that allocate from now on; call it before starting threads.

    Leaves the cap alone when `MALLOC_ARENA_MAX` is set (glibc read it at start: the operator's word stands).
    True when the cap was set, False when glibc refused or the environment decides, None without glibc."""
    if (os.environ if environ is None else environ).get("MALLOC_ARENA_MAX"):
        return False
    fn = _mallopt()
    if fn is None:
        return None
    return bool(fn(M_ARENA_MAX, int(n)))


def _mallopt() -> Callable[[int, int], int] | None:
    libc = _libc()
    fn = getattr(libc, "mallopt", None) if libc is not None else None
    if fn is None:
        return None
    fn.argtypes = [ctypes.c_int, ctypes.c_int]
    fn.restype = ctypes.c_int
    opt: Callable[[int, int], int] = fn
    return opt


@contextmanager
def heap_held(
    environ: dict[str, str] | None = None,
    mallopt: Callable[[int, int], int] | None = None,
) -> Iterator[bool | None]:
    """Within the block glibc serves allocations up to `MMAP_THRESHOLD_MAX` from its heap and keeps every page
    it frees (no page faults for the next array of the same size); on exit the trim threshold becomes
    `TRIM_AFTER`, so the next block (a replay's next window) finds up to that much free heap still resident
    and glibc trims beyond it as usual.  Process-wide; the mmap threshold stays at `MMAP_THRESHOLD_MAX`
    (glibc's own dynamic ceiling: setting it ends the dynamic rule).

    Yields True when the thresholds were set, False when glibc refused or the environment sets them (an
    operator's word stands), None without glibc. `mallopt` defaults to glibc's (tests pass a fake)."""
    env = os.environ if environ is None else environ
    opt = _mallopt() if mallopt is None else mallopt
    if opt is None:
        yield None
        return
    if any(env.get(k) for k in MALLOC_ENV) or "malloc" in env.get("GLIBC_TUNABLES", ""):
        yield False
        return
    ok = bool(opt(M_MMAP_THRESHOLD, MMAP_THRESHOLD_MAX)) and bool(opt(M_TRIM_THRESHOLD, TRIM_HELD))
    try:
        yield ok
    finally:
        opt(M_TRIM_THRESHOLD, TRIM_AFTER)


def _malloc_trim() -> Callable[[int], int] | None:
    libc = _libc()
    fn = getattr(libc, "malloc_trim", None) if libc is not None else None
    if fn is None:
        return None
    fn.argtypes = [ctypes.c_size_t]
    fn.restype = ctypes.c_int
    trim: Callable[[int], int] = fn
    return trim


def trim_heap() -> bool | None:
    """`malloc_trim(0)`: True when memory went back to the OS, False when none could, None without glibc."""
    fn = _malloc_trim()
    return None if fn is None else bool(fn(0))


@dataclass
class HeapTrimmer:
    """Calls `trim` (default `trim_heap`) at most once every `every_s` seconds of `clock`."""

    every_s: float = 60.0
    trim: Callable[[], bool | None] = trim_heap
    clock: Callable[[], float] = time.monotonic
    _last: float | None = field(default=None, init=False)
    calls: int = field(default=0, init=False)

    def maybe(self) -> bool:
        """Trim if the last trim is `every_s` old (or there was none); True when it trimmed."""
        now = self.clock()
        if self._last is not None and now - self._last < self.every_s:
            return False
        self._last = now
        self.calls += 1
        self.trim()
        return True
