"""What every DVFS backend shares: the cpufreq paths, the MSRs several backends read, and the grid check."""

from __future__ import annotations

from core.errors import KnobRangeError

CPU_DIR = "sys/devices/system/cpu"
IA32_PERF_STATUS = 0x198
IA32_PM_ENABLE = 0x770


def freq_dir(cpu: int) -> str:
    """`sys/devices/system/cpu/cpuN/cpufreq`, relative to the root."""
    return f"{CPU_DIR}/cpu{cpu}/cpufreq"


def check_in(ghz: float, freqs: tuple[float, ...], what: str) -> float:
    """The listed frequency `ghz` names (within 0.5 MHz), else a `KnobRangeError` listing them."""
    for f in freqs:
        if abs(f - float(ghz)) <= 5e-4:
            return f
    listed = ", ".join(f"{f:g}" for f in freqs)
    raise KnobRangeError(f"DVFS {ghz!r} GHz is not available ({what}): expected one of {listed}")
