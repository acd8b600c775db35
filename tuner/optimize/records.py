"""What the optimiser keeps per trial: `TrialRecord` (and its JSON form), `Prediction`, the pending-trial
bookkeeping, and the standard errors a window's metrics are reported to Ax with."""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from typing import Any

from actuators.host import Measurement, OperatingPoint

#: Relative standard error assumed for a window's mean power when the host does not report one: RAPL
#: counts energy exactly, what varies is the process; 1 % of power over a 20 s window is an upper estimate
#: of what the simulated host and the dissertation's 20 s windows show.
POWER_REL_SEM = 0.01
#: Floor for the relative SEM of the percentile (an order-statistic CI can collapse to zero width).
LATENCY_REL_SEM_FLOOR = 0.005

#: A grid cell of the optimiser's knob grid: (index into the ITR candidates, index into the host's frequencies).
Cell = tuple[int, int]

STATUS_COMPLETED = "completed"
STATUS_FAILED = "failed"


@dataclass(frozen=True)
class TrialRecord:
    """One trial: the point, the load it ran at, and what happened.

    `reward` is the reward's value (W for `constrained`); `settle` is the settle-period measurement (its
    energy and time count against the exploration), `compute_s` the optimiser's compute for the trial (the
    stopping-rule check before it, Ax's suggestion and the safety filter).
    With safe exploration on, `p_violation` is the model's P(percentile > SLA) at this point and load when it
    was chosen (None: no model yet, e.g. a safe-start step) and `note` says why the point was tried when it
    is not Ax's own proposal.
    """

    index: int
    point: OperatingPoint
    qps: float
    status: str  # "completed" | "failed"
    measurement: Measurement | None
    reward: float | None
    error: str | None
    settle: Measurement | None = None
    compute_s: float = 0.0
    p_violation: float | None = None
    note: str = ""


@dataclass(frozen=True)
class Prediction:
    """Model mean and SEM of the objective's percentile latency (µs) and power (W) at a point."""

    latency_us: float
    latency_sem: float
    power_w: float
    power_sem: float
    from_measured: bool


@dataclass
class Pending:
    """A suggested trial awaiting its result: the point, the Ax trial behind it and why it was chosen."""

    point: OperatingPoint
    compute_s: float
    ax_index: int
    load: float | None = None
    p_violation: float | None = None
    note: str = ""
    line_t: float | None = None
    #: chosen as a point the orderings prove within the limit (`SafeExploration._proven`)
    proven: bool = False


def lean(m: Measurement | None) -> Measurement | None:
    """`m` without its latency distribution: a trial record keeps the percentiles and CIs, not ~240 kB of
    samples (a long-lived contextual optimiser holds hundreds of records)."""
    if m is None or getattr(m, "latency_dist", None) is None:
        return m
    return replace(m, latency_dist=None)


def power_sem(m: Measurement) -> float:
    """SEM of a window's mean power: the host's own if it reports one (`power_sem_w`), else `POWER_REL_SEM`."""
    own = getattr(m, "power_sem_w", None)
    if own is not None and math.isfinite(own) and own > 0:
        return float(own)
    return max(POWER_REL_SEM * m.power_w, 1e-6)


def latency_sem(m: Measurement, pct: float) -> float | None:
    """SEM of the window's percentile from its order-statistic CI, floored at `LATENCY_REL_SEM_FLOOR`;
    None when the latency source gives no CI (`Measurement.ci_known` False: Ax then infers the noise)."""
    value = m.percentile(pct)
    try:
        sem = m.percentile_sem(pct)
    except KeyError:
        sem = 0.0
    if sem is None:
        return None
    return max(sem, LATENCY_REL_SEM_FLOOR * abs(value), 1e-9)


def opt_float(v: Any) -> float | None:
    return None if v is None else float(v)


def record_to_dict(r: TrialRecord) -> dict[str, Any]:
    return {
        "index": r.index,
        "point": {"itr_us": r.point.itr_us, "dvfs_ghz": r.point.dvfs_ghz},
        "qps": r.qps,
        "status": r.status,
        "measurement": None if r.measurement is None else r.measurement.to_dict(),
        "reward": r.reward,
        "error": r.error,
        "settle": None if r.settle is None else r.settle.to_dict(),
        "compute_s": r.compute_s,
        "p_violation": r.p_violation,
        "note": r.note,
    }


def record_from_dict(d: dict[str, Any]) -> TrialRecord:
    return TrialRecord(
        index=int(d["index"]),
        point=OperatingPoint(int(d["point"]["itr_us"]), float(d["point"]["dvfs_ghz"])),
        qps=float(d["qps"]),
        status=str(d["status"]),
        measurement=None if d.get("measurement") is None else Measurement.from_dict(d["measurement"]),
        reward=None if d.get("reward") is None else float(d["reward"]),
        error=d.get("error"),
        settle=None if d.get("settle") is None else Measurement.from_dict(d["settle"]),
        compute_s=float(d.get("compute_s", 0.0)),
        p_violation=None if d.get("p_violation") is None else float(d["p_violation"]),
        note=str(d.get("note") or ""),
    )
