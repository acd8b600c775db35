"""The `hwp` backend (IA32_HWP_REQUEST min = max = desired) over fake MSR files: levels and scale from the
capabilities, other fields and package control, originals, refusals before any write, read-back."""

from __future__ import annotations

import pytest

from actuators.linux import dvfs, hwp
from actuators.linux.hwio import Transaction
from actuators.linux.hwp import IA32_APERF, IA32_HWP_CAPABILITIES, IA32_HWP_REQUEST, IA32_MPERF, HwpBackend
from actuators.linux.originals import OriginalsStore, restore_originals
from core.errors import HostError, KnobRangeError
from tests import fakefs

CAPS, BOOT_REQUEST = fakefs.HWP_CAPS, fakefs.HWP_BOOT_REQUEST
EPP, WINDOW = 0x80 << 24, 0x2A << 32
hwp_host = fakefs.hwp_host


@pytest.fixture(autouse=True)
def _guard(monkeypatch, tmp_path):
    fakefs.guard_writes(monkeypatch, tmp_path)


def pin(io, store, backend, ghz):
    with Transaction(io, store) as txn:
        for s in backend.plan(ghz):
            txn.write(s)
        return backend.verify(ghz)


def requests(root, ncpus=2):
    return [fakefs.get_msr(root, cpu, IA32_HWP_REQUEST) for cpu in range(ncpus)]


def test_fields_and_package_control():
    assert hwp.capabilities(CAPS) == (35, 29, 8, 12)
    pinned = hwp.pinned_request(BOOT_REQUEST | hwp.PACKAGE_CONTROL, 20)
    assert hwp.request_fields(pinned) == (20, 20, 20, 0x80)  # EPP kept
    assert pinned & ~0xFFFFFFFF == WINDOW  # activity window kept, package control (bit 42) cleared


def test_auto_chooses_hwp_without_cpufreq_and_pins_every_core_then_restores(tmp_path):
    hwp_host(tmp_path, request=BOOT_REQUEST | hwp.PACKAGE_CONTROL)
    io = fakefs.HwpFollowsRequest(tmp_path)
    store = OriginalsStore(tmp_path / "state", tmp_path)
    backend = dvfs.choose_backend(io, None, "auto")
    assert backend.name == "hwp"  # HWP on: no PERF_CTL; no cpufreq: no minmax
    assert backend.frequencies()[0] == 1.2 and backend.frequencies()[-1] == 2.9  # lowest .. guaranteed, 100 MHz
    assert backend.current() is None
    assert pin(io, store, backend, 2.0) == []
    assert requests(tmp_path) == [hwp.pinned_request(BOOT_REQUEST, 20)] * 2
    assert backend.current() == 2.0
    assert pin(io, store, backend, 1.4) == []
    assert [e.value for e in store.entries()] == [BOOT_REQUEST | hwp.PACKAGE_CONTROL] * 2  # first value wins
    restore_originals(io, store)
    assert requests(tmp_path) == [BOOT_REQUEST | hwp.PACKAGE_CONTROL] * 2 and not store.path.exists()


@pytest.mark.parametrize("ghz", [3.0, 3.5, 1.1, 2.05])
def test_out_of_range_refused_before_any_write(tmp_path, ghz):
    hwp_host(tmp_path)
    io = fakefs.HwpFollowsRequest(tmp_path)
    store = OriginalsStore(tmp_path / "state", tmp_path)
    with pytest.raises(KnobRangeError, match=r"not available \(hwp\): expected one of 1.2, 1.3"):
        pin(io, store, HwpBackend(io, (0, 1)), ghz)
    assert requests(tmp_path) == [BOOT_REQUEST] * 2 and not store.path.exists()


