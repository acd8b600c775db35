"""The fake-hardware kit: a fake host under a directory, its hardware model, and a `Host` factory over it.

`create(root)` builds `<root>/sys` and `<root>/proc` as the kernel shows them on a small acpi-cpufreq server
(`kind="hwp"`: an Intel box with intel_pstate active and HWP on; `kind="amd"`: amd-pstate in active mode -- both
as the kernel boots them by default, tuned through min/max pinning):
`cpus` CPUs with cpufreq (ondemand governor, userspace available, `scaling_setspeed`), one RAPL package zone
(`intel-rapl:0`, powercap `energy_uj`), and a NIC `eth1` whose coalescing lives in a file (`FileNic`), played as
ixgbe or as another driver of `actuators.fakehw.drivers.DRIVERS` (`nic="mlx5_core"`: a ConnectX port with its
4095 µs period, 65535 frames and CQE timer mode).
`HardwareModel` plays the hardware: it advances `energy_uj` by `PowerModel` power at the frequency the
governor / `scaling_setspeed` set, the ITR the NIC has and the load memcached reports, and mirrors the set
frequency into `scaling_cur_freq`. `make_fake_host(root=...)` is `make_real_host` over that tree (the daemon's
`[host] spec = "actuators.fakehw:make_fake_host"`); it runs the model in a thread unless another process already
does (`python -m actuators.fakehw DIR`). Nothing outside `root` is read or written, except memcached stats.
"""

from __future__ import annotations

import contextlib
import fcntl
import logging
import os
import shutil
import threading
import time
from pathlib import Path
from typing import Any

from actuators.fakehw import tree
from actuators.fakehw.drivers import DRIVERS
from actuators.fakehw.nic import FileNic, create_nic, nic_path
from actuators.fakehw.power import PowerModel
from core.errors import HostError

log = logging.getLogger(__name__)

IFACE = "eth1"
ZONE = "intel-rapl:0"
RAPL_RANGE_UJ = 262_143_328_850
FREQS_KHZ = (1_200_000, 1_600_000, 2_000_000, 2_400_000, 2_900_000)
#: What the fake BMC reads beyond the package (fans, PSU loss, DRAM, NIC): the RAPL-to-BMC gap of the kit.
PLATFORM_W = 40.0
MARKER = "fakehw/KIT"
KIND_FILE = "fakehw/KIND"
LOCK = "fakehw/model.lock"
# what the kit's CPUs are: an acpi-cpufreq box (userspace governor), an Intel box with intel_pstate active and HWP
# on, an AMD box with amd-pstate in active (EPP) mode -- the last two as the kernel boots them by default
KINDS = ("acpi", "hwp", "amd")
ACTIVE_MIN_KHZ, ACTIVE_BASE_KHZ, HWP_TURBO_KHZ = 1_200_000, 2_900_000, 3_500_000
ACTIVE_DRIVERS = ("intel_pstate", "amd-pstate-epp")


def is_kit(root: str | Path) -> bool:
    return (Path(root) / MARKER).is_file()


def nic_under(root: str | Path) -> Any:
    """The NIC backend for `--root ROOT` in the one-shot commands (`tuner restore`, `tuner set`, `tuner doctor`):
    the kit's file-backed NIC (`FileNic`) when `root` is a kit -- the backend its daemon wrote through, so the
    same saved originals go back to the same place -- else `actuators.real.default_nic` (the live kernel's
    ethtool under `/`, none under another root). Never a real NIC for a kit."""
    if is_kit(root):
        return FileNic(root)
    from actuators.real import default_nic

    return default_nic(Path(root))


def kit_kind(root: str | Path) -> str:
    """The kit's CPU kind (one of `KINDS`); kits made before kinds existed are `acpi`."""
    path = Path(root) / KIND_FILE
    return path.read_text().strip() if path.is_file() else "acpi"


