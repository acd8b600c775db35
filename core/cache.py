"""`BoundedCache`: a least-recently-used memo bounded by the bytes it holds, that can never fail a caller.

Every lookup is compute-and-return in one step: `get_many(keys, compute)` looks the keys up, computes the
missing ones with one call, stores them and hands back a dict of *every* value asked for, built from
what it found and what it computed -- never from a second read of the store, which the bound may have
emptied in between (a cell evicted while its neighbour was being computed).  Eviction therefore only
ever costs a recomputation, never a `KeyError`.

The bound is in bytes, not entries: the caller gives `sizeof(key, value)`, an estimate of what one entry
holds (its key, its value and the store's own slot), and the cache evicts the least recently used entries
until the sum is within `max_bytes` (the entry just stored is kept even if it alone is larger).  Owners
state their bound where they create the cache.  `stats()` counts hits, misses and evictions so a bench
can print the hit rate.

A cache is an object the caller owns and passes on (no module-level store): hosts built alike share
values by being handed the same cache.  A lock guards the store (a daemon's threads may share one);
`compute` runs outside it, so two threads may compute the same missing key once each (same value).
"""

from __future__ import annotations

import sys
import threading
from collections import OrderedDict
from collections.abc import Callable, Hashable, Iterable, Mapping
from dataclasses import dataclass
from typing import Generic, TypeVar

K = TypeVar("K", bound=Hashable)
V = TypeVar("V")

SLOT_BYTES = 100  # an OrderedDict slot: hash-table entry + its linked-list node (CPython 3.11, measured ~100 B)


@dataclass(frozen=True)
class CacheStats:
    """Counters of one cache since it was made (or cleared)."""

    name: str
    hits: int
    misses: int
    evictions: int
    entries: int
    bytes: int
    max_bytes: int

    @property
    def hit_rate(self) -> float | None:
        """Hits / lookups, None before the first lookup."""
        total = self.hits + self.misses
        return self.hits / total if total else None

    def as_dict(self) -> dict[str, object]:
        rate = self.hit_rate
        return {
            "name": self.name,
            "hits": self.hits,
            "misses": self.misses,
            "hit_rate": None if rate is None else round(rate, 4),
            "evictions": self.evictions,
            "entries": self.entries,
            "bytes": self.bytes,
            "max_bytes": self.max_bytes,
        }


def tuple_bytes(obj: object) -> int:
    """Shallow-recursive size estimate of a key or value made of tuples, numbers, strings and arrays.

    Objects shared between entries (dataclass parameters in a key) count only their reference."""
    size = sys.getsizeof(obj)
    if isinstance(obj, tuple):
        size += sum(tuple_bytes(x) for x in obj if isinstance(x, (tuple, int, float, str, bytes)) or _is_array(x))
    return size


def _is_array(x: object) -> bool:
    return hasattr(x, "nbytes") and hasattr(x, "dtype")


class BoundedCache(Generic[K, V]):
    """LRU memo of at most `max_bytes` (estimated with `sizeof(key, value)`), with hit/miss counters."""

    def __init__(
        self,
        max_bytes: int,
        sizeof: Callable[[K, V], int] | None = None,
        name: str = "cache",
    ) -> None:
        if isinstance(max_bytes, bool) or not isinstance(max_bytes, int) or max_bytes < 0:
            raise ValueError(f"cache {name!r}: max_bytes {max_bytes!r}: expected an integer >= 0")
        self.name = name
        self.max_bytes = max_bytes
        self._sizeof = sizeof or (lambda k, v: tuple_bytes(k) + tuple_bytes(v))
        self._store: OrderedDict[K, tuple[V, int]] = OrderedDict()
        self._bytes = 0
        self._hits = self._misses = self._evictions = 0
        self._lock = threading.Lock()

    def __len__(self) -> int:
        return len(self._store)

    def __contains__(self, key: object) -> bool:
        return key in self._store

    def get_many(self, keys: Iterable[K], compute: Callable[[list[K]], Mapping[K, V]]) -> dict[K, V]:
        """Values of `keys`: cached ones as held, missing ones from one `compute(missing)` call (which must
        return a value for each).  The returned dict is complete whatever the bound evicts meanwhile."""
        out: dict[K, V] = {}
        missing: list[K] = []
        with self._lock:
            for key in dict.fromkeys(keys):
                held = self._store.get(key)
                if held is None:
                    missing.append(key)
                else:
                    self._store.move_to_end(key)
                    out[key] = held[0]
            self._hits += len(out)
            self._misses += len(missing)
        if not missing:
            return out
        computed = compute(missing)
        for key in missing:
            try:
                out[key] = computed[key]
            except KeyError:
                raise KeyError(f"cache {self.name!r}: compute() returned no value for {key!r}") from None
        with self._lock:
            for key in missing:
                self._put(key, out[key])
        return out

    def get(self, key: K, compute: Callable[[], V]) -> V:
        """The value of `key`, computed by `compute()` when missing (one key of `get_many`)."""
        return self.get_many((key,), lambda _missing: {key: compute()})[key]

    def _put(self, key: K, value: V) -> None:
        old = self._store.pop(key, None)
        if old is not None:
            self._bytes -= old[1]
        size = int(self._sizeof(key, value)) + SLOT_BYTES
        self._store[key] = (value, size)
        self._bytes += size
        while self._bytes > self.max_bytes and len(self._store) > 1:
            _, (_, freed) = self._store.popitem(last=False)
            self._bytes -= freed
            self._evictions += 1

    def clear(self) -> None:
        """Forget every entry and reset the counters."""
        with self._lock:
            self._store.clear()
            self._bytes = 0
            self._hits = self._misses = self._evictions = 0

    def stats(self) -> CacheStats:
        with self._lock:
            return CacheStats(
                self.name, self._hits, self._misses, self._evictions, len(self._store), self._bytes, self.max_bytes
            )
