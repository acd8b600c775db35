"""The daemon's guardrail never reverts to a less safe point, holds an idle point without retuning at
near-zero load, and backs off (without a new optimiser worker) when a retune keeps failing."""

from __future__ import annotations

import time

import pytest

from actuators.host import OperatingPoint
from tests.daemon_fakes import FakeOptimizers, write_config
from tests.fakes import FakeHost, FlakyHost
from tuner.config import load_config
from tuner.daemon.loop import Daemon
from tuner.daemon.plain import safe_corner
from tuner.daemon.safer_points import at_least_as_safe


def started(tmp_path, host, **kw) -> Daemon:
    d = Daemon(load_config(write_config(tmp_path, **kw)), host=host, optimizers=FakeOptimizers(), serve=False)
    d.start()
    return d


def window(point, qps, lat_us, when):
    md = {"offered_qps": qps, "latency_us": {"99": lat_us}, "latency_ci_us": {"99": [lat_us, lat_us]}}
    return {"point": point, "qps": qps, "measurement": md, "time": when}


def test_revert_at_zero_load_never_leaves_the_safe_corner_for_a_riskier_point(tmp_path):
    """Seen on a VM: at 0 QPS the guardrail 'reverted' from ITR 2 µs @ 2.9 GHz to ITR 514 µs @ 2.0 GHz,
    because that point once met the SLA at some load >= 0."""
    d = started(tmp_path, FakeHost(qps=0.0))
    corner = safe_corner(d.space)
    d.ctx.current_point = corner
    d.state.windows.append(window(OperatingPoint(514, 2.0), 50_000.0, 300.0, time.time()))
    point, why = d.guardrail.fallback_point(0.0, corner)
    assert point == corner and "safe corner" in why
    d._shutdown()


def test_revert_picks_only_strictly_safer_measured_points(tmp_path):
    d = started(tmp_path, FakeHost(qps=10_000.0))
    now = time.time()
    current = OperatingPoint(200, 2.0)
    for i, p in enumerate([OperatingPoint(100, 2.5), OperatingPoint(300, 2.9), OperatingPoint(50, 1.5)]):
        d.state.windows.append(window(p, 20_000.0, 300.0, now + i))  # the newest is tried first
    point, _ = d.guardrail.fallback_point(10_000.0, current)
    assert point == OperatingPoint(100, 2.5) and at_least_as_safe(point, current)
    d._shutdown()


def test_near_idle_load_holds_the_idle_point_and_starts_no_retune(tmp_path):
    host = FakeHost(qps=5.0)
    d = started(tmp_path, host)
    d.ctx.wait = lambda seconds, interruptible: False  # no real waiting in this unit test
    d.retune_driver.retune("startup")
    assert d.optimizers.created == 0 and d.state.trials == []
    held = d.state.held
    assert held["reason"] == "idle" and held["point"] == OperatingPoint(d.space.itr_us[0], d.space.dvfs_ghz[0])
    assert host.point() == OperatingPoint(d.space.itr_us[0], d.space.dvfs_ghz[0])
    d.retune_driver.retune("schedule")  # still idle: nothing new
    assert d.optimizers.created == 0 and sum(1 for x in d.state.decisions if x["reason"] == "idle") == 1
    d.guardrail.hold_window()
    assert not d.ctx.requests.load
    host._qps = 50_000.0  # the load comes back: a retune is due
    d.guardrail.hold_window()
    assert d.ctx.requests.load
    d._shutdown()


def test_failing_retune_backs_off_exponentially_without_a_new_worker(tmp_path):
    """Seen on a VM: a retune failing on every attempt was retried every ~6.5 s, each retry spawning a new
    ~410 MB optimiser worker. Retries now wait window_s, doubling up to retry_max_s, on the same optimiser."""
    host = FlakyHost()
    d = started(tmp_path, host, trials=2, window_s=2.0, tuning="retry_max_s = 10")
    retry_waits: list[float] = []  # interruptible waits are the retry back-off (windows are paced otherwise)
    d.ctx.wait = lambda seconds, interruptible: (retry_waits.append(seconds) if interruptible else None) or False
    for _ in range(5):
        d.retune_driver.retune("startup" if d.state.current_retune is None else "resume")
    assert retry_waits == [2.0, 4.0, 8.0, 10.0, 10.0]
    assert d.optimizers.created + d.optimizers.loaded == 1  # one optimiser for all the retries
    host.broken = False
    d.retune_driver.retune("resume")
    assert d.state.held is not None and d.state.held["reason"] == "resume"
    assert d.optimizers.created + d.optimizers.loaded == 1 and d.retune_driver.retry_s == 0.0
    d._shutdown()


@pytest.mark.parametrize("mode", ["tune"])
def test_metrics_mode_label(tmp_path, mode):
    d = started(tmp_path, FakeHost())
    assert d.mode_label == mode and d.status().mode == mode
    d._shutdown()


def test_an_idle_point_that_breaks_the_sla_is_left_for_a_safer_one_and_not_retaken(tmp_path):
    host = FakeHost(qps=5.0)  # at ITR 2 µs, 1.2 GHz this host's p99 is ~160 µs: above a 100 µs SLA
    d = started(tmp_path, host, sla_us=100.0)
    d.ctx.wait = lambda seconds, interruptible: False
    d.retune_driver.retune("startup")
    idle = host.point()
    for _ in range(3):
        d.guardrail.hold_window()
    assert host.point() == safe_corner(d.space) and at_least_as_safe(host.point(), idle)
    assert [x["reason"] for x in d.state.decisions] == ["idle", "guardrail"]  # no ping-pong back to idle
    d._shutdown()
