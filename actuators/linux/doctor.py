"""`tuner doctor`: what this host offers for tuning and what is missing, each finding with its fix.

Every check is read-only: it reads sysfs/procfs/MSRs under `root`, issues only ETHTOOL_G* ioctls, and
opens one TCP/unix connection to memcached. `summarize` decides whether the tuner can run: it needs a
working DVFS backend, a NIC whose coalescing it can set (plus CAP_NET_ADMIN), readable RAPL energy and a
reachable memcached.
"""

from __future__ import annotations

import socket
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from actuators.latency.memcached import MemcachedAddress
from actuators.linux.doctor_nic import check_nics
from actuators.linux.dvfs import (
    BACKENDS,
    CPU_DIR,
    IA32_PM_ENABLE,
    format_cpu_list,
    make_backend,
    online_cpus,
    require_online,
)
from actuators.linux.dvfs_active import active_driver
from actuators.linux.findings import FAIL, INFO, OK, WARN, Finding, Report
from actuators.linux.hwio import HardwareIO
from actuators.linux.msr import msr_path
from actuators.linux.rapl import cpu_vendor, discover_meter
from core.errors import HostError

CAP_NET_ADMIN, CAP_SYS_RAWIO = 12, 17
AMD_VENDORS = ("AuthenticAMD", "HygonGenuine")
VM_ADVICE = "no RAPL/MSR/cpufreq in most VMs: run on bare metal"
#: The findings of cache servers (`check_memcached`, `actuators.linux.doctor_redis.check_redis`).
SERVER_CHECKS = ("memcached", "redis")


@dataclass(frozen=True)
class Platform:
    """What the advice depends on: the CPU vendor and whether this is a virtual machine."""

    vendor: str = ""
    virtual: bool = False

    @property
    def amd(self) -> bool:
        return self.vendor in AMD_VENDORS


def read_platform(io: HardwareIO) -> Platform:
    """Vendor from `/proc/cpuinfo`; a VM when its flags list `hypervisor` (set by every common hypervisor)."""
    try:
        text = io.read_text("proc/cpuinfo")
    except HostError:
        return Platform()
    flags = next((line.split(":", 1)[1].split() for line in text.splitlines() if line.startswith("flags")), [])
    return Platform(cpu_vendor(io), "hypervisor" in flags)


def _status_of(findings: Iterable[Finding], check: str) -> str | None:
    return next((f.status for f in findings if f.check == check), None)


