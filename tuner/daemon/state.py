"""Crash-safe persistence of the daemon's state: atomic JSON writes (tmp + fsync + rename + dir fsync).

Layout under the state directory:
  state.json                 -- everything the loop needs to resume (see `DaemonState`), rewritten after
                                every trial, decision and knob change
  experiments/<retune>.json  -- the optimiser (Ax experiment) of each finished retune (newest
                                `KEEP_EXPERIMENTS`), and <retune>.table.json, its predictions over the
                                knob grid, which `GetOperatingPoint` answers from without loading Ax
The optimiser of the retune in progress lives inside state.json, written in the same atomic write as the
trial it just completed, so a measured trial is never lost and never half-recorded.
"""

from __future__ import annotations

import fcntl
import json
import os
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from core.errors import TunerError
from core.fsutil import atomic_write

STATE_VERSION = 1
KEEP_TRIALS = 5000
KEEP_DECISIONS = 500
KEEP_WINDOWS = 300
KEEP_EXPERIMENTS = 8


@dataclass
class DaemonState:
    """What survives a restart. Plain JSON types only (points as [itr_us, dvfs_ghz])."""

    version: int = STATE_VERSION
    #: True from just before the first knob write until the originals are restored.
    knobs_dirty: bool = False
    retune_seq: int = 0
    #: Retune in progress: {"id", "reason", "started", "qps", "optimizer"} (optimizer = Optimizer.to_json()).
    current_retune: dict[str, Any] | None = None
    #: Latest decision in force: {"retune_id", "reason", "point", "met_sla", "qps", "time", ...}.
    held: dict[str, Any] | None = None
    tuned_qps: float = 0.0
    last_retune_time: float = 0.0
    trials: list[dict[str, Any]] = field(default_factory=list)
    decisions: list[dict[str, Any]] = field(default_factory=list)
    #: Recent holding windows, met the SLA or not: {"point": [itr, ghz], "qps", "measurement", "time"}.
    windows: list[dict[str, Any]] = field(default_factory=list)
    #: Run-time policy from SetPolicy (overrides the config until the config's policy changes).
    policy_override: dict[str, Any] | None = None
    #: The config's policy when the override was set, to notice an edited config on reload.
    policy_override_base: dict[str, Any] | None = None
    experiments: list[str] = field(default_factory=list)
    counters: dict[str, int] = field(default_factory=dict)

    def trim(self) -> None:
        del self.trials[:-KEEP_TRIALS]
        del self.decisions[:-KEEP_DECISIONS]
        del self.windows[:-KEEP_WINDOWS]


class StateStore:
    """Reads and atomically writes the daemon's state under one directory."""

    def __init__(self, directory: Path) -> None:
        self.dir = Path(directory)
        self.path = self.dir / "state.json"
        self.exp_dir = self.dir / "experiments"

    def ensure(self) -> None:
        """Create the directory (0700) and lock it for this process, or raise `TunerError` saying why not."""
        try:
            self.dir.mkdir(parents=True, exist_ok=True, mode=0o700)
            self.exp_dir.mkdir(exist_ok=True, mode=0o700)
            probe = self.dir / ".write-test"
            atomic_write(probe, b"ok")
            probe.unlink()
            fd = os.open(self.dir / "daemon.lock", os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
        except OSError as exc:
            raise TunerError(f"state.dir {self.dir}: not writable: {exc.strerror or exc}") from None
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            os.close(fd)
            raise TunerError(f"state.dir {self.dir}: in use by another tuner daemon") from None
        self._lock_fd: int | None = fd  # held until the process exits (or `release`)

    def release(self) -> None:
        fd = getattr(self, "_lock_fd", None)
        if fd is not None:
            os.close(fd)
            self._lock_fd = None

    def load(self) -> DaemonState:
        """The saved state, or a fresh one when there is none; corrupt files raise `TunerError`."""
        try:
            raw = self.path.read_bytes()
        except FileNotFoundError:
            return DaemonState()
        except OSError as exc:
            raise TunerError(f"{self.path}: cannot read state: {exc.strerror or exc}") from None
        try:
            data = json.loads(raw)
            if not isinstance(data, dict):
                raise ValueError("not an object")
            if data.get("version") != STATE_VERSION:
                raise ValueError(f"version {data.get('version')!r}, expected {STATE_VERSION}")
            known = set(DaemonState.__dataclass_fields__)
            return DaemonState(**{k: v for k, v in data.items() if k in known})
        except (ValueError, TypeError) as exc:
            raise TunerError(f"{self.path}: corrupt state ({exc}); move it away to start afresh") from None

    def save(self, state: DaemonState) -> None:
        state.trim()
        atomic_write(self.path, json.dumps(asdict(state), separators=(",", ":")).encode())

    def save_experiment(self, state: DaemonState, retune_id: str, optimizer_json: str) -> None:
        """Keep a finished retune's optimiser; drop the oldest beyond `KEEP_EXPERIMENTS`."""
        atomic_write(self.exp_dir / f"{retune_id}.json", optimizer_json.encode())
        if retune_id not in state.experiments:
            state.experiments.append(retune_id)
        for old in state.experiments[:-KEEP_EXPERIMENTS]:
            for name in (f"{old}.json", f"{old}.table.json"):
                try:
                    (self.exp_dir / name).unlink()
                except FileNotFoundError:
                    pass
        del state.experiments[:-KEEP_EXPERIMENTS]

    def save_table(self, retune_id: str, table: dict[str, Any]) -> None:
        """The model's predictions over the knob grid for a finished retune (for `GetOperatingPoint`)."""
        atomic_write(self.exp_dir / f"{retune_id}.table.json", json.dumps(table).encode())

    def load_table(self, retune_id: str) -> dict[str, Any] | None:
        try:
            data = json.loads((self.exp_dir / f"{retune_id}.table.json").read_text())
        except (OSError, ValueError):
            return None
        return data if isinstance(data, dict) else None

    def load_experiment(self, retune_id: str) -> str | None:
        try:
            return (self.exp_dir / f"{retune_id}.json").read_text()
        except OSError:
            return None
