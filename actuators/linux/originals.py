"""Persisted originals: the hardware values found before the tuner's first write, so any process can undo.

The store is one JSON file (`<state-dir>/originals.json`) written atomically (temp file, fsync, rename,
fsync of the directory) before each first write of a value. The first value recorded for a key wins:
a daemon restarted after a crash must not mistake its own settings for the originals. Updates take an
exclusive `flock` and re-read the file, so two processes (daemon and `tuner set`) never lose each
other's entries. `restore_originals` puts every value back (reverse order of recording) and forgets
each one it restored.
"""

from __future__ import annotations

import fcntl
import json
import logging
import os
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from actuators.linux.hwio import Setting, describe
from core.errors import HostError
from core.fsutil import atomic_write, fsync_dir

log = logging.getLogger(__name__)

STATE_FILE = "originals.json"
LOCK_FILE = "originals.lock"
FORMAT_VERSION = 1


def default_state_dir(root: Path) -> Path:
    """`<root>/var/lib/tuner` (systemd `StateDirectory=tuner`); a fake root keeps its state inside."""
    return Path(root) / "var" / "lib" / "tuner"


def atomic_write_text(path: Path, text: str, mode: int = 0o600) -> None:
    """Replace `path` with `text` atomically (see `core.fsutil.atomic_write`)."""
    atomic_write(path, text.encode(), mode)


class OriginalsStore:
    """The originals of one host (one `root`), persisted under `state_dir`."""

    def __init__(self, state_dir: Path, root: Path = Path("/")) -> None:
        self.state_dir = Path(state_dir)
        self.root = Path(root)
        self.path = self.state_dir / STATE_FILE
        self._entries: list[Setting] = self._load()

    def _load(self) -> list[Setting]:
        try:
            text = self.path.read_text()
        except FileNotFoundError:
            return []
        except OSError as exc:
            raise HostError(f"cannot read {self.path}: {os.strerror(exc.errno or 0)}") from None
        try:
            data = json.loads(text)
            if data.get("version") != FORMAT_VERSION:
                raise ValueError(f"version {data.get('version')!r}, expected {FORMAT_VERSION}")
            saved_root = data.get("root")
            if saved_root is not None and Path(saved_root) != self.root:
                raise ValueError(f"saved for root {saved_root}, not {self.root}")
            return [Setting.from_json(e) for e in data["entries"]]
        except (ValueError, KeyError, TypeError, AttributeError) as exc:
            raise HostError(f"{self.path}: unreadable originals ({exc}); fix or remove it by hand") from None

    def entries(self) -> list[Setting]:
        """The saved originals, in the order they were first recorded."""
        return list(self._entries)

    def get(self, key: tuple[str, str, int]) -> Setting | None:
        return next((e for e in self._entries if e.key == key), None)

    @contextmanager
    def _locked(self) -> Iterator[None]:
        """Exclusive lock across processes; the entries are re-read from disk inside it."""
        self.state_dir.mkdir(parents=True, exist_ok=True, mode=0o700)
        fd = os.open(self.state_dir / LOCK_FILE, os.O_RDWR | os.O_CREAT, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            self._entries = self._load()
            yield
        finally:
            os.close(fd)

    def remember(self, original: Setting) -> bool:
        """Persist `original` unless its key is already saved (by any process); True when it was new.
        Durable on return."""
        try:
            with self._locked():
                if self.get(original.key) is not None:
                    return False
                self._entries.append(original)
                try:
                    self._persist()
                except OSError:
                    self._entries.pop()
                    raise
        except OSError as exc:
            raise HostError(
                f"cannot save originals to {self.path}: {os.strerror(exc.errno or 0)}; nothing was changed"
            ) from None
        return True

    def forget(self, keys: set[tuple[str, str, int]]) -> None:
        """Drop the given entries (restored); removes the file when none are left."""
        try:
            with self._locked():
                self._entries = [e for e in self._entries if e.key not in keys]
                if self._entries:
                    self._persist()
                elif self.path.exists():
                    self.path.unlink()
                    fsync_dir(self.state_dir)
        except OSError as exc:
            raise HostError(
                f"cannot update {self.path}: {os.strerror(exc.errno or 0)} (the values were "
                f"restored; the file still lists them)"
            ) from None

    def _persist(self) -> None:
        doc: dict[str, Any] = {
            "version": FORMAT_VERSION,
            "root": str(self.root),
            "saved_by_pid": os.getpid(),
            "saved_at_unix": time.time(),
            "entries": [e.to_json() for e in self._entries],
        }
        atomic_write_text(self.path, json.dumps(doc, indent=1) + "\n")


@dataclass(frozen=True)
class RestoreReport:
    """What `restore_originals` did: the settings put back and the ones that failed (with why)."""

    restored: tuple[Setting, ...]
    failed: tuple[tuple[Setting, str], ...]


def restore_originals(io: Any, store: OriginalsStore) -> RestoreReport:
    """Write every saved original back (newest first), forget those that succeeded.

    `io` is a `HardwareIO`; in dry-run mode the writes are only logged and the store is kept.
    Raises `HostError` naming the first failure after trying all of them.
    """
    restored: list[Setting] = []
    failed: list[tuple[Setting, str]] = []
    for original in reversed(store.entries()):
        try:
            io.apply(original)
            restored.append(original)
        except HostError as exc:
            failed.append((original, str(exc)))
    if not io.dry_run:
        store.forget({s.key for s in restored})
    report = RestoreReport(tuple(restored), tuple(failed))
    if failed:
        setting, why = failed[0]
        raise HostError(
            f"restore: {len(failed)} of {len(failed) + len(restored)} values not restored "
            f"(first: {describe(setting, io.root)}: {why}); they stay in {store.path}"
        )
    return report
