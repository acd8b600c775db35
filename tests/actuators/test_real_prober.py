"""The prober's client-settings warnings describe the CPUs it runs on: on the fake-hardware kit, this machine's
(not the governor a previous daemon left in the fake tree); under a live root, that root's."""

from __future__ import annotations

import os

from actuators.fakehw import create, make_fake_host
from actuators.latency.prober import Prober, read_client_settings
from actuators.real import make_real_host

LATENCY = {"kind": "prober", "target": "127.0.0.1:1"}  # never started: the settings are read at construction


def _set_governors(root, name: str) -> None:
    for gov in (root / "sys/devices/system/cpu").glob("cpu[0-9]*/cpufreq/scaling_governor"):
        gov.write_text(name + "\n")


class Counter:
    def total_requests(self) -> float:
        return 0.0


def test_on_the_kit_the_prober_reads_the_governor_of_the_cpus_it_runs_on(tmp_path) -> None:
    root = create(tmp_path / "hw")
    _set_governors(root, "userspace")  # what a previous daemon's DVFS left in the fake tree
    host = make_fake_host(str(root), model=False, qps=Counter(), latency=dict(LATENCY), state_dir=str(tmp_path / "s"))
    prober = host.latency
    assert isinstance(prober, Prober) and prober.settings is not None
    here = read_client_settings("/", cpus=os.sched_getaffinity(0))
    assert prober.settings.cpus == tuple(sorted(os.sched_getaffinity(0)))
    assert prober.settings.governors == here.governors
    assert [w for w in prober.warnings() if "governor" in w] == [w for w in here.warnings() if "governor" in w]
    host.close()


def test_under_a_live_root_the_prober_reads_that_root(tmp_path) -> None:
    root = create(tmp_path / "hw")  # stands for the host's /sys and /proc mounted at a path (a container's /host)
    _set_governors(root, "powersave")
    cpus = sorted(os.sched_getaffinity(0))
    host = make_real_host(root=root, live_root=True, parts=("latency",), qps=None, latency={**LATENCY, "cpus": cpus})
    prober = host.latency
    assert isinstance(prober, Prober) and prober.settings is not None
    kit_cpus = [c for c in cpus if c < 2]
    assert all(prober.settings.governors[c] == "powersave" for c in kit_cpus) and kit_cpus
    assert any("governor powersave" in w for w in prober.warnings())
    host.close()
