"""What limits the host now, by source: energy it cannot measure, the latency source's warnings (a same-host
prober cannot see ITR delay), DVFS read-back warnings of the last apply, NICs whose driver applied another rx-usecs
than its profile says, start-up notes and a permanent fault.
Each new line is logged once; the counts by source are exported (`tuner_host_warnings`)."""

from __future__ import annotations

import logging

from actuators.abilities import Warns
from tuner.daemon.context import LoopContext

log = logging.getLogger("tuner.daemon.loop")

#: Sources kept until the daemon restarts (the others are read from the host at each refresh).
STICKY = ("startup", "fault")


class HostWarnings:
    """The host's warnings by source (see the module docstring)."""

    def __init__(self, ctx: LoopContext) -> None:
        self.ctx = ctx
        self._by_source: dict[str, list[str]] = {}

    def refresh(self, extra: dict[str, list[str]] | None = None) -> None:
        """Read the host's warnings now, add `extra` (by source), log each new line once, export the counts."""
        host = self.ctx.host
        by_host: dict[str, list[str]] = host.warnings_by_source() if isinstance(host, Warns) else {}
        found: dict[str, list[str]] = {
            "energy": list(by_host.get("energy", [])),
            "latency": list(by_host.get("latency", [])),
            "dvfs": list(by_host.get("dvfs", [])),
            "itr": list(by_host.get("itr", [])),
            **{source: list(self._by_source.get(source, [])) for source in STICKY},
        }
        for source, lines in (extra or {}).items():
            found[source] = found.get(source, []) + lines
        seen = {w for lines in self._by_source.values() for w in lines}
        for lines in found.values():
            for w in lines:
                if w not in seen:
                    log.warning("%s", w)
        with self.ctx.lock:
            self._by_source = found
        self.ctx.metrics.set_warnings({source: len(lines) for source, lines in found.items()})

    def lines(self) -> list[str]:
        """Every active warning, one line each."""
        with self.ctx.lock:
            return [w for lines in self._by_source.values() for w in lines]
