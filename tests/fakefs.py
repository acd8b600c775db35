"""Test helpers over fake sysfs/devfs/procfs trees (the tree builders are `actuators.fakehw.tree`, re-exported).

MSR files are regular (sparse) files. The kernel's msr device takes offset = register and moves 8 bytes;
in a plain file adjacent registers (PERF_STATUS 0x198 / PERF_CTL 0x199) would overlap, so
`msr_device_semantics` makes `actuators.linux.msr`'s pread/pwrite store register R at byte 8*R of a fake file.
A register never written reads back short, which `actuators.linux.msr` reports like the kernel's EIO for an
unimplemented register. `FakeNic` is a mocked ethtool ioctl layer.
"""

from __future__ import annotations

import errno
import json
import os
import struct
import threading
from dataclasses import dataclass, field
from pathlib import Path

from actuators.fakehw.kit import IFACE
from actuators.fakehw.nic import nic_path
from actuators.fakehw.tree import (  # noqa: F401  (re-exported: the builders live in the product's kit)
    advance_zone,
    cpu_online,
    cpufreq,
    cpuidle,
    cpuinfo,
    net_iface,
    powercap_zone,
    proc_status,
    write,
)
from actuators.linux import hwio
from actuators.linux.rapl import EnergyCounter, EnergyMeter
from actuators.sensors import LatencyWindow
from core.errors import HostError

MSR_FILE_BYTES = 0x1000
STRIDE = 8


def msr_device_semantics(monkeypatch) -> None:
    """Register R of a fake `.../msr` file lives at byte 8*R (see module doc)."""
    import actuators.linux.msr as msr_mod

    def fake(fd: int) -> bool:
        target = os.readlink(f"/proc/self/fd/{fd}")
        return target.endswith("/msr") and not target.startswith("/dev/")

    def pread(fd, n, off):
        if fake(fd):
            data = os.pread(fd, n, off * STRIDE)
            return data if data != bytes(len(data)) or _written(fd, off) else b""
        return os.pread(fd, n, off)

    def pwrite(fd, data, off):
        if fake(fd):
            _mark(fd, off)
            return os.pwrite(fd, data, off * STRIDE)
        return os.pwrite(fd, data, off)

    monkeypatch.setattr(msr_mod, "_pread", pread)
    monkeypatch.setattr(msr_mod, "_pwrite", pwrite)


def _index_path(fd: int) -> Path:
    return Path(os.readlink(f"/proc/self/fd/{fd}") + ".regs")


def _written(fd: int, reg: int) -> bool:
    p = _index_path(fd)
    return p.exists() and str(reg) in p.read_text().split()


def _mark(fd: int, reg: int) -> None:
    p = _index_path(fd)
    if not _written(fd, reg):
        with open(p, "a") as f:
            f.write(f"{reg}\n")


def msr_files(root: Path, ncpus: int, regs: dict[int, int] | None = None, size: int = MSR_FILE_BYTES) -> None:
    """`/dev/cpu/N/msr` for N < ncpus, with `regs` pre-written on every CPU."""
    for cpu in range(ncpus):
        path = root / "dev/cpu" / str(cpu) / "msr"
        path.parent.mkdir(parents=True, exist_ok=True)
        with open(path, "wb") as f:
            f.truncate(size)
        for reg, value in (regs or {}).items():
            set_msr(root, cpu, reg, value)


def set_msr(root: Path, cpu: int, reg: int, value: int) -> None:
    path = root / "dev/cpu" / str(cpu) / "msr"
    fd = os.open(path, os.O_WRONLY)
    try:
        os.pwrite(fd, struct.pack("<Q", value), reg * STRIDE)
        _mark(fd, reg)
    finally:
        os.close(fd)


def get_msr(root: Path, cpu: int, reg: int) -> int:
    fd = os.open(root / "dev/cpu" / str(cpu) / "msr", os.O_RDONLY)
    try:
        return struct.unpack("<Q", os.pread(fd, 8, reg * STRIDE))[0]
    finally:
        os.close(fd)


def cpuid_only(root: Path, ncpus: int) -> None:
    """`/dev/cpu/N/` without `msr` (module not loaded)."""
    for cpu in range(ncpus):
        write(root / "dev/cpu" / str(cpu) / "cpuid", "")


def proc_modules(root: Path, modules: list[str]) -> None:
    write(root / "proc/modules", "\n".join(f"{m} 16384 0 - Live 0x0000000000000000" for m in modules))


