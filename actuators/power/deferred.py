"""`DeferredReader`: a `PowerReader` whose server did not answer at start-up, built when it first answers.

`kinds.build_source` builds each reader at start-up, so a configuration that cannot work (a bad option, an
unreadable password file, a refused login, no such chassis or series, several series) fails there, one line
naming the field. A reader whose server simply did not answer then (an `UnreachableError`: connection refused,
a timeout, HTTP 5xx -- the BMC or Prometheus is rebooting, or starts after the daemon) is not dropped: the
source gets a `DeferredReader` instead, which builds the real reader at each `read` until that succeeds.

The `SampledEnergyMeter` over it treats a failed build as any failed read: transient faults back off (one
warning per run of failures) and leave the windows' energy unknown, never 0; a build that keeps failing for
`give_up_s` -- or fails permanently once the server answers (the login refused, no such chassis) -- is
permanent, as a source that stops answering mid-run is. A later build's fault that was permanent at start only
because the server had answered it (Prometheus up but not yet scraping: "no series") stays transient here.

Until the reader is built, `info` is `provisional`: the kind, the configured zone, and the configured
`update_period_s` or `PROVISIONAL_PERIOD_S` (the pace of the retries); the built reader's own `info` (its
update period from the BMC's sensor or the scrape interval) replaces it from the first reading on.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

from actuators.power.source import PowerReader, PowerSample, SourceInfo

#: the update period `info` states before the server has answered (the meter retries after 1, 2, 4, ... of them)
PROVISIONAL_PERIOD_S = 1.0
log = logging.getLogger(__name__)


def provisional_info(kind: str, options: Mapping[str, object]) -> SourceInfo:
    """What a reader of `kind` with these (already checked) options states before its server answers."""
    zone = options.get("zone")
    period = options.get("update_period_s")
    given = isinstance(period, int | float) and not isinstance(period, bool) and math.isfinite(period) and period > 0
    return SourceInfo(
        source=kind,
        zones=(zone if isinstance(zone, str) and zone else "platform",),
        update_period_s=float(period) if given and isinstance(period, int | float) else PROVISIONAL_PERIOD_S,
        resolution=1.0,
        resolution_unit="W",
    )


@dataclass
class DeferredReader:
    """A `PowerReader` built by `build()` at the first `read` that succeeds in building it (module docstring)."""

    build: Callable[[], PowerReader]
    provisional: SourceInfo
    reader: PowerReader | None = field(default=None, repr=False)

    @property
    def info(self) -> SourceInfo:
        return self.reader.info if self.reader is not None else self.provisional

    def read(self) -> PowerSample:
        """The built reader's reading; builds it first while not built (its `HostError` is this read's)."""
        if self.reader is None:
            self.reader = self.build()
            log.info("energy source %s answers now: reading it", self.provisional.source)
        return self.reader.read()

    def close(self) -> None:
        if self.reader is not None:
            self.reader.close()
