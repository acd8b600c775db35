"""`tuner.daemon.grpc_messages` alone: `GetStatus` from a `DaemonStatus` field by field, one point converter each way."""

from __future__ import annotations

import dataclasses

from actuators.host import OperatingPoint
from tuner.config import PolicyConfig
from tuner.daemon.baseline import Savings
from tuner.daemon.grpc_messages import STATUS_CONVERTERS, STATUS_LOCAL, point_from_msg, point_msg, status_msg
from tuner.daemon.service import protos
from tuner.daemon.status_reader import DaemonStatus


def _status(**kw) -> DaemonStatus:
    base = {f.name: None for f in dataclasses.fields(DaemonStatus)}
    base.update(
        state="holding",
        point=OperatingPoint(50, 2.9),
        offered_qps=float("nan"),
        last_measurement=None,
        policy=PolicyConfig(sla_us=500.0, percentile=99.0),
        tuned_qps=1e5,
        band_low_qps=8e4,
        band_high_qps=1.2e5,
        retune_id="r000003",
        retune_trials_done=4,
        retune_trials_planned=30,
        retune_history_trials=2,
        last_retune_time=1.0,
        next_retune_time=3601.0,
        trials_total=40,
        guardrail_reverts_total=1,
        sla_violations_total=3,
        sla_violations_steady_total=2,
        host="sim",
        version="0.1.0",
        uptime_s=5.0,
        mode="tune",
        warnings=("a", "b"),
        savings=None,
        baseline=(),
    )
    base.update(kw)
    return DaemonStatus(**base)


def test_every_status_field_reaches_the_message_or_is_declared_local():
    pb = protos()[0]
    proto = set(pb.Status.DESCRIPTOR.fields_by_name)
    for f in dataclasses.fields(DaemonStatus):
        assert f.name in proto or f.name in STATUS_LOCAL or f.name in STATUS_CONVERTERS, f.name


def test_status_msg_copies_each_field_by_name():
    pb = protos()[0]
    s = _status(savings=Savings(0.2, 0.1, 0.3, ("1e5-2e5",)))
    msg = status_msg(pb, s)
    assert msg.state == "holding" and msg.retune_id == "r000003" and msg.trials_total == 40
    assert msg.offered_qps == 0.0  # not finite: sent as 0
    assert list(msg.warnings) == ["a", "b"] and msg.policy.sla_us == 500.0
    assert point_from_msg(msg.point) == s.point and msg.energy_saved_ratio_upper == 0.3
    assert not status_msg(pb, _status(point=None)).HasField("point")
    assert not status_msg(pb, _status()).HasField("energy_saved_ratio")  # unknown, not 0


def test_point_converters_are_inverse():
    p = OperatingPoint(130, 2.3)
    assert point_from_msg(point_msg(protos()[0], p)) == p


def test_the_last_window_carries_its_energy_source_and_the_sources_side_by_side():
    from tuner.daemon.grpc_messages import measurement_msg

    pb, _ = protos()
    md = {"seconds": 2.0, "offered_qps": 1.0, "achieved_qps": 1.0, "requests": 3, "energy_j": 400.0, "power_w": 200.0}
    msg = measurement_msg(pb, {**md, "energy_source": "ipmi", "power_by_source_w": {"ipmi": 200.0, "rapl": None}})
    assert msg.energy_source == "ipmi" and dict(msg.power_by_source_w) == {"ipmi": 200.0}  # no reading: absent
    assert measurement_msg(pb, md).energy_source == "" and not measurement_msg(pb, md).power_by_source_w
