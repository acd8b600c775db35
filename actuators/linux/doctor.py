"""`tuner doctor`: what this host offers for tuning and what is missing, each finding with its fix.

Every check is read-only: it reads sysfs/procfs/MSRs under `root`, issues only ETHTOOL_G* ioctls, and
opens one TCP/unix connection to memcached. `summarize` decides whether the tuner can run: it needs a
working DVFS backend, a NIC whose coalescing it can set (plus CAP_NET_ADMIN), readable RAPL energy and a
reachable memcached.
"""

from __future__ import annotations

import socket
from collections.abc import Iterable
from dataclasses import asdict, dataclass
from typing import Any

from actuators.linux.dvfs import CPU_DIR, IA32_PM_ENABLE, CpufreqBackend, MsrBackend, online_cpus
from actuators.linux.hwio import HardwareIO, nic_driver
from actuators.linux.itr import ADAPTIVE_RX, RX_USECS, physical_interfaces, profile_for
from actuators.linux.msr import msr_path
from actuators.linux.rapl import discover_meter
from core.errors import HostError

OK, WARN, FAIL, INFO = "ok", "warn", "fail", "info"
CAP_NET_ADMIN, CAP_SYS_RAWIO = 12, 17


@dataclass(frozen=True)
class Finding:
    """One check: `status` ok | warn | fail | info, what was seen, and how to fix it."""

    check: str
    status: str
    detail: str
    fix: str = ""


@dataclass(frozen=True)
class Report:
    findings: tuple[Finding, ...]
    can_tune: bool
    missing: tuple[str, ...]

    def to_json(self) -> dict[str, Any]:
        return {
            "can_tune": self.can_tune,
            "missing": list(self.missing),
            "findings": [asdict(f) for f in self.findings],
        }


def _status_of(findings: Iterable[Finding], check: str) -> str | None:
    return next((f.status for f in findings if f.check == check), None)


def summarize(findings: list[Finding]) -> Report:
    """Can the tuner run? Needs: DVFS (cpufreq backend, or MSR backend with CAP_SYS_RAWIO), ITR (a NIC
    with coalescing, ok or unverified driver, and CAP_NET_ADMIN), RAPL energy, memcached reachable."""
    usable = (OK, WARN)
    dvfs = _status_of(findings, "dvfs-cpufreq") in usable or (
        _status_of(findings, "dvfs-msr") in usable and _status_of(findings, "cap-sys-rawio") == OK
    )
    itr = (
        any(f.check.startswith("nic:") and f.status in usable for f in findings)
        and _status_of(findings, "cap-net-admin") == OK
    )
    energy = _status_of(findings, "rapl") in usable
    memcached = _status_of(findings, "memcached") in usable
    missing = tuple(
        name for name, good in (("dvfs", dvfs), ("itr", itr), ("energy", energy), ("memcached", memcached)) if not good
    )
    return Report(tuple(findings), not missing, missing)


def check_msr_module(io: HardwareIO) -> Finding:
    path = msr_path(io.root, 0)
    if path.exists():
        return Finding("msr-module", OK, f"{path} present")
    try:
        modules = io.read_text("proc/modules")
        loaded = any(line.split()[0] == "msr" for line in modules.splitlines() if line.strip())
    except HostError:
        loaded = False
    detail = f"{path} missing" + (" although msr is listed in /proc/modules" if loaded else "; msr module not loaded")
    return Finding(
        "msr-module",
        FAIL,
        detail,
        "modprobe msr (persist: echo msr > /etc/modules-load.d/msr.conf); needed by --backend msr "
        "and MSR energy counters only",
    )


def check_capabilities(io: HardwareIO) -> list[Finding]:
    try:
        status = io.read_text("proc/self/status")
        cap_eff = next(int(line.split()[1], 16) for line in status.splitlines() if line.startswith("CapEff:"))
    except (HostError, StopIteration, ValueError, IndexError):
        return [
            Finding("cap-net-admin", FAIL, "cannot read CapEff from /proc/self/status", "run on Linux"),
            Finding("cap-sys-rawio", FAIL, "cannot read CapEff from /proc/self/status", "run on Linux"),
        ]
    out = []
    for name, bit, why in (
        ("cap-net-admin", CAP_NET_ADMIN, "set NIC coalescing (ETHTOOL_SCOALESCE)"),
        ("cap-sys-rawio", CAP_SYS_RAWIO, "read/write /dev/cpu/N/msr"),
    ):
        has = bool(cap_eff >> bit & 1)
        out.append(
            Finding(
                name,
                OK if has else FAIL,
                f"CAP_{name[4:].upper().replace('-', '_')} {'present' if has else 'missing'} "
                f"(CapEff {cap_eff:#x}); needed to {why}",
                "" if has else "run as root or grant it: AmbientCapabilities= in the systemd unit",
            )
        )
    return out


