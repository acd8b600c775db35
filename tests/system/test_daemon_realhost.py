"""The daemon driving the real host's actuators on a fake sysfs/devfs tree (mocked ethtool): the knobs it
holds are really written, SIGTERM-style stop puts the originals back, and a dead run's writes are undone
before anything else at start. Energy/QPS/latency are canned sensors; no real hardware is touched."""

from __future__ import annotations

import pytest

from actuators.linux.dvfs import IA32_PERF_CTL
from actuators.linux.itr import RX_USECS
from actuators.real import make_real_host
from tests import fakefs
from tests.daemon_fakes import Running, registry_samples, wait_for, write_config

NCPU = 2
CTL0 = 20 << 8


@pytest.fixture(autouse=True)
def _guard(monkeypatch, tmp_path):
    fakefs.guard_writes(monkeypatch, tmp_path)
    fakefs.msr_device_semantics(monkeypatch)


@pytest.fixture
def tree(tmp_path):
    root = tmp_path / "root"
    return root, fakefs.realhost_tree(root, NCPU, CTL0)


def _host(root, nic):
    import time

    host = make_real_host(root=root, nic=nic, backend="msr", parts=("itr", "dvfs"))
    clock = time.monotonic
    host.energy, host.qps, host.latency = (
        fakefs.power_meter(clock, 60.0),
        fakefs.FakeQps(clock, 50_000.0),
        fakefs.FakeLatency(requests=1000),
    )
    return host


def _untouched(root, nic):
    return (
        all(fakefs.get_msr(root, c, IA32_PERF_CTL) == CTL0 for c in range(NCPU)) and nic.coalesce["eth1"][RX_USECS] == 1
    )


def test_daemon_writes_held_point_and_restores_on_stop(tmp_path, tree):
    root, nic = tree
    cfg = write_config(tmp_path, host="tests.fakes:make_fake_host", options={}, window_s=0.1, sla_us=500.0)
    host = _host(root, nic)
    with Running(cfg, host=host, serve=False) as r:
        wait_for(lambda: r.daemon.status().state == "holding", timeout=15)
        held = r.daemon.status().point
        assert host.point() == held
        assert fakefs.get_msr(root, 0, IA32_PERF_CTL) == round(held.dvfs_ghz * 10) << 8
        assert nic.coalesce["eth1"][RX_USECS] == held.itr_us
        assert r.stop() == 0
    assert _untouched(root, nic) and host.point() is None


def test_start_undoes_a_dead_runs_writes_first(tmp_path, tree):
    from tests.daemon_fakes import FakeOptimizers
    from tuner.config import load_config
    from tuner.daemon.loop import Daemon

    root, nic = tree
    dead = _host(root, nic)
    dead.apply(itr_us=300, dvfs_ghz=1.5)  # a previous daemon wrote the knobs, then was SIGKILLed
    del dead
    assert not _untouched(root, nic)
    cfg = write_config(tmp_path, host="tests.fakes:make_fake_host", options={}, window_s=0.1)
    d = Daemon(load_config(cfg), host=_host(root, nic), optimizers=FakeOptimizers(), serve=False)
    d.start()  # before the loop runs a single trial
    try:
        assert _untouched(root, nic)
    finally:
        d._shutdown()
    assert _untouched(root, nic)


def test_observe_on_a_vm_like_host_with_a_real_memcached(tmp_path, tree, caplog):
    """The first thing to run on a new host: no RAPL (a VM), memcached on loopback, the prober on the same
    host. Nothing is written, power is unknown, and the prober's blind spot (no NIC, so no ITR delay) is
    said in the log, in GetStatus and as a metric."""
    import shutil

    from tests.memcached_server import start_memcached

    root, nic = tree
    shutil.rmtree(root / "sys/class/powercap")
    server = start_memcached()
    try:
        opts = {
            "root": str(root),
            "state_dir": str(tmp_path / "orig"),
            "qps": f"memcached:localhost:{server.port}",  # another spelling than the prober's default target
        }
        latency = '[host.options.latency]\nisolation = "thread"\nrate_hz = 300\n'
        cfg = write_config(tmp_path, host="real", options=opts, window_s=0.3, extra=latency)
        cfg.write_text(cfg.read_text().replace("[host]\n", '[host]\nmode = "observe"\n', 1))
        with caplog.at_level("WARNING"), Running(cfg, serve=False) as r:
            wait_for(lambda: sum(b.windows for b in r.daemon.observer.baseline.data.values()) >= 2, timeout=20)
            s = r.daemon.status()
            metrics = registry_samples(r.daemon.metrics.registry)
            host = r.host
        assert host.probe_counts_in_qps  # localhost and 127.0.0.1 are the same server: probes subtracted
        assert s.point is None and s.trials_total == 0 and s.mode == "observe"
        assert s.last_measurement["power_w"] is None and s.last_measurement["offered_qps"] < 100
        assert any("never cross the NIC" in w for w in s.warnings)
        assert any(w.startswith("energy unavailable:") for w in s.warnings)
        assert metrics[("tuner_host_warnings", (("source", "latency"),))] >= 1
        assert metrics[("tuner_host_warnings", (("source", "energy"),))] == 1
        assert ("tuner_power_watts", ()) not in metrics
        assert any("never cross the NIC" in rec.getMessage() for rec in caplog.records)
        assert _untouched(root, nic) and nic.set_calls == []
    finally:
        server.stop()


