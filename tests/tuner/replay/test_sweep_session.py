"""A sweep session without the command line: points appended as measured, resume refused for another sweep, the
host restored and the measured points kept when a measurement fails or Ctrl-C arrives."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from core.errors import HostError, TunerError
from tests.fakes import FailingHost, FakeHost
from tuner.replay.static_sweep import SweepConfig
from tuner.replay.sweep_session import META, POINTS, SweepPlan, load_points, run_session


def _plan(out: Path, qps: float | None = 100_000.0, seconds: float = 1.0) -> SweepPlan:
    meta = {"host": "fake", "qps": qps, "load_schedule": None, "seconds": seconds, "settle": 0.0, "seed": None}
    config = SweepConfig(seconds=seconds, settle=0.0)
    return SweepPlan(out, meta, config, "100,200", "2.0,2.9", qps, 500.0, 99.0, 0.95)


def test_a_session_measures_every_point_and_writes_the_summaries(tmp_path: Path) -> None:
    host = FakeHost()
    plan = _plan(tmp_path / "sw")
    outcome = run_session(host, plan, plan.previous_points(resume=False))
    assert outcome.failure is None and outcome.restore_error is None
    assert (outcome.new, outcome.todo) == (4, 4) and host.restore_count == 1
    assert len(load_points(plan.out / POINTS, repair=False)) == 4
    assert json.loads((plan.out / META).read_text())["points"] == 4
    assert outcome.best is not None and (plan.out / "heatmap.png").exists()


def test_a_failure_keeps_the_points_and_restores_the_host(tmp_path: Path) -> None:
    for exc, kind in ((None, HostError), (KeyboardInterrupt(), KeyboardInterrupt)):
        host = FailingHost(fail_at=3, exc=exc)
        plan = _plan(tmp_path / kind.__name__)
        outcome = run_session(host, plan, [])
        assert isinstance(outcome.failure, kind) and host.restore_count == 1
        assert (outcome.new, outcome.todo) == (2, 4)
        assert len(load_points(plan.out / POINTS, repair=False)) == 2
        resumed = run_session(FakeHost(), plan, plan.previous_points(resume=True))
        assert (resumed.new, resumed.todo, len(resumed.measured)) == (2, 2, 4)


def test_resume_refuses_another_sweep_and_a_new_sweep_refuses_old_points(tmp_path: Path) -> None:
    plan = _plan(tmp_path / "sw")
    run_session(FakeHost(), plan, [])
    with pytest.raises(TunerError, match=r"--resume: seconds 2.0 differs from 1.0"):
        _plan(plan.out, seconds=2.0).previous_points(resume=True)
    with pytest.raises(TunerError, match="already holds a sweep: pass --resume"):
        plan.previous_points(resume=False)
