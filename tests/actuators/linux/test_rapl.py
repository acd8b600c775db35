"""RAPL energy from fake powercap zones (wrapping counters) and fake energy MSRs (Intel and AMD)."""

from __future__ import annotations

import pytest

from actuators.linux import rapl
from actuators.linux.hwio import HardwareIO
from core.errors import HostError
from tests import fakefs


@pytest.fixture(autouse=True)
def _guard(monkeypatch, tmp_path):
    fakefs.guard_writes(monkeypatch, tmp_path)


class Clock:
    def __init__(self) -> None:
        self.t = 100.0

    def __call__(self) -> float:
        return self.t


def two_packages(root, wrap=262_143_328_850):
    fakefs.powercap_zone(root, "package-0", "intel-rapl:0", wrap - 1_000_000, wrap, max_power_uw=150_000_000)
    fakefs.powercap_zone(root, "dram", "intel-rapl:0:0", 5_000_000, wrap)
    fakefs.powercap_zone(root, "core", "intel-rapl:0:1", 0, wrap)
    fakefs.powercap_zone(root, "package-1", "intel-rapl:1", 0, wrap, max_power_uw=150_000_000)
    fakefs.powercap_zone(root, "dram", "intel-rapl:1:0", 0, wrap)
    fakefs.powercap_zone(root, "psys", "intel-rapl:2", 0, wrap)


def test_powercap_sums_packages_across_a_wrap(tmp_path):
    two_packages(tmp_path)
    io = HardwareIO(tmp_path)
    meter = rapl.discover_meter(io)
    meter.clock = clock = Clock()
    assert meter.max_power_w == 300.0  # 2x the 150 W zone maximum
    meter.begin()
    fakefs.advance_zone(tmp_path, "intel-rapl:0", 3_000_000)  # wraps past max_energy_range_uj
    fakefs.advance_zone(tmp_path, "intel-rapl:1", 2_000_000)
    fakefs.advance_zone(tmp_path, "intel-rapl:0:0", 400_000)
    fakefs.advance_zone(tmp_path, "intel-rapl:1:0", 600_000)
    fakefs.advance_zone(tmp_path, "intel-rapl:2", 9_000_000)
    clock.t += 1.0
    meter.poll()
    fakefs.advance_zone(tmp_path, "intel-rapl:0", 1_000_000)
    clock.t += 1.0
    reading = meter.end()
    assert reading.energy_j == pytest.approx(6.0)  # 3 J + 1 J (package-0) + 2 J (package-1); psys not counted
    assert reading.by_zone_j["package-0"] == pytest.approx(4.0)
    assert reading.by_zone_j["dram"] == pytest.approx(1.0)  # summed over both packages
    assert reading.by_zone_j["psys"] == pytest.approx(9.0)
    assert reading.seconds == pytest.approx(2.0)


def test_safe_interval_and_missed_wrap_detection(tmp_path):
    wrap = 65_532_610_987  # a 65 kJ range
    fakefs.powercap_zone(tmp_path, "package-0", "intel-rapl:0", 0, wrap, max_power_uw=100_000_000)
    meter = rapl.discover_meter(HardwareIO(tmp_path))
    meter.clock = clock = Clock()
    assert meter.safe_interval_s == pytest.approx(65_532.610987 / 200.0 / 2.0)
    assert meter.poll_interval_s == 1.0
    meter.begin()
    clock.t += meter.safe_interval_s + 1
    with pytest.raises(HostError, match="not read for .* a counter wrap may have been missed"):
        meter.poll()


def test_msr_intel_units_and_32bit_wrap(tmp_path):
    fakefs.cpu_online(tmp_path, 2)
    fakefs.cpuinfo(tmp_path, "GenuineIntel", 2)
    fakefs.msr_files(
        tmp_path,
        2,
        {
            rapl.MSR_RAPL_POWER_UNIT: 0x000A0E03,  # ESU 14 -> 61 µJ, PU 3
            rapl.MSR_PKG_ENERGY_STATUS: 0xFFFF_FF00,
            rapl.MSR_PKG_POWER_INFO: 8 * 125,
        },
    )  # 125 W TDP in 1/8 W
    for cpu, pkg in ((0, "0"), (1, "1")):
        fakefs.write(tmp_path / f"sys/devices/system/cpu/cpu{cpu}/topology/physical_package_id", pkg)
    meter = rapl.discover_meter(HardwareIO(tmp_path))
    meter.clock = clock = Clock()
    assert [c.zone for c in meter.counters] == ["package-0", "package-1"]
    assert meter.max_power_w == 250.0
    meter.begin()
    fakefs.set_msr(tmp_path, 0, rapl.MSR_PKG_ENERGY_STATUS, 0x0000_0100)  # wrapped: +0x200 units
    fakefs.set_msr(tmp_path, 1, rapl.MSR_PKG_ENERGY_STATUS, 0xFFFF_FF00 + 0x4000)  # past 2^32 too
    clock.t += 0.5
    reading = meter.end()
    unit = 1.0 / (1 << 14)
    assert reading.energy_j == pytest.approx((0x200 + 0x4000) * unit)


