"""NIC interrupt throttling (ITR): static `rx-usecs` with adaptive moderation off, through ethtool ioctls.

The kernel interface is ETHTOOL_GCOALESCE / ETHTOOL_SCOALESCE (what `ethtool -c/-C` use), reached through
pyroute2's `IoctlEthtool`. Settings are per interface: pyroute2 does not wrap ETHTOOL_PERQUEUE, and the
driver this tuner is calibrated on (ixgbe) has no per-queue coalescing -- `ixgbe_set_coalesce` applies
one ITR to every queue vector -- so per-queue control would add nothing there.

What each driver accepts, how it rounds and how its adaptive mode goes off is its profile
(`actuators.linux.nic_profiles`). A read-back that differs from what the profile says the driver applies is
reported once per interface (a warning, `NicItr.notes`), the driver's value is kept and mapped back to the
requested one; it is not retried. Adaptive moderation still on after the write is an error.
"""

from __future__ import annotations

import errno
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from actuators.linux.hwio import COALESCE, HardwareIO, Setting, nic_driver
from actuators.linux.nic_profiles import (
    ADAPTIVE_RX,
    PROFILES,
    RX_USECS,
    DriverProfile,
    profile_for,
    unverified_message,
)
from core.errors import HostError, KnobRangeError

ETH_SS_PRIV_FLAGS, ETHTOOL_GPFLAGS = 2, 0x27  # include/uapi/linux/ethtool.h

__all__ = ["ADAPTIVE_RX", "PROFILES", "RX_USECS", "DriverProfile", "NicItr", "PyrouteEthtool", "profile_for"]


class PyrouteEthtool:
    """The real ethtool layer: pyroute2's `IoctlEthtool` (SIOCETHTOOL ioctls on an AF_INET socket).

    Only this class touches the NIC; tests replace it. pyroute2 errors become `OSError`s with errno.
    """

    def __init__(self) -> None:
        from pyroute2.ethtool.ioctl import IoctlEthtool  # heavy-ish import kept out of module load

        self._io = IoctlEthtool()

    def _call(self, ifname: str, fn_name: str, *args: object) -> Any:  # pyroute2's ethtool objects are untyped
        return self._run(ifname, lambda: getattr(self._io, fn_name)(*args))

    def _run(self, ifname: str, fn: Callable[[], Any]) -> Any:
        from pyroute2.ethtool.ioctl import NoSuchDevice, NotSupportedError

        self._io.change_ifname(ifname)
        try:
            return fn()
        except NotSupportedError:
            raise OSError(errno.EOPNOTSUPP, "operation not supported") from None
        except NoSuchDevice:
            raise OSError(errno.ENODEV, "no such device") from None

    def get_coalesce(self, ifname: str) -> dict[str, int]:
        raw = self._call(ifname, "get_coalesce")
        return {name: int(value) for name, value in raw.items() if name != "cmd"}

    def set_coalesce(self, ifname: str, values: dict[str, int]) -> None:
        raw = self._call(ifname, "get_coalesce")
        for name, value in values.items():
            raw[name] = int(value)
        self._call(ifname, "set_coalesce", raw)

    def lro_enabled(self, ifname: str) -> bool:
        features = self._call(ifname, "get_features")
        return "rx-lro" in features and bool(features.is_active("rx-lro"))

    def priv_flags(self, ifname: str) -> dict[str, bool]:
        """The driver's private flags (ETH_SS_PRIV_FLAGS names, ETHTOOL_GPFLAGS bits): read only."""
        import ctypes

        from pyroute2.ethtool.ioctl import EthtoolValue

        names = self._call(ifname, "get_stringset", ETH_SS_PRIV_FLAGS)
        value = EthtoolValue(cmd=ETHTOOL_GPFLAGS)

        def read() -> None:
            self._io.ifreq.value = ctypes.pointer(value)
            self._io.ioctl()

        self._run(ifname, read)
        return {name: bool(value.data >> i & 1) for i, name in enumerate(names)}

    def close(self) -> None:
        self._io.close()


def physical_interfaces(root: Path) -> tuple[str, ...]:
    """Interfaces under `<root>/sys/class/net` bound to a device driver (not lo, bridges, veths, ...)."""
    base = Path(root) / "sys/class/net"
    if not base.is_dir():
        return ()
    return tuple(sorted(p.name for p in base.iterdir() if (p / "device" / "driver").exists()))


