"""RealHost on a fake tree: Host protocol, transactional apply, dry run, restore across processes, measure,
and the `tuner set` / `tuner restore` commands."""

from __future__ import annotations

import threading
import time

import pytest

from actuators.host import Host, OperatingPoint, apply_point
from actuators.linux.dvfs import IA32_PERF_CTL
from actuators.linux.hwio import UnavailableNic
from actuators.linux.itr import RX_USECS
from actuators.linux.originals import OriginalsStore
from actuators.real import RealHost, default_nic, make_real_host
from core.errors import HostError, KnobRangeError
from tests import fakefs
from tests.fakefs import FakeLatency, FakeQps, power_meter
from tuner.cli import app as cli

NCPU = 4
CTL0 = 20 << 8
GOV = "sys/devices/system/cpu/cpu{}/cpufreq/scaling_governor"


@pytest.fixture(autouse=True)
def _guard(monkeypatch, tmp_path):
    fakefs.guard_writes(monkeypatch, tmp_path)


@pytest.fixture
def tree(tmp_path):
    root = tmp_path / "root"
    return root, fakefs.realhost_tree(root, NCPU, CTL0, extra_ifaces=("lo",))


def ctl(root, cpu):
    return fakefs.get_msr(root, cpu, IA32_PERF_CTL)


def untouched(root, nic):
    return (
        all(ctl(root, c) == CTL0 for c in range(NCPU))
        and all((root / GOV.format(c)).read_text().strip() == "ondemand" for c in range(NCPU))
        and nic.coalesce["eth1"][RX_USECS] == 1
    )


def host_for(root, nic, **kw):
    kw.setdefault("parts", ("itr", "dvfs"))
    return make_real_host(root=root, nic=nic, backend="msr", **kw)


def test_protocol_knobs_point_and_restore(tree):
    root, nic = tree
    host = host_for(root, nic)
    assert isinstance(host, Host)
    knobs = host.knobs()
    assert (
        knobs.itr_us[0] == 2
        and knobs.itr_us[-1] == 1022
        and knobs.dvfs_ghz == tuple(round(0.1 * r, 1) for r in range(12, 30))
    )
    assert host.point() is None
    assert apply_point(host, OperatingPoint(100, 2.4)) == OperatingPoint(100, 2.4)
    assert host.point() == OperatingPoint(100, 2.4)
    assert all(ctl(root, c) == 24 << 8 for c in range(NCPU))
    host.restore()
    assert untouched(root, nic) and host.point() is None
    host.restore()  # idempotent
    assert untouched(root, nic)


def test_itr_failure_after_dvfs_rolls_back_dvfs(tree):
    root, nic = tree
    import errno

    nic.fail_set["eth1"] = errno.EPERM
    host = host_for(root, nic)
    with pytest.raises(HostError, match="permission denied for ETHTOOL_SCOALESCE on eth1: needs CAP_NET_ADMIN"):
        host.apply(itr_us=50, dvfs_ghz=2.4)
    assert untouched(root, nic)
    assert not host.store.path.exists()  # fully undone: no stale originals either


def test_out_of_range_refused_before_any_write(tree):
    root, nic = tree
    host = host_for(root, nic)
    with pytest.raises(KnobRangeError, match="DVFS 3.3 GHz is not available"):
        host.apply(itr_us=50, dvfs_ghz=3.3)
    with pytest.raises(KnobRangeError, match="ITR 1023"):
        host.apply(itr_us=1023, dvfs_ghz=2.0)
    assert untouched(root, nic) and nic.set_calls == [] and not host.store.path.exists()


def test_dry_run_logs_every_write_and_makes_none(tree, caplog):
    root, nic = tree
    host = host_for(root, nic, dry_run=True)
    with caplog.at_level("INFO", logger="actuators.linux.hwio"):
        host.apply(itr_us=50, dvfs_ghz=1.5)
    assert untouched(root, nic) and nic.set_calls == [] and not host.store.path.exists()
    kinds = [(s.kind, s.reg) for s in host.io.planned]
    assert kinds == [("sysfs", 0)] * NCPU + [("msr", IA32_PERF_CTL)] * NCPU + [("coalesce", 0)]
    assert sum("dry run: would wrmsr cpu" in r.message for r in caplog.records) == NCPU


