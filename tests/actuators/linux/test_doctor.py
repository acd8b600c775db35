"""`tuner doctor`: findings on fake trees, the can-tune verdict, and a read-only run on this machine."""

from __future__ import annotations

import json
import socket
import threading

import pytest

from actuators.linux import doctor
from actuators.linux.dvfs import IA32_PERF_CTL, IA32_PM_ENABLE, MSR_PLATFORM_INFO
from actuators.linux.findings import Finding
from actuators.linux.hwio import HardwareIO
from tests import fakefs
from tuner.cli import app as cli

ALL_CAPS = (1 << 41) - 1


@pytest.fixture(autouse=True)
def _guard(monkeypatch, tmp_path):
    fakefs.guard_writes(monkeypatch, tmp_path)


@pytest.fixture
def fake_memcached():
    """A one-connection TCP server on 127.0.0.1 answering `version` like memcached."""
    srv = socket.socket()
    srv.bind(("127.0.0.1", 0))
    srv.listen(1)
    srv.settimeout(5.0)

    def serve():
        try:
            conn, _ = srv.accept()
        except OSError:
            return
        with conn:
            conn.settimeout(5.0)
            if conn.recv(64).startswith(b"version"):
                conn.sendall(b"VERSION 1.6.21\r\n")

    t = threading.Thread(target=serve, daemon=True)
    t.start()
    yield f"127.0.0.1:{srv.getsockname()[1]}"
    srv.close()
    t.join(5.0)


def good_host(root, hwp=False, caps=ALL_CAPS):
    fakefs.cpu_online(root, 2)
    fakefs.cpuinfo(root, "GenuineIntel", 2, flags="fpu msr hwp")
    fakefs.msr_files(
        root, 2, {MSR_PLATFORM_INFO: (10 << 40) | (24 << 8), IA32_PM_ENABLE: int(hwp), IA32_PERF_CTL: 20 << 8}
    )
    fakefs.cpufreq(
        root,
        2,
        driver="intel_pstate",
        governor="powersave",
        governors="performance powersave",
        pstate_status="active",
        min_khz=1_000_000,
        max_khz=2_400_000,
    )
    fakefs.powercap_zone(root, "package-0", "intel-rapl:0", 10, 262_143_328_850, max_power_uw=120_000_000)
    fakefs.net_iface(root, "eth1", "ixgbe")
    fakefs.proc_status(root, caps)
    fakefs.cpuidle(root, 2)
    nic = fakefs.FakeNic()
    nic.add("eth1", rx_usecs=1)
    return HardwareIO(root, nic, dry_run=True), nic


def by_check(report):
    return {f.check: f for f in report.findings}


def test_tunable_host(tmp_path, fake_memcached):
    io, nic = good_host(tmp_path)
    report = doctor.run_checks(io, (), fake_memcached, (0, 1))
    f = by_check(report)
    assert report.can_tune and report.missing == ()
    assert f["dvfs-msr"].status == "ok" and "15 frequencies 1..2.4 GHz" in f["dvfs-msr"].detail
    assert f["dvfs-cpufreq"].status == "fail" and "intel_pstate is in active mode" in f["dvfs-cpufreq"].detail
    assert f["hwp"].status == "ok" and f["rapl"].status == "ok" and "package-0" in f["rapl"].detail
    assert f["nic:eth1"].status == "ok" and "driver ixgbe" in f["nic:eth1"].detail
    assert f["memcached"].detail.endswith("VERSION 1.6.21")
    assert f["prober"].status == "warn" and "C6 (133 µs)" in f["prober"].fix  # deep C-state on prober CPUs
    assert io.planned == [] and nic.set_calls == []  # read-only
    assert "=> the tuner can run on this host" in doctor.format_report(report)


