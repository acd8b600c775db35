"""DVFS with the frequency driver in active mode: `scaling_min_freq = scaling_max_freq = target` (backend `minmax`).

intel_pstate in active mode (HWP on, the kernel's default on every Intel server since Skylake) and amd-pstate in
active mode (`amd-pstate-epp`, the default on Zen 2+ with current kernels) offer only the `powersave` and
`performance` governors, no `userspace`. Both drivers honour the policy limits: intel_pstate writes them into
`IA32_HWP_REQUEST` min/max, amd-pstate into the CPPC request's min/max performance. With min = max the hardware's
own choice is squeezed to one frequency: pinning without a reboot and without switching the driver's status.

Order of the two writes per core: going up (target >= the current minimum) the maximum first, going down the
minimum first, so min > max never exists even for a moment (kernels before freq-QoS refused it with EINVAL; newer
ones clamp silently). The governor and `energy_performance_preference` are left as they are: with min = max there
is no window left for EPP to choose in, and on Xeons EPP also steers the uncore clock, which is the operator's
call -- so the tuner neither writes nor has to restore them. Originals of min and max are saved before the first
write (`hwio.Transaction`) and put back by `tuner restore`, newest first, which widens the window again.

The grid: `cpuinfo_min_freq` up to the sustained maximum (`base_frequency` on intel_pstate with HWP, else
`cpuinfo_max_freq`, which on amd-pstate includes boost when boost is on) in 100 MHz steps. Read-back: the
limits must read back within 50 MHz (an error otherwise); the running frequency (`scaling_cur_freq`) is polled for
`settle_s` and a core more than one 100 MHz bin away is a warning -- an idle core reports less than its pin, and a
power or thermal limit may hold a busy one below it.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass, field

from actuators.linux.dvfs_common import CPU_DIR, check_in, freq_dir
from actuators.linux.hwio import SYSFS, HardwareIO, Setting
from core.errors import HostError

log = logging.getLogger(__name__)

LIMIT_TOLERANCE_KHZ = 50_000
RUNNING_TOLERANCE_KHZ = 100_000  # one bin
STEP_KHZ = 100_000
ACTIVE_DRIVERS = {"intel_pstate": "intel_pstate", "amd-pstate-epp": "amd_pstate", "amd-pstate": "amd_pstate"}
SUSTAINED = "base_frequency"  # intel_pstate with HWP: the guaranteed (non-turbo) frequency


def active_driver(io: HardwareIO, cpu: int) -> tuple[str, str] | None:
    """(scaling_driver, status directory) when `cpu`'s driver is intel_pstate/amd-pstate in active mode, else None."""
    try:
        driver = io.read_text(f"{freq_dir(cpu)}/scaling_driver")
    except HostError:
        return None
    status_dir = ACTIVE_DRIVERS.get(driver)
    if status_dir is None:
        return None
    status_path = f"{CPU_DIR}/{status_dir}/status"
    if io.path(status_path).exists():
        active = io.read_text(status_path) == "active"
    else:  # amd-pstate-epp exists only in active mode; intel_pstate without status file: HWP era default
        active = driver != "amd-pstate"
    return (driver, status_dir) if active else None


