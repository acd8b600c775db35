"""What every energy source gives a trial window, and what a slowly updating power reader gives it.

An `EnergySource` is read like RAPL's `EnergyMeter`: `begin()` at a window's start, `poll()` at least every
`poll_interval_s`, `end()` for the window's joules (total and per zone). `info` says what the source is and
how fast it updates, so a trial window never ends before the source has updated often enough.

A `PowerReader` is a source that answers one reading at a time and updates every 1-5 s (a BMC, a PDU exporter
in Prometheus): a power in watts (a gauge) or a cumulative energy in joules (a counter), stamped with the
time it was read.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol, runtime_checkable


@dataclass(frozen=True)
class SourceInfo:
    """An energy source's name (the `source` label), what it covers, how often and how finely it updates."""

    source: str  # rapl | ipmi | redfish | prometheus
    zones: tuple[str, ...]  # the `zone` labels it reports: package-0, dram, psys, platform, ...
    update_period_s: float  # how often a new value appears (RAPL ~0.001 s, a BMC 1-5 s)
    resolution: float  # the smallest step of one reading, in `resolution_unit`
    resolution_unit: str  # "J" (a counter) or "W" (a power reading)


@dataclass(frozen=True)
class PowerSample:
    """One reading: `watts` (a gauge) or `joules` (a cumulative counter), read at monotonic time `t`."""

    t: float
    watts: float | None = None
    joules: float | None = None


@runtime_checkable
class PowerReader(Protocol):
    """One slowly updating power or energy reading (BMC, Prometheus); `read` raises `HostError` on a fault."""

    @property
    def info(self) -> SourceInfo: ...

    def read(self) -> PowerSample: ...

    def close(self) -> None: ...


@dataclass(frozen=True)
class EnergyReading:
    """Energy over one window: the total the tuner uses and joules per zone (same-named zones summed).

    `updates` is how many times the source's value changed during the window (None: it updates so often --
    RAPL every ~1 ms -- that a window always sees enough of them)."""

    seconds: float
    energy_j: float
    by_zone_j: dict[str, float]
    updates: int | None = None


@runtime_checkable
class EnergySource(Protocol):
    """Read like RAPL's `EnergyMeter`: `begin()`, `poll()` at least every `poll_interval_s`, `end()`.

    `poll` raises `HostError` only when the window's energy is lost (`permanent=True` when retrying cannot
    help); `end` returns the window's joules."""

    @property
    def info(self) -> SourceInfo: ...

    @property
    def poll_interval_s(self) -> float: ...

    def begin(self) -> None: ...

    def poll(self) -> None: ...

    def end(self) -> EnergyReading: ...
