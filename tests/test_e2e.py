"""End to end on this machine (loopback): real memcached, `tuner load` replaying the bundled trace, and the
daemon's full loop on the fake-hardware kit -- offered QPS tracked, a +50 % load step retuned, knobs restored."""

from __future__ import annotations

import pytest
from e2e_harness import E2EConfig, run_e2e
from memcached_server import memcached_binary


@pytest.mark.skipif(memcached_binary() is None, reason="memcached binary not installed (Debian package `memcached`)")
def test_tuning_loop_on_the_fake_kit_under_real_load(tmp_path) -> None:
    r = run_e2e(tmp_path, E2EConfig(trials=2, hold_windows=1, timeout_s=45.0))
    assert r["daemon_exit_status"] == 0
    assert sum(r["tracebacks"].values()) == 0, r["tracebacks"]
    assert r["knobs_restored"], r["knobs_after_sigterm"]
    assert r["retune_reasons"][0] == "startup" and r["load_retune_after_step"], r["retune_reasons"]
    assert r["windows_compared"] >= 4  # windows the daemon measured while the load was steady (not the step)
    # over each steady load phase (window edges are known to the daemon only to its own clock reads)
    assert r["qps_error_phase_max"] <= 0.02, r["qps_by_phase"]


@pytest.mark.skipif(memcached_binary() is None, reason="memcached binary not installed (Debian package `memcached`)")
def test_observe_mode_on_this_host_under_real_load(tmp_path) -> None:
    """The real host (this VM: no RAPL, no cpufreq) in observe mode: QPS from memcached stats tracks the
    generators, nothing is written, no trial is recorded, power is unknown."""
    r = run_e2e(tmp_path, E2EConfig(mode="observe", hold_windows=3, timeout_s=45.0))
    assert r["daemon_exit_status"] == 0
    assert sum(r["tracebacks"].values()) == 0, r["tracebacks"]
    assert r["trials_recorded"] == 0 and r["retune_reasons"] == []
    assert r["observe_status"]["mode"] == "observe" and not r["observe_status"]["point"]
    assert any(w.startswith("energy unavailable") for w in r["observe_status"]["warnings"])
    assert r["windows_compared"] >= 3
    assert r["qps_error_phase_max"] <= 0.02, r["qps_by_phase"]
