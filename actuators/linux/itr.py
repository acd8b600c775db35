"""NIC interrupt throttling (ITR): static `rx-usecs` with adaptive moderation off, through ethtool ioctls.

The kernel interface is ETHTOOL_GCOALESCE / ETHTOOL_SCOALESCE (what `ethtool -c/-C` use), reached through
pyroute2's `IoctlEthtool`. Settings are per interface: pyroute2 does not wrap ETHTOOL_PERQUEUE, and the
driver this tuner is calibrated on (ixgbe) has no per-queue coalescing -- `ixgbe_set_coalesce` applies
one ITR to every queue vector -- so per-queue control would add nothing there.

ixgbe facts (drivers/net/ethernet/intel/ixgbe/ixgbe_ethtool.c): the EITR register counts 2 µs units,
so values step by 2; the maximum is 1022 µs (1024 -> EINVAL); 0 = one interrupt per packet; 1 = the
driver's own dynamic (adaptive) mode; with LRO (RSC) on, crossing 6 <-> 7 µs toggles RSC and resets the
adapter (the link drops), so values below 8 µs are refused while LRO is on unless forced.
"""

from __future__ import annotations

import errno
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from actuators.linux.hwio import COALESCE, HardwareIO, Setting, nic_driver
from core.errors import HostError, KnobRangeError

RX_USECS = "rx_coalesce_usecs"
ADAPTIVE_RX = "use_adaptive_rx_coalesce"


@dataclass(frozen=True)
class DriverProfile:
    """What a NIC driver accepts for `rx-usecs`, and which values are not static ITRs."""

    driver: str
    step_us: int
    min_us: int
    max_us: int
    dynamic_us: int | None = None  # rx-usecs value meaning "driver picks" (ixgbe: 1)
    lro_unsafe_below_us: int | None = None  # with LRO on, values below this reset the adapter
    verified: bool = True

    def values(self) -> tuple[int, ...]:
        first = self.min_us + (-self.min_us) % self.step_us
        return tuple(range(first, self.max_us + 1, self.step_us))


#: Profiles from the drivers' ethtool code. Tuning ranges stop at 1022 µs (the ixgbe maximum, the range
#: the tuner's models are calibrated on) even where the driver accepts more (i40e/ice: 8160 µs).
PROFILES: dict[str, DriverProfile] = {
    "ixgbe": DriverProfile("ixgbe", 2, 2, 1022, dynamic_us=1, lro_unsafe_below_us=8),
    "i40e": DriverProfile("i40e", 2, 2, 1022),
    "ice": DriverProfile("ice", 2, 2, 1022),
}


def profile_for(driver: str) -> DriverProfile:
    """The profile of `driver`; unknown drivers get ixgbe's grid, flagged unverified (read-back checks)."""
    return PROFILES.get(driver) or DriverProfile(driver, 2, 2, 1022, verified=False)


class PyrouteEthtool:
    """The real ethtool layer: pyroute2's `IoctlEthtool` (SIOCETHTOOL ioctls on an AF_INET socket).

    Only this class touches the NIC; tests replace it. pyroute2 errors become `OSError`s with errno.
    """

    def __init__(self) -> None:
        from pyroute2.ethtool.ioctl import IoctlEthtool  # heavy-ish import kept out of module load

        self._io = IoctlEthtool()

    def _call(self, ifname: str, fn_name: str, *args: object) -> Any:  # pyroute2's ethtool objects are untyped
        from pyroute2.ethtool.ioctl import NoSuchDevice, NotSupportedError

        self._io.change_ifname(ifname)
        try:
            return getattr(self._io, fn_name)(*args)
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
    """ITR control of one or more interfaces (all set to the same value)."""

    io: HardwareIO
    ifaces: tuple[str, ...]
    force: bool = False

    def __post_init__(self) -> None:
        if not self.ifaces:
            raise HostError("no NIC to tune: pass --iface (no interface bound to a device driver found)")

    def driver(self, ifname: str) -> str:
        return nic_driver(self.io.root, ifname)

    def profile(self, ifname: str) -> DriverProfile:
        return profile_for(self.driver(ifname))

    def values(self) -> tuple[int, ...]:
        """ITR values every tuned interface accepts."""
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
                problems.append(
                    f"NIC {ifname} (driver {prof.driver}) has no verified ITR profile (known: "
                    f"{', '.join(sorted(PROFILES))}); pass --force (host option force = true) to try static rx-usecs anyway"
                )
        if problems:
            raise HostError("; ".join(problems))

    def plan(self, itr_us: int) -> list[Setting]:
        """The writes that set `itr_us` everywhere; refuses what would be unsafe before any write."""
        settings = []
        for ifname in self.ifaces:
            prof = self.profile(ifname)
            if isinstance(itr_us, bool) or not isinstance(itr_us, int) or itr_us not in prof.values():
                raise KnobRangeError(
                    f"ITR {itr_us!r} µs is not supported by {ifname} (driver {prof.driver}): expected "
                    f"{prof.min_us}..{prof.max_us} in steps of {prof.step_us}"
                )
            current = self.io.get_coalesce(ifname)  # EOPNOTSUPP here names the driver
            if not prof.verified and not self.force:
                raise HostError(
                    f"NIC {ifname} (driver {prof.driver}) has no verified ITR profile (known: "
                    f"{', '.join(sorted(PROFILES))}); pass --force to try static rx-usecs on it anyway",
                    permanent=True,
                )
            if prof.lro_unsafe_below_us is not None and itr_us < prof.lro_unsafe_below_us and not self.force:
                if self.io.require_nic().lro_enabled(ifname):
                    raise KnobRangeError(
                        f"ITR {itr_us} µs on {ifname} ({prof.driver}) with LRO on: values below "
                        f"{prof.lro_unsafe_below_us} µs reset the adapter (link drop); turn LRO off "
                        f"(ethtool -K {ifname} lro off) or pass --force"
                    )
            value = {RX_USECS: itr_us}
            if ADAPTIVE_RX in current:
                value = {ADAPTIVE_RX: 0, RX_USECS: itr_us}
            settings.append(Setting(COALESCE, ifname, value))
        return settings

    def verify(self, itr_us: int) -> None:
        """Read back every interface: static `itr_us` with adaptive off, else `HostError`."""
        for ifname in self.ifaces:
            got = self.io.get_coalesce(ifname)
            if got.get(RX_USECS) != itr_us or got.get(ADAPTIVE_RX, 0) != 0:
                raise HostError(
                    f"NIC {ifname} (driver {self.driver(ifname)}) reads back rx-usecs="
                    f"{got.get(RX_USECS)} adaptive-rx={got.get(ADAPTIVE_RX, 0)} after setting {itr_us} µs "
                    f"with adaptive off"
                )

    def current(self) -> int | None:
        """The static ITR all interfaces share, or None (adaptive, dynamic mode, or they differ)."""
        seen = set()
        for ifname in self.ifaces:
            got = self.io.get_coalesce(ifname)
            prof = self.profile(ifname)
            usecs = got.get(RX_USECS)
            if got.get(ADAPTIVE_RX, 0) or usecs is None or usecs == prof.dynamic_us or usecs not in prof.values():
                return None
            seen.add(usecs)
        return seen.pop() if len(seen) == 1 else None
