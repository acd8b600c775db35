"""The one choke point for hardware writes, and all-or-nothing transactions over it.

Every value the tuner changes is a `Setting`: a sysfs file's text, one MSR on one CPU, or some
coalescing fields of one NIC. `HardwareIO.apply` performs it -- or, in dry-run mode, logs and records
it and touches nothing. `Transaction` reads each value before changing it, persists the original
(first change ever wins) before the write, and undoes its own writes in reverse order if anything in it
fails, so no error leaves the host half-changed.
"""

from __future__ import annotations

import errno
import logging
import os
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Literal, Protocol, runtime_checkable

from actuators.linux.msr import read_msr, write_msr
from core.errors import HostError, is_permanent, permanent_errno

log = logging.getLogger(__name__)

SYSFS, MSR, COALESCE = "sysfs", "msr", "coalesce"
UNSUPPORTED = "<unsupported>"  # what cpufreq's scaling_setspeed shows without the userspace governor


@dataclass(frozen=True)
class Setting:
    """One hardware value.

    sysfs: `target` is the path relative to the root (`sys/devices/...`), `value` its text;
    msr: `target` is the CPU number as text, `reg` the register, `value` the 64-bit integer;
    coalesce: `target` is the interface name, `value` a dict of ETHTOOL_SCOALESCE fields.
    """

    kind: str
    target: str
    value: Any
    reg: int = 0

    @property
    def key(self) -> tuple[str, str, int]:
        return (self.kind, self.target, self.reg)

    def to_json(self) -> dict[str, Any]:
        return {"kind": self.kind, "target": self.target, "reg": self.reg, "value": self.value}

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Setting:
        kind = data["kind"]
        if kind not in (SYSFS, MSR, COALESCE):
            raise ValueError(f"unknown kind {kind!r}")
        value = data["value"]
        if kind == MSR and not isinstance(value, int):
            raise ValueError("msr value must be an integer")
        if kind == COALESCE and not (isinstance(value, dict) and all(isinstance(v, int) for v in value.values())):
            raise ValueError("coalesce value must map field names to integers")
        if kind == SYSFS and not isinstance(value, str):
            raise ValueError("sysfs value must be text")
        return cls(kind, str(data["target"]), value, int(data.get("reg", 0)))


class NicIoctl(Protocol):
    """The ethtool layer (ETHTOOL_GCOALESCE / ETHTOOL_SCOALESCE / GFEATURES): real or mocked.

    Failures are raised as `OSError` with the kernel's errno (EOPNOTSUPP, EPERM, EINVAL, ENODEV).
    """

    def get_coalesce(self, ifname: str) -> dict[str, int]: ...

    def set_coalesce(self, ifname: str, values: dict[str, int]) -> None: ...

    def lro_enabled(self, ifname: str) -> bool: ...


@runtime_checkable
class NicPrivFlags(Protocol):
    """An ethtool layer that can also read the driver's private flags (ETHTOOL_GPFLAGS), e.g. mlx5's
    `rx_cqe_moder` (CQE vs EQE timer mode). Optional: asked with isinstance; read only."""

    def priv_flags(self, ifname: str) -> dict[str, bool]: ...


class UnavailableNic:
    """Stands in for the ethtool ioctl when it must not be used (fake `--root`): every call is an error."""

    def __init__(self, reason: str) -> None:
        self.reason = reason

    def get_coalesce(self, ifname: str) -> dict[str, int]:
        raise HostError(self.reason, permanent=True)

    def set_coalesce(self, ifname: str, values: dict[str, int]) -> None:
        raise HostError(self.reason, permanent=True)

    def lro_enabled(self, ifname: str) -> bool:
        raise HostError(self.reason, permanent=True)