def summarize(findings: list[Finding]) -> Report:
    """Can the tuner run? Needs: DVFS (cpufreq or minmax backend, or msr/hwp backend with CAP_SYS_RAWIO), ITR (a NIC
    with coalescing, ok or unverified driver, and CAP_NET_ADMIN), RAPL energy, memcached reachable."""
    usable = (OK, WARN)
    rawio = _status_of(findings, "cap-sys-rawio") == OK
    dvfs = any(_status_of(findings, f"dvfs-{b}") in usable for b in ("cpufreq", "minmax")) or (
        rawio and any(_status_of(findings, f"dvfs-{b}") in usable for b in ("msr", "hwp"))
    )
    itr = (
        any(f.check.startswith("nic:") and f.status in usable for f in findings)
        and _status_of(findings, "cap-net-admin") == OK
    )
    # the configured energy source (a BMC, Prometheus) stands in for RAPL when it reads
    energy = _status_of(findings, "rapl") in usable or _status_of(findings, "energy") == OK
    # the cache server checked (memcached by default, or --redis): each must answer
    servers = [(f.check, f.status in usable) for f in findings if f.check in SERVER_CHECKS] or [("memcached", False)]
    cores = _status_of(findings, "cpus") != FAIL
    missing = tuple(
        name
        for name, good in (
            ("cores", cores),
            ("dvfs", dvfs),
            ("itr", itr),
            ("energy", energy),
            *servers,
        )
        if not good
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


def check_platform(platform: Platform) -> Finding:
    vendor = platform.vendor or "unknown CPU vendor"
    if platform.virtual:
        return Finding(
            "platform",
            WARN,
            f"virtual machine (cpuinfo flag hypervisor), {vendor}",
            f"{VM_ADVICE}; observe mode still measures QPS and latency here",
        )
    return Finding("platform", INFO, f"bare metal (no hypervisor flag), {vendor}")


def check_hwp(io: HardwareIO, cpu: int, platform: Platform = Platform()) -> Finding:
    if platform.amd:
        return Finding(
            "hwp",
            INFO,
            f"{platform.vendor}: no Intel HWP; amd_pstate's active (EPP) mode is its counterpart and "
            f"the cpufreq check shows the mode",
        )
    try:
        enabled = bool(io.read_msr(cpu, IA32_PM_ENABLE) & 1)
        if enabled:
            return Finding(
                "hwp",
                INFO,
                "HWP enabled (IA32_PM_ENABLE 0x770 bit 0 = 1): IA32_PERF_CTL is ignored (no --backend msr); "
                "the minmax and hwp backends pin the frequency with HWP on",
                "nothing needed; only --backend msr wants intel_pstate=no_hwp (a reboot)",
            )
        return Finding("hwp", OK, "HWP off (IA32_PM_ENABLE 0x770 bit 0 = 0)")
    except HostError as exc:
        if "not implemented" in str(exc):
            return Finding("hwp", OK, "no HWP (IA32_PM_ENABLE not implemented on this CPU)")
        if io.path(f"{CPU_DIR}/intel_pstate/hwp_dynamic_boost").exists():  # exists only with HWP on
            return Finding(
                "hwp",
                INFO,
                "HWP enabled (intel_pstate exposes hwp_dynamic_boost): IA32_PERF_CTL is ignored (no --backend msr)",
                "nothing needed: the minmax backend pins through intel_pstate; only --backend msr wants "
                "intel_pstate=no_hwp (a reboot)",
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


def _cpufreq_fix(platform: Platform) -> str:
    if platform.virtual:
        return VM_ADVICE
    if platform.amd:
        return "boot with amd_pstate=passive (or acpi-cpufreq) and load the userspace governor"
    return "boot with intel_pstate=passive (or use acpi-cpufreq) and load the userspace governor"


def check_cpufreq(io: HardwareIO, cpu: int, platform: Platform = Platform()) -> Finding:
    d = f"{CPU_DIR}/cpu{cpu}/cpufreq"
    if not io.path(d).is_dir():
        return Finding(
            "cpufreq",
            FAIL,
            f"no cpufreq for CPU {cpu} ({io.path(d)} missing): no frequency driver",
            _cpufreq_fix(platform),
        )
    try:
        driver = io.read_text(f"{d}/scaling_driver")
        governor = io.read_text(f"{d}/scaling_governor")
        governors = io.read_text(f"{d}/scaling_available_governors")
    except HostError as exc:
        return Finding("cpufreq", FAIL, str(exc), _cpufreq_fix(platform))
    pstate = ""
    for name in ("intel_pstate", "amd_pstate"):
        if io.path(f"{CPU_DIR}/{name}/status").exists():
            pstate = f", {name} {io.read_text(f'{CPU_DIR}/{name}/status')}"
    return Finding("cpufreq", OK, f"driver {driver}{pstate}, governor {governor} (available: {governors})")


def _backend_fixes(platform: Platform) -> dict[str, str]:
    if platform.virtual:
        return dict.fromkeys(BACKENDS, VM_ADVICE)
    active = "needs intel_pstate or amd-pstate in active mode (the kernel's default)"
    if platform.amd:
        return {
            "cpufreq": "echo passive > /sys/devices/system/cpu/amd_pstate/status (at run time) or boot with "
            "amd_pstate=passive (or acpi-cpufreq), with the userspace governor",
            "msr": "the MSR backend drives Intel's IA32_PERF_CTL; on AMD use cpufreq or minmax",
            "minmax": active,
            "hwp": "Intel HWP only; on AMD use minmax (amd-pstate active) or cpufreq",
        }
    return {
        "cpufreq": "echo passive > /sys/devices/system/cpu/intel_pstate/status (at run time) or boot with "
        "intel_pstate=passive (or acpi-cpufreq), with the userspace governor",
        "msr": "modprobe msr, CAP_SYS_RAWIO, HWP off (intel_pstate=no_hwp)",
        "minmax": active,
        "hwp": "modprobe msr, CAP_SYS_RAWIO, HWP on, hwp_dynamic_boost off",
    }


def check_dvfs_backends(io: HardwareIO, cores: tuple[int, ...], platform: Platform = Platform()) -> list[Finding]:
    """Every backend's preflight; each failing one's fix names another only when that one works. Then which one
    `--backend auto` takes, and, with the driver in active mode, the run-time status switch as an optional step."""
    out = []
    fixes = _backend_fixes(platform)
    for name in BACKENDS:
        backend = make_backend(name, io, cores)
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
    working = [f.check.removeprefix("dvfs-") for f in out if f.status == OK]
    out = [
        Finding(f.check, f.status, f.detail, f"{f.fix}; or use --backend {working[0]} (usable here)")
        if f.status == FAIL and working
        else f
        for f in out
    ]
    return out + _dvfs_choice(io, cores, working)


def _dvfs_choice(io: HardwareIO, cores: tuple[int, ...], working: list[str]) -> list[Finding]:
    if not working:
        return [Finding("dvfs", FAIL, "no DVFS backend works here (each one's reason above)", "see dvfs-* fixes")]
    how = {"cpufreq": "userspace governor", "msr": "IA32_PERF_CTL", "minmax": "scaling_min/max pinning"}
    what = how.get(working[0], "IA32_HWP_REQUEST min = max = desired")
    out = [Finding("dvfs", OK, f"--backend auto uses {working[0]} ({what}): can be tuned without a reboot")]
    driver = active_driver(io, cores[0])
    if driver is not None:
        status = f"/{CPU_DIR}/{driver[1]}/status"
        out.append(
            Finding(
                "pstate-status",
                INFO,
                f"{driver[0]} in active mode (the kernel's default): tuned as it is, by pinning its min/max",
                f"optional step, never taken by the tuner: `echo passive > {status}` switches the driver at run "
                f"time to passive mode, whose userspace governor the cpufreq backend uses (`echo active > "
                f"{status}` switches back)",
            )
        )
    return out


def check_rapl(io: HardwareIO, platform: Platform = Platform()) -> Finding:
    try:
        meter = discover_meter(io)
    except HostError as exc:
        return Finding(
            "rapl",
            FAIL,
            f"no readable RAPL energy: {exc}",
            VM_ADVICE
            if platform.virtual
            else "load intel_rapl_common (powercap; amd energy too on Linux >= 5.8) or the msr module; "
            "root to read energy_uj",
        )
    zones = ", ".join(c.zone for c in meter.counters)
    return Finding(
        "rapl",
        OK,
        f"{zones} readable (max power {meter.max_power_w:g} W, read at least every "
        f"{meter.safe_interval_s:.0f} s to never miss a wrap)",
    )


def check_memcached(address: str, timeout_s: float = 1.0) -> Finding:
    """Connect and send `version` (TCP `host:port`, `[v6]:port` or `unix:/path`)."""
    try:
        parsed = MemcachedAddress.parse(address)
    except HostError as exc:
        return Finding("memcached", FAIL, str(exc), "pass --memcached HOST:PORT (port 1..65535) or unix:/path")
    try:
        if parsed.path is not None:
            sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            target: Any = parsed.path
        else:
            host = parsed.host or ""
            sock = socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET)
            target = (host, parsed.port)
        with sock:
            sock.settimeout(timeout_s)
            sock.connect(target)
            sock.sendall(b"version\r\n")
            reply = sock.recv(256).decode(errors="replace").strip()
    except (OSError, ValueError, OverflowError) as exc:
        return Finding(
            "memcached",
            FAIL,
            f"memcached at {parsed} not reachable: {exc}",
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


def _check_cores(io: HardwareIO, cores: tuple[int, ...] | None, findings: list[Finding]) -> tuple[int, ...]:
    """The CPUs the other checks look at; a `cpus` finding when the list is wrong or unreadable."""
    try:
        online = online_cpus(io)
    except HostError as exc:
        findings.append(Finding("cpus", WARN, str(exc)))
        return cores or (0,)
    if not cores:
        return online
    try:
        return require_online(io, cores)
    except HostError as exc:
        findings.append(Finding("cpus", FAIL, str(exc), f"pass --cores within {format_cpu_list(online)}"))
        return tuple(c for c in cores if c in online) or online


def run_checks(
    io: HardwareIO,
    ifaces: tuple[str, ...] = (),
    memcached: str | None = "127.0.0.1:11211",
    cores: tuple[int, ...] | None = None,
    servers: Iterable[Finding] = (),
    extra: list[Finding] | None = None,
) -> Report:
    """All checks, read-only (`io` should be dry-run so even a bug cannot write); `memcached` None skips that
    server's check, `servers` are the findings of other cache servers checked (`doctor_redis.check_redis`),
    `extra` the findings of other checks (the configured energy sources, `actuators.linux.doctor_energy`),
    weighed with these."""
    platform = read_platform(io)
    findings: list[Finding] = [check_platform(platform)]
    cpus = _check_cores(io, cores, findings)
    findings.append(check_msr_module(io))
    findings += check_capabilities(io)
    findings.append(check_hwp(io, cpus[0], platform))
    findings.append(check_cpufreq(io, cpus[0], platform))
    findings += check_dvfs_backends(io, cpus, platform)
    findings.append(check_rapl(io, platform))
    findings += extra or []
    findings += check_nics(io, ifaces)
    if memcached is not None:
        findings.append(check_memcached(memcached))
    findings += servers
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
