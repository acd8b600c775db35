"""Sensor protocols a real host combines into a `Measurement`: offered load and latency over a window."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol, runtime_checkable


@dataclass(frozen=True)
class LatencyWindow:
    """Latency observed over one window: per-percentile values and 95 % order-statistic CIs (µs).

    `ci_known` is False when the source cannot bound its percentiles (the CIs are then placeholders).
    """

    requests: int
    latency_us: dict[float, float]
    latency_ci_us: dict[float, tuple[float, float]]
    ci_known: bool = True


@runtime_checkable
class LatencySource(Protocol):
    """Something that observes request latency (prober, Prometheus query, hook)."""

    def begin(self) -> None:
        """Start a window (discard what was seen before)."""
        ...

    def end(self) -> LatencyWindow:
        """Close the window and return what was seen in it."""
        ...

    def close(self) -> None:
        """Stop background work and release sockets."""
        ...


@runtime_checkable
class QpsSource(Protocol):
    """A monotonically increasing request count (memcached `cmd_*` sum, NIC rx packets, ...)."""

    def total_requests(self) -> float:
        """Requests seen so far; the rate is the difference of two reads over their time apart."""
        ...


@runtime_checkable
class WarningSource(Protocol):
    """A sensor that can say what limits its view (a same-host prober cannot see ITR delay)."""

    def warnings(self) -> list[str]: ...


@runtime_checkable
class ServerStats(Protocol):
    """A QPS source that reads its server's own statistics (memcached `stats`, with the server's `version`)."""

    def snapshot(self) -> ServerSnapshot: ...


class ServerSnapshot(Protocol):
    """The part of a server's statistics a host's hardware class uses."""

    @property
    def version(self) -> str: ...
