"""A host's hardware class: what makes two memcached hosts interchangeable for tuning.

Two hosts with the same CPU model, core count, NIC driver, memcached version and kernel respond alike to
the same ITR x DVFS point, so a new host may start from the trials of its class. The host finds its class
itself (`hardware_class()`, the optional ability `actuators.abilities.HardwareClassified`): the real host
reads `/proc/cpuinfo`, the NIC's sysfs driver link, memcached's `stats` (`version`) and `uname`; the simulated
host reports its model parameters.

`HardwareClass.id` is a short stable digest of the five fields (what the trial store indexes);
`label` is the readable form. A field the host cannot read is "unknown", never guessed.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import socket
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Protocol, runtime_checkable

UNKNOWN = "unknown"


@dataclass(frozen=True)
class HardwareClass:
    """CPU model, online core count, NIC driver, memcached version and kernel release of one host."""

    cpu_model: str
    cores: int
    nic_driver: str
    memcached_version: str
    kernel: str

    @property
    def id(self) -> str:
        """A 16-hex-digit digest of the fields (stable across runs, Python versions and hosts)."""
        text = json.dumps(asdict(self), sort_keys=True, separators=(",", ":"))
        return hashlib.sha256(text.encode()).hexdigest()[:16]

    @property
    def label(self) -> str:
        return (
            f"{self.cpu_model} x{self.cores}, {self.nic_driver}, memcached {self.memcached_version}, "
            f"kernel {self.kernel}"
        )

    def to_dict(self) -> dict[str, object]:
        return {**asdict(self), "id": self.id}


@runtime_checkable
class HardwareClassified(Protocol):
    """A host that can name its hardware class (hosts of one class may start from each other's trials)."""

    def hardware_class(self) -> HardwareClass: ...


def host_class(host: object) -> HardwareClass | None:
    """`host.hardware_class()`, or None for a host without the `HardwareClassified` ability."""
    return host.hardware_class() if isinstance(host, HardwareClassified) else None


def cpu_model(root: Path) -> str:
    """The `model name` of the first CPU in `<root>/proc/cpuinfo` (whitespace collapsed)."""
    try:
        text = (root / "proc/cpuinfo").read_text(errors="replace")
    except OSError:
        return UNKNOWN
    for line in text.splitlines():
        key, _, value = line.partition(":")
        if key.strip() in ("model name", "Model", "cpu model") and value.strip():
            return " ".join(value.split())
    return UNKNOWN


def online_cores(root: Path) -> int:
    """Online CPUs from `<root>/sys/devices/system/cpu/online` (a list like 0-3,8), else 0."""
    try:
        text = (root / "sys/devices/system/cpu/online").read_text().strip()
    except OSError:
        return 0
    n = 0
    for part in filter(None, text.split(",")):
        lo, _, hi = part.partition("-")
        try:
            n += int(hi or lo) - int(lo) + 1
        except ValueError:
            return 0
    return n


def nic_driver(root: Path, iface: str | None) -> str:
    """The driver bound to `iface` (the basename of `<root>/sys/class/net/IFACE/device/driver`)."""
    if not iface:
        return UNKNOWN
    try:
        return Path(os.readlink(root / "sys/class/net" / iface / "device/driver")).name or UNKNOWN
    except OSError:
        return UNKNOWN


def kernel_release(root: Path) -> str:
    """The running kernel's release (`<root>/proc/sys/kernel/osrelease`, i.e. `uname -r`)."""
    try:
        return (root / "proc/sys/kernel/osrelease").read_text().strip() or UNKNOWN
    except OSError:
        return UNKNOWN


def memcached_version(host: str, port: int, timeout_s: float = 1.0) -> str:
    """`version` from memcached's text-protocol `stats` at host:port (`unknown` if it does not answer)."""
    try:
        with socket.create_connection((host, port), timeout=timeout_s) as s:
            s.sendall(b"stats\r\n")
            buf = b""
            while not buf.endswith(b"END\r\n"):
                chunk = s.recv(65536)
                if not chunk:
                    break
                buf += chunk
    except OSError:
        return UNKNOWN
    m = re.search(rb"^STAT version (\S+)\r$", buf, re.MULTILINE)
    return m.group(1).decode(errors="replace") if m else UNKNOWN


def detect(root: str | Path = "/", iface: str | None = None, memcached: tuple[str, int] | None = None) -> HardwareClass:
    """The class of the machine under `root` (reads only; never writes anything)."""
    r = Path(root)
    return HardwareClass(
        cpu_model=cpu_model(r),
        cores=online_cores(r),
        nic_driver=nic_driver(r, iface),
        memcached_version=memcached_version(*memcached) if memcached else UNKNOWN,
        kernel=kernel_release(r),
    )


__all__ = [
    "UNKNOWN",
    "HardwareClass",
    "HardwareClassified",
    "host_class",
    "cpu_model",
    "detect",
    "kernel_release",
    "memcached_version",
    "nic_driver",
    "online_cores",
]
