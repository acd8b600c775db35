"""End to end on this machine (loopback) with Redis as the cache server: Debian's redis-server, `tuner load
--protocol redis` replaying the bundled trace, and the daemon (`[host] server = "redis"`) observing the real host,
then tuning the fake-hardware kit -- the same scenario and checks as memcached's (tests/system/test_e2e.py).

`timeout_s` is also how long each generator runs (they are stopped when the scenario ends): 90 s, not 45, so that on
a loaded machine, where the scenario's stages take longer, the first generator still runs through the phase after
the load step instead of ending inside it. A quiet run takes as long either way."""

from __future__ import annotations

import pytest

from tests.e2e_harness import E2EConfig, run_e2e
from tests.redis_server import redis_binary

pytestmark = pytest.mark.skipif(
    redis_binary() is None, reason="redis-server binary not installed (Debian package `redis-server`)"
)


def test_observe_mode_counts_redis_load_from_its_info(tmp_path) -> None:
    """The real host in observe mode: QPS from Redis's INFO tracks the generators (the prober's GETs taken out),
    nothing is written, no trial is recorded, power is unknown."""
    r = run_e2e(tmp_path, E2EConfig(server="redis", mode="observe", hold_windows=3, timeout_s=90.0))
    assert r["daemon_exit_status"] == 0
    assert sum(r["tracebacks"].values()) == 0, r["tracebacks"]
    assert r["trials_recorded"] == 0 and r["retune_reasons"] == []
    assert r["observe_status"]["mode"] == "observe" and not r["observe_status"]["point"]
    assert r["windows_compared"] >= 3
    assert r["qps_error_phase_max"] <= 0.02, r["qps_by_phase"]


def test_tuning_loop_on_the_fake_kit_under_redis_load(tmp_path) -> None:
    r = run_e2e(tmp_path, E2EConfig(server="redis", trials=2, hold_windows=1, timeout_s=90.0))
    assert r["daemon_exit_status"] == 0
    assert sum(r["tracebacks"].values()) == 0, r["tracebacks"]
    assert r["knobs_restored"], r["knobs_after_sigterm"]
    assert r["retune_reasons"][0] == "startup" and r["load_retune_after_step"], r["retune_reasons"]
    assert r["windows_compared"] >= 4
    assert r["qps_error_phase_max"] <= 0.02, r["qps_by_phase"]
