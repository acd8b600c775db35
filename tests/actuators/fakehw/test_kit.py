"""The fake-hardware kit: its tree, file-backed NIC, power model and the real host running over it."""

from __future__ import annotations

import errno
import subprocess
import sys

import pytest

from actuators.fakehw import FileNic, HardwareModel, PowerModel, create, make_fake_host
from actuators.fakehw.kit import IFACE, ZONE
from actuators.host import OperatingPoint, apply_point
from core.errors import HostError


class Counter:
    def __init__(self) -> None:
        self.n = 0.0

    def total_requests(self) -> float:
        return self.n


def test_power_model_grows_with_frequency_load_and_interrupt_rate() -> None:
    m = PowerModel(cores=2)
    assert m.watts(1.2, 0, None) < m.watts(2.9, 0, None)  # idle: linear in f
    assert m.watts(2.0, 20_000, 100) < m.watts(2.0, 60_000, 100)
    assert m.watts(2.0, 50_000, 200) < m.watts(2.0, 50_000, 2)  # throttling interrupts saves CPU time
    assert m.utilisation(1.2, 1e9, None) == 1.0


def test_real_host_over_the_kit_sets_knobs_meters_energy_and_restores(tmp_path) -> None:
    root = create(tmp_path / "hw")
    host = make_fake_host(
        str(root), model=False, qps=Counter(), latency=_NoLatency(), state_dir=str(tmp_path / "state")
    )
    space = host.knobs()
    assert space.dvfs_ghz == (1.2, 1.6, 2.0, 2.4, 2.9)
    assert host.point() is None  # ondemand + adaptive ITR: the OS is in charge
    apply_point(host, OperatingPoint(100, 1.6))
    assert host.point() == OperatingPoint(100, 1.6)
    assert FileNic(root).get_coalesce(IFACE)["rx_coalesce_usecs"] == 100
    hw = HardwareModel(root, None)
    watts = hw.step(0.5, 10_000)
    cur = (root / "sys/devices/system/cpu/cpu0/cpufreq/scaling_cur_freq").read_text().strip()
    assert cur == "1600000"
    assert int((root / f"sys/class/powercap/{ZONE}/energy_uj").read_text()) == round(watts * 0.5e6)
    host.restore()
    assert host.point() is None
    gov = (root / "sys/devices/system/cpu/cpu1/cpufreq/scaling_governor").read_text().strip()
    assert gov == "ondemand" and FileNic(root).get_coalesce(IFACE)["use_adaptive_rx_coalesce"] == 1


def test_file_nic_refuses_like_the_driver(tmp_path) -> None:
    root = create(tmp_path / "hw")
    with pytest.raises(OSError) as exc:
        FileNic(root).set_coalesce(IFACE, {"rx_coalesce_usecs": 5000})
    assert exc.value.errno == errno.EINVAL
    with pytest.raises(OSError) as exc:
        FileNic(root).get_coalesce("eth9")
    assert exc.value.errno == errno.ENODEV


def test_kit_refuses_a_directory_that_is_not_a_kit(tmp_path) -> None:
    (tmp_path / "x").mkdir()
    (tmp_path / "x" / "precious").write_text("1")
    with pytest.raises(HostError, match="not a fake-hardware kit"):
        create(tmp_path / "x")
    with pytest.raises(HostError, match="create it"):
        make_fake_host(str(tmp_path / "x"))