def test_msr_amd_registers(tmp_path):
    fakefs.cpu_online(tmp_path, 1)
    fakefs.cpuinfo(tmp_path, "AuthenticAMD")
    fakefs.msr_files(tmp_path, 1, {rapl.AMD_RAPL_POWER_UNIT: 0x000A1003, rapl.AMD_PKG_ENERGY_STATUS: 1000})
    meter = rapl.discover_meter(HardwareIO(tmp_path), "msr", max_power=400.0)
    meter.clock = clock = Clock()
    assert meter.counters[0].joules_per_unit == 1.0 / (1 << 16)
    meter.begin()
    fakefs.set_msr(tmp_path, 0, rapl.AMD_PKG_ENERGY_STATUS, 1000 + (1 << 16))
    clock.t += 0.1
    assert meter.end().energy_j == pytest.approx(1.0)


def test_energy_permission_denied(tmp_path, monkeypatch):
    fakefs.powercap_zone(tmp_path, "package-0", "intel-rapl:0", 0, 1000)
    real = HardwareIO.read_text

    def denied(self, rel):
        if rel.endswith("energy_uj"):
            raise HostError(f"permission denied reading {self.path(rel)} (run as root)")
        return real(self, rel)

    monkeypatch.setattr(HardwareIO, "read_text", denied)
    with pytest.raises(HostError, match="energy_uj is root-only since Linux 5.10"):
        rapl.discover_meter(HardwareIO(tmp_path))


def test_no_rapl_anywhere(tmp_path):
    fakefs.cpu_online(tmp_path, 1)
    fakefs.cpuid_only(tmp_path, 1)
    with pytest.raises(HostError, match="no powercap intel-rapl zone .* and no energy MSR .*msr module not loaded"):
        rapl.discover_meter(HardwareIO(tmp_path))
    with pytest.raises(HostError, match="no RAPL powercap zone"):
        rapl.discover_meter(HardwareIO(tmp_path), "powercap")


@pytest.mark.parametrize("text", ["", "garbage", "12 34", "-5"])
def test_empty_or_garbled_energy_read_is_one_line_host_error(tmp_path, text):
    fakefs.powercap_zone(tmp_path, "package-0", "intel-rapl:0", 0, 262_143_328_850)
    fakefs.write(tmp_path / "sys/class/powercap/intel-rapl:0/energy_uj", text)
    with pytest.raises(HostError, match=r"energy_uj reads .*expected a non-negative integer") as e:
        rapl.discover_meter(HardwareIO(tmp_path))
    assert "\n" not in str(e.value)


def test_garbled_energy_range_is_one_line_host_error(tmp_path):
    fakefs.powercap_zone(tmp_path, "package-0", "intel-rapl:0", 0, 262_143_328_850)
    fakefs.write(tmp_path / "sys/class/powercap/intel-rapl:0/max_energy_range_uj", "")
    with pytest.raises(HostError, match="max_energy_range_uj reads ''"):
        rapl.discover_meter(HardwareIO(tmp_path))


def test_every_zone_is_labelled_and_the_source_states_its_update_and_resolution(tmp_path):
    """package-N, dram (subzones named by their `name` file), core and psys all get a zone label; psys (the whole
    platform, a top-level zone) is reported but never added into the package total."""
    from actuators.power.source import EnergySource

    two_packages(tmp_path)
    meter = rapl.discover_meter(HardwareIO(tmp_path))
    assert isinstance(meter, EnergySource)
    info = meter.info
    assert info.source == "rapl" and info.zones == ("package-0", "dram", "core", "package-1", "psys")
    assert info.update_period_s == pytest.approx(0.001)
    assert info.resolution == pytest.approx(1e-6) and info.resolution_unit == "J"
    assert [c.zone for c in meter.counters if c.package] == ["package-0", "package-1"]
    meter.begin()
    assert meter.end().updates is None  # RAPL updates every ms: a window never waits for it
