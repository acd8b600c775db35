"""Drift: a host that got faster under its model (a release rolled back, a noisy neighbour gone). Pure functions.

Each trial's percentile is compared with the model's prediction for it before it is reported (`ExperimentModel.
latency_z`: signed SDs, negative = faster than predicted). A one-sided CUSUM of those z scores (allowance
`DRIFT_K`) crosses `TunerSettings.drift_h` when trial after trial runs faster than the model expects: the host
changed, and the trials before the run began describe a host that is gone. The optimiser then retires them
(kept in its records, no longer in the model, the safety filter's evidence or a retune's choice), so a faster
host is not held at the points a slower one needed.

Only the faster side is tested: the model's surprises upward are routine on an unchanged host (a new peak, the
latency cliff). Off by default: measured on the zoo's tuning half it takes a rollback's cost away where it fires
but retires too much when it does (docs/benchmarks.md, "A drifting plant on the tuning half").
"""

from __future__ import annotations

from dataclasses import dataclass

#: The CUSUM's allowance, in SDs: a trial counts toward an alarm by how far it is faster than 1 SD below the model
DRIFT_K = 1.0


@dataclass(frozen=True)
class Cusum:
    """The CUSUM of faster-than-predicted z scores: the sum, and the trial its current run began at (None: 0)."""

    total: float = 0.0
    start: int | None = None


def cusum_step(state: Cusum, index: int, z: float, k: float = DRIFT_K) -> Cusum:
    """`state` after trial `index` measured `z` SDs from the model (negative: faster than predicted)."""
    total = max(0.0, state.total - z - k)
    if total <= 0.0:
        return Cusum()
    return Cusum(total, index if state.start is None else state.start)


def alarmed(state: Cusum, h: float) -> bool:
    """Whether the sum crossed `h` (> 0; 0 = the test is off)."""
    return h > 0 and state.total > h and state.start is not None