def check_hwp(io: HardwareIO, cpu: int) -> Finding:
    try:
        enabled = bool(io.read_msr(cpu, IA32_PM_ENABLE) & 1)
        if enabled:
            return Finding(
                "hwp",
                FAIL,
                "HWP enabled (IA32_PM_ENABLE 0x770 bit 0 = 1): IA32_PERF_CTL is ignored",
                "boot with intel_pstate=no_hwp for --backend msr, or use cpufreq (intel_pstate=passive)",
            )
        return Finding("hwp", OK, "HWP off (IA32_PM_ENABLE 0x770 bit 0 = 0)")
    except HostError as exc:
        if "not implemented" in str(exc):
            return Finding("hwp", OK, "no HWP (IA32_PM_ENABLE not implemented on this CPU)")
        if io.path(f"{CPU_DIR}/intel_pstate/hwp_dynamic_boost").exists():  # exists only with HWP on
            return Finding(
                "hwp",
                FAIL,
                "HWP enabled (intel_pstate exposes hwp_dynamic_boost): IA32_PERF_CTL is ignored",
                "boot with intel_pstate=no_hwp for --backend msr, or use cpufreq",
            )
        try:
            flags = io.read_text("proc/cpuinfo")
        except HostError:
            flags = ""
        if " hwp " in f" {flags.replace(chr(10), ' ')} ":
            return Finding(
                "hwp",
                WARN,
                f"CPU supports HWP; state unknown ({exc})",
                "load msr to read IA32_PM_ENABLE, or check /sys/devices/system/cpu/intel_pstate/status",
            )
        return Finding("hwp", INFO, f"HWP state unknown ({exc}); /proc/cpuinfo lists no hwp flag")


def check_cpufreq(io: HardwareIO, cpu: int) -> Finding:
    d = f"{CPU_DIR}/cpu{cpu}/cpufreq"
    if not io.path(d).is_dir():
        return Finding(
            "cpufreq",
            FAIL,
            f"no cpufreq for CPU {cpu} ({io.path(d)} missing): no frequency driver",
            "load acpi-cpufreq / intel_pstate / amd-pstate (virtual machines usually have none)",
        )
    try:
        driver = io.read_text(f"{d}/scaling_driver")
        governor = io.read_text(f"{d}/scaling_governor")
        governors = io.read_text(f"{d}/scaling_available_governors")
    except HostError as exc:
        return Finding("cpufreq", FAIL, str(exc), "check the cpufreq driver")
    pstate = ""
    if io.path(f"{CPU_DIR}/intel_pstate/status").exists():
        pstate = f", intel_pstate {io.read_text(f'{CPU_DIR}/intel_pstate/status')}"
    return Finding("cpufreq", OK, f"driver {driver}{pstate}, governor {governor} (available: {governors})")


def check_dvfs_backends(io: HardwareIO, cores: tuple[int, ...]) -> list[Finding]:
    out = []
    fixes = {
        "cpufreq": "intel_pstate=passive (Intel) or amd-pstate=passive (AMD), with the userspace governor",
        "msr": "modprobe msr, CAP_SYS_RAWIO, HWP off (intel_pstate=no_hwp)",
    }
    for cls in (CpufreqBackend, MsrBackend):
        backend = cls(io, cores)
        try:
            backend.preflight()
            freqs = backend.frequencies()
            listed = " ".join(f"{f:g}" for f in freqs) if len(freqs) <= 40 else f"{freqs[0]:g} .. {freqs[-1]:g}"
            out.append(
                Finding(
                    f"dvfs-{backend.name}",
                    OK,
                    f"usable on CPUs {cores[0]}..{cores[-1]}: {len(freqs)} frequencies "
                    f"{freqs[0]:g}..{freqs[-1]:g} GHz ({listed})",
                )
            )
        except HostError as exc:
            out.append(Finding(f"dvfs-{backend.name}", FAIL, str(exc), fixes[backend.name]))
    return out


def check_rapl(io: HardwareIO) -> Finding:
    try:
        meter = discover_meter(io)
    except HostError as exc:
        return Finding(
            "rapl",
            FAIL,
            f"no readable RAPL energy: {exc}",
            "bare metal with intel_rapl_common/rapl loaded (powercap) or the msr module; "
            "root to read energy_uj; VMs expose no RAPL",
        )
    zones = ", ".join(c.zone for c in meter.counters)
    return Finding(
        "rapl",
        OK,
        f"{zones} readable (max power {meter.max_power_w:g} W, read at least every "
        f"{meter.safe_interval_s:.0f} s to never miss a wrap)",
    )


