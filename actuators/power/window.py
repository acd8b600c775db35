"""`EnergyWindow`: the energy sources of one measurement window -- the one the tuner uses and those compared with it.

The main source's faults are the caller's (it decides: unknown energy in observe mode, a failed window or a stop
when tuning); a compared source never fails a window: its fault is kept in `problems` (a permanent one drops it,
said once) and that window simply has no reading from it.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass, field

from actuators.power.source import EnergyReading, EnergySource
from core.errors import HostError

log = logging.getLogger(__name__)


def source_names(sources: list[EnergySource]) -> list[str]:
    """The `source` label of each, made unique (`ipmi`, `ipmi-2`, ...)."""
    names: list[str] = []
    for s in sources:
        base, n = s.info.source, 2
        name = base
        while name in names:
            name, n = f"{base}-{n}", n + 1
        names.append(name)
    return names


@dataclass
class CompareSources:
    """Sources shown beside the main one, never used by the tuner; their faults are remembered, not raised."""

    sources: list[EnergySource] = field(default_factory=list)
    problems: dict[str, str] = field(default_factory=dict)  # source -> why it has no reading
    _live: dict[str, EnergySource] = field(default_factory=dict, repr=False)

    def __post_init__(self) -> None:
        self._live = dict(zip(source_names(self.sources), self.sources))

    @property
    def poll_interval_s(self) -> float:
        return min((s.poll_interval_s for s in self._live.values()), default=1.0)

    def _each(self, action: Callable[[EnergySource], EnergyReading | None]) -> dict[str, EnergyReading]:
        out: dict[str, EnergyReading] = {}
        for name, source in list(self._live.items()):
            try:
                reading = action(source)
            except HostError as exc:
                if exc.permanent:
                    del self._live[name]
                    log.warning("energy source %s (compared) dropped: %s", name, exc)
                self.problems[name] = str(exc) + (" (dropped)" if exc.permanent else "")
                continue
            if reading is not None:
                self.problems.pop(name, None)
                out[name] = reading
        return out

    def begin(self) -> None:
        self._each(lambda s: s.begin())

    def poll(self) -> None:
        self._each(lambda s: s.poll())

    def end(self) -> dict[str, EnergyReading]:
        return self._each(lambda s: s.end())