def test_one_command_creates_the_kit(tmp_path) -> None:
    out = subprocess.run(
        [sys.executable, "-m", "actuators.fakehw", str(tmp_path / "hw"), "--create-only"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert out.returncode == 0, out.stderr
    assert (tmp_path / "hw/sys/class/net/eth1/device/driver").exists()
    bad = subprocess.run(
        [sys.executable, "-m", "actuators.fakehw", str(tmp_path), "--create-only"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert bad.returncode == 2 and "Traceback" not in bad.stderr and "not a fake-hardware kit" in bad.stderr


class _NoLatency:
    def begin(self) -> None: ...

    def end(self):  # pragma: no cover - not measured here
        raise AssertionError

    def close(self) -> None: ...


@pytest.mark.parametrize(
    ("kind", "driver", "status"), [("hwp", "intel_pstate", "intel_pstate"), ("amd", "amd-pstate-epp", "amd_pstate")]
)
def test_active_pstate_kits_as_the_kernel_boots_them_and_pinned_by_the_real_host(
    tmp_path, kind, driver, status
) -> None:
    root = create(tmp_path / "hw", kind=kind)
    cpufreq = root / "sys/devices/system/cpu/cpu0/cpufreq"
    assert (cpufreq / "scaling_driver").read_text().strip() == driver
    assert (root / f"sys/devices/system/cpu/{status}/status").read_text().strip() == "active"
    assert (cpufreq / "scaling_governor").read_text().strip() == "powersave"
    assert "userspace" not in (cpufreq / "scaling_available_governors").read_text()
    assert (cpufreq / "energy_performance_preference").read_text().strip() == "balance_performance"
    host = make_fake_host(str(root), model=False, qps=Counter(), latency=_NoLatency(), state_dir=str(tmp_path / "s"))
    assert host.dvfs is not None and host.dvfs.name == "minmax"
    assert host.knobs().dvfs_ghz[0] == 1.2 and host.knobs().dvfs_ghz[-1] == 2.9
    hw = HardwareModel(root, None)
    hw.step(0.1, 0.0)
    assert (cpufreq / "scaling_cur_freq").read_text().strip() == "2900000"  # busy at the top of the window
    apply_point(host, OperatingPoint(100, 1.6))
    hw.step(0.1, 0.0)
    assert (cpufreq / "scaling_cur_freq").read_text().strip() == "1600000" and host.point() == OperatingPoint(100, 1.6)
    host.restore()
    assert host.point() is None and (cpufreq / "scaling_min_freq").read_text().strip() == "1200000"


def test_the_command_plays_a_kind_and_keeps_a_kit_from_changing_kind_silently(tmp_path) -> None:
    def run(*args: str) -> subprocess.CompletedProcess[str]:
        cmd = [sys.executable, "-m", "actuators.fakehw", str(tmp_path / "hw"), "--create-only", *args]
        return subprocess.run(cmd, capture_output=True, text=True, timeout=60)

    assert run("--kind", "amd").returncode == 0
    assert (tmp_path / "hw/sys/devices/system/cpu/amd_pstate/status").exists()
    bad = run("--kind", "hwp")
    assert (
        bad.returncode == 2 and "the kit is amd, not hwp: add --reset" in bad.stderr and "Traceback" not in bad.stderr
    )
    assert run("--kind", "hwp", "--reset").returncode == 0
    assert (tmp_path / "hw/sys/devices/system/cpu/intel_pstate/status").exists()
    assert not (tmp_path / "hw/sys/devices/system/cpu/amd_pstate").exists()  # nothing of the old kind left


def test_the_kits_bmc_follows_the_modelled_power_over_ipmi(tmp_path, fake_bmc) -> None:
    """A BMC attached to the kit's model reads the package power plus the platform's (the RAPL-to-BMC gap)."""
    from actuators.fakehw.kit import PLATFORM_W
    from actuators.power.ipmi import make_reader

    root = create(tmp_path / "hw")
    hw = HardwareModel(root, None)
    hw.bmc = fake_bmc
    watts = hw.step(0.5, 50_000)
    assert int(fake_bmc.value_file.read_text()) == round(watts + PLATFORM_W)
    opts = fake_bmc.reader_options()
    opts.pop("kind")
    reader = make_reader(**opts)
    deadline = __import__("time").monotonic() + 5
    while reader.read().watts != round(watts + PLATFORM_W) and __import__("time").monotonic() < deadline:
        __import__("time").sleep(0.05)  # poll interval of a bounded wait for ipmi_sim's next sensor poll
    assert reader.read().watts == round(watts + PLATFORM_W)


def test_make_fake_host_with_a_bmc_measures_energy_over_ipmi(tmp_path) -> None:
    from actuators.fakehw.bmc import ipmi_sim_binary

    if ipmi_sim_binary() is None:
        pytest.skip("ipmi_sim not installed (Debian package `openipmi`)")
    from tests.fakefs import FakeLatency

    root = create(tmp_path / "hw")
    host = make_fake_host(
        str(root),
        model=False,
        qps=Counter(),
        latency=FakeLatency(),
        state_dir=str(tmp_path / "st"),
        bmc=123,
        bmc_poll_ms=200,
    )
    try:
        assert host.energy.info.source == "ipmi"
        m = host.measure(0.5)
        assert m.energy_source == "ipmi" and m.power_w == pytest.approx(123.0, rel=0.02)
    finally:
        host.close()
    with pytest.raises(HostError, match="bmc: 'loud'"):
        make_fake_host(str(root), model=False, qps=Counter(), latency=_NoLatency(), bmc="loud")
