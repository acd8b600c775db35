"""Warm start by hardware class: a retune's history is this host's trials plus its class's, unless it drifts.

`class_history` reads both from the store, runs the drift test (`tuner.store.drift`) of this host's trials
against the class's, records the verdict in the store (so other hosts leave a drifting host's trials out of
their class) and returns what the optimiser should be seeded with.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, replace
from typing import Any

from actuators.host import KnobSpace
from tuner.optimize.optimizer import TrialRecord
from tuner.store.base import TrialStore
from tuner.store.drift import DriftResult, DriftSettings, drift_test
from tuner.store.history import HistoryEntry

log = logging.getLogger("tuner.store.warm")


@dataclass(frozen=True)
class ClassHistory:
    """What a retune is seeded with: `entries` (own first, then the class's, oldest first within each),
    how many are the host's own and its class's, and the drift verdict."""

    entries: list[HistoryEntry]
    own: int
    from_class: int
    drift: DriftResult

    def records(self) -> list[TrialRecord]:
        """The entries as `TrialRecord`s indexed 0.. (what `Optimizer.add_history` takes)."""
        return [replace(e.record, index=i) for i, e in enumerate(self.entries)]


def class_history(
    store: TrialStore,
    host: str,
    hw_class: str,
    *,
    limit: int,
    space: KnobSpace | None = None,
    hw: dict[str, Any] | None = None,
    settings: DriftSettings | None = None,
) -> ClassHistory:
    """This host's newest `limit` trials plus (when it does not drift) its class's newest `limit`."""
    own, cls = store.warm_start(host, hw_class, limit, space)
    verdict = drift_test(own, cls, settings) if cls else DriftResult(False, None, 0)
    if hw_class:
        store.set_host(host, hw_class, hw, drift=verdict.drifting, drift_z=verdict.t, drift_n=verdict.n)
    if verdict.drifting:
        log.warning(
            "host %s drifts from its class %s (|t| = %.1f over %d trials): warm start from its own trials only",
            host,
            hw_class,
            verdict.t or 0.0,
            verdict.n,
        )
        cls = []
    return ClassHistory(own + cls, len(own), len(cls), verdict)


__all__ = ["ClassHistory", "class_history"]
