"""Hardware classes (found by the host), the class drift test and the class warm start from a real SQLite store."""

from __future__ import annotations

import dataclasses
import math
import os
import random
from pathlib import Path

from actuators import hwclass
from actuators.sim.host import SimHost
from actuators.sim.model import SimParams
from tests.store_fakes import entry
from tuner.store.drift import DriftSettings, drift_test
from tuner.store.sqlite import SqliteStore
from tuner.store.warm import class_history


def _fake_root(tmp_path: Path) -> Path:
    root = tmp_path / "root"
    (root / "proc/sys/kernel").mkdir(parents=True)
    (root / "proc/cpuinfo").write_text(
        "processor\t: 0\nvendor_id\t: GenuineIntel\nmodel name\t: Intel(R) Xeon(R) CPU E5-2690 0 @ 2.90GHz\n\n"
        "processor\t: 1\nmodel name\t: Intel(R) Xeon(R) CPU E5-2690 0 @ 2.90GHz\n"
    )
    (root / "proc/sys/kernel/osrelease").write_text("5.4.0-150-generic\n")
    (root / "sys/devices/system/cpu").mkdir(parents=True)
    (root / "sys/devices/system/cpu/online").write_text("0-15,32\n")
    drv = root / "sys/bus/pci/drivers/ixgbe"
    drv.mkdir(parents=True)
    dev = root / "sys/devices/pci0000:00/0000:03:00.0"
    dev.mkdir(parents=True)
    os.symlink(drv, dev / "driver")
    (root / "sys/class/net/eth1").mkdir(parents=True)
    os.symlink(dev, root / "sys/class/net/eth1/device")
    return root


def test_real_class_read_from_the_machine(tmp_path: Path, memcached) -> None:
    root = _fake_root(tmp_path)
    c = hwclass.detect(root, "eth1", (memcached.host, memcached.port))
    assert c.cpu_model == "Intel(R) Xeon(R) CPU E5-2690 0 @ 2.90GHz"
    assert (c.cores, c.nic_driver, c.kernel) == (17, "ixgbe", "5.4.0-150-generic")
    assert c.memcached_version[0].isdigit() and c.memcached_version.count(".") >= 2  # e.g. 1.6.18
    missing = hwclass.detect(tmp_path / "nowhere", "eth1", None)
    assert missing == hwclass.HardwareClass("unknown", 0, "unknown", "unknown", "unknown")
    assert len(c.id) == 16 and c.id != missing.id


def test_sim_hosts_of_one_model_share_a_class() -> None:
    a, b = SimHost(seed=1, cores=4).hardware_class(), SimHost(seed=2, cores=4).hardware_class()
    assert a.id == b.id  # the seed (noise) is not part of the class
    assert SimHost(seed=1, cores=8).hardware_class().id != a.id
    other = SimHost(seed=1, cores=4, params=dataclasses.replace(SimParams(), static_w=20.0))
    assert other.hardware_class().id != a.id
    assert hwclass.host_class(object()) is None and hwclass.host_class(SimHost(cores=4)) == a


def _class_trials(host: str, n: int, seed: int, *, power_scale: float = 1.0, lat_scale: float = 1.0) -> list:
    """Trials from one smooth response surface (the class) with 3 % multiplicative noise."""
    rng = random.Random(seed)
    out = []
    for i in range(n):
        q = rng.choice([100e3, 200e3, 300e3, 400e3])
        ghz = rng.choice([1.2, 1.6, 2.0, 2.4, 2.8])
        itr = rng.choice(range(16, 400, 16))
        power = (20 + 60 * (q / 4e5) * (ghz / 2.9) ** 2) * power_scale * math.exp(rng.gauss(0, 0.03))
        p99 = (60 + 0.9 * itr + 3e-4 * q / ghz) * lat_scale * math.exp(rng.gauss(0, 0.03))
        out.append(entry(seed * 1000 + i, host, qps=q, itr=itr, ghz=ghz, power_w=power, p99_us=p99, time=i))
    return out


