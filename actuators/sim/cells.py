"""The long-run memo of the simulated host: `Expected` values and the byte-bounded `ExpectedCache` of the
cells behind `SimHost.expected()` / `expected_default()` (see `core.cache` for why a lookup cannot fail)."""

from __future__ import annotations

import sys
from dataclasses import dataclass
from typing import Any

import numpy as np

from core.cache import BoundedCache, CacheStats, tuple_bytes


@dataclass(frozen=True)
class Expected:
    """Noise-free long-run latency percentiles (µs) and package power (W) of one operating point."""

    latency_us: dict[float, float]
    power_w: float
    p99_se_us: float = 0.0  # standard error of latency_us[99.0] itself (batch means over its own sample)


#: Memory bounds of the long-run memo behind `expected()` / `expected_default()` (see `ExpectedCache`).
#: A cell (one ITR anchor x frequency x load: 5 percentiles, power, SE, and its key) holds ~550 B, so
#: 64 MiB keep ~120,000 cells: a full 54 x 18 grid at ~120 loads, or every cell a day's replay in
#: 5-minute windows asks for outside the oracle's full grids.  A default-mode entry is ~700 B.
EXPECTED_CACHE_BYTES = 64 * 2**20
DEFAULT_CACHE_BYTES = 4 * 2**20

Cell = tuple[np.ndarray, float, float]  # (percentiles (P,), package power W, p99 standard error µs)


class ExpectedCache:
    """The memo of long-run cells: pure functions of (params, cores, ITR anchor, load, frequency) computed
    from fixed seeds, so hosts built alike can share one (a replay's oracle and its tuner's windows ask for
    the same cells) by being handed the same `ExpectedCache`.  Bounded by bytes (LRU); a cell evicted is
    recomputed, identically, when asked again."""

    def __init__(self, cell_bytes: int = EXPECTED_CACHE_BYTES, default_bytes: int = DEFAULT_CACHE_BYTES) -> None:
        self.cells: BoundedCache[tuple[Any, ...], Cell] = BoundedCache(cell_bytes, name="sim.expected_cells")
        self.defaults: BoundedCache[tuple[Any, ...], Expected] = BoundedCache(
            default_bytes, sizeof=_expected_bytes, name="sim.expected_default"
        )

    def clear(self) -> None:
        """Forget every cell (benchmarks of the cold cost)."""
        self.cells.clear()
        self.defaults.clear()

    def stats(self) -> list[CacheStats]:
        return [self.cells.stats(), self.defaults.stats()]


def _expected_bytes(key: tuple[Any, ...], value: Expected) -> int:
    return tuple_bytes(key) + sys.getsizeof(value) + 2 * sys.getsizeof(value.latency_us) + 48 * len(value.latency_us)