@dataclass
class MinMaxBackend:
    """`scaling_min_freq` = `scaling_max_freq` = target on each core, for intel_pstate/amd-pstate in active mode."""

    io: HardwareIO
    cores: tuple[int, ...]
    settle_s: float = 0.05
    name: str = "minmax"
    _freqs: tuple[float, ...] | None = field(default=None, repr=False)

    def _read(self, cpu: int, attr: str) -> str:
        return self.io.read_text(f"{freq_dir(cpu)}/{attr}")

    def _khz(self, cpu: int, attr: str) -> int:
        text = self._read(cpu, attr)
        try:
            return int(text)
        except ValueError:
            raise HostError(f"{self.io.path(freq_dir(cpu) + '/' + attr)}: {text!r} is not a frequency in kHz") from None

    def preflight(self) -> None:
        for cpu in self.cores:
            if not self.io.path(freq_dir(cpu)).is_dir():
                raise HostError(f"cpufreq is not available for CPU {cpu} ({self.io.path(freq_dir(cpu))} missing)")
        driver = active_driver(self.io, self.cores[0])
        if driver is None:
            name = self._read(self.cores[0], "scaling_driver")
            raise HostError(
                f"min/max pinning is for intel_pstate or amd-pstate in active mode; CPU {self.cores[0]} runs "
                f"{name} (not in active mode): use the cpufreq backend (userspace governor)"
            )
        for cpu in self.cores:
            for attr in ("scaling_min_freq", "scaling_max_freq"):
                self._khz(cpu, attr)
        self.frequencies()

    def frequencies(self) -> tuple[float, ...]:
        """cpuinfo_min_freq .. the sustained maximum, 100 MHz steps (hardware limits: the same before and after
        a pin, which moves scaling_min/max)."""
        if self._freqs is None:
            cpu = self.cores[0]
            lo, hi = self._khz(cpu, "cpuinfo_min_freq"), self._khz(cpu, "cpuinfo_max_freq")
            if self.io.path(f"{freq_dir(cpu)}/{SUSTAINED}").exists():
                hi = min(hi, self._khz(cpu, SUSTAINED))
            khz = range(-(-lo // STEP_KHZ) * STEP_KHZ, hi + 1, STEP_KHZ)
            freqs = tuple(round(k / 1e6, 3) for k in khz)
            if not freqs:
                raise HostError(f"CPU {cpu}: no 100 MHz step inside cpuinfo_min..max_freq ({lo}..{hi} kHz)")
            self._freqs = freqs
        return self._freqs

    def plan(self, ghz: float) -> list[Setting]:
        """Per core, max before min going up and min before max going down (read now, at plan time)."""
        ghz = check_in(ghz, self.frequencies(), "minmax")
        khz = int(round(ghz * 1e6))
        out: list[Setting] = []
        for cpu in self.cores:
            d = freq_dir(cpu)
            lo, hi = (
                Setting(SYSFS, f"{d}/scaling_min_freq", str(khz)),
                Setting(SYSFS, f"{d}/scaling_max_freq", str(khz)),
            )
            out += [hi, lo] if khz >= self._khz(cpu, "scaling_min_freq") else [lo, hi]
        return out

    def verify(self, ghz: float) -> list[str]:
        """Limits must read back (within 50 MHz: drivers resolve to their own perf levels); the running frequency
        is polled for `settle_s`, each core still off by more than one bin is a warning."""
        khz = int(round(ghz * 1e6))
        for cpu in self.cores:
            got = {a: self._read(cpu, a) for a in ("scaling_min_freq", "scaling_max_freq")}
            if any(not v.isdigit() or abs(int(v) - khz) > LIMIT_TOLERANCE_KHZ for v in got.values()):
                raise HostError(
                    f"CPU {cpu} reads back scaling_min_freq={got['scaling_min_freq']} "
                    f"scaling_max_freq={got['scaling_max_freq']} kHz after pinning both at {khz} kHz"
                )
        pending = set(self.cores)
        deadline = time.monotonic() + self.settle_s
        while True:
            pending = {c for c in pending if not self._running_near(c, khz)}
            if not pending or time.monotonic() >= deadline:
                break
            time.sleep(0.005)
        warnings = [
            f"CPU {cpu} runs at {self._read(cpu, 'scaling_cur_freq')} kHz (scaling_cur_freq) after pinning "
            f"{khz} kHz: an idle core reports less, a power/thermal limit holds a busy one below"
            for cpu in sorted(pending)
        ]
        for w in warnings:
            log.warning("%s", w)
        return warnings

    def _running_near(self, cpu: int, khz: int) -> bool:
        try:
            return abs(self._khz(cpu, "scaling_cur_freq") - khz) <= RUNNING_TOLERANCE_KHZ
        except HostError:
            return False

    def current(self) -> float | None:
        """The pinned frequency when every core has min = max at one listed frequency, else None (the driver
        chooses within a window)."""
        pins = set()
        for cpu in self.cores:
            lo, hi = self._khz(cpu, "scaling_min_freq"), self._khz(cpu, "scaling_max_freq")
            if abs(lo - hi) > LIMIT_TOLERANCE_KHZ:
                return None
            pins.add(hi)
        if len(pins) != 1:
            return None
        khz = pins.pop()
        nearest = min(self.frequencies(), key=lambda f: abs(f * 1e6 - khz))
        return nearest if abs(nearest * 1e6 - khz) <= LIMIT_TOLERANCE_KHZ else None
