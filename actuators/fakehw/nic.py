"""A file-backed fake NIC: the ethtool coalescing ioctl (`NicIoctl`) over JSON files, one per interface.

`<root>/fakehw/nic/<ifname>.json` holds `{"driver": "ixgbe", "coalesce": {...}, "lro": false, "priv_flags": {}}`;
writes replace the file atomically, so several processes (the daemon, `tuner set`, the kit's power model) see one
consistent NIC. Each write goes through the driver's own rule (`actuators.fakehw.drivers`: its limits, rounding
and quirks), errors are `OSError` with the driver's errno, exactly what the real ioctl layer raises.
"""

from __future__ import annotations

import errno
import json
from pathlib import Path
from typing import Any

from actuators.fakehw.drivers import DRIVERS
from core.fsutil import atomic_write

NIC_DIR = "fakehw/nic"


def nic_path(root: Path, ifname: str) -> Path:
    return Path(root) / NIC_DIR / f"{ifname}.json"


def create_nic(root: Path, ifname: str, driver: str = "ixgbe", lro: bool = False) -> None:
    """Create (or reset) the fake NIC `ifname` played as `driver` (a key of `DRIVERS`), at its boot coalescing."""
    fake = DRIVERS[driver]
    state = {"driver": driver, "coalesce": dict(fake.boot), "lro": lro, "priv_flags": dict(fake.priv_flags)}
    path = nic_path(root, ifname)
    path.parent.mkdir(parents=True, exist_ok=True)
    atomic_write(path, json.dumps(state).encode(), mode=0o644)


class FileNic:
    """`NicIoctl` over the kit's JSON files under `root`."""

    def __init__(self, root: str | Path) -> None:
        self.root = Path(root)

    def _load(self, ifname: str) -> dict[str, Any]:
        try:
            data: dict[str, Any] = json.loads(nic_path(self.root, ifname).read_text())
            return data
        except FileNotFoundError:
            raise OSError(errno.ENODEV, "No such device") from None

    def get_coalesce(self, ifname: str) -> dict[str, int]:
        return dict(self._load(ifname)["coalesce"])

    def set_coalesce(self, ifname: str, values: dict[str, int]) -> None:
        state = self._load(ifname)
        old = state["coalesce"]
        if any(k not in old or isinstance(v, bool) or not isinstance(v, int) or v < 0 for k, v in values.items()):
            raise OSError(errno.EINVAL, "Invalid argument")
        state["coalesce"] = DRIVERS[state.get("driver", "ixgbe")].apply(old, {**old, **values})
        atomic_write(nic_path(self.root, ifname), json.dumps(state).encode(), mode=0o644)

    def lro_enabled(self, ifname: str) -> bool:
        return bool(self._load(ifname)["lro"])

    def priv_flags(self, ifname: str) -> dict[str, bool]:
        return {k: bool(v) for k, v in self._load(ifname).get("priv_flags", {}).items()}

    def close(self) -> None:
        pass
