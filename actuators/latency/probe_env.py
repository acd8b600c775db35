"""What limits a latency prober's view, read-only: the client-side settings that change measured tails
(`ClientSettings`: cpufreq governor, cpuidle driver/governor and C-states of the CPUs it may run on, kernel
command line), read from sysfs under a configurable root, and a target whose traffic never crosses a NIC."""

from __future__ import annotations

import os
from collections.abc import Iterable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from actuators.latency.memcached import MemcachedAddress


# -- client-side settings (read-only) ---------------------------------------------------------------
@dataclass(frozen=True)
class IdleState:
    """One cpuidle state as the kernel lists it for the first prober CPU."""

    name: str
    exit_latency_us: int | None
    disabled_on: tuple[int, ...]


@dataclass(frozen=True)
class ClientSettings:
    """Client-side settings that change measured tails (Antoniou et al.: C-states, DVFS, governor).

    Read from sysfs/procfs under `root`, never written. None means the file does not exist here.
    """

    cpus: tuple[int, ...]
    governors: dict[int, str | None]
    cpufreq_driver: str | None
    boost: str | None
    idle_driver: str | None
    idle_governor: str | None
    idle_states: tuple[IdleState, ...]
    intel_idle_max_cstate: str | None
    cmdline_flags: tuple[str, ...]

    def deep_states(self, threshold_us: int = 10) -> list[IdleState]:
        """Enabled idle states whose exit latency exceeds `threshold_us`."""
        return [
            s
            for s in self.idle_states
            if s.exit_latency_us is not None
            and s.exit_latency_us > threshold_us
            and set(s.disabled_on) != set(self.cpus)
        ]

    def warnings(self) -> list[str]:
        """What in these settings can inflate the prober's measured latency, with the fix."""
        out = []
        slow = sorted({g for g in self.governors.values() if g and g != "performance"})
        if slow:
            out.append(
                f"prober CPUs use cpufreq governor {'/'.join(slow)}: client-side frequency ramps add tens of µs "
                "to measured tails (Antoniou et al.); use 'performance' on the prober CPUs or a dedicated client"
            )
        deep = self.deep_states()
        if deep:
            names = ", ".join(f"{s.name} ({s.exit_latency_us} µs)" for s in deep)
            out.append(
                f"deep C-states enabled on prober CPUs: {names}; wake-ups add their exit latency to measured "
                "tails; disable them for the prober CPUs (cpupower idle-set -D 10) or probe from a tuned client"
            )
        return out

    def lines(self) -> list[str]:
        """Human-readable summary for `tuner doctor`."""
        govs = sorted({g or "none" for g in self.governors.values()})
        states = (
            ", ".join(
                f"{s.name}({s.exit_latency_us}µs{', off' if set(s.disabled_on) == set(self.cpus) else ''})"
                for s in self.idle_states
            )
            or "none listed"
        )
        return [
            f"prober CPUs: {cpu_list(self.cpus)}",
            f"cpufreq: driver {self.cpufreq_driver or 'none'}, governor {', '.join(govs)}, boost {self.boost or 'n/a'}",
            f"cpuidle: driver {self.idle_driver or 'none'}, governor {self.idle_governor or 'none'}, states {states}",
            f"intel_idle.max_cstate {self.intel_idle_max_cstate or 'n/a'}; kernel flags: "
            f"{' '.join(self.cmdline_flags) or 'none relevant'}",
        ]

    def as_dict(self) -> dict[str, Any]:
        """JSON-ready form (for `tuner doctor --json`)."""
        d = asdict(self)
        d["governors"] = {str(k): v for k, v in self.governors.items()}
        d["warnings"] = self.warnings()
        return d


_CMDLINE_KEYS = (
    "idle=",
    "intel_idle.max_cstate=",
    "processor.max_cstate=",
    "intel_pstate=",
    "cpuidle.off=",
    "nohz=",
    "nohz_full=",
    "cpufreq.default_governor=",
    "cpuidle_haltpoll.force=",
)