def create(root: str | Path, cpus: int = 2, kind: str = "acpi", nic: str = "ixgbe") -> Path:
    """Build the fake tree under `root` (refuses a non-empty directory that is not a kit; resets a kit). `kind`:
    `acpi` (acpi-cpufreq, ondemand, userspace available), `hwp` (intel_pstate active, HWP on, powersave, EPP,
    1.2 GHz .. 2.9 GHz base, 3.5 GHz turbo) or `amd` (amd-pstate-epp active, powersave, EPP, 1.2 .. 2.9 GHz);
    `nic` is the driver the NIC plays (a key of `DRIVERS`)."""
    root = Path(root)
    if root.exists() and any(root.iterdir()) and not is_kit(root):
        raise HostError(f"{root}: not empty and not a fake-hardware kit: give a new or empty directory")
    if not 1 <= cpus <= 256:
        raise HostError(f"cpus {cpus}: expected 1..256")
    if kind not in KINDS:
        raise HostError(f"kit kind {kind!r}: expected one of {', '.join(KINDS)}")
    if nic not in DRIVERS:
        raise HostError(f"nic {nic!r}: expected one of {', '.join(DRIVERS)}")
    if is_kit(root):
        for old in ("sys", "proc"):  # a kit rebuilt as another kind keeps no file of the old one
            shutil.rmtree(root / old, ignore_errors=True)
    tree.cpu_online(root, cpus)
    vendor, flags = "GenuineIntel", "fpu msr"
    if kind == "acpi":
        tree.cpufreq(root, cpus, available_khz=list(FREQS_KHZ), min_khz=FREQS_KHZ[0], max_khz=FREQS_KHZ[-1])
    elif kind == "hwp":
        tree.active_pstate(
            root, cpus, driver="intel_pstate", status_dir="intel_pstate", min_khz=ACTIVE_MIN_KHZ,
            max_khz=HWP_TURBO_KHZ, base_khz=ACTIVE_BASE_KHZ,
        )  # fmt: skip
        flags = "fpu msr hwp hwp_epp"
    else:
        tree.active_pstate(
            root, cpus, driver="amd-pstate-epp", status_dir="amd_pstate", min_khz=ACTIVE_MIN_KHZ,
            max_khz=ACTIVE_BASE_KHZ,
        )  # fmt: skip
        vendor, flags = "AuthenticAMD", "fpu msr cppc"
    tree.powercap_zone(root, "package-0", ZONE, 0, RAPL_RANGE_UJ, max_power_uw=95_000_000)
    tree.net_iface(root, IFACE, DRIVERS[nic].name)
    tree.cpuinfo(root, vendor, cpus, flags=flags)
    tree.proc_status(root, (1 << 41) - 1)  # writing the kit's files needs no capability: it has them all
    create_nic(root, IFACE, nic)
    tree.write(root / KIND_FILE, kind)
    tree.write(root / MARKER, f"fake-hardware kit: {cpus} CPUs ({kind}), cpufreq, RAPL {ZONE}, NIC {IFACE} ({nic})")
    return root


class HardwareModel:
    """Advances the fake RAPL counter and `scaling_cur_freq` every `period_s` from the kit's own state."""

    def __init__(
        self, root: str | Path, qps: Any = None, model: PowerModel | None = None, period_s: float = 0.05
    ) -> None:
        self.root = Path(root)
        if not is_kit(self.root):
            raise HostError(f"{self.root}: not a fake-hardware kit (create it first: python -m actuators.fakehw DIR)")
        self.cpus = sorted(p.name for p in (self.root / "sys/devices/system/cpu").glob("cpu[0-9]*"))
        self.model = model or PowerModel(cores=len(self.cpus), fmax_ghz=FREQS_KHZ[-1] / 1e6)
        self.qps = qps  # anything with total_requests(), e.g. actuators.qps.MemcachedStatsQps
        self.period_s = period_s
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._lock_fd: int | None = None
        self.watts = 0.0
        self.bmc: Any = None  # a FakeBmc (actuators.fakehw.bmc) whose sensor follows the power, when attached
        self.platform_w = PLATFORM_W

    def _cpu_ghz(self, cpu: str) -> float:
        d = self.root / "sys/devices/system/cpu" / cpu / "cpufreq"
        gov = (d / "scaling_governor").read_text().strip()
        khz = FREQS_KHZ[-1]
        if (d / "scaling_driver").read_text().strip() in ACTIVE_DRIVERS:
            khz = self._active_khz(d)
        elif gov == "userspace":
            with contextlib.suppress(ValueError):
                khz = int((d / "scaling_setspeed").read_text())
        elif gov == "powersave":
            khz = FREQS_KHZ[0]
        cur = d / "scaling_cur_freq"
        if cur.read_text().strip() != str(khz):
            tree.write(cur, str(khz))
        return khz / 1e6

    @staticmethod
    def _active_khz(d: Path) -> int:
        """The driver in active mode: the hardware picks within scaling_min..max_freq and under load (memcached's)
        climbs to the top of that window, capped at the sustained `base_frequency` (the model has no turbo)."""
        try:
            lo, hi = (int((d / f).read_text()) for f in ("scaling_min_freq", "scaling_max_freq"))
        except ValueError:
            return FREQS_KHZ[-1]
        return max(lo, min(hi, ACTIVE_BASE_KHZ))

    def _rx_usecs(self) -> int | None:
        nic = FileNic(self.root)
        c = nic.get_coalesce(IFACE)
        return None if c.get("use_adaptive_rx_coalesce") else int(c["rx_coalesce_usecs"])

    def step(self, dt_s: float, qps: float) -> float:
        """Advance the hardware by `dt_s` at `qps`; returns the package power used (W)."""
        ghz = sum(self._cpu_ghz(c) for c in self.cpus) / len(self.cpus)
        self.watts = self.model.watts(ghz, qps, self._rx_usecs())
        tree.advance_zone(self.root, ZONE, int(round(self.watts * dt_s * 1e6)))
        if self.bmc is not None:  # the BMC sees the whole platform: the package plus what RAPL does not count
            self.bmc.set_watts(self.watts + self.platform_w)
        return self.watts

    def claim(self) -> bool:
        """Take the kit's model lock (one model per kit); False if another process runs it."""
        fd = os.open(self.root / LOCK, os.O_CREAT | os.O_RDWR, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            return False
        self._lock_fd = fd
        return True

    def run(self) -> None:
        """Step every `period_s` until `stop()` (QPS from the source's counter; 0 if none or unreadable)."""
        last_t, last_n = time.monotonic(), self._requests()
        while not self._stop.wait(self.period_s):
            now, n = time.monotonic(), self._requests()
            dt = now - last_t
            qps = max(n - last_n, 0.0) / dt if (n is not None and last_n is not None and dt > 0) else 0.0
            self.step(dt, qps)
            last_t, last_n = now, n

    def _requests(self) -> float | None:
        if self.qps is None:
            return None
        try:
            return float(self.qps.total_requests())
        except HostError:
            return None

    def start(self) -> bool:
        """Run in a daemon thread if no other process models this kit; returns whether it started."""
        if not self.claim():
            return False
        self._thread = threading.Thread(target=self.run, name="fakehw-model", daemon=True)
        self._thread.start()
        return True

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=2)
        if self._lock_fd is not None:
            os.close(self._lock_fd)
            self._lock_fd = None