def test_originals_survive_a_dead_process_and_first_write_wins(tree):
    root, nic = tree
    first = host_for(root, nic)
    first.apply(itr_us=50, dvfs_ghz=2.4)
    del first  # "crashes" without restoring
    second = host_for(root, nic)  # restarted daemon
    second.apply(itr_us=20, dvfs_ghz=1.8)
    assert ctl(root, 0) == 18 << 8
    third_store = OriginalsStore(second.store.state_dir, root)  # `tuner restore` in another process
    assert {e.key[0] for e in third_store.entries()} == {"sysfs", "msr", "coalesce"}
    from actuators.linux.hwio import HardwareIO
    from actuators.linux.originals import restore_originals

    restore_originals(HardwareIO(root, nic), third_store)
    assert untouched(root, nic) and not third_store.path.exists()


def measuring_host(tree):
    root, nic = tree
    host = host_for(root, nic)
    clock = time.monotonic
    host.energy, host.qps, host.latency = power_meter(clock, 80.0), FakeQps(clock, 5000.0), FakeLatency()
    return host


def test_measure_combines_energy_qps_latency_over_one_window(tree):
    host = measuring_host(tree)
    m = host.measure(0.3)
    assert 0.3 <= m.seconds < 1.0
    assert m.power_w == pytest.approx(80.0, rel=0.05)
    assert m.offered_qps == pytest.approx(5000.0, rel=0.01) and m.achieved_qps == m.offered_qps
    assert m.requests == 42 and m.percentile(99.0) == 120.0 and m.latency_ci_us[99.0] == (100.0, 150.0)
    assert m.energy_by_zone_j["package-0"] == pytest.approx(m.energy_j)
    assert m.point is None


def test_real_windows_carry_their_latency_distribution_so_they_can_be_pooled(tree):
    import numpy as np

    from actuators.host import Measurement
    from actuators.latency.dist import SampleDist
    from actuators.latency.prober import ProbeWindow

    samples = np.random.default_rng(3).exponential(100.0, 4000)

    class DistLatency(FakeLatency):
        def end(self):
            self.ended += 1
            dist = SampleDist(samples)
            est, lo, hi = dist.quantile_ci(0.99)
            return ProbeWindow(int(samples.size), {99.0: est}, {99.0: (lo, hi)}, latency_dist=dist)

    host = measuring_host(tree)
    host.latency = DistLatency()
    a, b = host.measure(0.05), host.measure(0.05)
    assert a.latency_dist is not None and a.latency_dist.count == samples.size
    pooled = Measurement.merge_all([a, b])  # refuses windows without a distribution
    assert pooled.requests == 2 * samples.size
    assert pooled.latency_dist.count == 2 * samples.size


def test_measure_is_interruptible_and_closes_the_window(tree):
    host = measuring_host(tree)
    errors = []

    def run():
        try:
            host.measure(30.0)
        except HostError as exc:
            errors.append(str(exc))

    t = threading.Thread(target=run)
    start = time.monotonic()
    t.start()
    assert host.latency.begun.wait(5.0)
    host.interrupt()
    t.join(5.0)
    assert not t.is_alive() and time.monotonic() - start < 5.0
    assert errors == ["measurement interrupted"] and host.latency.ended == 1


def test_offered_qps_samples_when_no_recent_read(tree):
    host = measuring_host(tree)
    host.qps_sample_s = 0.05
    assert host.offered_qps() == pytest.approx(5000.0, rel=0.01)


def test_missing_component_is_a_clear_error(tree):
    root, nic = tree
    host = RealHost(host_for(root, nic).io, OriginalsStore(root / "s", root))
    with pytest.raises(HostError, match="built without energy"):
        host.measure(1.0)


