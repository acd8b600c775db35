"""Hand the allocator's free pages back to the OS now and then, so a long-running process's RSS tracks what it
holds.

CPython frees into glibc's malloc, which keeps freed pages resident in its arenas (one per thread that
allocated, up to 8 x cores) until the top of an arena happens to be free.  A daemon that allocates per window
(measurements, JSON encoding of its state, gRPC replies) on several threads then shows an RSS that swings by
tens of MB with no change in what it holds, and a leak hides in that noise.  `malloc_trim(0)` releases every
free page of every arena (glibc >= 2.8 also madvises pages in the middle of the heap).  Elsewhere (musl,
macOS) there is no such call and `trim_heap` does nothing.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import time
from collections.abc import Callable
from dataclasses import dataclass, field


def _malloc_trim() -> Callable[[int], int] | None:
    name = ctypes.util.find_library("c")
    try:
        fn = ctypes.CDLL(name).malloc_trim if name else None
    except (OSError, AttributeError):
        return None
    if fn is None:
        return None
    fn.argtypes = [ctypes.c_size_t]
    fn.restype = ctypes.c_int
    return fn


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
