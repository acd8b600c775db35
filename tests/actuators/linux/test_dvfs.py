"""DVFS backends against fake sysfs/devfs trees: MSR (PERF_CTL/PERF_STATUS/HWP) and cpufreq."""

from __future__ import annotations

import errno

import pytest

from actuators.linux import dvfs, hwio
from actuators.linux.dvfs import IA32_PERF_CTL, IA32_PERF_STATUS, IA32_PM_ENABLE, MSR_PLATFORM_INFO
from actuators.linux.hwio import HardwareIO, Transaction
from actuators.linux.originals import OriginalsStore, restore_originals
from core.errors import HostError, KnobRangeError
from tests import fakefs

PLATFORM = (12 << 40) | (29 << 8)  # max efficiency 1.2 GHz, max non-turbo 2.9 GHz
CPUFREQ = "sys/devices/system/cpu/cpu{}/cpufreq/{}"


@pytest.fixture(autouse=True)
def _guard(monkeypatch, tmp_path):
    fakefs.guard_writes(monkeypatch, tmp_path)


def msr_host(root, ncpus=4, hwp=False, ctl_ratio=20, cpufreq=True):
    fakefs.cpu_online(root, ncpus)
    fakefs.msr_files(
        root,
        ncpus,
        {
            MSR_PLATFORM_INFO: PLATFORM,
            IA32_PM_ENABLE: int(hwp),
            IA32_PERF_CTL: (1 << 32) | (ctl_ratio << 8),
            IA32_PERF_STATUS: ctl_ratio << 8,
        },
    )
    if cpufreq:
        fakefs.cpufreq(root, ncpus, governor="ondemand")


def apply(io, store, backend, ghz):
    with Transaction(io, store) as txn:
        for s in backend.plan(ghz):
            txn.write(s)
        return backend.verify(ghz)


def test_ratio_bits():
    assert dvfs.ratio_of(0x1_0000_1D00) == 29
    assert dvfs.with_ratio(0x1_0000_1D00, 18) == 0x1_0000_1200  # turbo-disengage bit 32 kept
    assert dvfs.ghz_to_ratio(2.4) == 24 and dvfs.ratio_to_ghz(24) == 2.4
    assert dvfs.parse_cpu_list("0-2,5") == (0, 1, 2, 5)
    with pytest.raises(ValueError):
        dvfs.parse_cpu_list("3-1")


def test_msr_sets_all_cores_governor_first_and_restores(tmp_path):
    msr_host(tmp_path)
    io = fakefs.StatusFollowsCtl(tmp_path)
    store = OriginalsStore(tmp_path / "state", tmp_path)
    backend = dvfs.choose_backend(io, None, "msr")
    assert backend.frequencies()[0] == 1.2 and backend.frequencies()[-1] == 2.9
    assert backend.current() is None  # ondemand governor in charge
    assert apply(io, store, backend, 2.4) == []
    for cpu in range(4):
        assert fakefs.get_msr(tmp_path, cpu, IA32_PERF_CTL) == (1 << 32) | (24 << 8)
        assert (tmp_path / CPUFREQ.format(cpu, "scaling_governor")).read_text() == "userspace"
    assert backend.current() == 2.4
    kinds = [e.kind for e in store.entries()]
    assert kinds == ["sysfs"] * 4 + ["msr"] * 4  # governors saved (and written) before PERF_CTL
    restore_originals(io, store)
    for cpu in range(4):
        assert fakefs.get_msr(tmp_path, cpu, IA32_PERF_CTL) == (1 << 32) | (20 << 8)
        assert (tmp_path / CPUFREQ.format(cpu, "scaling_governor")).read_text().strip() == "ondemand"
    assert not store.path.exists()


def test_msr_perf_status_mismatch_is_a_warning(tmp_path):
    msr_host(tmp_path, ncpus=2)
    io = fakefs.StatusFollowsCtl(tmp_path)
    io.stuck = frozenset({1})
    backend = dvfs.MsrBackend(io, (0, 1), settle_s=0.01)
    warnings = apply(io, OriginalsStore(tmp_path / "s", tmp_path), backend, 1.8)
    assert len(warnings) == 1 and "CPU 1 runs at 2 GHz" in warnings[0]