def test_fake_root_never_reaches_the_live_nic(tmp_path):
    assert isinstance(default_nic(tmp_path), UnavailableNic)
    with pytest.raises(HostError, match="cannot be redirected under --root"):
        default_nic(tmp_path).get_coalesce("eth0")


# -- CLI ---------------------------------------------------------------------------------------------
def test_cli_set_then_restore(tree, monkeypatch, capsys):
    root, nic = tree
    import actuators.real as real

    monkeypatch.setattr(real, "default_nic", lambda r: nic)
    state = root.parent / "state"
    rc = cli.main(
        ["set", "--itr", "64", "--dvfs", "2.2", "--backend", "msr", "--root", str(root), "--state-dir", str(state)]
    )
    out = capsys.readouterr().out
    assert rc == 0 and "DVFS 2.2 GHz on CPUs 0,1,2,3 (msr backend)" in out and "ITR 64 µs" in out
    assert ctl(root, 3) == 22 << 8 and nic.coalesce["eth1"][RX_USECS] == 64
    rc = cli.main(["restore", "--root", str(root), "--state-dir", str(state)])
    out = capsys.readouterr().out
    assert rc == 0 and out.count("restored: ") == 2 * NCPU + 1
    assert untouched(root, nic)
    assert cli.main(["restore", "--root", str(root), "--state-dir", str(state)]) == 0
    assert "nothing to restore" in capsys.readouterr().out


def test_cli_dry_run_and_errors(tree, monkeypatch, capsys):
    root, nic = tree
    rc = cli.main(["set", "--dvfs", "1.5", "--cores", "1-2", "--root", str(root), "--dry-run"])
    out = capsys.readouterr().out
    # auto picks cpufreq (userspace governor offered): governor + setspeed on CPUs 1 and 2
    assert rc == 0 and "dry run: 4 write(s) planned, none made" in out
    assert "would write '1500000' to" in out and "cpu2/cpufreq/scaling_setspeed" in out
    assert untouched(root, nic)
    rc = cli.main(["set", "--dvfs", "9.9", "--backend", "msr", "--root", str(root)])
    err = capsys.readouterr().err.strip().splitlines()
    assert rc == 2 and len(err) == 1 and err[0].startswith("tuner: error: DVFS 9.9 GHz is not available")
    rc = cli.main(["set", "--itr", "50", "--iface", "eth1", "--root", str(root)])  # fake root, live ioctl refused
    err = capsys.readouterr().err
    assert rc == 2 and "cannot be redirected under --root" in err
    assert untouched(root, nic)


def test_full_real_host_with_real_memcached_and_prober(tree, memcached):
    """make_real_host with every part: fake hardware tree, the real QPS reader and prober on a real
    memcached (127.0.0.1, free port)."""
    root, nic = tree
    host = make_real_host(
        root=root,
        nic=nic,
        backend="msr",
        qps=f"memcached:{memcached.address}",
        latency={"target": memcached.address, "rate_hz": 400.0},
    )
    try:
        assert host.probe_counts_in_qps
        fakefs.advance_zone(root, "intel-rapl:0", 0)
        m = host.measure(0.5)
        assert m.requests >= 50 and 0 < m.percentile(50.0) <= m.percentile(99.0) < 1e6
        assert m.offered_qps < 0.25 * m.requests / m.seconds  # the prober's own gets are not load
        assert m.energy_j == 0.0 and m.point is None
    finally:
        host.close()


# -- originals store ---------------------------------------------------------------------------------
def test_original_is_durable_before_the_write(tree, monkeypatch):
    root, nic = tree
    host = host_for(root, nic)
    from actuators.linux.hwio import HardwareIO

    real_apply = HardwareIO.apply
    seen = []

    def apply(self, setting):
        saved = OriginalsStore(host.store.state_dir, root)  # what another process would read now
        seen.append(saved.get(setting.key) is not None)
        return real_apply(self, setting)

    monkeypatch.setattr(HardwareIO, "apply", apply)
    host.apply(dvfs_ghz=2.0, itr_us=30)
    assert seen and all(seen)
    assert sorted(p.name for p in host.store.state_dir.iterdir()) == ["originals.json", "originals.lock"]