def check_nics(io: HardwareIO, ifaces: tuple[str, ...]) -> list[Finding]:
    ifaces = ifaces or physical_interfaces(io.root)
    if not ifaces:
        return [
            Finding("nic", FAIL, f"no interface bound to a driver under {io.path('sys/class/net')}", "pass --iface")
        ]
    out = []
    for ifname in ifaces:
        driver = nic_driver(io.root, ifname)
        prof = profile_for(driver)
        try:
            values = io.get_coalesce(ifname)
        except HostError as exc:
            out.append(
                Finding(
                    f"nic:{ifname}",
                    FAIL,
                    str(exc),
                    "use a NIC whose driver implements ethtool coalescing (ixgbe, i40e, ice, ...)",
                )
            )
            continue
        seen = f"rx-usecs {values.get(RX_USECS)}, adaptive-rx {'on' if values.get(ADAPTIVE_RX) else 'off'}"
        try:
            lro = io.require_nic().lro_enabled(ifname)
            seen += f", LRO {'on' if lro else 'off'}"
        except (HostError, OSError):
            pass
        if prof.verified:
            out.append(
                Finding(
                    f"nic:{ifname}",
                    OK,
                    f"driver {driver}: coalescing readable ({seen}); ITR "
                    f"{prof.min_us}..{prof.max_us} µs step {prof.step_us}",
                )
            )
        else:
            out.append(
                Finding(
                    f"nic:{ifname}",
                    WARN,
                    f"driver {driver}: coalescing readable ({seen}) but no verified profile; whether "
                    f"it accepts static rx-usecs shows only on the first set (doctor never writes)",
                    "prefer ixgbe/i40e/ice; `tuner set --itr N --dry-run`, then a real set, to try",
                )
            )
    return out


def check_memcached(address: str, timeout_s: float = 1.0) -> Finding:
    """Connect and send `version` (TCP `host:port` or `unix:/path`)."""
    try:
        if address.startswith("unix:") or address.startswith("/"):
            sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            target: Any = address.removeprefix("unix:")
        else:
            host, _, port = address.rpartition(":")
            sock = socket.socket(socket.AF_INET6 if ":" in host.strip("[]") else socket.AF_INET)
            target = (host.strip("[]"), int(port))
        with sock:
            sock.settimeout(timeout_s)
            sock.connect(target)
            sock.sendall(b"version\r\n")
            reply = sock.recv(256).decode(errors="replace").strip()
    except (OSError, ValueError) as exc:
        return Finding(
            "memcached",
            FAIL,
            f"memcached at {address} not reachable: {exc}",
            "start memcached or pass --memcached HOST:PORT / unix:/path",
        )
    if not reply.startswith("VERSION"):
        return Finding("memcached", FAIL, f"{address} answered {reply[:60]!r}, not memcached", "check the address")
    return Finding("memcached", OK, f"{address}: {reply}")


def check_prober(io: HardwareIO) -> Finding:
    """The prober's own CPU governor and C-states (they shift measured tails: Antoniou et al.)."""
    try:
        from actuators.latency.prober import read_client_settings
    except ImportError as exc:  # sensors not installed
        return Finding("prober", INFO, f"prober settings unavailable ({exc})")
    settings = read_client_settings(io.root)
    warnings = settings.warnings()
    return Finding("prober", WARN if warnings else OK, "; ".join(settings.lines()), " | ".join(warnings))


def run_checks(
    io: HardwareIO,
    ifaces: tuple[str, ...] = (),
    memcached: str = "127.0.0.1:11211",
    cores: tuple[int, ...] | None = None,
) -> Report:
    """All checks, read-only (`io` should be dry-run so even a bug cannot write)."""
    findings: list[Finding] = []
    try:
        cpus = cores or online_cpus(io)
    except HostError as exc:
        cpus = (0,)
        findings.append(Finding("cpus", WARN, str(exc)))
    findings.append(check_msr_module(io))
    findings += check_capabilities(io)
    findings.append(check_hwp(io, cpus[0]))
    findings.append(check_cpufreq(io, cpus[0]))
    findings += check_dvfs_backends(io, cpus)
    findings.append(check_rapl(io))
    findings += check_nics(io, ifaces)
    findings.append(check_memcached(memcached))
    findings.append(check_prober(io))
    return summarize(findings)


def format_report(report: Report) -> str:
    tags = {OK: " OK ", WARN: "WARN", FAIL: "FAIL", INFO: "INFO"}
    lines = []
    for f in report.findings:
        lines.append(f"[{tags[f.status]}] {f.check:<14} {f.detail}")
        if f.fix and f.status != OK:
            lines.append(f"       {'':<14} fix: {f.fix}")
    if report.can_tune:
        lines.append("=> the tuner can run on this host")
    else:
        lines.append(f"=> the tuner cannot tune this host: missing {', '.join(report.missing)}")
    return "\n".join(lines)