def test_hwp_refused_with_explanation_and_nothing_written(tmp_path):
    msr_host(tmp_path, hwp=True)
    io = HardwareIO(tmp_path)
    with pytest.raises(HostError, match=r"HWP is enabled .*intel_pstate=no_hwp"):
        dvfs.choose_backend(io, None, "msr")
    backend = dvfs.MsrBackend(io, (0, 1, 2, 3))
    with pytest.raises(HostError, match="HWP"):
        backend.plan(2.0)
    assert fakefs.get_msr(tmp_path, 0, IA32_PERF_CTL) == (1 << 32) | (20 << 8)
    assert (tmp_path / CPUFREQ.format(0, "scaling_governor")).read_text().strip() == "ondemand"


def test_missing_msr_module(tmp_path):
    fakefs.cpu_online(tmp_path, 2)
    fakefs.cpuid_only(tmp_path, 2)
    fakefs.cpufreq(tmp_path, 2)
    with pytest.raises(HostError, match=r"msr module not loaded: .*dev/cpu/0/msr is missing \(run `modprobe msr`\)"):
        dvfs.choose_backend(HardwareIO(tmp_path), None, "msr")
    with pytest.raises(HostError, match=r"^msr module not loaded"):
        dvfs.MsrBackend(HardwareIO(tmp_path), (0, 1)).plan(2.0)
    assert all((tmp_path / CPUFREQ.format(c, "scaling_governor")).read_text().strip() == "ondemand" for c in (0, 1))


def test_out_of_range_refused_before_hardware(tmp_path):
    msr_host(tmp_path)
    io = HardwareIO(tmp_path)
    backend = dvfs.MsrBackend(io, (0, 1, 2, 3))
    with pytest.raises(KnobRangeError, match=r"DVFS 3.5 GHz is not available"):
        backend.plan(3.5)
    assert fakefs.get_msr(tmp_path, 3, IA32_PERF_CTL) == (1 << 32) | (20 << 8)


def test_failure_on_core_5_rolls_back_cores_0_to_4(tmp_path, monkeypatch):
    msr_host(tmp_path, ncpus=8)
    io = fakefs.StatusFollowsCtl(tmp_path)
    store = OriginalsStore(tmp_path / "state", tmp_path)
    backend = dvfs.MsrBackend(io, tuple(range(8)))
    real = hwio.write_msr

    def flaky(root, cpu, reg, value):
        if cpu == 5 and reg == IA32_PERF_CTL and (value >> 8) & 0xFF == 24:
            raise HostError("permission denied writing MSR 0x199 on CPU 5: needs CAP_SYS_RAWIO")
        return real(root, cpu, reg, value)

    monkeypatch.setattr(hwio, "write_msr", flaky)
    with pytest.raises(HostError, match="permission denied writing MSR 0x199 on CPU 5"):
        apply(io, store, backend, 2.4)
    for cpu in range(8):
        assert fakefs.get_msr(tmp_path, cpu, IA32_PERF_CTL) == (1 << 32) | (20 << 8), cpu
        assert (tmp_path / CPUFREQ.format(cpu, "scaling_governor")).read_text().strip() == "ondemand"


def test_permission_denied_opening_msr(tmp_path, monkeypatch):
    msr_host(tmp_path, ncpus=1, cpufreq=False)
    import actuators.linux.msr as msr_mod

    real_open = msr_mod.os.open

    def denied(path, flags, *a):
        if str(path).endswith("/msr"):
            raise PermissionError(errno.EACCES, "Permission denied")
        return real_open(path, flags, *a)

    monkeypatch.setattr(msr_mod.os, "open", denied)
    with pytest.raises(HostError, match=r"permission denied opening .*msr: needs root with CAP_SYS_RAWIO"):
        dvfs.MsrBackend(HardwareIO(tmp_path), (0,)).preflight()


