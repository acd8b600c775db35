"""The power curve a scheduler asks for: at each load the model knows, the predicted power and latency percentile
at the best point under an SLA, with their standard errors.

The source is the daemon's prediction tables (one per recent retune: the optimiser's model over a grid of
points, predicted at that retune's load -- in context mode the model's load input, computed in the loop
thread so no RPC ever runs the model). At each table's load the best point is the one of lowest predicted
power whose one-sided 95 % upper bound of the latency (mean + 1.645 SEM) meets the SLA -- the rule
`GetOperatingPoint` applies. Tables of loads within `merge_pct` % of each other are one load (the newest
wins). A load where no point meets the SLA is reported (`meets_sla` False, no point) rather than dropped,
so a scheduler sees where this host cannot hold the SLA. Only tables trained at the requested percentile
can answer: a model of p99 does not predict p90.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from actuators.host import OperatingPoint

Z_95 = 1.645


@dataclass(frozen=True)
class CurvePoint:
    qps: float
    point: OperatingPoint | None
    power_w: float
    power_sem_w: float
    latency_us: float
    latency_sem_us: float
    meets_sla: bool
    source: str


def power_curve(
    tables: Sequence[Any], sla_us: float, percentile: float, *, z: float = Z_95, merge_pct: float = 1.0
) -> tuple[list[CurvePoint], str]:
    """(curve points by load, a note): see the module docstring. `tables` have `retune_id`, `tuned_qps`,
    `percentile`, `points` and per point `latency_us`, `latency_sem`, `power_w`, `power_sem`, oldest first."""
    usable = [t for t in tables if abs(t.percentile - percentile) <= 1e-9 and math.isfinite(t.tuned_qps)]
    skipped = len(tables) - len(usable)
    note = ""
    if skipped:
        others = sorted({f"p{t.percentile:g}" for t in tables if t not in usable})
        note = f"{skipped} model(s) of other percentiles left out ({', '.join(others)})"
    by_load: list[Any] = []
    for t in usable:  # oldest first: a newer table at (nearly) the same load replaces the older
        same = [i for i, u in enumerate(by_load) if abs(u.tuned_qps - t.tuned_qps) <= merge_pct / 100 * t.tuned_qps]
        for i in reversed(same):
            del by_load[i]
        by_load.append(t)
    out = []
    for t in sorted(by_load, key=lambda t: t.tuned_qps):
        ok = [
            i
            for i in range(len(t.points))
            if math.isfinite(t.latency_us[i])
            and math.isfinite(t.power_w[i])
            and t.latency_us[i] + z * (t.latency_sem[i] if math.isfinite(t.latency_sem[i]) else math.inf) <= sla_us
        ]
        if not ok:
            out.append(
                CurvePoint(t.tuned_qps, None, math.nan, math.nan, math.nan, math.nan, False, f"model {t.retune_id}")
            )
            continue
        i = min(ok, key=lambda j: t.power_w[j])
        out.append(
            CurvePoint(
                t.tuned_qps,
                t.points[i],
                t.power_w[i],
                t.power_sem[i],
                t.latency_us[i],
                t.latency_sem[i],
                True,
                f"model {t.retune_id}",
            )
        )
    if not out:
        note = (note + "; " if note else "") + "no model yet (the first retune has not finished)"
    return out, note


__all__ = ["Z_95", "CurvePoint", "power_curve"]
