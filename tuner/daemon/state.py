"""Crash-safe persistence of the daemon's state, each save costing what changed rather than the history.

Layout under the state directory:
  state.json                 -- the small part the loop needs to resume (see `DaemonState`: knobs_dirty, the
                                held decision, counters, policy, the retune in progress with its optimiser,
                                zlib-compressed as `optimizer_zlib`), replaced atomically (tmp + fsync + rename + dir fsync) after every trial,
                                decision and knob change; it names each journal's committed extent
  journal/<list>.<n>.jsonl   -- the append-only lists (trials, decisions, holding windows), one JSON object a
                                line (`tuner.daemon.journal`): a save appends only the rows added since the last
                                one, and rewrites a list to its `KEEP_*` newest rows once its file holds twice that
  experiments/<retune>.json  -- the optimiser (Ax experiment) of each finished retune (newest
                                `KEEP_EXPERIMENTS`), and <retune>.table.json, its predictions over the
                                knob grid, which `GetOperatingPoint` answers from without loading Ax
A save appends (and fsyncs) the new rows first, then replaces state.json with their new committed lengths:
state.json is the commit point. A crash before the replace leaves the old lengths, and the next load ignores
the uncommitted tail, so a trial row and the optimiser of the retune in progress (in state.json) are committed
together: a measured trial is never lost and never half-recorded. A version-1 state.json (the lists inline)
loads as before and is migrated by the first save.

In memory every row's point (and its measurement's) is an `OperatingPoint`; the files hold [itr_us, dvfs_ghz]
(`row_json` on the way out, `row_loaded` on the way in), so files written by any earlier version still load.
"""

from __future__ import annotations

import base64
import errno
import fcntl
import json
import logging
import os
import stat
import zlib
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any

from actuators.host import OperatingPoint
from core.errors import TunerError
from core.fsutil import atomic_write
from tuner.daemon.journal import Journal, Mark, ReadResult
from tuner.daemon.plain import point_from, point_list

log = logging.getLogger("tuner.daemon.loop")  # the control loop's logger (operators filter on it)

STATE_VERSION = 2
#: The version whose state.json held the lists inline (loaded, then migrated by the first save).
LEGACY_VERSION = 1
KEEP_TRIALS = 5000
KEEP_DECISIONS = 500
KEEP_WINDOWS = 300
KEEP_EXPERIMENTS = 8


def _json_point(v: Any) -> Any:
    return point_list(v) if isinstance(v, OperatingPoint) else v


def row_json(row: dict[str, Any]) -> dict[str, Any]:
    """A row (trial, decision, window) as its JSON file holds it: points as [itr_us, dvfs_ghz]."""
    out = {**row, "point": _json_point(row.get("point"))} if "point" in row else dict(row)
    md = row.get("measurement")
    if isinstance(md, dict) and "point" in md:
        out["measurement"] = {**md, "point": _json_point(md["point"])}
    return out


def row_loaded(row: Any) -> Any:
    """A row read from a JSON file with its points (and its measurement's) as `OperatingPoint`s, in place;
    `ValueError` naming the field when one is not [itr_us, dvfs_ghz]."""
    if not isinstance(row, dict):
        return row
    for where in (row, row.get("measurement")):
        if isinstance(where, dict) and where.get("point") is not None:
            try:
                where["point"] = point_from(where["point"])
            except (TypeError, ValueError, IndexError, KeyError) as exc:
                raise ValueError(f"point: expected [itr_us, dvfs_ghz], got {where['point']!r} ({exc})") from None
    return row


@dataclass
class DaemonState:
    """What survives a restart. Plain JSON types, but points are `OperatingPoint`s (`row_json` for the file)."""

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
        for kind in LISTS:
            del getattr(self, kind)[: -keep(kind)]


def plain_state(state: DaemonState) -> dict[str, Any]:
    """`state` as plain JSON types, the way its files hold it (points as [itr_us, dvfs_ghz])."""
    doc: dict[str, Any] = {f.name: getattr(state, f.name) for f in fields(state)}
    for kind in LISTS:
        doc[kind] = [row_json(r) for r in doc[kind]]
    doc["held"] = None if state.held is None else row_json(state.held)
    return json.loads(json.dumps(doc))  # a deep copy: nothing shared with the live state


#: The append-only lists of `DaemonState`, each kept in its own journal.
LISTS = ("trials", "decisions", "windows")


def keep(kind: str) -> int:
    """How many rows of list `kind` the daemon keeps (read at call time: tests lower the caps)."""
    return {"trials": KEEP_TRIALS, "decisions": KEEP_DECISIONS, "windows": KEEP_WINDOWS}[kind]


