"""DVFS through Intel HWP's own request register (backend `hwp`): `IA32_HWP_REQUEST` min = max = desired.

With HWP on (`IA32_PM_ENABLE` 0x770 bit 0) the CPU ignores `IA32_PERF_CTL`, but it keeps its choice inside the
window each core asks for in `IA32_HWP_REQUEST` (0x774): bits 7:0 minimum, 15:8 maximum, 23:16 desired
performance, 31:24 EPP, 41:32 activity window, bit 42 package control. This backend writes min = max = desired =
the target's performance level on every tuned core and keeps every other field as read -- except package control,
which it clears so that the core's own fields rule (with bit 42 set the core would follow
`IA32_HWP_REQUEST_PKG`, 0x772, which the tuner never writes). The whole original register is saved per core
before the first write and restored as it was, bit 42 included.

The levels come from `IA32_HWP_CAPABILITIES` (0x771): highest (7:0), guaranteed (15:8), most efficient (23:16),
lowest (31:24). The grid is lowest .. guaranteed (the sustained range, as the MSR backend stops at the maximum
non-turbo ratio). A level is 100 MHz on Intel's non-hybrid parts, not on hybrid ones (P-cores use about 78.7
MHz), so the scale is taken from cpufreq when it is there -- `base_frequency` / guaranteed, else
`cpuinfo_max_freq` / highest -- and is 100 MHz only without cpufreq. Tuned cores must share capabilities and
scale (one kind of core on a hybrid part).

Read-back: the request must read back exactly (an error otherwise). The running frequency comes from APERF/MPERF
(0xE8/0xE7) deltas over `settle_s` times the base frequency (MPERF counts at it), or, where they do not advance,
`IA32_PERF_STATUS` (0x198) bits 15:8 x 100 MHz; a core more than one bin from the target is a warning: HWP runs
below the request in idle (C-states) and under a power or thermal limit. intel_pstate in active mode rewrites
this register whenever its policy changes and, with `hwp_dynamic_boost` on, on I/O wake-ups: there the `minmax`
backend (which goes through the driver) is the one to use, and `auto` chooses it first.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass, field

from actuators.linux.dvfs_common import CPU_DIR, IA32_PERF_STATUS, IA32_PM_ENABLE, check_in, freq_dir
from actuators.linux.hwio import MSR, HardwareIO, Setting
from core.errors import HostError

log = logging.getLogger(__name__)

IA32_MPERF = 0xE7
IA32_APERF = 0xE8
IA32_HWP_CAPABILITIES = 0x771
IA32_HWP_REQUEST_PKG = 0x772
IA32_HWP_REQUEST = 0x774
PACKAGE_CONTROL = 1 << 42
DEFAULT_LEVEL_KHZ = 100_000


def capabilities(value: int) -> tuple[int, int, int, int]:
    """(highest, guaranteed, most efficient, lowest) performance levels of IA32_HWP_CAPABILITIES."""
    return value & 0xFF, (value >> 8) & 0xFF, (value >> 16) & 0xFF, (value >> 24) & 0xFF


def request_fields(value: int) -> tuple[int, int, int, int]:
    """(min, max, desired, EPP) of IA32_HWP_REQUEST."""
    return value & 0xFF, (value >> 8) & 0xFF, (value >> 16) & 0xFF, (value >> 24) & 0xFF


def pinned_request(old: int, level: int) -> int:
    """`old` with min = max = desired = `level` and package control cleared; EPP, activity window, rest kept."""
    if not 0 < level <= 0xFF:
        raise ValueError(f"performance level {level} out of 1..255")
    return (old & ~0xFFFFFF & ~PACKAGE_CONTROL) | level | (level << 8) | (level << 16)


@dataclass
class HwpBackend:
    """IA32_HWP_REQUEST on each core through `/dev/cpu/N/msr`."""

    io: HardwareIO
    cores: tuple[int, ...]
    settle_s: float = 0.05
    name: str = "hwp"
    _scale: tuple[int, int, int] | None = field(default=None, repr=False)  # (lowest, guaranteed, kHz per level)

    def preflight(self) -> None:
        try:
            enabled = bool(self.io.read_msr(self.cores[0], IA32_PM_ENABLE) & 1)
        except HostError as exc:
            if "not implemented" in str(exc):
                raise HostError("no HWP on this CPU (IA32_PM_ENABLE 0x770 not implemented)", permanent=True) from None
            raise
        if not enabled:
            raise HostError("HWP is off (IA32_PM_ENABLE 0x770 bit 0 = 0): the msr backend (IA32_PERF_CTL) applies")
        boost = f"{CPU_DIR}/intel_pstate/hwp_dynamic_boost"
        if self.io.path(boost).exists() and self.io.read_text(boost) == "1":
            raise HostError(
                "intel_pstate's hwp_dynamic_boost is on and rewrites IA32_HWP_REQUEST on I/O wake-ups: "
                f"echo 0 > /{boost}, or use the minmax backend"
            )
        for cpu in self.cores:
            self.io.read_msr(cpu, IA32_HWP_REQUEST)
        self._levels()

    def _level_khz(self, highest: int, guaranteed: int) -> int:
        d = freq_dir(self.cores[0])
        for attr, level in (("base_frequency", guaranteed), ("cpuinfo_max_freq", highest)):
            if level > 0 and self.io.path(f"{d}/{attr}").exists():
                try:
                    return int(round(int(self.io.read_text(f"{d}/{attr}")) / level))
                except ValueError:
                    continue
        return DEFAULT_LEVEL_KHZ

    def _levels(self) -> tuple[int, int, int]:
        if self._scale is None:
            caps = {cpu: self.io.read_msr(cpu, IA32_HWP_CAPABILITIES) for cpu in self.cores}
            if len(set(caps.values())) != 1:
                raise HostError(
                    "tuned cores differ in IA32_HWP_CAPABILITIES (a hybrid part's P- and E-cores): pass --cores "
                    "of one kind"
                )
            highest, guaranteed, _, lowest = capabilities(caps[self.cores[0]])
            if not 0 < lowest <= guaranteed <= highest:
                raise HostError(
                    f"IA32_HWP_CAPABILITIES {caps[self.cores[0]]:#x} on CPU {self.cores[0]}: lowest {lowest}, "
                    f"guaranteed {guaranteed}, highest {highest} are not ordered"
                )
            self._scale = (lowest, guaranteed, self._level_khz(highest, guaranteed))
        return self._scale

    def frequencies(self) -> tuple[float, ...]:
        lowest, guaranteed, khz = self._levels()
        return tuple(round(level * khz / 1e6, 3) for level in range(lowest, guaranteed + 1))

    def level_of(self, ghz: float) -> int:
        return int(round(ghz * 1e6 / self._levels()[2]))

    def plan(self, ghz: float) -> list[Setting]:
        ghz = check_in(ghz, self.frequencies(), "hwp")
        self.preflight()
        level = self.level_of(ghz)
        return [
            Setting(MSR, str(cpu), pinned_request(self.io.read_msr(cpu, IA32_HWP_REQUEST), level), IA32_HWP_REQUEST)
            for cpu in self.cores
        ]

    def verify(self, ghz: float) -> list[str]:
        """The request must read back exactly; the running frequency is a warning when off by more than a bin."""
        level = self.level_of(ghz)
        for cpu in self.cores:
            got = self.io.read_msr(cpu, IA32_HWP_REQUEST)
            lo, hi, desired, _ = request_fields(got)
            if (lo, hi, desired) != (level, level, level) or got & PACKAGE_CONTROL:
                raise HostError(
                    f"CPU {cpu} reads back IA32_HWP_REQUEST {got:#x} (min {lo}, max {hi}, desired {desired}) after "
                    f"writing level {level} ({ghz:g} GHz)"
                )
        running = self.running_ghz()
        tolerance = max(self._levels()[2], DEFAULT_LEVEL_KHZ) / 1e6 + 1e-6
        warnings = [
            f"CPU {cpu} runs at {f:.2f} GHz ({how}) after asking HWP for {ghz:g} GHz: in idle and under a "
            f"power/thermal limit HWP runs below its request"
            for cpu, (f, how) in sorted(running.items())
            if abs(f - ghz) > tolerance
        ]
        for w in warnings:
            log.warning("%s", w)
        return warnings

    def running_ghz(self) -> dict[int, tuple[float, str]]:
        """Per core the running frequency over `settle_s`: APERF/MPERF x base where MPERF advances, else
        IA32_PERF_STATUS's ratio x 100 MHz; cores with neither are left out."""
        base_ghz = self._levels()[1] * self._levels()[2] / 1e6
        start = {c: self._counters(c) for c in self.cores}
        time.sleep(self.settle_s)  # the measuring interval of the APERF/MPERF ratio
        out: dict[int, tuple[float, str]] = {}
        for cpu in self.cores:
            a0, m0 = start[cpu] or (0, 0)
            now = self._counters(cpu)
            if start[cpu] is not None and now is not None and now[1] > m0:
                out[cpu] = (base_ghz * (now[0] - a0) / (now[1] - m0), "APERF/MPERF")
                continue
            try:
                out[cpu] = (((self.io.read_msr(cpu, IA32_PERF_STATUS) >> 8) & 0xFF) / 10, "IA32_PERF_STATUS")
            except HostError:
                continue
        return out

    def _counters(self, cpu: int) -> tuple[int, int] | None:
        try:
            return self.io.read_msr(cpu, IA32_APERF), self.io.read_msr(cpu, IA32_MPERF)
        except HostError:
            return None

    def current(self) -> float | None:
        levels = set()
        for cpu in self.cores:
            lo, hi, desired, _ = request_fields(self.io.read_msr(cpu, IA32_HWP_REQUEST))
            if not lo == hi == desired:
                return None
            levels.add(lo)
        if len(levels) != 1:
            return None
        ghz = round(levels.pop() * self._levels()[2] / 1e6, 3)
        return ghz if ghz in self.frequencies() else None
