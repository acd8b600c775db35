"""Builders of fake sysfs/devfs/procfs trees under a root directory, shaped like the kernel's.

Used by the fake-hardware kit (`actuators.fakehw`) and by the tests. Every path is under `root`; nothing here
touches the machine's own /sys or /dev.
"""

from __future__ import annotations

import os
from pathlib import Path


def write(path: Path, text: str) -> Path:
    """Create `path` (and its parents) holding `text` and a newline, as sysfs attributes read."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text + "\n")
    return path


def cpu_online(root: Path, ncpus: int) -> None:
    write(root / "sys/devices/system/cpu/online", f"0-{ncpus - 1}" if ncpus > 1 else "0")


def cpufreq(
    root: Path,
    ncpus: int,
    *,
    driver: str = "acpi-cpufreq",
    governor: str = "ondemand",
    governors: str = "performance powersave ondemand userspace",
    available_khz: list[int] | None = None,
    min_khz: int = 1_200_000,
    max_khz: int = 2_900_000,
    pstate_status: str | None = None,
) -> None:
    """`cpuN/cpufreq/` attribute files as acpi-cpufreq (with available list) or intel_pstate show them."""
    for cpu in range(ncpus):
        d = root / f"sys/devices/system/cpu/cpu{cpu}/cpufreq"
        write(d / "scaling_driver", driver)
        write(d / "scaling_governor", governor)
        write(d / "scaling_available_governors", governors)
        write(d / "cpuinfo_min_freq", str(min_khz))
        write(d / "cpuinfo_max_freq", str(max_khz))
        write(d / "scaling_min_freq", str(min_khz))
        write(d / "scaling_max_freq", str(max_khz))
        write(d / "scaling_cur_freq", str(max_khz))
        write(d / "scaling_setspeed", "<unsupported>")
        if available_khz is not None:
            write(d / "scaling_available_frequencies", " ".join(str(k) for k in available_khz))
    if pstate_status is not None:
        write(root / "sys/devices/system/cpu/intel_pstate/status", pstate_status)


def active_pstate(
    root: Path,
    ncpus: int,
    *,
    driver: str,
    status_dir: str,
    min_khz: int,
    max_khz: int,
    base_khz: int | None = None,
    epp: str = "balance_performance",
) -> None:
    """A frequency driver in active mode as the kernel boots it (intel_pstate with HWP: `driver="intel_pstate"`,
    `status_dir="intel_pstate"`, `base_khz`; amd-pstate EPP: `"amd-pstate-epp"`, `"amd_pstate"`): `powersave`
    governor, no `userspace`, the EPP files, `<status_dir>/status` = active."""
    cpufreq(
        root,
        ncpus,
        driver=driver,
        governor="powersave",
        governors="performance powersave",
        min_khz=min_khz,
        max_khz=max_khz,
    )
    for cpu in range(ncpus):
        d = root / f"sys/devices/system/cpu/cpu{cpu}/cpufreq"
        write(d / "energy_performance_preference", epp)
        write(
            d / "energy_performance_available_preferences",
            "default performance balance_performance balance_power power",
        )
        if base_khz is not None:
            write(d / "base_frequency", str(base_khz))
    write(root / f"sys/devices/system/cpu/{status_dir}/status", "active")
    if status_dir == "intel_pstate":
        write(root / "sys/devices/system/cpu/intel_pstate/hwp_dynamic_boost", "0")
        write(root / "sys/devices/system/cpu/intel_pstate/no_turbo", "0")


def powercap_zone(
    root: Path, name: str, zone: str, energy_uj: int, max_range_uj: int, max_power_uw: int | None = None
) -> Path:
    """`/sys/class/powercap/<zone>` (`intel-rapl:0`, `intel-rapl:0:0`, ...)."""
    d = root / "sys/class/powercap" / zone
    write(d / "name", name)
    write(d / "energy_uj", str(energy_uj))
    write(d / "max_energy_range_uj", str(max_range_uj))
    if max_power_uw is not None:
        write(d / "constraint_0_max_power_uw", str(max_power_uw))
    return d


def advance_zone(root: Path, zone: str, delta_uj: int) -> int:
    """Advance a powercap counter by `delta_uj`, wrapping at its `max_energy_range_uj` (atomic replace, so a
    concurrent reader never sees a half-written file)."""
    d = root / "sys/class/powercap" / zone
    wrap = int((d / "max_energy_range_uj").read_text())
    value = (int((d / "energy_uj").read_text()) + delta_uj) % wrap
    tmp = d / ".energy_uj.tmp"
    tmp.write_text(f"{value}\n")
    os.replace(tmp, d / "energy_uj")
    return value


def net_iface(root: Path, ifname: str, driver: str | None) -> None:
    """`/sys/class/net/<if>` with `device/driver` -> `.../drivers/<driver>` (no device: virtual)."""
    d = root / "sys/class/net" / ifname
    d.mkdir(parents=True, exist_ok=True)
    if driver is not None:
        target = root / "sys/bus/pci/drivers" / driver
        target.mkdir(parents=True, exist_ok=True)
        (d / "device").mkdir(exist_ok=True)
        link = d / "device" / "driver"
        if link.is_symlink() and Path(os.readlink(link)) != target:
            link.unlink()  # a kit reset with another driver
        if not link.is_symlink():
            os.symlink(target, link)


def cpuinfo(root: Path, vendor: str, ncpus: int = 1, flags: str = "fpu msr") -> None:
    write(
        root / "proc/cpuinfo",
        "\n\n".join(f"processor\t: {i}\nvendor_id\t: {vendor}\nflags\t\t: {flags}" for i in range(ncpus)),
    )


def proc_status(root: Path, cap_eff: int) -> None:
    """`/proc/self/status` with the effective capabilities `cap_eff`."""
    write(root / "proc/self/status", f"Name:\ttuner\nCapInh:\t0000000000000000\nCapEff:\t{cap_eff:016x}\n")


def cpuidle(root: Path, ncpus: int, states: list[tuple[str, int]] | None = None) -> None:
    write(root / "sys/devices/system/cpu/cpuidle/current_driver", "intel_idle")
    write(root / "sys/devices/system/cpu/cpuidle/current_governor_ro", "menu")
    for cpu in range(ncpus):
        for i, (name, lat) in enumerate(states or [("POLL", 0), ("C1", 2), ("C6", 133)]):
            d = root / f"sys/devices/system/cpu/cpu{cpu}/cpuidle/state{i}"
            write(d / "name", name)
            write(d / "latency", str(lat))
            write(d / "disable", "0")