#: Bytes of the longest path SQLite opens (its unix VFS's MAX_PATHNAME): the trial store and its spool are files
#: in the state directory (`tuner.store`), so the directory leaves room for the longest of their names.
SQLITE_PATH_MAX = 512
#: Bytes the state directory's path may have.
DIR_MAX = SQLITE_PATH_MAX - len("/trials-spool.sqlite-journal")


class StateDirError(TunerError):
    """The state directory cannot be created or written (not "in use": that may pass); `reason` says why."""

    def __init__(self, directory: Path, reason: str) -> None:
        from tuner.config.checks import shown

        self.reason = reason
        super().__init__(f"state.dir {shown(str(directory))}: not writable: {reason}")


def unusable_dir(directory: Path) -> str | None:
    """Why a state directory could not be created and written at `directory`, found without writing anything
    (None: it can be): a path the OS refuses (too long for the store's files, a name too long, a NUL byte), a
    file in its place, an ancestor that is a file, no permission to write where it would be created."""
    try:
        encoded = os.fsencode(directory)
    except (UnicodeError, ValueError) as exc:
        return str(exc)
    if b"\0" in encoded:
        return "embedded null byte"
    too_long = os.strerror(errno.ENAMETOOLONG)
    if len(encoded) > DIR_MAX:
        return f"{too_long} ({len(encoded)} bytes; at most {DIR_MAX} leave room for the trial store's files in it)"
    if any(len(os.fsencode(part)) > 255 for part in directory.parts):
        return f"{too_long} (a name over 255 bytes)"
    for place in (directory, *directory.parents):
        try:
            st = os.stat(place)
        except FileNotFoundError:
            continue
        except OSError as exc:
            return exc.strerror or str(exc)
        if not stat.S_ISDIR(st.st_mode):
            return os.strerror(errno.ENOTDIR) if place == directory else f"{place} is not a directory"
        if not os.access(place, os.W_OK | os.X_OK):
            return (
                os.strerror(errno.EACCES) if place == directory else f"cannot create it in {place}: permission denied"
            )
        break
    for sub in ("experiments", "journal"):
        if (directory / sub).exists() and not (directory / sub).is_dir():
            return f"{directory / sub} is not a directory"
    return None