@dataclass
class FakeNic:
    """A mocked ethtool ioctl layer: per-interface coalescing dicts, LRO flags, injectable failures.

    `fail_set` maps ifname -> errno raised by set_coalesce; `unsupported` ifnames raise EOPNOTSUPP on
    every call; `rounds` maps a requested rx-usecs to the value the "driver" stores instead.
    """

    coalesce: dict[str, dict[str, int]] = field(default_factory=dict)
    lro: dict[str, bool] = field(default_factory=dict)
    fail_set: dict[str, int] = field(default_factory=dict)
    unsupported: set[str] = field(default_factory=set)
    rounds: dict[int, int] = field(default_factory=dict)
    set_calls: list[tuple[str, dict[str, int]]] = field(default_factory=list)

    def add(self, ifname: str, rx_usecs: int = 1, adaptive: int = 0, lro: bool = False) -> None:
        self.coalesce[ifname] = {
            "rx_coalesce_usecs": rx_usecs,
            "use_adaptive_rx_coalesce": adaptive,
            "rx_max_coalesced_frames": 0,
            "tx_coalesce_usecs": 0,
        }
        self.lro[ifname] = lro

    def _check(self, ifname: str) -> None:
        if ifname in self.unsupported:
            raise OSError(errno.EOPNOTSUPP, "Operation not supported")
        if ifname not in self.coalesce:
            raise OSError(errno.ENODEV, "No such device")

    def get_coalesce(self, ifname: str) -> dict[str, int]:
        self._check(ifname)
        return dict(self.coalesce[ifname])

    def set_coalesce(self, ifname: str, values: dict[str, int]) -> None:
        self._check(ifname)
        self.set_calls.append((ifname, dict(values)))
        if ifname in self.fail_set:
            raise OSError(self.fail_set[ifname], os.strerror(self.fail_set[ifname]))
        self.coalesce[ifname].update(values)
        usecs = self.coalesce[ifname]["rx_coalesce_usecs"]
        self.coalesce[ifname]["rx_coalesce_usecs"] = self.rounds.get(usecs, usecs)

    def lro_enabled(self, ifname: str) -> bool:
        self._check(ifname)
        return self.lro[ifname]


def guard_writes(monkeypatch, tmp_path: Path) -> None:
    """Make any sysfs or MSR write outside `tmp_path` fail the test (defence against a wrong root), and
    give fake MSR files device semantics."""
    msr_device_semantics(monkeypatch)
    real_text, real_msr = hwio.HardwareIO._write_text, hwio.write_msr
    base = str(tmp_path.resolve())

    def text(self, path, value):
        assert str(Path(path).resolve()).startswith(base), f"write outside the fake root: {path}"
        return real_text(self, path, value)

    def msr(root, cpu, reg, value):
        assert str(Path(root).resolve()).startswith(base), f"MSR write outside the fake root: {root}"
        return real_msr(root, cpu, reg, value)

    monkeypatch.setattr(hwio.HardwareIO, "_write_text", text)
    monkeypatch.setattr(hwio, "write_msr", msr)

    def no_real_ioctl(*_a, **_k):
        raise AssertionError("a test reached pyroute2's real SCOALESCE")

    import pyroute2.ethtool.ioctl as ioctl_mod

    monkeypatch.setattr(ioctl_mod.IoctlEthtool, "set_coalesce", no_real_ioctl)


class StatusFollowsCtl(hwio.HardwareIO):
    """A HardwareIO whose fake CPU copies the PERF_CTL ratio into PERF_STATUS on write (like hardware),
    except on CPUs in `stuck` (a power limit holding them)."""

    stuck: frozenset[int] = frozenset()

    def apply(self, setting: hwio.Setting) -> None:
        super().apply(setting)
        if (
            setting.kind == hwio.MSR
            and setting.reg == 0x199
            and not self.dry_run
            and int(setting.target) not in self.stuck
        ):
            set_msr(self.root, int(setting.target), 0x198, setting.value & 0xFF00)


class KernelLikeIO(StatusFollowsCtl):
    """Also reads `scaling_setspeed` as the kernel shows it: `<unsupported>` unless the governor is
    userspace."""

    def read_text(self, rel: str) -> str:
        if rel.endswith("/scaling_setspeed"):
            governor = super().read_text(rel.replace("scaling_setspeed", "scaling_governor"))
            if governor != "userspace":
                return "<unsupported>"
        return super().read_text(rel)


class FakeQps:
    """A request counter growing at `rate` per second of `clock`."""

    def __init__(self, clock, rate):
        self.clock, self.rate = clock, rate

    def total_requests(self):
        return self.rate * self.clock()


class FakeLatency:
    """A latency source that returns one fixed window of `requests` requests."""

    def __init__(self, requests: int = 42):
        self.begun = threading.Event()
        self.ended = 0
        self.requests = requests

    def begin(self):
        self.begun.set()

    def end(self):
        self.ended += 1
        return LatencyWindow(self.requests, {99.0: 120.0}, {99.0: (100.0, 150.0)})

    def close(self):
        pass


def power_meter(clock, watts):
    """An `EnergyMeter` over one fake powercap-style counter drawing `watts`."""
    unit = 1e-6
    counter = EnergyCounter("package-0", True, 1 << 40, unit, lambda: int(clock() * watts / unit) % (1 << 40), "fake")
    return EnergyMeter([counter], 400.0, clock)


