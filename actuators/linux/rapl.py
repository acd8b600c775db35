"""RAPL energy: powercap sysfs or the energy MSRs, summed over packages, never missing a counter wrap.

powercap: `<root>/sys/class/powercap/intel-rapl:N/energy_uj` (package N; subzones `intel-rapl:N:M` are
dram/core/uncore) wrapping at `max_energy_range_uj`. MSR: `MSR_RAPL_POWER_UNIT` (0x606) bits 12:8 give
the energy unit 1/2^ESU J, `MSR_PKG_ENERGY_STATUS` (0x611) bits 31:0 count it and wrap at 2^32; AMD
Zen uses 0xC0010299 (units) / 0xC001029B (package energy) with the same layout.

Wraps: `EnergyMeter.poll` is called often enough (`poll_interval_s`, a quarter of the safe interval from
`actuators.energy.max_read_interval_s` at the package's maximum power) that at most one wrap happens
between two reads; a gap longer than the safe interval raises instead of returning a wrong number.
"""

from __future__ import annotations

import functools
import re
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from actuators.energy import counter_delta, max_read_interval_s
from actuators.linux.hwio import HardwareIO
from actuators.power.source import EnergyReading, SourceInfo
from core.errors import HostError

POWERCAP = "sys/class/powercap"
MSR_RAPL_POWER_UNIT = 0x606
MSR_PKG_ENERGY_STATUS = 0x611
MSR_PKG_POWER_INFO = 0x614
AMD_RAPL_POWER_UNIT = 0xC0010299
AMD_PKG_ENERGY_STATUS = 0xC001029B
DEFAULT_MAX_POWER_W = 500.0
RAPL_UPDATE_S = 0.001  # the counters tick about every millisecond (Intel SDM vol. 3B, 15.10.1)
_ZONE = re.compile(r"^intel-rapl:(\d+)(?::(\d+))?$")


@dataclass(frozen=True)
class EnergyCounter:
    """One wrapping energy counter: `read()` returns raw units in [0, wrap)."""

    zone: str  # label: package-0, dram, core, ...
    package: bool  # counts toward the package total
    wrap: int
    joules_per_unit: float
    read: Callable[[], int]
    source: str  # path or register, for messages

    @property
    def wrap_joules(self) -> float:
        return self.wrap * self.joules_per_unit


def _read_int(io: HardwareIO, rel: str) -> int:
    """A non-negative integer attribute; an empty or garbled read is a one-line HostError."""
    text = io.read_text(rel)
    try:
        value = int(text)
    except ValueError:
        raise HostError(f"{io.path(rel)} reads {text[:40]!r}: expected a non-negative integer") from None
    if value < 0:
        raise HostError(f"{io.path(rel)} reads {value}: expected a non-negative integer")
    return value


def _read_msr32(io: HardwareIO, cpu: int, reg: int) -> int:
    """The low 32 bits of an MSR (RAPL energy status counters are 32 bits wide)."""
    return io.read_msr(cpu, reg) & 0xFFFFFFFF


def _read_uj(io: HardwareIO, rel: str) -> int:
    try:
        return _read_int(io, rel)
    except HostError as exc:
        if "permission denied" in str(exc):
            raise HostError(
                f"permission denied reading {io.path(rel)}: energy_uj is root-only since Linux 5.10 "
                f"(Platypus mitigation); run as root or grant read access with a udev rule"
            ) from None
        raise


def powercap_counters(io: HardwareIO) -> list[EnergyCounter]:
    """intel-rapl zones under `<root>/sys/class/powercap` (package zones and their subzones)."""
    base = io.path(POWERCAP)
    if not base.is_dir():
        return []
    counters = []
    for entry in sorted(base.iterdir(), key=lambda p: [int(x) for x in re.findall(r"\d+", p.name)]):
        m = _ZONE.match(entry.name)
        if not m:
            continue
        rel = f"{POWERCAP}/{entry.name}"
        name = io.read_text(f"{rel}/name")
        wrap = _read_int(io, f"{rel}/max_energy_range_uj")
        if wrap <= 0:
            raise HostError(f"{io.path(rel)}/max_energy_range_uj is {wrap}: expected a positive range")
        package = m.group(2) is None and name.startswith("package")  # not psys (whole platform)
        label = name if m.group(2) is None else re.sub(r"-\d+$", "", name)
        counters.append(
            EnergyCounter(
                label, package, wrap, 1e-6, functools.partial(_read_uj, io, f"{rel}/energy_uj"), str(io.path(rel))
            )
        )
    return counters


def package_cpus(io: HardwareIO) -> tuple[int, ...]:
    """The first CPU of each physical package (`topology/physical_package_id`); CPU 0 if unknown."""
    from actuators.linux.dvfs import online_cpus

    firsts: dict[str, int] = {}
    for cpu in online_cpus(io):
        try:
            pkg = io.read_text(f"sys/devices/system/cpu/cpu{cpu}/topology/physical_package_id")
        except HostError:
            pkg = "0"
        firsts.setdefault(pkg, cpu)
    return tuple(sorted(firsts.values())) or (0,)


def cpu_vendor(io: HardwareIO) -> str:
    """`GenuineIntel`, `AuthenticAMD`, `HygonGenuine` from `<root>/proc/cpuinfo`, or '' if unknown."""
    try:
        for line in io.read_text("proc/cpuinfo").splitlines():
            if line.startswith("vendor_id"):
                return line.split(":", 1)[1].strip()
    except HostError:
        pass
    return ""


