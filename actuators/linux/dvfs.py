"""CPU frequency (DVFS): an MSR backend (IA32_PERF_CTL) and a cpufreq backend (userspace governor).

MSR: the target ratio goes in IA32_PERF_CTL (0x199) bits 15:8 (GHz = ratio x 0.1, the 100 MHz bus
clock), the running ratio is read back from IA32_PERF_STATUS (0x198). With HWP on (IA32_PM_ENABLE 0x770
bit 0) the CPU ignores PERF_CTL, so the backend refuses. Where a cpufreq governor is active it would
overwrite PERF_CTL, so the governor is set to `userspace` first. With the driver in active mode (HWP,
amd-pstate EPP) `choose_backend` falls back to the `minmax` backend (`dvfs_active`: scaling_min/max pinning)
or the `hwp` backend (`hwp`: IA32_HWP_REQUEST), which need no reboot.

cpufreq: `scaling_governor=userspace`, `scaling_setspeed` in kHz. Available frequencies come from
`scaling_available_frequencies` (acpi-cpufreq) or `cpuinfo_min_freq..cpuinfo_max_freq` in 100 MHz steps
(intel_pstate passive, amd-pstate), kept within the operator's `scaling_min/max_freq`. intel_pstate in
active mode has no userspace governor (the `minmax` backend pins it instead). AMD hosts use this backend.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass, field
from typing import Protocol

from actuators.linux.dvfs_active import MinMaxBackend
from actuators.linux.dvfs_common import CPU_DIR as CPU_DIR  # re-exported: the MSRs and paths the callers name
from actuators.linux.dvfs_common import IA32_PERF_STATUS as IA32_PERF_STATUS
from actuators.linux.dvfs_common import IA32_PM_ENABLE as IA32_PM_ENABLE
from actuators.linux.dvfs_common import check_in
from actuators.linux.dvfs_common import freq_dir as _freq_dir
from actuators.linux.hwio import MSR, SYSFS, HardwareIO, Setting
from actuators.linux.hwp import HwpBackend
from core.errors import HostError

log = logging.getLogger(__name__)

IA32_PERF_CTL = 0x199
MSR_PLATFORM_INFO = 0xCE
BUS_GHZ = 0.1
SETSPEED_TOLERANCE_KHZ = 50_000


def ratio_of(value: int) -> int:
    """The ratio field (bits 15:8) of PERF_CTL / PERF_STATUS."""
    return (value >> 8) & 0xFF


def with_ratio(perf_ctl: int, ratio: int) -> int:
    """`perf_ctl` with bits 15:8 replaced by `ratio` (other bits, e.g. turbo disengage, kept)."""
    if not 0 < ratio <= 0xFF:
        raise ValueError(f"ratio {ratio} out of 1..255")
    return (perf_ctl & ~0xFF00) | (ratio << 8)


def ghz_to_ratio(ghz: float) -> int:
    return int(round(ghz / BUS_GHZ))


def ratio_to_ghz(ratio: int) -> float:
    return round(ratio * BUS_GHZ, 1)


def parse_cpu_list(text: str) -> tuple[int, ...]:
    """Parse a kernel CPU list (`0-3,5,8-9`); raises ValueError on malformed input."""
    cpus: set[int] = set()
    for part in text.strip().split(","):
        part = part.strip()
        if not part:
            continue
        lo, sep, hi = part.partition("-")
        a, b = int(lo), int(hi) if sep else int(lo)
        if a < 0 or b < a:
            raise ValueError(f"bad CPU range {part!r}")
        cpus.update(range(a, b + 1))
    if not cpus:
        raise ValueError("empty CPU list")
    return tuple(sorted(cpus))


def online_cpus(io: HardwareIO) -> tuple[int, ...]:
    """CPUs online per `<root>/sys/devices/system/cpu/online`, else the `<root>/dev/cpu/N` directories."""
    try:
        return parse_cpu_list(io.read_text(f"{CPU_DIR}/online"))
    except (HostError, ValueError):
        pass
    devdir = io.path("dev/cpu")
    cpus = sorted(int(p.name) for p in devdir.iterdir() if p.name.isdigit()) if devdir.is_dir() else []
    if not cpus:
        raise HostError(f"cannot list CPUs: {io.path(CPU_DIR + '/online')} and {devdir} are missing")
    return tuple(cpus)


def format_cpu_list(cpus: tuple[int, ...]) -> str:
    """The kernel's compact form: (0, 1, 2, 5) -> '0-2,5'."""
    parts: list[str] = []
    for cpu in sorted(cpus):
        if parts and cpu == int(parts[-1].rpartition("-")[2]) + 1:
            parts[-1] = f"{parts[-1].partition('-')[0]}-{cpu}"
        else:
            parts.append(str(cpu))
    return ",".join(parts)