def test_refusals_hwp_off_dynamic_boost_and_mixed_cores(tmp_path):
    hwp_host(tmp_path / "off", enabled=0)
    with pytest.raises(HostError, match="HWP is off .* the msr backend"):
        HwpBackend(fakefs.HwpFollowsRequest(tmp_path / "off"), (0, 1)).preflight()
    hwp_host(tmp_path / "boost")
    fakefs.write(tmp_path / "boost/sys/devices/system/cpu/intel_pstate/hwp_dynamic_boost", "1")
    with pytest.raises(HostError, match="hwp_dynamic_boost is on"):
        HwpBackend(fakefs.HwpFollowsRequest(tmp_path / "boost"), (0, 1)).preflight()
    hwp_host(tmp_path / "hybrid")
    fakefs.set_msr(tmp_path / "hybrid", 1, IA32_HWP_CAPABILITIES, CAPS + 10)
    with pytest.raises(HostError, match="differ in IA32_HWP_CAPABILITIES"):
        HwpBackend(fakefs.HwpFollowsRequest(tmp_path / "hybrid"), (0, 1)).preflight()


def test_level_scale_from_cpufreq_on_a_hybrid_part(tmp_path):
    hwp_host(tmp_path)  # a P-core: 78,741 kHz per level, base_frequency = guaranteed x that
    fakefs.write(tmp_path / "sys/devices/system/cpu/cpu0/cpufreq/base_frequency", str(29 * 78_741))
    backend = HwpBackend(fakefs.HwpFollowsRequest(tmp_path), (0, 1))
    assert backend.frequencies()[0] == round(12 * 78_741 / 1e6, 3) and backend.level_of(backend.frequencies()[-1]) == 29


def test_request_that_does_not_read_back_is_an_error_and_undone(tmp_path):
    hwp_host(tmp_path)

    class Clamping(fakefs.HwpFollowsRequest):
        """A CPU that clamps a pinned request's maximum to 25 (a platform limit)."""

        def apply(self, setting):
            super().apply(setting)
            if setting.reg == IA32_HWP_REQUEST and (setting.value >> 8) & 0xFF > 25 and (setting.value >> 16) & 0xFF:
                fakefs.set_msr(self.root, int(setting.target), IA32_HWP_REQUEST, (setting.value & ~0xFF00) | 25 << 8)

    io = Clamping(tmp_path)
    store = OriginalsStore(tmp_path / "state", tmp_path)
    with pytest.raises(HostError, match=r"^CPU 0 reads back IA32_HWP_REQUEST .* \(min 28, max 25, desired 28\)"):
        pin(io, store, HwpBackend(io, (0, 1), settle_s=0), 2.8)
    assert requests(tmp_path) == [BOOT_REQUEST] * 2 and not store.path.exists()


def test_running_frequency_from_perf_status_and_from_aperf_mperf(tmp_path):
    hwp_host(tmp_path)
    io = fakefs.HwpFollowsRequest(tmp_path)
    io.stuck = frozenset({1})
    warnings = pin(io, OriginalsStore(tmp_path / "state", tmp_path), HwpBackend(io, (0, 1), settle_s=0), 1.8)
    assert len(warnings) == 1 and warnings[0].startswith("CPU 1 runs at 3.50 GHz (IA32_PERF_STATUS)")

    class Counting(fakefs.HwpFollowsRequest):
        """APERF/MPERF that advance: 62 actual cycles per 100 at base (2.9 GHz) -> 1.8 GHz."""

        def read_msr(self, cpu, reg):
            if reg in (IA32_APERF, IA32_MPERF):
                value = super().read_msr(cpu, reg) + (62 if reg == IA32_APERF else 100)
                fakefs.set_msr(self.root, cpu, reg, value)
                return value
            return super().read_msr(cpu, reg)

    counting = Counting(tmp_path)
    running = HwpBackend(counting, (0, 1), settle_s=0).running_ghz()
    assert {cpu: (round(f, 2), how) for cpu, (f, how) in running.items()} == {
        0: (1.8, "APERF/MPERF"),
        1: (1.8, "APERF/MPERF"),
    }