def describe(setting: Setting, root: Path) -> str:
    """A one-line description of a write, as the dry run logs it."""
    if setting.kind == SYSFS:
        return f"write {setting.value!r} to {Path(root) / setting.target}"
    if setting.kind == MSR:
        return f"wrmsr cpu {setting.target} {setting.reg:#x} = {setting.value:#x} ({Path(root) / 'dev/cpu' / setting.target / 'msr'})"
    fields = " ".join(f"{k}={v}" for k, v in setting.value.items())
    return f"ethtool SCOALESCE {setting.target} {fields}"


@dataclass
class HardwareIO:
    """Reads and writes under `root`; with `dry_run` every write is logged and recorded, none made."""

    root: Path
    nic: NicIoctl | None = None
    dry_run: bool = False
    planned: list[Setting] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.root = Path(self.root)

    def path(self, rel: str) -> Path:
        """`rel` (e.g. `sys/class/net`) under the root."""
        return self.root / rel.lstrip("/")

    # -- reads -------------------------------------------------------------------------------
    def read_text(self, rel: str) -> str:
        """A sysfs/procfs file's content, stripped."""
        path = self.path(rel)
        try:
            return path.read_text().strip()
        except FileNotFoundError:
            raise HostError(f"{path} is missing", permanent=True) from None
        except PermissionError:
            raise HostError(f"permission denied reading {path} (run as root)", permanent=True) from None
        except OSError as exc:
            raise HostError(
                f"cannot read {path}: {os.strerror(exc.errno or 0)}", permanent=permanent_errno(exc.errno)
            ) from None

    def read_msr(self, cpu: int, reg: int) -> int:
        return read_msr(self.root, cpu, reg)

    def require_nic(self) -> NicIoctl:
        if self.nic is None:
            raise HostError("no ethtool layer configured for NIC coalescing", permanent=True)
        return self.nic

    def get_coalesce(self, ifname: str) -> dict[str, int]:
        try:
            return dict(self.require_nic().get_coalesce(ifname))
        except OSError as exc:
            raise nic_error(ifname, "ETHTOOL_GCOALESCE", exc, self.root) from None

    def read(self, setting: Setting) -> Setting:
        """The current value of what `setting` would change, as a `Setting` of the same shape."""
        if setting.kind == SYSFS:
            return replace(setting, value=self.read_text(setting.target))
        if setting.kind == MSR:
            return replace(setting, value=self.read_msr(int(setting.target), setting.reg))
        current = self.get_coalesce(setting.target)
        missing = [k for k in setting.value if k not in current]
        if missing:
            raise HostError(f"NIC {setting.target}: coalescing has no field {missing[0]!r}", permanent=True)
        return replace(setting, value={k: int(current[k]) for k in setting.value})

    # -- writes ------------------------------------------------------------------------------
    def apply(self, setting: Setting) -> None:
        """Make the write (or, dry run, log and record it)."""
        if self.dry_run:
            self.planned.append(setting)
            log.info("dry run: would %s", describe(setting, self.root))
            return
        log.debug("%s", describe(setting, self.root))
        if setting.kind == SYSFS:
            self._write_text(self.path(setting.target), setting.value)
        elif setting.kind == MSR:
            write_msr(self.root, int(setting.target), setting.reg, setting.value)
        elif setting.kind == COALESCE:
            try:
                self.require_nic().set_coalesce(setting.target, dict(setting.value))
            except OSError as exc:
                raise nic_error(setting.target, "ETHTOOL_SCOALESCE", exc, self.root) from None
        else:
            raise HostError(f"unknown setting kind {setting.kind!r}")

    def _write_text(self, path: Path, text: str) -> None:
        # One write() without O_CREAT: sysfs attributes are written whole and never created.
        try:
            fd = os.open(path, os.O_WRONLY | os.O_TRUNC)
        except FileNotFoundError:
            raise HostError(f"{path} is missing", permanent=True) from None
        except PermissionError:
            raise HostError(f"permission denied writing {path} (run as root)", permanent=True) from None
        try:
            os.write(fd, text.encode())
        except OSError as exc:
            if exc.errno in (errno.EACCES, errno.EPERM):
                raise HostError(f"permission denied writing {path} (run as root)", permanent=True) from None
            if exc.errno == errno.EINVAL:
                raise HostError(f"kernel refused {text!r} for {path} (EINVAL)") from None
            raise HostError(
                f"cannot write {text!r} to {path}: {os.strerror(exc.errno or 0)}", permanent=permanent_errno(exc.errno)
            ) from None
        finally:
            os.close(fd)