def test_hwp_host_pins_through_minmax_and_missing_caps_block_with_fixes(tmp_path):
    io, _ = good_host(tmp_path, hwp=True, caps=0)
    report = doctor.run_checks(io, ("eth1",), "127.0.0.1:1", (0, 1))
    f = by_check(report)
    assert not report.can_tune and set(report.missing) == {"itr", "memcached"}  # DVFS needs no capability here
    assert f["hwp"].status == "info" and "intel_pstate=no_hwp" in f["hwp"].fix and "minmax" in f["hwp"].detail
    assert f["dvfs-msr"].status == "fail" and f["dvfs-minmax"].status == "ok"
    assert "without a reboot" in f["dvfs"].detail and "minmax" in f["dvfs"].detail
    assert f["cap-net-admin"].status == "fail" and "AmbientCapabilities" in f["cap-net-admin"].fix
    assert "not reachable" in f["memcached"].detail
    text = doctor.format_report(report)
    assert "cannot tune this host: missing itr, memcached" in text and "fix: " in text


def nothing_works(root):
    """An HWP host whose intel_pstate is passive without the userspace governor: no backend works."""
    io, nic = good_host(root, hwp=True)
    fakefs.write(root / "sys/devices/system/cpu/intel_pstate/status", "passive")
    return io, nic


def test_unsupported_nic_and_no_msr_module(tmp_path):
    fakefs.cpu_online(tmp_path, 1)
    fakefs.cpuid_only(tmp_path, 1)
    fakefs.proc_modules(tmp_path, ["ixgbe", "kvm"])
    fakefs.net_iface(tmp_path, "eth0", "virtio_net")
    nic = fakefs.FakeNic()
    nic.add("eth0")
    nic.unsupported.add("eth0")
    f = by_check(doctor.run_checks(HardwareIO(tmp_path, nic, dry_run=True), (), "127.0.0.1:1"))
    assert f["msr-module"].status == "fail" and "modprobe msr" in f["msr-module"].fix
    assert f["nic:eth0"].status == "fail"
    assert f["nic:eth0"].detail.startswith("NIC eth0 (driver virtio_net) does not support interrupt coalescing")
    assert f["rapl"].status == "fail"


def test_summarize_rules():
    F = Finding
    base = [
        F("dvfs-msr", "ok", ""),
        F("cap-sys-rawio", "fail", ""),
        F("dvfs-cpufreq", "fail", ""),
        F("nic:eth1", "warn", ""),
        F("cap-net-admin", "ok", ""),
        F("rapl", "ok", ""),
        F("memcached", "ok", ""),
    ]
    assert doctor.summarize(base).missing == ("dvfs",)  # MSR backend without CAP_SYS_RAWIO is no backend
    base[2] = F("dvfs-cpufreq", "ok", "")
    assert doctor.summarize(base).can_tune


def test_doctor_on_this_machine_is_read_only_and_honest(monkeypatch, capsys):
    """The real `/`: must not write anything and must say it cannot tune (no RAPL/DVFS here)."""
    import pyroute2.ethtool.ioctl as ioctl_mod

    from actuators.linux import hwio

    def forbidden(*_a, **_k):
        raise AssertionError("doctor attempted a write")

    monkeypatch.setattr(hwio.HardwareIO, "_write_text", forbidden)
    monkeypatch.setattr(hwio, "write_msr", forbidden)
    monkeypatch.setattr(ioctl_mod.IoctlEthtool, "set_coalesce", forbidden)
    rc = cli.main(["doctor", "--json", "--memcached", "127.0.0.1:1"])
    data = json.loads(capsys.readouterr().out)
    has_rapl = any(
        (p / "energy_uj").exists() for p in __import__("pathlib").Path("/sys/class/powercap").glob("intel-rapl:*")
    )
    if has_rapl:
        pytest.skip("this machine has RAPL; the honesty assertion is for the CI VM")
    assert rc == 1 and data["can_tune"] is False and "energy" in data["missing"]
    assert {f["check"] for f in data["findings"]} >= {
        "msr-module",
        "cap-net-admin",
        "cap-sys-rawio",
        "hwp",
        "cpufreq",
        "dvfs-msr",
        "dvfs-cpufreq",
        "rapl",
        "memcached",
        "prober",
    }