def realhost_tree(root: Path, ncpu: int, ctl0: int, extra_ifaces: tuple[str, ...] = ()) -> FakeNic:
    """A fake Sandy Bridge host under `root`: `ncpu` CPUs with MSRs (no HWP, PERF_CTL = `ctl0`), cpufreq
    (ondemand), one RAPL package zone and an ixgbe `eth1` (rx-usecs 1); returns its mocked NIC layer."""
    from actuators.linux.dvfs import IA32_PERF_CTL, IA32_PERF_STATUS, IA32_PM_ENABLE, MSR_PLATFORM_INFO

    cpu_online(root, ncpu)
    msr_files(
        root,
        ncpu,
        {MSR_PLATFORM_INFO: (12 << 40) | (29 << 8), IA32_PM_ENABLE: 0, IA32_PERF_CTL: ctl0, IA32_PERF_STATUS: ctl0},
    )
    cpufreq(root, ncpu, governor="ondemand")
    powercap_zone(root, "package-0", "intel-rapl:0", 0, 262_143_328_850, max_power_uw=150_000_000)
    net_iface(root, "eth1", "ixgbe")
    for name in extra_ifaces:
        net_iface(root, name, None)
    nic = FakeNic()
    nic.add("eth1", rx_usecs=1)
    return nic


def kit_knobs(root: Path) -> dict[str, object]:
    """The kit's knobs by file: every CPU's governor (its `scaling_setspeed` only under userspace, where it means
    something -- the kernel shows `<unsupported>` otherwise) and the NIC's whole state."""
    out: dict[str, object] = {}
    for gov in sorted((root / "sys/devices/system/cpu").glob("cpu[0-9]*/cpufreq/scaling_governor")):
        out[str(gov.relative_to(root))] = name = gov.read_text().strip()
        if name == "userspace":
            out[str(gov.with_name("scaling_setspeed").relative_to(root))] = gov.with_name(
                "scaling_setspeed"
            ).read_text()
    out[IFACE] = json.loads(nic_path(root, IFACE).read_text())
    return out


class PstateKernelIO(hwio.HardwareIO):
    """A HardwareIO whose fake intel_pstate/amd-pstate in active mode acts like the kernel (before freq-QoS) on
    the policy limits: a `scaling_min_freq` above the current maximum or a `scaling_max_freq` below the current
    minimum is refused with EINVAL, and `scaling_cur_freq` follows the window (a busy core at its top, `stuck`
    cores held where they are by a power limit). `writes` lists every sysfs write, in order."""

    stuck: frozenset[int] = frozenset()

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.writes: list[tuple[str, str]] = []

    def apply(self, setting: hwio.Setting) -> None:
        name = setting.target.rsplit("/", 1)[-1]
        if setting.kind == hwio.SYSFS and name in ("scaling_min_freq", "scaling_max_freq") and not self.dry_run:
            d = setting.target.rsplit("/", 1)[0]
            lo, hi = (int(self.read_text(f"{d}/{a}")) for a in ("scaling_min_freq", "scaling_max_freq"))
            new = int(setting.value)
            if (name == "scaling_min_freq" and new > hi) or (name == "scaling_max_freq" and new < lo):
                raise HostError(f"kernel refused {setting.value!r} for {self.path(setting.target)} (EINVAL)")
        super().apply(setting)
        if setting.kind == hwio.SYSFS:
            self.writes.append((setting.target, str(setting.value)))
            if name in ("scaling_min_freq", "scaling_max_freq") and not self.dry_run:
                d = setting.target.rsplit("/", 1)[0]
                if int(d.split("/")[-2].removeprefix("cpu")) not in self.stuck:
                    write(self.path(f"{d}/scaling_cur_freq"), self.read_text(f"{d}/scaling_max_freq"))


class HwpFollowsRequest(hwio.HardwareIO):
    """A HardwareIO whose fake HWP CPU runs at the level it is asked (IA32_HWP_REQUEST's desired field) and shows
    it in IA32_PERF_STATUS bits 15:8 (100 MHz levels), except on `stuck` CPUs."""

    stuck: frozenset[int] = frozenset()

    def apply(self, setting: hwio.Setting) -> None:
        super().apply(setting)
        if setting.kind == hwio.MSR and setting.reg == 0x774 and not self.dry_run:
            cpu = int(setting.target)
            if cpu not in self.stuck:
                set_msr(self.root, cpu, 0x198, ((setting.value >> 16) & 0xFF) << 8)


HWP_CAPS = 35 | (29 << 8) | (8 << 16) | (12 << 24)  # highest 3.5, guaranteed 2.9, most efficient 0.8, lowest 1.2 GHz
HWP_BOOT_REQUEST = (
    (0x2A << 32) | (0x80 << 24) | 35 << 8 | 12
)  # intel_pstate's under powersave: min 12, max 35, EPP 0x80


def hwp_host(
    root: Path, ncpus: int = 2, request: int = HWP_BOOT_REQUEST, caps: int = HWP_CAPS, enabled: int = 1
) -> None:
    """CPUs with HWP (`enabled`) and its MSRs -- capabilities, request, PERF_STATUS at the top, APERF/MPERF -- and
    no cpufreq directory (no driver manages HWP)."""
    cpu_online(root, ncpus)
    msr_files(
        root,
        ncpus,
        {0x770: enabled, 0x771: caps, 0x774: request, 0x198: 35 << 8, 0xE8: 0, 0xE7: 0},
    )
