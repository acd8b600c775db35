"""The `minmax` backend over fake trees of intel_pstate (HWP) and amd-pstate (EPP) in active mode, as the kernel boots
them: chosen by `auto`, pinning order, originals saved and restored, refusals before any write, read-back."""

from __future__ import annotations

import pytest

from actuators.fakehw import tree
from actuators.linux import dvfs
from actuators.linux.dvfs_active import MinMaxBackend
from actuators.linux.hwio import Transaction
from actuators.linux.originals import OriginalsStore, restore_originals
from core.errors import HostError, KnobRangeError
from tests import fakefs

F = "sys/devices/system/cpu/cpu{}/cpufreq/{}"
BOOT = {"scaling_min_freq": "1200000", "scaling_max_freq": "3500000"}


@pytest.fixture(autouse=True)
def _guard(monkeypatch, tmp_path):
    fakefs.guard_writes(monkeypatch, tmp_path)


def intel_active(root, ncpus=2):
    fakefs.cpu_online(root, ncpus)
    tree.active_pstate(
        root, ncpus, driver="intel_pstate", status_dir="intel_pstate", min_khz=1_200_000, max_khz=3_500_000,
        base_khz=2_900_000,
    )  # fmt: skip


def amd_active(root, ncpus=2):
    fakefs.cpu_online(root, ncpus)
    tree.active_pstate(
        root, ncpus, driver="amd-pstate-epp", status_dir="amd_pstate", min_khz=1_200_000, max_khz=3_000_000
    )


def read(root, cpu, attr):
    return (root / F.format(cpu, attr)).read_text().strip()


def pin(io, store, backend, ghz):
    with Transaction(io, store) as txn:
        for s in backend.plan(ghz):
            txn.write(s)
        return backend.verify(ghz)


@pytest.mark.parametrize("make", [intel_active, amd_active])
def test_auto_chooses_minmax_on_the_kernels_default_and_names_the_grid(tmp_path, make):
    make(tmp_path)
    backend = dvfs.choose_backend(fakefs.PstateKernelIO(tmp_path), None, "auto")
    assert backend.name == "minmax" and backend.cores == (0, 1)
    top = 2.9 if make is intel_active else 3.0  # intel: base_frequency (no turbo); amd: cpuinfo_max_freq
    assert backend.frequencies()[0] == 1.2 and backend.frequencies()[-1] == top
    assert backend.current() is None  # a window: the driver chooses


def test_pin_down_then_up_in_the_order_the_kernel_accepts_and_restore(tmp_path):
    intel_active(tmp_path)
    io = fakefs.PstateKernelIO(tmp_path)
    store = OriginalsStore(tmp_path / "state", tmp_path)
    backend = MinMaxBackend(io, (0, 1), settle_s=0)
    assert pin(io, store, backend, 2.0) == []
    names = [t.rsplit("/", 1)[1] for t, _ in io.writes]
    assert names == ["scaling_max_freq", "scaling_min_freq"] * 2  # 2.0 >= boot min 1.2: the maximum first
    assert backend.current() == 2.0 and read(tmp_path, 1, "scaling_cur_freq") == "2000000"
    io.writes.clear()
    assert pin(io, store, backend, 1.5) == []  # down: the minimum first, else min 2.0 > max 1.5 for a moment
    assert [t.rsplit("/", 1)[1] for t, _ in io.writes] == ["scaling_min_freq", "scaling_max_freq"] * 2
    io.writes.clear()
    assert pin(io, store, backend, 2.9) == []
    assert [t.rsplit("/", 1)[1] for t, _ in io.writes] == ["scaling_max_freq", "scaling_min_freq"] * 2
    saved = {e.target.rsplit("/", 1)[1]: e.value for e in store.entries()}
    assert saved == BOOT and len(store.entries()) == 4  # the boot values, not the 2.0 GHz pin
    for cpu in (0, 1):  # EPP and governor are not the tuner's: untouched
        assert read(tmp_path, cpu, "energy_performance_preference") == "balance_performance"
        assert read(tmp_path, cpu, "scaling_governor") == "powersave"
    restore_originals(io, store)  # widens from 2.9/2.9: min back first, then max -- the kernel accepts both
    for cpu in (0, 1):
        assert {a: read(tmp_path, cpu, a) for a in BOOT} == BOOT
    assert not store.path.exists() and backend.current() is None