def nic_driver(root: Path, ifname: str) -> str:
    """The kernel driver bound to `ifname` (`ixgbe`, ...), `virtual` without a device, `?` if unknown."""
    base = Path(root) / "sys/class/net" / ifname
    link = base / "device" / "driver"
    try:
        return Path(os.readlink(link)).name
    except FileNotFoundError:
        return "virtual" if base.exists() and not (base / "device").exists() else "?"
    except OSError:
        return "?"


def nic_error(ifname: str, op: str, exc: OSError, root: Path) -> HostError:
    """A one-line error for a failed ethtool ioctl, naming the interface's driver; permanent when the errno says
    a retry cannot succeed (EOPNOTSUPP, EPERM, ENODEV: `core.errors.PERMANENT_ERRNOS`)."""
    driver = nic_driver(root, ifname)
    code = exc.errno
    permanent = permanent_errno(code)
    if code in (errno.EOPNOTSUPP, errno.ENOTSUP):
        why = f"NIC {ifname} (driver {driver}) does not support interrupt coalescing ({op}: EOPNOTSUPP)"
    elif code in (errno.EPERM, errno.EACCES):
        why = f"permission denied for {op} on {ifname}: needs CAP_NET_ADMIN"
    elif code == errno.ENODEV:
        why = f"no network interface {ifname!r} (ENODEV)"
    elif code == errno.EINVAL:
        why = f"NIC {ifname} (driver {driver}) rejected the coalescing values ({op}: EINVAL)"
    else:
        why = f"{op} on {ifname} (driver {driver}) failed: {os.strerror(code or 0)}"
    return HostError(why, permanent=permanent)


class Transaction:
    """All-or-nothing writes: originals persisted before the first write, own writes undone on failure.

    Use as a context manager; `store` is an `OriginalsStore` (or None to skip persistence).
    """

    def __init__(self, io: HardwareIO, store: Any | None) -> None:
        self.io = io
        self.store = store
        self._undo: list[Setting] = []
        self._new_keys: set[tuple[str, str, int]] = set()

    def write(self, setting: Setting) -> None:
        before = self.io.read(setting)
        if before.value == setting.value:
            return  # already so: no write, nothing to undo or remember
        # `scaling_setspeed` reads "<unsupported>" unless the userspace governor runs: there is nothing to
        # put back (writing that text would be EINVAL); restoring the governor is what undoes it.
        restorable = not (before.kind == SYSFS and before.value == UNSUPPORTED)
        if restorable and self.store is not None and not self.io.dry_run and self.store.remember(before):
            self._new_keys.add(before.key)
        self.io.apply(setting)  # a write the kernel refused changed nothing: no undo entry for it
        if restorable:
            self._undo.append(before)

    def rollback(self) -> list[str]:
        """Undo this transaction's writes in reverse order; return the errors (empty when clean)."""
        errors: list[str] = []
        while self._undo:
            setting = self._undo.pop()
            try:
                self.io.apply(setting)
            except Exception as exc:  # noqa: BLE001 - keep undoing the rest
                errors.append(str(exc))
        return errors

    def __enter__(self) -> Transaction:
        return self

    def __exit__(self, exc_type: Any, exc: BaseException | None, tb: Any) -> Literal[False]:
        if exc is None:
            self._undo.clear()
            return False
        errors = [] if self.io.dry_run else self.rollback()
        if errors:
            raise HostError(f"{exc}; rollback also failed: {errors[0]}", permanent=is_permanent(exc)) from exc
        if self.store is not None and self._new_keys:
            self.store.forget(self._new_keys)  # fully undone: these originals are current values again
        return False