def test_dvfs_read_back_warnings_reach_status_and_metrics(tmp_path, tree):
    """IA32_PERF_STATUS stays at the old ratio on this tree (as under a power limit): `apply` warns, and the
    daemon no longer drops it."""
    root, nic = tree
    cfg = write_config(tmp_path, host="tests.fakes:make_fake_host", options={}, window_s=0.1)
    with Running(cfg, host=_host(root, nic), serve=False) as r:
        wait_for(lambda: r.daemon.status().state == "holding", timeout=15)
        wait_for(lambda: any("IA32_PERF_STATUS" in w for w in r.daemon.status().warnings))
        metrics = registry_samples(r.daemon.metrics.registry)
    assert metrics[("tuner_host_warnings", (("source", "dvfs"),))] >= 1


def test_dry_run_on_the_real_host_logs_the_writes_and_makes_none(tmp_path, tree, caplog):
    """`dry_run = true` once recorded trials at points never applied and reported them as held; now it says
    what it is at start, logs the writes a tuning run would make, and claims no point and no trial."""
    import time

    root, nic = tree
    opts = {"root": str(root), "state_dir": str(tmp_path / "orig"), "backend": "msr", "dry_run": True}
    cfg = write_config(tmp_path, host="real", options=opts, window_s=0.1)
    host = make_real_host(root=root, nic=nic, backend="msr", dry_run=True, parts=("itr", "dvfs"))
    host.energy, host.qps, host.latency = (
        fakefs.power_meter(time.monotonic, 60.0),
        fakefs.FakeQps(time.monotonic, 50_000.0),
        fakefs.FakeLatency(requests=1000),
    )
    with caplog.at_level("INFO"), Running(cfg, host=host, serve=False) as r:
        wait_for(lambda: r.daemon.ctx.last_measurement is not None, timeout=15)
        s = r.daemon.status()
    logged = [rec.getMessage() for rec in caplog.records]
    assert any(m.startswith("DRY RUN") for m in logged)
    assert any(m.startswith("dry run: would wrmsr cpu 0 0x199") for m in logged)
    assert s.mode == "dry_run" and s.point is None and s.trials_total == 0
    assert _untouched(root, nic) and nic.set_calls == [] and host.io.planned


def test_nic_losing_coalescing_at_run_time_stops_tuning_and_restores_the_cpu(tmp_path, tree):
    """The ethtool ioctl starts failing with EOPNOTSUPP while the daemon tunes (a driver reload without
    coalescing): tuning stops at once -- the DVFS originals are back on the CPUs, no write is retried -- and a
    restart after the host is fixed would tune again; here the NIC comes back and the stop restores it too."""
    import errno
    import time

    root, nic = tree
    cfg = write_config(tmp_path, host="tests.fakes:make_fake_host", options={}, window_s=0.05, trials=6)
    host = _host(root, nic)
    with Running(cfg, host=host, serve=False) as r:
        wait_for(lambda: r.daemon.status().state == "holding", timeout=15)
        nic.fail_set["eth1"] = errno.EOPNOTSUPP  # reads still work: only the writes are refused
        assert r.daemon.request_retune("rpc")[0]
        wait_for(lambda: r.daemon.status().state == "degraded", timeout=15)
        s = r.daemon.status()
        calls = len(nic.set_calls)
        cpus_back = all(fakefs.get_msr(root, c, IA32_PERF_CTL) == CTL0 for c in range(NCPU))
        since = time.time()
        wait_for(lambda: (r.daemon.status().last_measurement or {}).get("time", 0) > since, timeout=15)
        assert len(nic.set_calls) == calls  # no retry: the refused write is never tried again
        del nic.fail_set["eth1"]  # the operator fixes the host
        assert r.stop() == 0
    assert cpus_back and s.point is None
    assert any("EOPNOTSUPP" in w and "permanent host fault" in w for w in s.warnings)
    assert _untouched(root, nic)