def test_corrupt_or_foreign_originals_are_refused(tmp_path):
    from actuators.linux.hwio import Setting

    state = tmp_path / "state"
    store = OriginalsStore(state, tmp_path)
    store.remember(Setting("sysfs", "sys/x", "ondemand"))
    with pytest.raises(HostError, match=r"saved for root .* not /other"):
        OriginalsStore(state, __import__("pathlib").Path("/other"))
    (state / "originals.json").write_text('{"version": 1, "entries": [{"kind": "bogus"}]}')
    with pytest.raises(HostError, match=r"originals.json: unreadable originals .*fix or remove it by hand"):
        OriginalsStore(state, tmp_path)


def test_restore_keeps_what_failed(tree, monkeypatch):
    root, nic = tree
    import errno

    host = host_for(root, nic)
    host.apply(itr_us=40, dvfs_ghz=2.6)
    nic.fail_set["eth1"] = errno.ENODEV
    with pytest.raises(HostError, match=r"restore: 1 of 9 values not restored .*no network interface 'eth1'"):
        host.restore()
    assert all(ctl(root, c) == CTL0 for c in range(NCPU))  # the rest was put back
    left = OriginalsStore(host.store.state_dir, root).entries()
    assert [e.kind for e in left] == ["coalesce"]
    nic.fail_set.clear()
    host.restore()
    assert untouched(root, nic) and not host.store.path.exists()


def test_two_processes_never_lose_each_others_originals(tmp_path):
    from actuators.linux.hwio import Setting

    state = tmp_path / "state"
    daemon, manual = OriginalsStore(state, tmp_path), OriginalsStore(state, tmp_path)  # both loaded empty
    assert daemon.remember(Setting("sysfs", "sys/a", "ondemand"))
    assert manual.remember(Setting("sysfs", "sys/b", "1"))
    assert not manual.remember(Setting("sysfs", "sys/a", "userspace"))  # daemon's original wins
    assert [(e.target, e.value) for e in OriginalsStore(state, tmp_path).entries()] == [
        ("sys/a", "ondemand"),
        ("sys/b", "1"),
    ]
    daemon.forget({("sysfs", "sys/a", 0)})
    assert [e.target for e in OriginalsStore(state, tmp_path).entries()] == ["sys/b"]


def test_make_host_real_builds_a_protocol_host(tree):
    from tuner.hosts import make_host

    root, nic = tree
    host = make_host("real", root=str(root), nic=nic, backend="cpufreq", cores="0-1", parts=("itr", "dvfs"))
    assert isinstance(host, RealHost) and host.dvfs.name == "cpufreq" and host.dvfs.cores == (0, 1)
    with pytest.raises(Exception, match=r"cores '0-x': expected a CPU list"):
        make_host("real", root=str(root), nic=nic, cores="0-x", parts=("dvfs",))


def test_observe_host_without_rapl_reports_power_unknown_and_no_point(tree, memcached):
    """Observe mode's host: no knobs built, energy optional; a tree without RAPL (a VM) measures QPS and
    latency and says power is unknown -- never a number."""
    import shutil

    from actuators.host import Measurement

    root, nic = tree
    shutil.rmtree(root / "sys/class/powercap")
    with pytest.raises(HostError, match="no powercap intel-rapl zone"):  # energy required unless declared optional
        make_real_host(root=root, nic=nic, parts=("energy",))
    host = make_real_host(
        root=root,
        nic=nic,
        parts=("energy", "qps", "latency"),
        optional=("energy",),
        qps=f"memcached:{memcached.address}",
        latency={"rate_hz": 400.0, "isolation": "thread"},
    )
    try:
        assert host.latency.config.target == memcached.address  # the prober defaults to the QPS source's server
        m = host.measure(0.3)
        assert m.point is None and not m.energy_known and m.power_or_none is None
        assert m.to_dict()["energy_j"] is None and not Measurement.from_dict(m.to_dict()).energy_known
        assert m.requests > 0 and m.percentile(99.0) > 0
        notices = host.notices()
        assert any(n.startswith("energy unavailable:") and "unknown" in n for n in notices)
        assert any("never cross the NIC" in n for n in notices)  # same-host prober cannot see ITR delay
    finally:
        host.close()


