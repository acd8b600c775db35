"""On an Intel HWP box and an amd-pstate box in active mode, as the kernel boots them (the fake-hardware kit's `hwp`
and `amd` kinds, and an HWP tree with MSRs and no cpufreq): `tuner doctor` says the host can be tuned without a
reboot, `tuner set --dvfs` pins the frequency, `tuner restore` puts every original back."""

from __future__ import annotations

import json

import pytest

from actuators.fakehw import HardwareModel, create
from actuators.linux.hwp import IA32_HWP_REQUEST
from tests import fakefs
from tuner.cli.app import main

CPU = "sys/devices/system/cpu"
STATUS = {"hwp": "intel_pstate", "amd": "amd_pstate"}


def knob_files(root):
    """Every CPU's policy limits, EPP and governor (what the tuner may change, and what it must not)."""
    return {
        str(p.relative_to(root)): p.read_text().strip()
        for name in ("scaling_min_freq", "scaling_max_freq", "energy_performance_preference", "scaling_governor")
        for p in sorted(root.glob(f"{CPU}/cpu[0-9]*/cpufreq/{name}"))
    }


@pytest.mark.parametrize("kind", ["hwp", "amd"])
def test_doctor_set_restore_on_the_kernels_default(tmp_path, capsys, monkeypatch, kind):
    fakefs.guard_writes(monkeypatch, tmp_path)
    root = create(tmp_path / "hw", kind=kind)
    boot = knob_files(root)
    assert main(["doctor", "--root", str(root), "--memcached", "127.0.0.1:1", "--json"]) == 1
    report = json.loads(capsys.readouterr().out)
    found = {f["check"]: f for f in report["findings"]}
    assert report["missing"] == ["memcached"]  # nothing else is missing: no reboot, no kernel parameter
    assert (
        found["dvfs"]["detail"].startswith("--backend auto uses minmax")
        and "without a reboot" in found["dvfs"]["detail"]
    )
    step = f"echo passive > /sys/devices/system/cpu/{STATUS[kind]}/status"
    assert step in found["pstate-status"]["fix"] and "never taken by the tuner" in found["pstate-status"]["fix"]
    assert (root / CPU / STATUS[kind] / "status").read_text().strip() == "active"  # offered, not done

    state = str(tmp_path / "state")
    assert main(["set", "--root", str(root), "--state-dir", state, "--dvfs", "2.0"]) == 0
    out = capsys.readouterr().out
    assert "DVFS 2 GHz on CPUs 0,1 (minmax backend)" in out
    assert "(scaling_cur_freq)" in out  # nothing plays the kit's hardware yet: the running frequency lags, a warning
    pinned = knob_files(root)
    for cpu in (0, 1):
        for limit in ("min", "max"):
            assert pinned[f"{CPU}/cpu{cpu}/cpufreq/scaling_{limit}_freq"] == "2000000"
    assert {k: v for k, v in pinned.items() if "scaling_m" not in k} == {
        k: v for k, v in boot.items() if "scaling_m" not in k
    }  # EPP and governor untouched
    HardwareModel(root).step(0.1, 1000.0)  # the kit's "kernel": the CPUs run at the top of their window
    assert (root / CPU / "cpu1/cpufreq/scaling_cur_freq").read_text().strip() == "2000000"

    assert main(["restore", "--root", str(root), "--state-dir", state]) == 0
    assert "scaling_min_freq" in capsys.readouterr().out
    assert knob_files(root) == boot


def test_set_restore_through_the_hwp_request(tmp_path, capsys, monkeypatch):
    """HWP on, no cpufreq driver managing it: `auto` pins through IA32_HWP_REQUEST; restore puts each core's back."""
    fakefs.guard_writes(monkeypatch, tmp_path)
    fakefs.hwp_host(tmp_path, ncpus=2)
    state = str(tmp_path / "state")
    assert main(["set", "--root", str(tmp_path), "--state-dir", state, "--dvfs", "2.2"]) == 0
    assert "(hwp backend)" in capsys.readouterr().out
    for cpu in (0, 1):
        assert fakefs.get_msr(tmp_path, cpu, IA32_HWP_REQUEST) & 0xFFFFFF == 22 | 22 << 8 | 22 << 16
    assert main(["restore", "--root", str(tmp_path), "--state-dir", state]) == 0
    assert [fakefs.get_msr(tmp_path, cpu, IA32_HWP_REQUEST) for cpu in (0, 1)] == [fakefs.HWP_BOOT_REQUEST] * 2