def test_hwp_seen_through_intel_pstate_without_msr(tmp_path):
    fakefs.cpu_online(tmp_path, 1)
    fakefs.cpuid_only(tmp_path, 1)
    fakefs.write(tmp_path / "sys/devices/system/cpu/intel_pstate/hwp_dynamic_boost", "0")
    finding = doctor.check_hwp(HardwareIO(tmp_path, dry_run=True), 0)
    assert finding.status == "info" and "hwp_dynamic_boost" in finding.detail and "no_hwp" in finding.fix


@pytest.mark.parametrize(
    ("address", "said"),
    [("127.0.0.1:99999", "port 99999 outside 1..65535"), ("127.0.0.1:", "the port after ':' is missing")],
)
def test_bad_memcached_address_is_a_usage_error_not_cannot_tune(address, said, capsys):
    rc = cli.main(["doctor", "--memcached", address])
    err = capsys.readouterr().err
    assert rc == 2 and said in err and "Traceback" not in err and err.count("\n") == 1
    finding = doctor.check_memcached(address)  # and as a finding (config files) a FAIL, never an exception
    assert finding.status == "fail" and said in finding.detail


def test_amd_host_gets_amd_pstate_advice(tmp_path):
    fakefs.cpu_online(tmp_path, 2)
    fakefs.cpuinfo(tmp_path, "AuthenticAMD", 2, flags="fpu msr")
    fakefs.cpufreq(tmp_path, 2, driver="amd-pstate-epp", governor="powersave", governors="performance powersave")
    fakefs.write(tmp_path / "sys/devices/system/cpu/amd_pstate/status", "active")
    f = by_check(doctor.run_checks(HardwareIO(tmp_path, fakefs.FakeNic(), dry_run=True), ("eth9",), "127.0.0.1:1"))
    assert f["platform"].status == "info" and "bare metal" in f["platform"].detail
    assert "AuthenticAMD" in f["hwp"].detail and f["hwp"].status == "info"
    assert "amd_pstate active" in f["cpufreq"].detail
    assert f["dvfs-cpufreq"].status == "fail" and "amd_pstate=passive" in f["dvfs-cpufreq"].fix
    assert "on AMD use cpufreq" in f["dvfs-msr"].fix
    assert not any("intel_pstate" in x.fix for x in f.values())


def test_vm_is_stated_as_a_vm(tmp_path):
    fakefs.cpu_online(tmp_path, 2)
    fakefs.cpuinfo(tmp_path, "GenuineIntel", 2, flags="fpu msr hypervisor")
    f = by_check(doctor.run_checks(HardwareIO(tmp_path, fakefs.FakeNic(), dry_run=True), ("eth9",), "127.0.0.1:1"))
    assert f["platform"].status == "warn" and "virtual machine (cpuinfo flag hypervisor)" in f["platform"].detail
    for check in ("platform", "cpufreq", "dvfs-cpufreq", "dvfs-msr", "rapl"):
        assert "no RAPL/MSR/cpufreq in most VMs: run on bare metal" in f[check].fix, check


def test_cores_beyond_the_online_cpus(tmp_path):
    io, _ = good_host(tmp_path)
    report = doctor.run_checks(io, ("eth1",), "127.0.0.1:1", (0, 1, 2, 3, 4, 5, 6, 7))
    f = by_check(report)
    assert f["cpus"].status == "fail" and f["cpus"].detail.startswith("CPU 2 is not online (online: 0-1")
    assert "cores" in report.missing
    assert f["dvfs-msr"].status == "ok"  # the other checks still ran, on the online CPUs asked for


