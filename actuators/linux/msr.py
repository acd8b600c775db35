"""Model-specific registers through the Linux `msr` driver: 8-byte pread/pwrite at offset = register.

`<root>/dev/cpu/N/msr` is a character device on a real host (module `msr`, needs CAP_SYS_RAWIO) and a
plain file in tests; a read beyond a fake file's end behaves like the kernel's EIO for a register the
CPU does not implement.
"""

from __future__ import annotations

import errno
import os
import struct
from pathlib import Path

from core.errors import HostError, permanent_errno

_U64 = struct.Struct("<Q")

# The two system calls, as module attributes so tests can give a fake file device semantics.
_pread = os.pread
_pwrite = os.pwrite


def msr_path(root: Path, cpu: int) -> Path:
    """`<root>/dev/cpu/<cpu>/msr`."""
    return Path(root) / "dev" / "cpu" / str(cpu) / "msr"


def _open_error(path: Path, cpu: int, exc: OSError) -> HostError:
    """Permanent when the errno says so (module gone, CPU offline, no capability: `core.errors.PERMANENT_ERRNOS`)."""
    permanent = permanent_errno(exc.errno)
    if exc.errno == errno.ENOENT:
        if path.parent.is_dir():
            return HostError(f"msr module not loaded: {path} is missing (run `modprobe msr`)", permanent=True)
        return HostError(f"CPU {cpu} has no {path.parent} (offline or no such CPU)", permanent=True)
    if exc.errno in (errno.EACCES, errno.EPERM):
        return HostError(f"permission denied opening {path}: needs root with CAP_SYS_RAWIO", permanent=True)
    return HostError(f"cannot open {path}: {os.strerror(exc.errno or 0)}", permanent=permanent)


def read_msr(root: Path, cpu: int, reg: int) -> int:
    """Read the 64-bit MSR `reg` on `cpu`; raise `HostError` with the reason on failure."""
    path = msr_path(root, cpu)
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError as exc:
        raise _open_error(path, cpu, exc) from None
    try:
        data = _pread(fd, 8, reg)
    except OSError as exc:
        if exc.errno == errno.EIO:
            raise HostError(
                f"MSR {reg:#x} is not implemented on CPU {cpu} (EIO reading {path})", permanent=True
            ) from None
        raise HostError(
            f"cannot read MSR {reg:#x} from {path}: {os.strerror(exc.errno or 0)}", permanent=permanent_errno(exc.errno)
        ) from None
    finally:
        os.close(fd)
    if len(data) != 8:
        raise HostError(f"MSR {reg:#x} is not implemented on CPU {cpu} (EIO reading {path})", permanent=True)
    value: int = _U64.unpack(data)[0]
    return value


def write_msr(root: Path, cpu: int, reg: int, value: int) -> None:
    """Write the 64-bit `value` to MSR `reg` on `cpu`; raise `HostError` with the reason on failure."""
    if not 0 <= value < 1 << 64:
        raise HostError(f"MSR {reg:#x} value {value:#x} does not fit in 64 bits")
    path = msr_path(root, cpu)
    try:
        fd = os.open(path, os.O_WRONLY)
    except OSError as exc:
        raise _open_error(path, cpu, exc) from None
    try:
        written = _pwrite(fd, _U64.pack(value), reg)
    except OSError as exc:
        if exc.errno == errno.EIO:
            raise HostError(
                f"CPU {cpu} refused {value:#x} for MSR {reg:#x} (EIO: reserved bits or unsupported register)"
            ) from None
        if exc.errno in (errno.EACCES, errno.EPERM):
            raise HostError(
                f"permission denied writing MSR {reg:#x} on CPU {cpu}: needs CAP_SYS_RAWIO "
                f"(and msr.allow_writes=on on kernels that lock MSR writes)",
                permanent=True,
            ) from None
        raise HostError(
            f"cannot write MSR {reg:#x} to {path}: {os.strerror(exc.errno or 0)}", permanent=permanent_errno(exc.errno)
        ) from None
    finally:
        os.close(fd)
    if written != 8:
        raise HostError(f"short write of MSR {reg:#x} on CPU {cpu} ({written} of 8 bytes)")