def require_online(io: HardwareIO, cores: tuple[int, ...]) -> tuple[int, ...]:
    """`cores` if every one is online, else a HostError naming the first that is not ("CPU 2 is not
    online"); when the online list cannot be read, `cores` unchanged (the backends fail on it later)."""
    try:
        online = online_cpus(io)
    except HostError:
        return cores
    offline = [c for c in cores if c not in online]
    if offline:
        raise HostError(
            f"CPU {offline[0]} is not online (online: {format_cpu_list(online)}; asked for "
            f"{format_cpu_list(cores)}): choose cores among the online CPUs"
        )
    return cores


class DvfsBackend(Protocol):
    name: str
    cores: tuple[int, ...]

    def preflight(self) -> None: ...

    def frequencies(self) -> tuple[float, ...]: ...

    def plan(self, ghz: float) -> list[Setting]: ...

    def verify(self, ghz: float) -> list[str]: ...

    def current(self) -> float | None: ...


@dataclass
class CpufreqBackend:
    """`userspace` governor + `scaling_setspeed` on each core."""

    io: HardwareIO
    cores: tuple[int, ...]
    name: str = "cpufreq"

    def _read(self, cpu: int, attr: str) -> str:
        return self.io.read_text(f"{_freq_dir(cpu)}/{attr}")

    def preflight(self) -> None:
        for cpu in self.cores:
            if not self.io.path(_freq_dir(cpu)).is_dir():
                raise HostError(
                    f"cpufreq is not available for CPU {cpu} ({self.io.path(_freq_dir(cpu))} missing): "
                    f"no cpufreq driver loaded"
                )
        driver = self._read(self.cores[0], "scaling_driver")
        status_path = f"{CPU_DIR}/intel_pstate/status"
        if (
            driver == "intel_pstate"
            and self.io.path(status_path).exists()
            and self.io.read_text(status_path) == "active"
        ):
            raise HostError(
                "intel_pstate is in active mode, which has no userspace governor: switch it to passive "
                "(echo passive > /sys/devices/system/cpu/intel_pstate/status, or boot with "
                "intel_pstate=passive)"
            )
        governors = self._read(self.cores[0], "scaling_available_governors").split()
        if "userspace" not in governors:
            raise HostError(
                f"cpufreq driver {driver} offers no userspace governor (has: {' '.join(governors)}): "
                f"load cpufreq_userspace (CONFIG_CPU_FREQ_GOV_USERSPACE)"
            )

    def frequencies(self) -> tuple[float, ...]:
        cpu = self.cores[0]
        lo_khz = int(self._read(cpu, "scaling_min_freq"))
        hi_khz = int(self._read(cpu, "scaling_max_freq"))
        if self.io.path(f"{_freq_dir(cpu)}/scaling_available_frequencies").exists():
            khz = [int(x) for x in self._read(cpu, "scaling_available_frequencies").split()]
        else:
            lo = int(self._read(cpu, "cpuinfo_min_freq"))
            hi = int(self._read(cpu, "cpuinfo_max_freq"))
            khz = list(range(-(-lo // 100_000) * 100_000, hi + 1, 100_000))
        freqs = sorted({round(k / 1e6, 3) for k in khz if lo_khz <= k <= hi_khz})
        if not freqs:
            raise HostError(
                f"CPU {cpu}: no frequency inside scaling_min_freq..scaling_max_freq ({lo_khz}..{hi_khz} kHz)"
            )
        return tuple(freqs)

    def plan(self, ghz: float) -> list[Setting]:
        ghz = check_in(ghz, self.frequencies(), "cpufreq")
        khz = str(int(round(ghz * 1e6)))
        governors = [Setting(SYSFS, f"{_freq_dir(c)}/scaling_governor", "userspace") for c in self.cores]
        speeds = [Setting(SYSFS, f"{_freq_dir(c)}/scaling_setspeed", khz) for c in self.cores]
        return governors + speeds

    def verify(self, ghz: float) -> list[str]:
        """Governor must read `userspace` and `scaling_setspeed` (the userspace governor shows policy->cur)
        must be within `SETSPEED_TOLERANCE_KHZ` of the request (drivers resolve to their own grid)."""
        khz = int(round(ghz * 1e6))
        for cpu in self.cores:
            gov, speed = self._read(cpu, "scaling_governor"), self._read(cpu, "scaling_setspeed")
            if gov != "userspace" or not speed.isdigit() or abs(int(speed) - khz) > SETSPEED_TOLERANCE_KHZ:
                raise HostError(
                    f"CPU {cpu} reads back governor={gov} setspeed={speed} kHz after setting userspace at {khz} kHz"
                )
        return []

    def current(self) -> float | None:
        speeds = set()
        for cpu in self.cores:
            if self._read(cpu, "scaling_governor") != "userspace":
                return None
            try:
                speeds.add(int(self._read(cpu, "scaling_setspeed")))
            except ValueError:
                return None
        if len(speeds) != 1:
            return None
        khz = speeds.pop()  # report the listed frequency it resolves to (see `verify`)
        nearest = min(self.frequencies(), key=lambda f: abs(f * 1e6 - khz))
        return nearest if abs(nearest * 1e6 - khz) <= SETSPEED_TOLERANCE_KHZ else round(khz / 1e6, 3)


@dataclass
class MsrBackend:
    """IA32_PERF_CTL on each core through `/dev/cpu/N/msr`."""

    io: HardwareIO
    cores: tuple[int, ...]
    settle_s: float = 0.05
    name: str = "msr"
    _freqs: tuple[float, ...] | None = field(default=None, repr=False)

    def hwp_enabled(self) -> bool:
        """IA32_PM_ENABLE bit 0; a CPU without the register (EIO: pre-Skylake, AMD) has no HWP."""
        try:
            return bool(self.io.read_msr(self.cores[0], IA32_PM_ENABLE) & 1)
        except HostError as exc:
            if "not implemented" in str(exc):
                return False
            raise

    def preflight(self) -> None:
        self.io.read_msr(self.cores[0], IA32_PERF_CTL)  # msr module, permission, register present
        if self.hwp_enabled():
            raise HostError(
                "HWP is enabled (IA32_PM_ENABLE 0x770 bit 0): the CPU picks its own P-states and "
                "ignores IA32_PERF_CTL; boot with intel_pstate=no_hwp"
            )

    def frequencies(self) -> tuple[float, ...]:
        """Ratios from max efficiency (PLATFORM_INFO 47:40) to max non-turbo (15:8); else cpufreq's min/max."""
        if self._freqs is None:
            try:
                info = self.io.read_msr(self.cores[0], MSR_PLATFORM_INFO)
                lo, hi = (info >> 40) & 0xFF, (info >> 8) & 0xFF
            except HostError:
                lo = hi = 0
            if not 0 < lo <= hi:
                d = _freq_dir(self.cores[0])
                try:
                    lo = -(-int(self.io.read_text(f"{d}/cpuinfo_min_freq")) // 100_000)
                    hi = int(self.io.read_text(f"{d}/cpuinfo_max_freq")) // 100_000
                except (HostError, ValueError):
                    raise HostError(
                        "cannot tell the CPU's frequency range: MSR_PLATFORM_INFO (0xce) and "
                        "cpufreq cpuinfo_min/max_freq are both unreadable"
                    ) from None
            self._freqs = tuple(ratio_to_ghz(r) for r in range(lo, hi + 1))
        return self._freqs

    def _governor_settings(self) -> list[Setting]:
        out = []
        for cpu in self.cores:
            d = _freq_dir(cpu)
            if not self.io.path(d).is_dir():
                continue
            if self.io.read_text(f"{d}/scaling_governor") == "userspace":
                continue
            governors = self.io.read_text(f"{d}/scaling_available_governors").split()
            if "userspace" not in governors:
                driver = self.io.read_text(f"{d}/scaling_driver")
                raise HostError(
                    f"cpufreq driver {driver} on CPU {cpu} would overwrite IA32_PERF_CTL and offers no "
                    f"userspace governor: use intel_pstate=passive (or disable) first"
                )
            out.append(Setting(SYSFS, f"{d}/scaling_governor", "userspace"))
        return out

    def plan(self, ghz: float) -> list[Setting]:
        ghz = check_in(ghz, self.frequencies(), "msr")
        self.preflight()
        ratio = ghz_to_ratio(ghz)
        settings = self._governor_settings()
        for cpu in self.cores:
            old = self.io.read_msr(cpu, IA32_PERF_CTL)
            settings.append(Setting(MSR, str(cpu), with_ratio(old, ratio), IA32_PERF_CTL))
        return settings

    def verify(self, ghz: float) -> list[str]:
        """PERF_CTL must read back exactly; PERF_STATUS is polled briefly and a mismatch is a warning."""
        ratio = ghz_to_ratio(ghz)
        for cpu in self.cores:
            got = ratio_of(self.io.read_msr(cpu, IA32_PERF_CTL))
            if got != ratio:
                raise HostError(f"CPU {cpu} reads back IA32_PERF_CTL ratio {got} after writing {ratio} ({ghz:g} GHz)")
        pending = set(self.cores)
        deadline = time.monotonic() + self.settle_s
        while True:
            pending = {c for c in pending if ratio_of(self.io.read_msr(c, IA32_PERF_STATUS)) != ratio}
            if not pending or time.monotonic() >= deadline:
                break
            time.sleep(0.005)
        warnings = []
        for cpu in sorted(pending):
            running = ratio_of(self.io.read_msr(cpu, IA32_PERF_STATUS))
            warnings.append(
                f"CPU {cpu} runs at {ratio_to_ghz(running):g} GHz (IA32_PERF_STATUS) after asking "
                f"{ghz:g} GHz: a power/thermal limit or a hyperthread sibling's request wins"
            )
        for w in warnings:
            log.warning("%s", w)
        return warnings

    def current(self) -> float | None:
        if any(
            self.io.path(_freq_dir(c)).is_dir() and self.io.read_text(f"{_freq_dir(c)}/scaling_governor") != "userspace"
            for c in self.cores
        ):
            return None
        ratios = {ratio_of(self.io.read_msr(c, IA32_PERF_CTL)) for c in self.cores}
        return ratio_to_ghz(ratios.pop()) if len(ratios) == 1 else None


BACKENDS = ("cpufreq", "msr", "minmax", "hwp")  # the order `auto` tries them in


def make_backend(name: str, io: HardwareIO, cores: tuple[int, ...]) -> DvfsBackend:
    """The backend called `name` (one of `BACKENDS`) over `cores`, not yet checked."""
    classes: dict[str, type] = {
        "cpufreq": CpufreqBackend,
        "msr": MsrBackend,
        "minmax": MinMaxBackend,
        "hwp": HwpBackend,
    }
    backend: DvfsBackend = classes[name](io, cores)
    return backend


def choose_backend(io: HardwareIO, cores: tuple[int, ...] | None = None, prefer: str = "auto") -> DvfsBackend:
    """The DVFS backend to use: `prefer` (one of `BACKENDS`) or, with 'auto', the first that works of: cpufreq
    when it offers the userspace governor, MSR (IA32_PERF_CTL) with HWP off, then -- the driver in active mode --
    min/max pinning through cpufreq, then IA32_HWP_REQUEST. Raises `HostError` explaining why none works."""
    cores = require_online(io, tuple(cores)) if cores else online_cpus(io)
    if prefer != "auto" and prefer not in BACKENDS:
        raise HostError(f"--backend {prefer!r}: expected auto, {', '.join(BACKENDS)}")
    if prefer != "auto":
        backend = make_backend(prefer, io, cores)
        try:
            backend.preflight()
        except HostError as exc:
            for name in BACKENDS:
                if name == prefer:
                    continue
                try:
                    make_backend(name, io, cores).preflight()
                except HostError:
                    continue
                raise HostError(f"{exc}; --backend {name} works on this host") from None
            raise exc from None  # offer another backend only when it works here
        return backend
    reasons = []
    for name in BACKENDS:
        backend = make_backend(name, io, cores)
        try:
            backend.preflight()
            return backend
        except HostError as exc:
            reasons.append(f"{backend.name}: {exc}")
    raise HostError("no DVFS backend works here -- " + " | ".join(reasons))