def test_drift_test_flags_a_shifted_host_only() -> None:
    peers = _class_trials("a", 300, 1) + _class_trials("b", 300, 2)
    same = drift_test(_class_trials("c", 30, 3), peers)
    assert not same.drifting and same.n == 30 and same.t is not None and same.t < 3.5
    hot = drift_test(_class_trials("d", 30, 4, power_scale=1.15), peers)
    assert hot.drifting and hot.metrics["power"]["shift"] > 0.10 and hot.metrics["power"]["t"] > 3.5
    slow = drift_test(_class_trials("e", 30, 5, lat_scale=1.4), peers)
    assert slow.drifting and slow.metrics["latency"]["shift"] > 0.3
    tiny = drift_test(_class_trials("f", 200, 6, power_scale=1.02), peers)  # significant but within 5 %
    assert not tiny.drifting
    few = drift_test(_class_trials("g", 4, 7, power_scale=2.0), peers)
    assert (few.drifting, few.t, few.n) == (False, None, 4)
    assert (
        drift_test(_class_trials("h", 30, 8), peers, DriftSettings(min_neighbours=10_000)).n == 0
    )  # too few neighbours


def _steep_trials(host: str, n: int, seed: int, itrs: range, *, lat_scale: float = 1.0) -> list:
    """One load and frequency, latency steep in ITR (as near the cliff at a tight SLA), 3 % noise."""
    rng = random.Random(seed)
    out = []
    for i in range(n):
        itr = rng.choice(itrs)
        p99 = (40 + 1.2 * itr) * lat_scale * math.exp(rng.gauss(0, 0.03))
        power = (70 - 0.02 * itr) * math.exp(rng.gauss(0, 0.03))
        out.append(entry(seed * 1000 + i, host, qps=300e3, itr=itr, ghz=1.6, power_w=power, p99_us=p99, time=i))
    return out


def test_drift_test_is_not_fooled_by_neighbours_on_one_side_of_a_steep_surface() -> None:
    """The class measured ITR 160-300, this host 100-170 (a second host exploring lower): the neighbours of
    most of its trials lie at higher ITRs, where latency is higher. The median of the neighbours calls that
    a latency shift and flags a healthy host; testing only the trials the class brackets, against a local
    line, does not -- and still flags a host 30 % slower."""
    peers = _steep_trials("a", 200, 1, range(160, 300, 8))
    healthy = _steep_trials("b", 40, 2, range(100, 170, 8))
    median = drift_test(healthy, peers, DriftSettings(local_linear=False, bracket=100.0))
    assert median.drifting and median.metrics["latency"]["shift"] < -0.10  # the bias this guards against
    fit = drift_test(healthy, peers)  # only trials the class brackets, a local line through their neighbours
    assert not fit.drifting and fit.n >= 10 and abs(fit.metrics["latency"]["shift"]) < 0.05
    slow = drift_test(_steep_trials("c", 40, 3, range(100, 170, 8), lat_scale=1.3), peers)
    assert slow.drifting and slow.metrics["latency"]["shift"] > 0.2


def test_class_warm_start_mixes_in_the_class_unless_the_host_drifts(tmp_path: Path) -> None:
    store = SqliteStore(tmp_path / "trials.sqlite")
    store.add(_class_trials("peer", 200, 1))
    store.add(_class_trials("me", 20, 2))
    got = class_history(store, "me", "c1", limit=500, hw={"cpu_model": "x"})
    assert (got.own, got.from_class, got.drift.drifting) == (20, 200, False)
    assert [r.index for r in got.records()] == list(range(220))
    store.add(_class_trials("bad", 20, 3, power_scale=1.3))
    bad = class_history(store, "bad", "c1", limit=500)
    assert (bad.own, bad.from_class, bad.drift.drifting) == (20, 0, True)  # only its own trials
    flagged = {h.host: h.drift for h in store.hosts()}
    assert flagged == {"me": False, "bad": True}
    again = class_history(store, "me", "c1", limit=500)
    assert again.from_class == 200  # the drifting host's trials stay out of the class


def test_drift_is_exported_as_a_gauge() -> None:
    from prometheus_client import generate_latest

    from tuner.daemon.metrics import DaemonMetrics

    m = DaemonMetrics.create("test", "h")
    m.set_class_drift("c1", True, 5.25, 3, 40)
    text = generate_latest(m.registry).decode()
    assert 'tuner_class_drift{hw_class="c1"} 1.0' in text
    assert 'tuner_class_drift_statistic{hw_class="c1"} 5.25' in text
    assert 'tuner_warm_start_trials{source="class"} 40.0' in text
    m.set_class_drift("c1", False, None, 3, 40)
    text = generate_latest(m.registry).decode()
    assert 'tuner_class_drift{hw_class="c1"} 0.0' in text and 'tuner_class_drift_statistic{hw_class="c1"} NaN' in text
