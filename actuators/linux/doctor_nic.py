"""`tuner doctor`'s NIC check: per interface the driver, its coalescing now and what the tuner will do with it."""

from __future__ import annotations

from actuators.linux.findings import FAIL, OK, WARN, Finding
from actuators.linux.hwio import HardwareIO, NicPrivFlags, nic_driver
from actuators.linux.itr import physical_interfaces
from actuators.linux.nic_profiles import ADAPTIVE_RX, PROFILES, RX_FRAMES, RX_USECS, profile_for
from core.errors import HostError


def _nic_seen(io: HardwareIO, ifname: str, values: dict[str, int]) -> str:
    """What the interface has now: rx-usecs, adaptive, rx-frames, LRO and any CQE/EQE timer-mode private flag."""
    seen = f"rx-usecs {values.get(RX_USECS)}, adaptive-rx {'on' if values.get(ADAPTIVE_RX) else 'off'}"
    if values.get(RX_FRAMES):
        seen += f", rx-frames {values[RX_FRAMES]}"
    try:
        seen += f", LRO {'on' if io.require_nic().lro_enabled(ifname) else 'off'}"
    except (HostError, OSError):
        pass
    nic = io.nic
    if isinstance(nic, NicPrivFlags):
        try:
            flags = nic.priv_flags(ifname)
        except (HostError, OSError):
            flags = {}
        for name in sorted(f for f in flags if f.startswith("rx_cqe_moder")):
            seen += (
                f", timer mode {'CQE' if flags[name] else 'EQE'} (priv-flag {name} {'on' if flags[name] else 'off'})"
            )
    return seen


def check_nics(io: HardwareIO, ifaces: tuple[str, ...]) -> list[Finding]:
    """Per interface: the driver, its coalescing now, and what the tuner will do with it (the profile: range,
    step, how adaptive goes off, the fields it sets and those it leaves)."""
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
                    f"use a NIC whose driver implements ethtool coalescing ({', '.join(sorted(PROFILES))})",
                )
            )
            continue
        seen = _nic_seen(io, ifname, values)
        if prof.verified:
            out.append(
                Finding(f"nic:{ifname}", OK, f"driver {driver}: coalescing readable ({seen}); {prof.describe()}")
            )
        else:
            out.append(
                Finding(
                    f"nic:{ifname}",
                    WARN,
                    f"driver {driver}: coalescing readable ({seen}) but no verified profile (known: "
                    f"{', '.join(sorted(PROFILES))}): unverified; whether it accepts static rx-usecs shows only on "
                    f"the first set (doctor never writes)",
                    "`tuner set --itr N --force --dry-run`, then a real set with --force (host option force = true), "
                    "to try",
                )
            )
    return out
