"""A file-backed fake NIC: the ethtool coalescing ioctl (`NicIoctl`) over JSON files, one per interface.

`<root>/fakehw/nic/<ifname>.json` holds `{"coalesce": {...}, "lro": false}`; writes replace the file atomically,
so several processes (the daemon, `tuner set`, the kit's power model) see one consistent NIC. Values are checked
as ixgbe checks them (rx-usecs 0..1022; 1 = the driver's dynamic mode), errors are `OSError` with the kernel's
errno, exactly what the real ioctl layer raises.
"""

from __future__ import annotations

import errno
import json
from pathlib import Path
from typing import Any

from core.fsutil import atomic_write

NIC_DIR = "fakehw/nic"
MAX_RX_USECS = 1022


def nic_path(root: Path, ifname: str) -> Path:
    return Path(root) / NIC_DIR / f"{ifname}.json"


def create_nic(root: Path, ifname: str, rx_usecs: int = 1, adaptive: int = 1, lro: bool = False) -> None:
    """Create (or reset) the fake NIC `ifname` with its boot-time coalescing."""
    state = {
        "coalesce": {
            "rx_coalesce_usecs": rx_usecs,
            "use_adaptive_rx_coalesce": adaptive,
            "rx_max_coalesced_frames": 0,
            "tx_coalesce_usecs": 0,
        },
        "lro": lro,
    }
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
        usecs = values.get("rx_coalesce_usecs", state["coalesce"]["rx_coalesce_usecs"])
        if not isinstance(usecs, int) or not 0 <= usecs <= MAX_RX_USECS:
            raise OSError(errno.EINVAL, "Invalid argument")
        state["coalesce"].update({k: int(v) for k, v in values.items()})
        atomic_write(nic_path(self.root, ifname), json.dumps(state).encode(), mode=0o644)

    def lro_enabled(self, ifname: str) -> bool:
        return bool(self._load(ifname)["lro"])

    def close(self) -> None:
        pass