def msr_counters(io: HardwareIO) -> list[EnergyCounter]:
    """Package energy MSRs, one per package (Intel 0x611, AMD 0xC001029B)."""
    amd = cpu_vendor(io) in ("AuthenticAMD", "HygonGenuine")
    unit_reg, energy_reg = (
        (AMD_RAPL_POWER_UNIT, AMD_PKG_ENERGY_STATUS) if amd else (MSR_RAPL_POWER_UNIT, MSR_PKG_ENERGY_STATUS)
    )
    counters = []
    for i, cpu in enumerate(package_cpus(io)):
        esu = (io.read_msr(cpu, unit_reg) >> 8) & 0x1F
        counters.append(
            EnergyCounter(
                f"package-{i}",
                True,
                1 << 32,
                1.0 / (1 << esu),
                functools.partial(_read_msr32, io, cpu, energy_reg),
                f"MSR {energy_reg:#x} on CPU {cpu}",
            )
        )
    return counters


def max_power_w(io: HardwareIO, counters: list[EnergyCounter]) -> float:
    """A safe upper bound on package power: 2x the larger of powercap's max power / limit, or of the TDP
    in MSR_PKG_POWER_INFO; `DEFAULT_MAX_POWER_W` when neither is readable."""
    found = 0.0
    for c in counters:
        if c.package and c.source.startswith(str(io.path(POWERCAP))):
            rel = c.source[len(str(io.root)) :].lstrip("/")
            for attr in ("constraint_0_max_power_uw", "constraint_0_power_limit_uw"):
                try:
                    found = max(found, int(io.read_text(f"{rel}/{attr}")) / 1e6)
                except (HostError, ValueError):
                    continue
    if not found and counters and counters[0].source.startswith("MSR"):
        try:
            cpu = package_cpus(io)[0]
            unit = io.read_msr(cpu, MSR_RAPL_POWER_UNIT) & 0xF
            found = (io.read_msr(cpu, MSR_PKG_POWER_INFO) & 0x7FFF) / (1 << unit)
        except HostError:
            found = 0.0
    return 2.0 * found if found > 0 else DEFAULT_MAX_POWER_W


@dataclass
class EnergyMeter:
    """Accumulates wrapping counters over a window; call `poll()` at least every `poll_interval_s`."""

    counters: list[EnergyCounter]
    max_power_w: float
    clock: Callable[[], float] = time.monotonic
    _last: list[int] = field(default_factory=list, repr=False)
    _acc: list[int] = field(default_factory=list, repr=False)
    _t0: float = 0.0
    _t_last: float = 0.0

    def __post_init__(self) -> None:
        if not self.counters:
            raise HostError("no RAPL energy counter found (no powercap intel-rapl zone, no energy MSR)")

    @property
    def safe_interval_s(self) -> float:
        """Longest gap between reads that cannot miss a wrap (smallest counter range, 2x margin)."""
        return min(max_read_interval_s(c.wrap_joules, self.max_power_w) for c in self.counters)

    @property
    def poll_interval_s(self) -> float:
        return min(1.0, self.safe_interval_s / 4.0)

    @property
    def info(self) -> SourceInfo:
        """Source `rapl`: its zones in counter order, updated every ~1 ms, counting in `joules_per_unit` steps."""
        zones = tuple(dict.fromkeys(c.zone for c in self.counters))
        resolution = min(c.joules_per_unit for c in self.counters)
        return SourceInfo("rapl", zones, RAPL_UPDATE_S, resolution, "J")

    def _read_all(self) -> list[int]:
        values = []
        for c in self.counters:
            v = c.read()
            if not 0 <= v < c.wrap:
                v %= c.wrap
            values.append(v)
        return values

    def begin(self) -> None:
        self._last = self._read_all()
        self._acc = [0] * len(self.counters)
        self._t0 = self._t_last = self.clock()

    def poll(self) -> None:
        """Read every counter and add its increase; raises if the gap could hide a second wrap."""
        now = self.clock()
        values = self._read_all()
        gap = now - self._t_last
        if gap > self.safe_interval_s:
            raise HostError(
                f"energy counters were not read for {gap:.1f} s (safe interval "
                f"{self.safe_interval_s:.1f} s): a counter wrap may have been missed"
            )
        for i, (c, v) in enumerate(zip(self.counters, values)):
            self._acc[i] += counter_delta(self._last[i], v, c.wrap)
        self._last, self._t_last = values, now

    def end(self) -> EnergyReading:
        self.poll()
        by_zone: dict[str, float] = {}
        total = 0.0
        for c, units in zip(self.counters, self._acc):
            joules = units * c.joules_per_unit
            by_zone[c.zone] = by_zone.get(c.zone, 0.0) + joules
            if c.package:
                total += joules
        return EnergyReading(self._t_last - self._t0, total, by_zone)


def discover_meter(io: HardwareIO, prefer: str = "auto", max_power: float | None = None) -> EnergyMeter:
    """powercap when it has zones (or `prefer='powercap'`), else the energy MSRs (`prefer='msr'`)."""
    if prefer not in ("auto", "powercap", "msr"):
        raise HostError(f"energy source {prefer!r}: expected auto, powercap or msr")
    counters = powercap_counters(io) if prefer in ("auto", "powercap") else []
    if not counters and prefer == "msr":
        counters = msr_counters(io)
    elif not counters and prefer == "auto":
        try:
            counters = msr_counters(io)
        except HostError as exc:
            raise HostError(
                f"no powercap intel-rapl zone under {io.path(POWERCAP)} and no energy MSR ({exc})"
            ) from None
    if not counters:
        raise HostError(
            f"no RAPL powercap zone under {io.path(POWERCAP)} (load intel_rapl_common / "
            f"rapl) and energy MSRs not requested"
        )
    for c in counters:
        c.read()  # fail now (permission, missing) rather than mid-window
    return EnergyMeter(counters, max_power if max_power else max_power_w(io, counters))