def read_client_settings(root: str | os.PathLike[str] = "/", cpus: Iterable[int] | None = None) -> ClientSettings:
    """Read the governor/C-state settings of `cpus` (default: this process's affinity) under `root`."""
    base = Path(root)
    cpu_dir = base / "sys/devices/system/cpu"
    cpu_set = tuple(sorted(cpus if cpus is not None else os.sched_getaffinity(0)))
    governors = {c: _read(cpu_dir / f"cpu{c}/cpufreq/scaling_governor") for c in cpu_set}
    driver = next((d for c in cpu_set if (d := _read(cpu_dir / f"cpu{c}/cpufreq/scaling_driver"))), None)
    boost = _read(cpu_dir / "cpufreq/boost")
    if boost is None and (no_turbo := _read(cpu_dir / "intel_pstate/no_turbo")) is not None:
        boost = "0" if no_turbo == "1" else "1"
    states: list[IdleState] = []
    first = cpu_set[0] if cpu_set else 0
    state_dirs = sorted((cpu_dir / f"cpu{first}/cpuidle").glob("state*"), key=lambda p: int(p.name[5:] or 0))
    for sd in state_dirs:
        lat = _read(sd / "latency")
        disabled_on = tuple(c for c in cpu_set if _read(cpu_dir / f"cpu{c}/cpuidle/{sd.name}/disable") == "1")
        states.append(
            IdleState(_read(sd / "name") or sd.name, int(lat) if lat and lat.isdigit() else None, disabled_on)
        )
    cmdline = _read(base / "proc/cmdline") or ""
    flags = tuple(tok for tok in cmdline.split() if tok.startswith(_CMDLINE_KEYS))
    return ClientSettings(
        cpus=cpu_set,
        governors=governors,
        cpufreq_driver=driver,
        boost=boost,
        idle_driver=_read(cpu_dir / "cpuidle/current_driver"),
        idle_governor=_read(cpu_dir / "cpuidle/current_governor") or _read(cpu_dir / "cpuidle/current_governor_ro"),
        idle_states=tuple(states),
        intel_idle_max_cstate=_read(base / "sys/module/intel_idle/parameters/max_cstate"),
        cmdline_flags=flags,
    )


def _read(path: Path) -> str | None:
    try:
        return path.read_text().strip()
    except OSError:
        return None


def cpu_list(cpus: tuple[int, ...]) -> str:
    return ",".join(map(str, cpus)) if cpus else "none"


# -- where the probes go --------------------------------------------------------------------------
def local_path_reason(address: MemcachedAddress, local_ips: Iterable[str] | None = None) -> str | None:
    """Why probes to `address` would never cross a NIC, or None when they do (as far as we can tell).

    Linux delivers traffic to *any* address of this host over `lo` -- not just 127.0.0.1 -- so a
    prober targeting the host's own eth0 address still bypasses the NIC and its interrupt throttling.
    """
    import ipaddress
    import socket

    if address.path is not None:
        return f"{address} is a unix socket"
    try:
        infos = socket.getaddrinfo(address.host, address.port, type=socket.SOCK_STREAM)
    except OSError:
        return None  # cannot resolve here: cannot tell
    if local_ips is None:
        import psutil

        local_ips = [
            a.address
            for addrs in psutil.net_if_addrs().values()
            for a in addrs
            if a.family in (socket.AF_INET, socket.AF_INET6)
        ]
    local = {ip.split("%", 1)[0] for ip in local_ips}
    for info in infos:
        ip = str(info[4][0]).split("%", 1)[0]
        if ipaddress.ip_address(ip).is_loopback:
            return f"{address} resolves to loopback {ip}"
        if ip in local:
            return f"{address} is an address of this host ({ip}; Linux routes it over lo)"
    return None


def target_warning(address: MemcachedAddress, local_ips: Iterable[str] | None = None) -> str | None:
    """A warning when the prober cannot see NIC-side delay (ITR), with the fix; None when it can."""
    reason = local_path_reason(address, local_ips)
    if reason is None:
        return None
    return (
        f"prober target {reason}: probes never cross the NIC, so they miss interrupt-throttling (ITR) "
        "delay and the tuner would see large ITR as free; run the prober on a client machine "
        "(target this host's NIC address) or use the prometheus/hook latency source"
    )
