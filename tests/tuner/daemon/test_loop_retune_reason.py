"""Why a retune starts: on a host that starts idle, the first retune when the load arrives is for the load."""

from __future__ import annotations

import time

from tests.daemon_fakes import FakeOptimizers, write_config
from tests.fakes import FakeHost
from tuner.config import load_config
from tuner.daemon.loop import Daemon


def test_the_first_retune_after_an_idle_start_is_for_the_load_not_the_schedule(tmp_path):
    host = FakeHost(qps=5.0)
    d = Daemon(
        load_config(write_config(tmp_path, period_s=3600.0)), host=host, optimizers=FakeOptimizers(), serve=False
    )
    d.start()
    try:
        d.ctx.wait = lambda seconds, interruptible: False  # no real waiting in this unit test
        assert d._due_retune() == "startup"
        d.retune_driver.retune("startup")
        assert d.state.held["reason"] == "idle" and d.state.last_retune_time == 0.0  # held idle, never retuned
        assert d._due_retune() is None
        d.state.held["time"] = time.time() - 7200.0  # idle for longer than the period
        host._qps = 50_000.0  # the load arrives
        d.guardrail.hold_window()
        assert d._due_retune() == "load"
    finally:
        d._shutdown()


def test_an_idle_hold_older_than_the_period_makes_the_schedule_due(tmp_path):
    host = FakeHost(qps=5.0)
    d = Daemon(load_config(write_config(tmp_path, period_s=60.0)), host=host, optimizers=FakeOptimizers(), serve=False)
    d.start()
    try:
        d.ctx.wait = lambda seconds, interruptible: False
        d.retune_driver.retune("startup")
        assert d._due_retune() is None
        d.state.held["time"] = time.time() - 61.0  # held idle for longer than the period, no load request
        assert d._due_retune() == "schedule"
    finally:
        d._shutdown()
