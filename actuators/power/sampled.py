"""`SampledEnergyMeter`: a slowly updating `PowerReader` (BMC, PDU in Prometheus) read as an `EnergySource`.

Watts (a gauge): the window's energy is the trapezoid integral of the readings over time, from the reading taken
at `begin` to the one taken at `end`, plus the window's edges outside them (the time a read takes) at the nearest
reading's power. Readings in a run of equal values integrate exactly as if only the first and
the last of the run were kept, so between two different readings the power is taken to move linearly from the last
time the old value was seen to the first time the new one was; `method="hold"` keeps each reading until the next
instead (a step, for sources that report a fresh average at each update). Joules (a counter): the difference of
the first and last readings (a counter that goes backwards was reset: the window counts from the reset on). Either way the window's edges cost at most
about one update period's energy, hence the windows' minimum number of source updates (`updates`).

`updates` counts the source's updates seen in the window: readings that differ from the previous one, and a
repeated value read a whole `update_period_s` after the last update (a source that updated to the same value).

Faults: a failing read is retried with a capped exponential back-off (no read before it is due), and the window goes
on; a window left with fewer than two readings raises a transient `HostError` (nothing to integrate); a source that
has failed for `give_up_s` in a row -- or raises a permanent `HostError` -- raises a permanent one.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from actuators.power.source import EnergyReading, PowerReader, PowerSample, SourceInfo
from core.errors import HostError

METHODS = ("trapezoid", "hold")
log = logging.getLogger(__name__)


def integrate_watts(samples: list[tuple[float, float]], method: str = "trapezoid") -> float:
    """Joules of (t, watts) readings in time order, from the first reading's time to the last's (pure)."""
    if method not in METHODS:
        raise ValueError(f"method {method!r}: expected one of {', '.join(METHODS)}")
    joules = 0.0
    for (t0, w0), (t1, w1) in zip(samples, samples[1:]):
        joules += (t1 - t0) * (w0 if method == "hold" else (w0 + w1) / 2.0)
    return joules


def count_updates(samples: list[tuple[float, float]], period_s: float) -> int:
    """Source updates among (t, value) readings: changed values, and a repeat a whole period after the last one."""
    updates = 0
    if not samples:
        return 0
    last_t, last_v = samples[0]
    for t, v in samples[1:]:
        if v != last_v or t - last_t >= period_s:
            updates += 1
            last_t = t
        last_v = v
    return updates


@dataclass
class SampledEnergyMeter:
    """An `EnergySource` over a `PowerReader` (see the module docstring)."""

    reader: PowerReader
    method: str = "trapezoid"
    give_up_s: float = 60.0  # failing this long in a row is permanent (the source stopped answering)
    max_backoff_s: float = 10.0
    clock: Callable[[], float] = time.monotonic
    _samples: list[tuple[float, float]] = field(default_factory=list, repr=False)
    _counter: bool = field(default=False, repr=False)
    _failing_since: float | None = field(default=None, repr=False)
    _failures: int = field(default=0, repr=False)
    _next_read: float = field(default=0.0, repr=False)
    _last_error: str = field(default="", repr=False)
    _t0: float = field(default=0.0, repr=False)

    def __post_init__(self) -> None:
        if self.method not in METHODS:
            raise HostError(f"energy method {self.method!r}: expected one of {', '.join(METHODS)}", permanent=True)

    @property
    def info(self) -> SourceInfo:
        return self.reader.info

    @property
    def poll_interval_s(self) -> float:
        """Twice per update: every change is seen within half a period of when it appeared."""
        return max(self.reader.info.update_period_s / 2.0, 0.05)

    @property
    def last_error(self) -> str:
        return self._last_error

    def begin(self) -> None:
        self._samples = []
        self._t0 = self.clock()
        self._next_read = 0.0
        self._read()

    def poll(self) -> None:
        if self.clock() >= self._next_read:
            self._read()

    def end(self) -> EnergyReading:
        self._read()
        seconds = self.clock() - self._t0
        if len(self._samples) < 2:
            why = f" (last error: {self._last_error})" if self._last_error else ""
            raise HostError(f"energy source {self.info.source}: no reading to integrate over {seconds:.1f} s{why}")
        joules = self._window_joules(self._t0 + seconds)
        updates = count_updates(self._samples, self.info.update_period_s)
        zones = {zone: joules for zone in self.info.zones[:1]}
        return EnergyReading(seconds, joules, zones, updates)

    def _window_joules(self, t_end: float) -> float:
        """Joules from `_t0` to `t_end`: the readings' integral (or counter difference), and the edges before the
        first reading and after the last one at the nearest reading's power (counters: at the window's mean)."""
        (t_first, v_first), (t_last, v_last) = self._samples[0], self._samples[-1]
        edges = max(t_first - self._t0, 0.0), max(t_end - t_last, 0.0)
        if self._counter:
            inside = v_last - v_first
            rate = inside / (t_last - t_first) if t_last > t_first else 0.0
            return inside + rate * (edges[0] + edges[1])
        return integrate_watts(self._samples, self.method) + v_first * edges[0] + v_last * edges[1]

    def _read(self) -> None:
        now = self.clock()
        try:
            sample = self.reader.read()
            value = self._value(sample)
        except HostError as exc:
            self._fail(now, exc)
            return
        self._failing_since, self._failures, self._next_read = None, 0, 0.0
        self._samples.append((sample.t, value))

    def _value(self, sample: PowerSample) -> float:
        """The sample's watts or joules (a reading with neither is a transient fault)."""
        if sample.joules is not None:
            if self._samples and not self._counter:
                raise HostError(f"energy source {self.info.source}: switched from watts to joules mid-window")
            self._counter = True
            if self._samples and sample.joules < self._samples[-1][1]:
                self._samples = []  # reset (a BMC reboot, an exporter restart): the window counts from here
            return float(sample.joules)
        if sample.watts is None:
            raise HostError(f"energy source {self.info.source}: a reading with neither watts nor joules")
        self._counter = False
        return float(sample.watts)

    def _fail(self, now: float, exc: HostError) -> None:
        """Back off; raise (permanent) once the source has failed for `give_up_s`, or at once on a permanent fault."""
        self._last_error = str(exc)
        if exc.permanent:
            raise exc
        if self._failing_since is None:
            self._failing_since = now
        self._failures += 1
        if now - self._failing_since >= self.give_up_s:
            raise HostError(
                f"energy source {self.info.source} failed for {now - self._failing_since:.0f} s: {exc}",
                permanent=True,
            )
        backoff = min(self.reader.info.update_period_s * 2.0 ** (self._failures - 1), self.max_backoff_s)
        self._next_read = now + backoff
        if self._failures == 1:  # once per run of failures: the back-off is said, not each retry
            log.warning(
                "energy source %s: %s; backing off (retries up to every %.0f s, gives up after %.0f s)",
                self.info.source,
                exc,
                self.max_backoff_s,
                self.give_up_s,
            )