@pytest.mark.parametrize("ghz", [3.0, 3.5, 1.1, 2.05])
def test_out_of_range_refused_before_any_write(tmp_path, ghz):
    intel_active(tmp_path)
    io = fakefs.PstateKernelIO(tmp_path)
    store = OriginalsStore(tmp_path / "state", tmp_path)
    with pytest.raises(KnobRangeError, match=r"not available \(minmax\): expected one of 1.2, 1.3"):
        pin(io, store, MinMaxBackend(io, (0, 1)), ghz)
    assert io.writes == [] and not store.path.exists()


def test_limits_that_do_not_read_back_are_an_error_and_the_pin_before_is_kept(tmp_path):
    intel_active(tmp_path)

    class Rounding(fakefs.PstateKernelIO):
        """A driver that stores 2.5 GHz as its perf level below (2.4 GHz)."""

        def apply(self, setting):
            super().apply(setting)
            if setting.target.endswith("_freq") and setting.value == "2500000":
                fakefs.write(self.path(setting.target), "2400000")

    io = Rounding(tmp_path)
    store = OriginalsStore(tmp_path / "state", tmp_path)
    backend = MinMaxBackend(io, (0, 1), settle_s=0)
    assert pin(io, store, backend, 2.9) == []
    with pytest.raises(HostError, match=r"^CPU 0 reads back scaling_min_freq=2400000 scaling_max_freq=2400000 kHz"):
        pin(io, store, backend, 2.5)  # down: min 2.5 (read 2.4), then max 2.5 (read 2.4) -> mismatch
    assert backend.current() == 2.9  # the transaction put the 2.9 GHz pin back on both cores
    restore_originals(io, store)
    with pytest.raises(HostError, match=r"kernel refused '2500000' for .*cpu0/cpufreq/scaling_min_freq \(EINVAL\)"):
        pin(io, store, MinMaxBackend(io, (0, 1)), 2.5)
    for cpu in (0, 1):  # up from boot: max 2.5 stored as 2.4, then min 2.5 > 2.4 refused; all undone
        assert {a: read(tmp_path, cpu, a) for a in BOOT} == BOOT
    assert not store.path.exists()


def test_a_core_that_does_not_follow_is_a_warning_naming_it(tmp_path):
    amd_active(tmp_path)
    io = fakefs.PstateKernelIO(tmp_path)
    io.stuck = frozenset({1})
    warnings = pin(io, OriginalsStore(tmp_path / "state", tmp_path), MinMaxBackend(io, (0, 1), settle_s=0), 1.6)
    assert len(warnings) == 1 and warnings[0].startswith("CPU 1 runs at 3000000 kHz (scaling_cur_freq)")


def test_refuses_a_driver_that_is_not_in_active_mode(tmp_path):
    intel_active(tmp_path)
    fakefs.write(tmp_path / "sys/devices/system/cpu/intel_pstate/status", "passive")
    with pytest.raises(HostError, match="runs intel_pstate .not in active mode.: use the cpufreq backend"):
        MinMaxBackend(fakefs.PstateKernelIO(tmp_path), (0, 1)).preflight()
    fakefs.cpufreq(tmp_path / "acpi", 1)
    fakefs.cpu_online(tmp_path / "acpi", 1)
    assert dvfs.choose_backend(fakefs.PstateKernelIO(tmp_path / "acpi")).name == "cpufreq"  # the passive path stays