def make_fake_host(
    root: str,
    model: bool = True,
    seed: int | None = None,
    bmc: str | float | None = None,
    bmc_poll_ms: int = 1000,
    **options: Any,
) -> Any:
    """`make_real_host` over the kit at `root` with its file-backed NIC (cpufreq backend, NIC eth1); the other
    options are `[host.options]` of the real host (qps, latency, state_dir, dry_run, ...). `model` runs the
    hardware model in this process unless another one already does. `bmc` starts a fake BMC (ipmi_sim, see
    `actuators.fakehw.bmc`) in `<root>/fakehw/bmc` whose power sensor follows the model's power plus `PLATFORM_W`
    ("follow") or stays at a fixed number of watts, and reads it over IPMI-over-LAN: as the energy source unless
    `energy` is given, else beside it (`energy_compare`)."""
    from actuators.qps import qps_source_from_spec
    from actuators.real import make_real_host

    if not is_kit(root):
        raise HostError(f"{root}: not a fake-hardware kit (create it: python -m actuators.fakehw {root})")
    if not nic_path(Path(root), IFACE).exists():
        raise HostError(f"{root}: the kit's NIC file is missing (recreate the kit)")
    options.setdefault("backend", "cpufreq" if kit_kind(root) == "acpi" else "auto")
    options.setdefault("iface", IFACE)
    fake_bmc = _start_bmc(root, bmc, bmc_poll_ms, options) if bmc is not None else None
    try:
        host = make_real_host(root=root, nic=FileNic(root), **options)
    except BaseException:
        if fake_bmc is not None:
            fake_bmc.stop()
        raise
    hw = None
    if model:
        spec = options.get("qps")
        source = qps_source_from_spec(spec) if isinstance(spec, str) else spec
        hw = HardwareModel(root, source)
        if hw.start():
            host.warnings.append("fake-hardware kit: power is modelled (actuators.fakehw.power), not measured")
            hw.bmc = fake_bmc if bmc == "follow" else None
        else:
            hw = None
    _attach(host, hw, fake_bmc)
    return host


def _start_bmc(root: str, bmc: str | float, poll_ms: int, options: dict[str, Any]) -> Any:
    """Start the kit's fake BMC and point `energy` (or, when `energy` is set, `energy_compare`) at it."""
    from actuators.fakehw.bmc import start_bmc

    if bmc != "follow" and (isinstance(bmc, bool) or not isinstance(bmc, int | float)):
        raise HostError(f'bmc: {bmc!r}: expected "follow" or a fixed power in watts', permanent=True)
    watts = PLATFORM_W if bmc == "follow" else float(bmc)
    fake = start_bmc(Path(root) / "fakehw/bmc", watts=watts, poll_ms=poll_ms)
    if "energy" in options:
        options["energy_compare"] = [*options.get("energy_compare", []), fake.reader_options()]
    else:
        options["energy"] = fake.reader_options()
    return fake


def _attach(host: Any, hw: HardwareModel | None, bmc: Any) -> None:
    """Stop the model and the fake BMC when the host is closed."""
    close = host.close

    def closing() -> None:
        if hw is not None:
            hw.stop()
        if bmc is not None:
            bmc.stop()
        close()

    host.close = closing