class StateStore:
    """Reads and atomically writes the daemon's state under one directory."""

    def __init__(self, directory: Path) -> None:
        self.dir = Path(directory)
        self.path = self.dir / "state.json"
        self.exp_dir = self.dir / "experiments"
        self.journal_dir = self.dir / "journal"
        self._journals = {kind: Journal(self.journal_dir, kind) for kind in LISTS}
        #: Committed extent of each journal, as the last load or save left state.json.
        self._marks: dict[str, Mark] = {}
        #: Each list object and how many of its rows are committed (a different object: rewritten whole).
        self._known: dict[str, tuple[list[dict[str, Any]], int]] = {}
        #: Bytes the last `save` wrote (state.json and journal appends or rewrites), for benchmarks.
        self.last_save_bytes = 0
        #: What the last `load` noticed: a migrated old file, an ignored uncommitted tail, a missing journal.
        self.notes: list[str] = []
        self._zcache: tuple[str | None, str] = (None, "")

    def ensure(self) -> None:
        """Create the directory (0700) and lock it for this process, or raise `StateDirError` saying why it cannot
        be written (`unusable_dir` first: what `tuner daemon --check` finds) or `TunerError` when another daemon
        holds it."""
        reason = unusable_dir(self.dir)
        if reason is not None:
            raise StateDirError(self.dir, reason)
        try:
            self.dir.mkdir(parents=True, exist_ok=True, mode=0o700)
            self.exp_dir.mkdir(exist_ok=True, mode=0o700)
            self.journal_dir.mkdir(exist_ok=True, mode=0o700)
            probe = self.dir / ".write-test"
            atomic_write(probe, b"ok")
            probe.unlink()
            fd = os.open(self.dir / "daemon.lock", os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
        except OSError as exc:
            raise StateDirError(self.dir, exc.strerror or str(exc)) from None
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            os.close(fd)
            from tuner.config.checks import shown

            raise TunerError(f"state.dir {shown(str(self.dir))}: in use by another tuner daemon") from None
        self._lock_fd: int | None = fd  # held until the process exits (or `release`)

    def release(self) -> None:
        fd = getattr(self, "_lock_fd", None)
        if fd is not None:
            os.close(fd)
            self._lock_fd = None

    def load(self) -> DaemonState:
        """The saved state: state.json with the committed rows of its journals (each list its newest `KEEP_*`),
        or a fresh state when there is none. Reads only, so it is safe beside a running daemon; a corrupt file
        raises `TunerError`; a journal's uncommitted tail is ignored and a missing one is logged (`notes`)."""
        for attempt in range(3):
            raw = self._read_raw()
            if raw is None:
                self._marks, self._known, self.notes = {}, {}, []
                return DaemonState()
            data = self._parse(raw)
            if data["version"] == LEGACY_VERSION:
                return self._load_legacy(data)
            try:
                journal = data.get("journal")
                marks = {kind: Mark.from_json(kind, (journal or {}).get(kind)) for kind in LISTS}
            except ValueError as exc:
                raise TunerError(f"{self.path}: corrupt state ({exc}); move it away to start afresh") from None
            found, gone = self._read_journals(marks)
            if gone and attempt < 2 and self._read_raw() != raw:
                continue  # a running daemon compacted a journal meanwhile: read its new state.json
            return self._adopt(data, found, marks)
        raise AssertionError("unreachable")  # the last attempt returns

    def _read_raw(self) -> bytes | None:
        try:
            return self.path.read_bytes()
        except FileNotFoundError:
            return None
        except OSError as exc:
            raise TunerError(f"{self.path}: cannot read state: {exc.strerror or exc}") from None

    def _parse(self, raw: bytes) -> dict[str, Any]:
        try:
            data = json.loads(raw)
            if not isinstance(data, dict):
                raise ValueError("not an object")
            if data.get("version") not in (LEGACY_VERSION, STATE_VERSION):
                raise ValueError(f"version {data.get('version')!r}, expected {LEGACY_VERSION} or {STATE_VERSION}")
        except ValueError as exc:
            raise TunerError(f"{self.path}: corrupt state ({exc}); move it away to start afresh") from None
        return data

    def _read_journals(self, marks: dict[str, Mark]) -> tuple[dict[str, ReadResult], bool]:
        found: dict[str, ReadResult] = {}
        gone = False
        for kind, mark in marks.items():
            journal = self._journals[kind]
            try:
                found[kind] = journal.read(mark)
            except FileNotFoundError:
                gone = True
                path = journal.dir / mark.file
                note = f"{path}: missing; its {mark.rows} committed records are lost (rewritten at the next save)"
                found[kind] = ReadResult([], None, note)
            except OSError as exc:
                raise TunerError(f"{journal.dir / mark.file}: cannot read: {exc.strerror or exc}") from None
        return found, gone

    def _state_of(self, data: dict[str, Any]) -> DaemonState:
        names = {f.name for f in fields(DaemonState)}
        try:
            state = DaemonState(**{k: v for k, v in data.items() if k in names})
        except TypeError as exc:
            raise TunerError(f"{self.path}: corrupt state ({exc}); move it away to start afresh") from None
        for kind in LISTS:
            if not isinstance(getattr(state, kind), list):
                raise TunerError(f"{self.path}: corrupt state ({kind}: expected a list); move it away to start afresh")
        try:
            row_loaded(state.held)
            for kind in LISTS:  # inline only in a version-1 file
                for row in getattr(state, kind):
                    row_loaded(row)
        except ValueError as exc:
            raise TunerError(f"{self.path}: corrupt state ({exc}); move it away to start afresh") from None
        cur = state.current_retune
        if isinstance(cur, dict) and "optimizer_zlib" in cur:
            try:
                text = zlib.decompress(base64.b64decode(cur["optimizer_zlib"], validate=True)).decode()
            except (ValueError, TypeError, zlib.error) as exc:
                raise TunerError(
                    f"{self.path}: corrupt state (current_retune.optimizer_zlib: {exc}); move it away to start afresh"
                ) from None
            state.current_retune = {**{k: v for k, v in cur.items() if k != "optimizer_zlib"}, "optimizer": text}
        state.version = STATE_VERSION
        return state

    def _packed(self, cur: dict[str, Any] | None) -> dict[str, Any] | None:
        """The retune in progress as state.json stores it: its optimiser JSON zlib-compressed (level 1, base64):
        ~10x smaller, and cheaper than escaping it as a JSON string (an Ax snapshot is ~15 KB per trial).
        The last text's compression is reused while the optimiser has not changed."""
        text = (cur or {}).get("optimizer")
        if cur is None or not isinstance(text, str):
            self._zcache = (None, "")  # no retune in progress: hold no copy of the last one between retunes
            return cur
        if self._zcache[0] is not text:
            self._zcache = (text, base64.b64encode(zlib.compress(text.encode(), 1)).decode("ascii"))
        return {**{k: v for k, v in cur.items() if k != "optimizer"}, "optimizer_zlib": self._zcache[1]}

    def _adopt(self, data: dict[str, Any], found: dict[str, ReadResult], marks: dict[str, Mark]) -> DaemonState:
        state = self._state_of({k: v for k, v in data.items() if k not in LISTS})
        self.notes = []
        for kind, res in found.items():
            first = max(len(res.rows) - keep(kind), 0)
            for line, row in enumerate(res.rows[first:], first + 1):
                try:
                    row_loaded(row)
                except ValueError as exc:
                    path = self.journal_dir / marks[kind].file
                    raise TunerError(f"{path}:{line}: corrupt journal record ({exc}); move the file away") from None
            setattr(state, kind, res.rows[first:])
            if res.note:
                self.notes.append(res.note)
                log.warning("state: %s", res.note)
        self._marks = {kind: res.mark for kind, res in found.items() if res.mark is not None}
        self._known = {kind: (getattr(state, kind), len(getattr(state, kind))) for kind in self._marks}
        return state

    def _load_legacy(self, data: dict[str, Any]) -> DaemonState:
        """A version-1 state.json (the lists inline): loaded whole; the first save writes each list to its
        journal, then the new state.json (until then the old file stays as it was)."""
        state = self._state_of(data)
        state.trim()
        self._marks, self._known = {}, {}
        counts = ", ".join(f"{len(getattr(state, kind))} {kind}" for kind in LISTS)
        self.notes = [
            f"{self.path}: version {LEGACY_VERSION} ({counts} inline); migrated to {self.journal_dir}/ by the next save"
        ]
        log.info("state: %s", self.notes[0])
        return state

    def save(self, state: DaemonState) -> None:
        """Append each list's rows added since the last save to its journal (or rewrite the list when its
        journal is due for compaction, or was not written by this store for this list object), then commit
        with an atomic state.json naming the new extents; each list is then trimmed to its `KEEP_*`."""
        marks: dict[str, Mark] = {}
        replaced: dict[str, Mark | None] = {}
        written = 0
        for kind in LISTS:
            rows: list[dict[str, Any]] = getattr(state, kind)
            journal, mark, known = self._journals[kind], self._marks.get(kind), self._known.get(kind)
            if (
                mark is not None
                and known is not None
                and known[0] is rows
                and known[1] <= len(rows)
                and mark.rows + len(rows) - known[1] <= 2 * keep(kind)
            ):
                if len(rows) > known[1]:
                    mark, n = journal.append(mark, [row_json(r) for r in rows[known[1] :]])
                    written += n
                marks[kind] = mark
            else:
                marks[kind], n = journal.rewrite([row_json(r) for r in rows[-keep(kind) :]])
                written += n
                replaced[kind] = mark
        doc: dict[str, Any] = {f.name: getattr(state, f.name) for f in fields(state) if f.name not in LISTS}
        doc["version"] = STATE_VERSION
        doc["current_retune"] = self._packed(state.current_retune)
        doc["held"] = None if state.held is None else row_json(state.held)
        doc["journal"] = {kind: mark.to_json() for kind, mark in marks.items()}
        data = json.dumps(doc, separators=(",", ":")).encode()
        atomic_write(self.path, data)  # the commit point
        self.last_save_bytes = written + len(data)
        state.version = STATE_VERSION
        state.trim()
        self._marks = marks
        self._known = {kind: (getattr(state, kind), len(getattr(state, kind))) for kind in LISTS}
        for kind, old in replaced.items():  # the replaced generation stays for readers of the old state.json
            try:
                self._journals[kind].prune({marks[kind].file} | ({old.file} if old else set()))
            except OSError as exc:
                log.warning("state: cannot remove old journal files under %s: %s", self.journal_dir, exc)

    def save_experiment(self, state: DaemonState, retune_id: str, optimizer_json: str) -> None:
        """Keep a finished retune's optimiser; drop the oldest beyond `KEEP_EXPERIMENTS`."""
        atomic_write(self.exp_dir / f"{retune_id}.json", optimizer_json.encode())
        if retune_id not in state.experiments:
            state.experiments.append(retune_id)
        for old in state.experiments[:-KEEP_EXPERIMENTS]:
            for name in (f"{old}.json", f"{old}.table.json", f"{old}.loads.json"):
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

    def save_load_table(self, retune_id: str, table: dict[str, Any]) -> None:
        """A finished retune's multi-load table (for `GetPowerCurve` over a range of loads); only the newest is
        kept, the others' files are removed."""
        atomic_write(self.exp_dir / f"{retune_id}.loads.json", json.dumps(table).encode())
        for other in self.exp_dir.glob("*.loads.json"):
            if other.name != f"{retune_id}.loads.json":
                other.unlink(missing_ok=True)

    def load_load_table(self, retune_id: str) -> dict[str, Any] | None:
        try:
            data = json.loads((self.exp_dir / f"{retune_id}.loads.json").read_text())
        except (OSError, ValueError):
            return None
        return data if isinstance(data, dict) else None

    def load_experiment(self, retune_id: str) -> str | None:
        try:
            return (self.exp_dir / f"{retune_id}.json").read_text()
        except OSError:
            return None