@dataclass
class NicItr:
    """ITR control of one or more interfaces (all set to the same value).

    `notes` holds one warning per interface whose driver applied something else than its profile says
    (reported once, for the host's warnings); `_mapped` maps such an applied value back to the requested one."""

    io: HardwareIO
    ifaces: tuple[str, ...]
    force: bool = False
    notes: list[str] = field(default_factory=list)
    _mapped: dict[str, dict[int, int]] = field(default_factory=dict, repr=False)
    _warned: set[str] = field(default_factory=set, repr=False)

    def __post_init__(self) -> None:
        if not self.ifaces:
            raise HostError("no NIC to tune: pass --iface (no interface bound to a device driver found)")

    def driver(self, ifname: str) -> str:
        return nic_driver(self.io.root, ifname)

    def profile(self, ifname: str) -> DriverProfile:
        return profile_for(self.driver(ifname))

    def values(self) -> tuple[int, ...]:
        """ITR values every tuned interface applies exactly."""
        common = set(self.profile(self.ifaces[0]).values())
        for ifname in self.ifaces[1:]:
            common &= set(self.profile(ifname).values())
        if not common:
            raise HostError(f"interfaces {', '.join(self.ifaces)} share no ITR value")
        return tuple(sorted(common))

    def check_supported(self) -> dict[str, dict[str, int]]:
        """Read every interface's coalescing (raises naming the driver if it has none)."""
        return {ifname: self.io.get_coalesce(ifname) for ifname in self.ifaces}

    def preflight(self) -> None:
        """What can never work, found before any write: an interface without coalescing, or a driver with no
        verified profile and no `force`. One HostError naming every such interface."""
        problems = []
        for ifname in self.ifaces:
            try:
                self.io.get_coalesce(ifname)
            except HostError as exc:
                problems.append(str(exc))
                continue
            prof = self.profile(ifname)
            if not prof.verified and not self.force:
                problems.append(unverified_message(ifname, prof.driver))
        if problems:
            raise HostError("; ".join(problems))

    @staticmethod
    def _check_range(ifname: str, prof: DriverProfile, itr_us: int) -> None:
        if isinstance(itr_us, bool) or not isinstance(itr_us, int) or itr_us not in prof.values():
            raise KnobRangeError(
                f"ITR {itr_us!r} µs is not supported by {ifname} (driver {prof.driver}): expected "
                f"{prof.min_us}..{prof.max_us} in steps of {prof.step_us}"
            )

    def _check_lro(self, ifname: str, prof: DriverProfile, itr_us: int) -> None:
        if prof.lro_unsafe_below_us is not None and itr_us < prof.lro_unsafe_below_us and not self.force:
            if self.io.require_nic().lro_enabled(ifname):
                raise KnobRangeError(
                    f"ITR {itr_us} µs on {ifname} ({prof.driver}) with LRO on: values below "
                    f"{prof.lro_unsafe_below_us} µs reset the adapter (link drop); turn LRO off "
                    f"(ethtool -K {ifname} lro off) or pass --force"
                )

    def plan(self, itr_us: int) -> list[Setting]:
        """The writes that set `itr_us` everywhere; refuses what would be unsafe before any write. A driver
        that ignores the rest of a request turning adaptive off (bnxt_en) gets that write first, on its own
        (`reg` 1 keeps its original apart from the rx-usecs one)."""
        settings = []
        for ifname in self.ifaces:
            prof = self.profile(ifname)
            self._check_range(ifname, prof, itr_us)
            current = self.io.get_coalesce(ifname)  # EOPNOTSUPP here names the driver
            if not prof.verified and not self.force:
                raise HostError(unverified_message(ifname, prof.driver), permanent=True)
            self._check_lro(ifname, prof, itr_us)
            value = {RX_USECS: itr_us, **dict(prof.extra)}
            adaptive = prof.adaptive_field and ADAPTIVE_RX in current
            if adaptive and prof.adaptive_first:
                if current[ADAPTIVE_RX]:
                    settings.append(Setting(COALESCE, ifname, {ADAPTIVE_RX: 0}, reg=1))
            elif adaptive:
                value = {ADAPTIVE_RX: 0, **value}
            settings.append(Setting(COALESCE, ifname, value))
        return settings

    def verify(self, itr_us: int) -> list[str]:
        """Read back every interface: adaptive off (else `HostError`), and `itr_us` applied as the profile says.
        A driver that applied another value keeps it (mapped back to `itr_us`); the first such interface read
        is warned about once, and the new warnings are returned."""
        new: list[str] = []
        for ifname in self.ifaces:
            got = self.io.get_coalesce(ifname)
            prof = self.profile(ifname)
            if prof.adaptive_field and got.get(ADAPTIVE_RX, 0) != 0:
                raise HostError(
                    f"NIC {ifname} (driver {prof.driver}) reads back rx-usecs={got.get(RX_USECS)} adaptive-rx="
                    f"{got.get(ADAPTIVE_RX, 0)} after setting {itr_us} µs with adaptive off"
                )
            wanted = {RX_USECS: prof.applied(itr_us), **dict(prof.extra)}
            wrong = {k: got.get(k) for k, v in wanted.items() if got.get(k) != v}
            if not wrong:
                self._mapped.get(ifname, {}).pop(itr_us, None)  # read back as asked: no longer stands for another
                continue
            usecs = got.get(RX_USECS)
            if isinstance(usecs, int):
                self._mapped.setdefault(ifname, {})[usecs] = itr_us
            if ifname not in self._warned:
                self._warned.add(ifname)
                seen = " ".join(f"{k}={v}" for k, v in wrong.items())
                note = (
                    f"NIC {ifname} (driver {prof.driver}) reads back {seen} after setting {itr_us} µs, not what "
                    f"its profile says ({prof.rounding}); the driver's value is kept and counted as {itr_us} µs "
                    f"(reported once per interface)"
                )
                self.notes.append(note)
                new.append(note)
        return new

    def current(self) -> int | None:
        """The static ITR all interfaces share, or None (adaptive, dynamic mode, or they differ)."""
        seen = set()
        for ifname in self.ifaces:
            got = self.io.get_coalesce(ifname)
            prof = self.profile(ifname)
            usecs = got.get(RX_USECS)
            if usecs is not None:
                usecs = self._mapped.get(ifname, {}).get(usecs, usecs)
            if prof.adaptive_field and got.get(ADAPTIVE_RX, 0):
                return None
            if usecs is None or usecs in prof.dynamic_us or usecs not in prof.values():
                return None
            seen.add(usecs)
        return seen.pop() if len(seen) == 1 else None