def test_cpufreq_available_list_and_setspeed(tmp_path):
    fakefs.cpu_online(tmp_path, 2)
    fakefs.cpufreq(
        tmp_path,
        2,
        governor="schedutil",
        governors="performance schedutil userspace",
        available_khz=[2_900_000, 2_400_000, 1_800_000, 1_200_000],
    )
    io = fakefs.KernelLikeIO(tmp_path)
    store = OriginalsStore(tmp_path / "state", tmp_path)
    backend = dvfs.choose_backend(io, None, "auto")
    assert backend.name == "cpufreq"
    assert backend.frequencies() == (1.2, 1.8, 2.4, 2.9)
    with pytest.raises(KnobRangeError):
        backend.plan(2.0)
    apply(io, store, backend, 1.8)
    assert (tmp_path / CPUFREQ.format(1, "scaling_setspeed")).read_text() == "1800000"
    assert backend.current() == 1.8
    assert [e.target.rsplit("/", 1)[1] for e in store.entries()] == ["scaling_governor"] * 2  # no "<unsupported>"
    restore_originals(io, store)
    assert (tmp_path / CPUFREQ.format(1, "scaling_governor")).read_text().strip() == "schedutil"
    assert backend.current() is None


def test_cpufreq_min_max_steps_and_intel_pstate_active(tmp_path):
    fakefs.cpu_online(tmp_path, 1)
    fakefs.cpufreq(
        tmp_path,
        1,
        driver="intel_pstate",
        governors="performance powersave",
        min_khz=800_000,
        max_khz=1_200_000,
        pstate_status="active",
    )
    io = HardwareIO(tmp_path)
    backend = dvfs.CpufreqBackend(io, (0,))
    assert backend.frequencies() == (0.8, 0.9, 1.0, 1.1, 1.2)
    with pytest.raises(HostError, match="intel_pstate is in active mode.*passive"):
        backend.preflight()
    (tmp_path / "sys/devices/system/cpu/intel_pstate/status").write_text("passive\n")
    with pytest.raises(HostError, match="no userspace governor"):
        backend.preflight()


def test_cpufreq_write_rejected_leaves_nothing_changed(tmp_path, monkeypatch):
    fakefs.cpu_online(tmp_path, 3)
    fakefs.cpufreq(tmp_path, 3, available_khz=[2_000_000, 1_500_000])
    io = fakefs.KernelLikeIO(tmp_path)
    store = OriginalsStore(tmp_path / "state", tmp_path)
    real = HardwareIO._write_text

    def einval(self, path, text):
        if path.name == "scaling_setspeed" and "cpu2" in str(path):
            raise HostError(f"kernel refused {text!r} for {path} (EINVAL)")
        return real(self, path, text)

    monkeypatch.setattr(HardwareIO, "_write_text", einval)
    with pytest.raises(HostError, match="EINVAL"):
        apply(io, store, dvfs.CpufreqBackend(io, (0, 1, 2)), 1.5)
    for cpu in range(3):
        assert io.read_text(CPUFREQ.format(cpu, "scaling_governor")) == "ondemand"
        assert io.read_text(CPUFREQ.format(cpu, "scaling_setspeed")) == "<unsupported>"
    assert not store.path.exists()


def test_auto_explains_when_nothing_works(tmp_path):
    fakefs.cpu_online(tmp_path, 1)
    fakefs.cpuid_only(tmp_path, 1)
    with pytest.raises(HostError, match=r"no DVFS backend works here -- cpufreq: .* \| msr: msr module not loaded"):
        dvfs.choose_backend(HardwareIO(tmp_path))


def test_cpufreq_userspace_original_setspeed_is_restored(tmp_path):
    fakefs.cpu_online(tmp_path, 1)
    fakefs.cpufreq(tmp_path, 1, governor="userspace", available_khz=[2_000_000, 1_500_000])
    (tmp_path / CPUFREQ.format(0, "scaling_setspeed")).write_text("2000000\n")
    io = fakefs.KernelLikeIO(tmp_path)
    store = OriginalsStore(tmp_path / "state", tmp_path)
    apply(io, store, dvfs.CpufreqBackend(io, (0,)), 1.5)
    assert [(e.target.rsplit("/", 1)[1], e.value) for e in store.entries()] == [("scaling_setspeed", "2000000")]
    restore_originals(io, store)
    assert io.read_text(CPUFREQ.format(0, "scaling_setspeed")) == "2000000"