def test_other_backend_offered_only_when_it_works(tmp_path):
    io, _ = good_host(tmp_path)  # msr works, cpufreq (intel_pstate active) does not
    f = by_check(doctor.run_checks(io, ("eth1",), "127.0.0.1:1", (0, 1)))
    assert "--backend msr (usable here)" in f["dvfs-cpufreq"].fix
    io, _ = nothing_works(tmp_path / "hwp")  # now every backend fails: none to offer
    f = by_check(doctor.run_checks(io, ("eth1",), "127.0.0.1:1", (0, 1)))
    assert {f[f"dvfs-{b}"].status for b in ("msr", "cpufreq", "minmax", "hwp")} == {"fail"}
    assert f["dvfs"].status == "fail"
    texts = [x.detail + x.fix for x in f.values()]
    assert not any("--backend msr" in t and "usable" in t for t in texts)
    assert not any("use --backend" in t for t in texts)


def test_backend_choice_names_offline_cpu_and_offers_only_a_working_backend(tmp_path):
    from actuators.linux.dvfs import choose_backend
    from core.errors import HostError

    io, _ = good_host(tmp_path)
    with pytest.raises(HostError, match=r"^CPU 2 is not online"):
        choose_backend(io, (0, 1, 2), "msr")
    with pytest.raises(HostError, match="--backend msr works on this host"):
        choose_backend(io, (0, 1), "cpufreq")
    io, _ = good_host(tmp_path / "hwp", hwp=True)  # HWP on, intel_pstate active: min/max pinning works
    with pytest.raises(HostError, match="--backend minmax works on this host"):
        choose_backend(io, (0, 1), "cpufreq")
    io, _ = nothing_works(tmp_path / "none")
    with pytest.raises(HostError) as e:
        choose_backend(io, (0, 1), "cpufreq")
    assert "--backend" not in str(e.value)


def test_doctor_lists_per_interface_what_it_will_tune(tmp_path):
    from actuators.fakehw.nic import FileNic, create_nic

    for ifname, driver in (("eth1", "mlx5_core"), ("eth2", "bnxt_en"), ("eth3", "igb"), ("eth4", "sfc")):
        fakefs.net_iface(tmp_path, ifname, driver)
        create_nic(tmp_path, ifname, "ixgbe" if driver == "sfc" else driver)
    f = by_check_list(doctor.check_nics(HardwareIO(tmp_path, FileNic(tmp_path), dry_run=True), ()))
    mlx5, bnxt, igb, sfc = f["nic:eth1"], f["nic:eth2"], f["nic:eth3"], f["nic:eth4"]
    assert mlx5.status == "ok" and mlx5.detail.startswith(
        "driver mlx5_core: coalescing readable (rx-usecs 8, adaptive-rx on, rx-frames 32, LRO off, "
        "timer mode CQE (priv-flag rx_cqe_moder on)); profile mlx5_core: rx-usecs 1..1022 µs step 1 (driver "
        "applies up to 4095 µs;"
    )
    assert "adaptive off: use-adaptive-rx off (DIM); sets rx-frames 65535; leaves the CQE/EQE timer mode" in mlx5.detail
    assert mlx5.detail.endswith("[en_ethtool.c mlx5e_ethtool_set_coalesce]")
    assert "adaptive off: use-adaptive-rx off (DIM) in its own write first" in bnxt.detail
    assert "sets nothing else; leaves rx-frames, rx-usecs-irq, cqe-mode-rx" in bnxt.detail
    assert "rx-usecs 10..1022 µs step 1 (driver applies up to 8191 µs" in igb.detail
    assert "rx-usecs 1 = dynamic mode, 3 = dynamic conservative" in igb.detail
    assert sfc.status == "warn"
    assert "no verified profile (known: bnxt_en, ena, i40e, ice, igb, igc, ixgbe, mlx5_core)" in sfc.detail
    assert "unverified" in sfc.detail and "--force" in sfc.fix


def by_check_list(findings):
    return {f.check: f for f in findings}
