"""`StatusReader` alone: a frozen `DaemonStatus` snapshot, kept trials, the measured operating point."""

from __future__ import annotations

import dataclasses

import pytest

from actuators.host import OperatingPoint
from core.errors import InputError
from tests.daemon_fakes import loop_context
from tuner.daemon.host_warnings import HostWarnings
from tuner.daemon.model_tables import ModelTables
from tuner.daemon.observer import Observer
from tuner.daemon.status_reader import DaemonStatus, StatusReader


def _reader(ctx):
    return StatusReader(ctx, Observer(ctx), HostWarnings(ctx), ModelTables(ctx))


def test_status_is_a_frozen_snapshot_of_the_shared_state(tmp_path):
    ctx = loop_context(tmp_path)
    point = ctx.apply(OperatingPoint(ctx.knob_space.itr_us[0], ctx.knob_space.dvfs_ghz[-1]))
    ctx.state.tuned_qps = 100_000.0
    ctx.state.counters.update({"sla_violations": 5, "sla_violations:shifted": 2, "trials": 7})
    ctx.progress.done, ctx.progress.planned = 3, 10
    s = _reader(ctx).status()
    assert isinstance(s, DaemonStatus) and s.point == point and s.mode == "tune"
    assert (s.band_low_qps, s.band_high_qps) == pytest.approx((80_000.0, 120_000.0))
    assert (s.sla_violations_total, s.sla_violations_steady_total, s.trials_total) == (5, 3, 7)
    assert (s.retune_trials_done, s.retune_trials_planned) == (3, 10)
    with pytest.raises(dataclasses.FrozenInstanceError):
        s.state = "holding"  # type: ignore[misc]
    ctx.store.release()


def test_operating_point_answers_from_measured_windows_else_the_safe_corner(tmp_path):
    ctx = loop_context(tmp_path, sla_us=500.0)
    reader = _reader(ctx)
    cheap = OperatingPoint(ctx.knob_space.itr_us[-1], ctx.knob_space.dvfs_ghz[0])
    md = {"offered_qps": 100_000.0, "power_w": 40.0, "latency_us": {"99": 300.0}, "latency_ci_us": {"99": [290, 310]}}
    ctx.state.windows += [{"point": cheap, "qps": 100_000.0, "measurement": md, "time": t} for t in (1.0, 2.0)]
    a = reader.operating_point(100_000.0)
    assert a.point == cheap and a.from_measured and a.meets_sla and a.source == "2 measured window(s)"
    far = reader.operating_point(900_000.0)
    assert far.source == "safe corner" and not far.meets_sla
    with pytest.raises(InputError, match="qps"):
        reader.operating_point(-1.0)
    ctx.store.release()


def test_trials_filter_by_retune_and_limit(tmp_path):
    ctx = loop_context(tmp_path)
    ctx.state.trials += [{"retune_id": f"r{i % 2}", "index": i} for i in range(6)]
    reader = _reader(ctx)
    assert [t["index"] for t in reader.trials(retune_id="r1")] == [1, 3, 5]
    assert [t["index"] for t in reader.trials(limit=2)] == [4, 5]
    ctx.store.release()
