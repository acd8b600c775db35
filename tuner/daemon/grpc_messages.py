"""The daemon's values as `tuner.v1` messages (the gRPC edge): an `OperatingPoint` becomes a `Point` here and
only here (`point_msg`, and `point_from_msg` back), a `DaemonStatus` becomes a `Status` field by field
(`status_msg`), and measurement, decision and trial rows become their messages. `pb` is the messages module
of `tuner.daemon.service.protos`."""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import fields as dataclass_fields
from typing import Any

from actuators.host import OperatingPoint
from tuner.daemon.baseline import Savings
from tuner.daemon.status_reader import DaemonStatus


def point_msg(pb: Any, p: OperatingPoint) -> Any:
    """An `OperatingPoint` as `tuner.v1.Point` (the only place one becomes the other on the way out)."""
    return pb.Point(itr_us=int(p.itr_us), dvfs_ghz=float(p.dvfs_ghz))


def point_from_msg(msg: Any) -> OperatingPoint:
    """A `tuner.v1.Point` as an `OperatingPoint` (the only place one becomes the other on the way in)."""
    return OperatingPoint(int(msg.itr_us), float(msg.dvfs_ghz))


def measurement_msg(pb: Any, md: dict | None) -> Any:
    if not md:
        return None
    m = pb.Measurement(
        seconds=md["seconds"],
        offered_qps=md["offered_qps"],
        achieved_qps=md["achieved_qps"],
        requests=max(0, int(md["requests"])),
        time=md.get("time", 0.0),
    )
    if md.get("energy_j") is not None and md.get("power_w") is not None and math.isfinite(md["power_w"]):
        m.power_w, m.energy_j = md["power_w"], md["energy_j"]  # unset: energy unknown on this host
    for k, v in md.get("latency_us", {}).items():
        m.latency_us[k] = float(v)
    m.energy_source = str(md.get("energy_source", ""))
    for source, watts in (md.get("power_by_source_w") or {}).items():
        if watts is not None and math.isfinite(watts):
            m.power_by_source_w[source] = float(watts)
    if md.get("point") is not None:
        m.point.CopyFrom(point_msg(pb, md["point"]))
    return m


def policy_msg(pb: Any, p: Any) -> Any:
    return pb.Policy(sla_us=p.sla_us, percentile=p.percentile, reward=p.reward)


def decision_msg(pb: Any, d: dict) -> Any:
    msg = pb.Decision(
        retune_id=d.get("retune_id", ""),
        reason=d.get("reason", ""),
        met_sla=bool(d.get("met_sla")),
        detail=d.get("detail", ""),
        qps=float(d.get("qps", 0.0)),
        time=float(d.get("time", 0.0)),
    )
    if d.get("point") is not None:
        msg.point.CopyFrom(point_msg(pb, d["point"]))
    if d.get("measurement"):
        msg.measurement.CopyFrom(measurement_msg(pb, d["measurement"]))
    return msg


def trial_msg(pb: Any, t: dict) -> Any:
    msg = pb.Trial(
        retune_id=t.get("retune_id", ""),
        index=int(t["index"]),
        qps=float(t.get("qps", 0.0)),
        status=t.get("status", ""),
        has_reward=t.get("reward") is not None,
        reward=float(t["reward"]) if t.get("reward") is not None else 0.0,
        error=t.get("error") or "",
        time=float(t.get("time", 0.0)),
    )
    if t.get("point") is not None:
        msg.point.CopyFrom(point_msg(pb, t["point"]))
    if t.get("measurement"):
        msg.measurement.CopyFrom(measurement_msg(pb, t["measurement"]))
    return msg


def fleet_msg(pb: Any, report: Any) -> Any:
    """A `tuner.store.fleet.FleetReport` as `tuner.v1.FleetView`."""
    bands = []
    for r in report.rows:
        b = pb.FleetBand(
            hw_class=r.hw_class,
            qps_low=r.qps_low,
            qps_high=r.qps_high,
            meets_sla=r.itr_us is not None,
            trials_at_point=r.trials_at_point,
            trials=r.trials,
            hosts=r.hosts,
        )
        if r.itr_us is not None:
            b.point.CopyFrom(point_msg(pb, OperatingPoint(int(r.itr_us), float(r.dvfs_ghz))))
            b.power_w = float(r.power_w)
            b.latency_us = float(r.latency_us)
        bands.append(b)
    classes = [
        pb.HardwareClass(id=c, fields={k: str(v) for k, v in fields.items() if k != "id"})
        for c, fields in report.classes.items()
    ]
    return pb.FleetView(
        sla_us=report.sla_us,
        percentile=report.percentile,
        band_pct=report.band_pct,
        store=report.location,
        bands=bands,
        classes=classes,
        drifting_hosts=list(report.drifting),
    )


def finite(x: float) -> float:
    return x if math.isfinite(x) else 0.0


def _status_point(pb: Any, msg: Any, p: OperatingPoint | None) -> None:
    if p is not None:
        msg.point.CopyFrom(point_msg(pb, p))


def _status_measurement(pb: Any, msg: Any, md: dict[str, Any] | None) -> None:
    if md:
        msg.last_measurement.CopyFrom(measurement_msg(pb, md))


def _status_policy(pb: Any, msg: Any, p: Any) -> None:
    msg.policy.CopyFrom(policy_msg(pb, p))


def _status_savings(pb: Any, msg: Any, s: Savings | None) -> None:
    if s is not None:  # unset until both the baseline and the tuned windows are measured
        msg.energy_saved_ratio, msg.energy_saved_ratio_lower, msg.energy_saved_ratio_upper = s.ratio, s.lower, s.upper


#: `DaemonStatus` fields that are messages (or split over several fields) in `tuner.v1.Status`.
STATUS_CONVERTERS: dict[str, Callable[[Any, Any, Any], None]] = {
    "point": _status_point,
    "last_measurement": _status_measurement,
    "policy": _status_policy,
    "savings": _status_savings,
}
#: `DaemonStatus` fields `tuner.v1.Status` does not carry (read in process: `tuner.daemon.loop.Daemon.status`).
STATUS_LOCAL = ("retune_history_trials", "baseline")


def status_msg(pb: Any, s: DaemonStatus) -> Any:
    """`GetStatus`'s message from a snapshot: each field of `DaemonStatus` goes to the `tuner.v1.Status` field of
    the same name (a converter for the message fields, `STATUS_CONVERTERS`); `STATUS_LOCAL` stay in process."""
    msg = pb.Status()
    for f in dataclass_fields(s):
        value = getattr(s, f.name)
        if f.name in STATUS_CONVERTERS:
            STATUS_CONVERTERS[f.name](pb, msg, value)
        elif f.name in STATUS_LOCAL:
            continue
        elif isinstance(value, tuple):
            getattr(msg, f.name).extend(value)
        else:
            setattr(msg, f.name, finite(value) if isinstance(value, float) else value)
    return msg
