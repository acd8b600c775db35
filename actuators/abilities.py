"""Optional host abilities beyond `actuators.host.Host`, each a `runtime_checkable` Protocol.

Code that can use an ability asks `isinstance(host, Ability)` and otherwise does without it; nothing looks a
member up by name. Which host has which:

| ability | what it gives | `SimHost` | `RealHost` |
|---|---|---|---|
| `ExpectedModel` | `expected(points, qps)`: noise-free long-run latency and power (the oracle) | yes | no |
| `ExpectedAnchors` | `expected_itr_anchors()`: ITRs the model is linear between (a shorter oracle search) | yes | no |
| `ExpectedDrawsKept` | `expected_draws_kept()`: a context in which repeated model calls share work | yes | no |
| `ExpectedCacheShared` | `expected_cache`: the model's memo, handed to hosts built alike (`cache=`) | yes | no |
| `AtomicApply` | `apply(itr_us=, dvfs_ghz=)`: both knobs in one all-or-nothing call | no | yes |
| `Closable` | `close()`: release sockets and processes (not a restore) | no | yes |
| `HardwareClassified` | `hardware_class()`: what makes hosts interchangeable for tuning | yes | yes |
| `Interruptible` | `interrupt()`: stop a running `measure` early, from another thread | no | yes |
| `Warns` | `warnings_by_source()`: what limits the host's measurements and writes | no | yes |
| `LoadControl` | `set_offered_qps(qps)`: the host's offered load can be set (replay needs it) | yes | no |

`AtomicApply` and `LoadControl` (`set_offered_qps`, an ability too) are declared beside `Host` in `actuators.host`,
`HardwareClassified` beside `HardwareClass` in `actuators.hwclass`; this module names them all.
`actuators.loadctl.LoadedHost` has the abilities of the host it wraps (and its own `close` and load control).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from contextlib import AbstractContextManager
from typing import TYPE_CHECKING, Protocol, runtime_checkable

from actuators.host import AtomicApply, LoadControl, OperatingPoint
from actuators.hwclass import HardwareClassified

if TYPE_CHECKING:
    from core.cache import CacheStats

__all__ = [
    "ABILITIES",
    "AtomicApply",
    "Closable",
    "ExpectedAnchors",
    "ExpectedCacheShared",
    "ExpectedDrawsKept",
    "ExpectedModel",
    "ExpectedPoint",
    "HardwareClassified",
    "Interruptible",
    "LoadControl",
    "ModelCache",
    "Warns",
    "abilities_of",
]


class ExpectedPoint(Protocol):
    """What `ExpectedModel.expected` gives per point: latency percentiles (µs) and package power (W)."""

    @property
    def latency_us(self) -> Mapping[float, float]: ...

    @property
    def power_w(self) -> float: ...


# --- the oracle's family: a noise-free model of the host -------------------------------------------------------


@runtime_checkable
class ExpectedModel(Protocol):
    """A host with a noise-free long-run model: what the oracle policy searches."""

    def expected(self, points: Sequence[OperatingPoint], qps: float) -> Sequence[ExpectedPoint]:
        """The long-run latency and power of each of `points` at offered load `qps`."""
        ...


@runtime_checkable
class ExpectedAnchors(Protocol):
    """A model computed at anchor ITRs and linear in ITR between them (the oracle's search relies on it)."""

    def expected_itr_anchors(self) -> tuple[int, ...]:
        """The ITRs (µs) the model computes; other ITRs are interpolated between two of them."""
        ...


@runtime_checkable
class ExpectedDrawsKept(Protocol):
    """A model that can keep the work its calls share while a context is open (one oracle search)."""

    def expected_draws_kept(self) -> AbstractContextManager[None]:
        """A context inside which `expected()` calls reuse what earlier calls of it drew."""
        ...


class ModelCache(Protocol):
    """A model's memo: emptied for benchmarks of the cold cost, and its sizes reported."""

    def clear(self) -> None: ...

    def stats(self) -> list[CacheStats]: ...


@runtime_checkable
class ExpectedCacheShared(Protocol):
    """A model whose memo can be handed to another host built alike (the factory's `cache=` option)."""

    @property
    def expected_cache(self) -> ModelCache:
        """The memo; pass it as `cache=` to the host factory."""
        ...


# --- writes, lifetime, identity, limits ---------------------------------------------------------------------


@runtime_checkable
class Closable(Protocol):
    """Something holding sockets, files or processes that `close()` releases (a host: without restoring)."""

    def close(self) -> None: ...


@runtime_checkable
class Interruptible(Protocol):
    """Something whose blocking call (a host's `measure`) another thread can stop early."""

    def interrupt(self) -> None: ...


@runtime_checkable
class Warns(Protocol):
    """A host that says what limits its measurements and writes, by source."""

    def warnings_by_source(self) -> dict[str, list[str]]:
        """ "energy": parts it runs without (no RAPL: energy unknown), "latency": its latency source's warnings
        (a same-host prober cannot see ITR delay), "dvfs": read-back warnings of the last apply."""
        ...


#: Every optional ability above, for hosts that pass on another host's (`LoadedHost`).
ABILITIES: tuple[type, ...] = (
    ExpectedModel,
    ExpectedAnchors,
    ExpectedDrawsKept,
    ExpectedCacheShared,
    AtomicApply,
    Closable,
    HardwareClassified,
    Interruptible,
    Warns,
)

_MEMBERS: dict[type, tuple[str, ...]] = {
    ExpectedModel: ("expected",),
    ExpectedAnchors: ("expected_itr_anchors",),
    ExpectedDrawsKept: ("expected_draws_kept",),
    ExpectedCacheShared: ("expected_cache",),
    AtomicApply: ("apply",),
    Closable: ("close",),
    HardwareClassified: ("hardware_class",),
    Interruptible: ("interrupt",),
    Warns: ("warnings_by_source",),
}


def abilities_of(host: object) -> dict[type, tuple[str, ...]]:
    """The optional abilities `host` has, each with its member names."""
    return {ability: _MEMBERS[ability] for ability in ABILITIES if isinstance(host, ability)}