def test_probe_traffic_subtracted_whatever_the_spelling(tree, memcached):
    root, nic = tree
    port = memcached.address.rpartition(":")[2]
    host = make_real_host(
        root=root,
        nic=nic,
        parts=("qps", "latency"),
        qps=f"memcached:localhost:{port}",
        latency={"target": f"127.0.0.1:{port}", "isolation": "thread"},
    )
    try:
        assert host.probe_counts_in_qps
    finally:
        host.close()
    other = make_real_host(
        root=root,
        nic=nic,
        parts=("qps", "latency"),
        qps=f"memcached:127.0.0.1:{port}",
        latency={"target": "127.0.0.1:1", "isolation": "thread"},
    )
    try:
        assert not other.probe_counts_in_qps  # another server: its probes are not in this count
    finally:
        other.close()


def test_every_missing_part_in_one_error_before_any_write(tree):
    """A NIC without coalescing, an unverified driver without force, and no RAPL: all found while building
    the host (before the first retune), in one message."""
    import shutil

    root, nic = tree
    shutil.rmtree(root / "sys/class/powercap")
    fakefs.net_iface(root, "eth2", "virtio_net")
    nic.add("eth2")
    nic.unsupported.add("eth1")
    with pytest.raises(HostError) as e:
        make_real_host(root=root, nic=nic, backend="msr", iface="eth1,eth2", parts=("itr", "dvfs", "energy"))
    msg = str(e.value)
    assert "\n" not in msg
    assert "itr: NIC eth1 (driver ixgbe) does not support interrupt coalescing" in msg
    assert "NIC eth2 (driver virtio_net) has no verified ITR profile" in msg and "force = true" in msg
    assert "energy: no powercap intel-rapl zone" in msg
    assert nic.set_calls == []
    host = make_real_host(root=root, nic=nic, backend="msr", iface="eth2", force=True, parts=("itr",))
    assert host.itr.ifaces == ("eth2",)  # forced: the unverified driver may be tried


def test_a_dead_runs_settings_are_restored_even_when_this_start_finds_missing_parts(tree):
    """A tuner crashed with knobs changed; the next start cannot build every part (RAPL gone): the error still
    lists the missing part, and the dead run's DVFS and ITR values are back before the daemon exits."""
    import shutil

    root, nic = tree
    first = host_for(root, nic)
    first.apply(itr_us=50, dvfs_ghz=2.4)
    del first  # crashes without restoring
    assert not untouched(root, nic)
    shutil.rmtree(root / "sys/class/powercap")
    with pytest.raises(HostError) as e:
        host_for(root, nic, parts=("itr", "dvfs", "energy"))
    assert "energy: no powercap intel-rapl zone" in str(e.value)
    assert untouched(root, nic)
    assert not OriginalsStore(root / "var/lib/tuner", root).entries()


def test_a_start_with_missing_parts_in_dry_run_restores_nothing(tree):
    import shutil

    root, nic = tree
    first = host_for(root, nic)
    first.apply(itr_us=50, dvfs_ghz=2.4)
    del first
    shutil.rmtree(root / "sys/class/powercap")
    with pytest.raises(HostError):
        host_for(root, nic, parts=("itr", "dvfs", "energy"), dry_run=True)
    assert ctl(root, 0) == 24 << 8  # still the dead run's value: a dry run writes nothing
