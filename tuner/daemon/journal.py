"""Append-only JSON-lines journals for the daemon's growing lists (trials, decisions, holding windows).

One file per list, `<kind>.<generation>.jsonl` under `<state.dir>/journal/`, one JSON object per line. An
append is written at the committed length (`pwrite`; whatever lies beyond it, left by a write that was never
committed, is cut off) and fsynced, but counts only once the caller commits the new length: state.json names
each journal's file, committed bytes and rows (`Mark`), and is replaced atomically after the appends. A crash
between an append and its commit leaves the old length, so a load reads exactly what was committed, whole
records only. A compaction writes the kept rows to a new generation (tmp + fsync + rename); the generation it
replaced stays until the next compaction, so a reader holding the previous state.json still finds its file.
"""

from __future__ import annotations

import json
import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from core.errors import TunerError
from core.fsutil import atomic_write


@dataclass(frozen=True)
class Mark:
    """A journal's committed extent, as state.json records it."""

    file: str
    bytes: int
    rows: int

    def to_json(self) -> dict[str, Any]:
        return {"file": self.file, "bytes": self.bytes, "rows": self.rows}

    @classmethod
    def from_json(cls, kind: str, data: Any) -> Mark:
        """The mark of journal `kind` from state.json (`ValueError` naming the field when malformed)."""
        if not isinstance(data, dict):
            raise ValueError(f"journal.{kind}: expected an object with file, bytes, rows")
        name = data.get("file")
        if not isinstance(name, str) or not re.fullmatch(rf"{re.escape(kind)}\.\d+\.jsonl", name):
            raise ValueError(f"journal.{kind}.file: expected '{kind}.<n>.jsonl', got {name!r}")
        counts = []
        for field in ("bytes", "rows"):
            value = data.get(field)
            if not isinstance(value, int) or isinstance(value, bool) or value < 0:
                raise ValueError(f"journal.{kind}.{field}: expected a count >= 0, got {value!r}")
            counts.append(value)
        return cls(name, counts[0], counts[1])


@dataclass
class ReadResult:
    """What `Journal.read` found: the committed rows, the mark to append at (None: the file is not as
    committed, so the next save rewrites it), and a note for the log when anything was dropped or is missing."""

    rows: list[dict[str, Any]]
    mark: Mark | None
    note: str | None = None


def encode(rows: list[dict[str, Any]]) -> bytes:
    """Rows as JSON lines (json.dumps escapes newlines inside strings, so one row is one line)."""
    return b"".join(json.dumps(r, separators=(",", ":")).encode() + b"\n" for r in rows)


def _parse(path: Path, lines: bytes) -> list[dict[str, Any]]:
    """The rows of whole JSON lines: parsed as one array (a line at a time costs ~4x more at 5000 rows);
    on failure line by line, to name the bad one (`TunerError`)."""
    try:
        rows = json.loads(b"[" + lines.rstrip(b"\n").replace(b"\n", b",") + b"]")
        if all(isinstance(r, dict) for r in rows):
            return rows
    except ValueError:
        pass
    for lineno, line in enumerate(lines.splitlines(), 1):
        try:
            row = json.loads(line)
        except ValueError as exc:
            raise TunerError(f"{path}:{lineno}: corrupt journal record ({exc}); move the file away") from None
        if not isinstance(row, dict):
            raise TunerError(f"{path}:{lineno}: corrupt journal record (not an object); move the file away")
    raise TunerError(f"{path}: corrupt journal (records not separated by newlines); move the file away")


class Journal:
    """The journal of one list (`kind`) under `directory`."""

    def __init__(self, directory: Path, kind: str) -> None:
        self.dir = Path(directory)
        self.kind = kind

    def read(self, mark: Mark) -> ReadResult:
        """The committed rows of `mark` (`FileNotFoundError` when its file is gone; `TunerError` naming the
        file and line for a committed record that does not parse)."""
        path = self.dir / mark.file
        with open(path, "rb") as f:
            data = f.read(mark.bytes)
            beyond = max(os.fstat(f.fileno()).st_size - len(data), 0)
        rows = _parse(path, data[: data.rfind(b"\n") + 1])
        if len(data) < mark.bytes or len(rows) != mark.rows:
            lost = max(mark.rows - len(rows), 0)
            note = (
                f"{path}: {mark.rows} records committed but {len(rows)} on disk ({lost} lost, the file is "
                f"{len(data)} of {mark.bytes} committed bytes); rewritten at the next save"
            )
            return ReadResult(rows, None, note)
        if not beyond:
            return ReadResult(rows, mark)
        note = (
            f"{path}: ignored {beyond} bytes after the last committed record (a write interrupted before "
            f"its commit); all {mark.rows} committed records are loaded, none is lost"
        )
        return ReadResult(rows, mark, note)

    def append(self, mark: Mark, rows: list[dict[str, Any]]) -> tuple[Mark, int]:
        """Write `rows` at `mark`'s committed end (cutting off any uncommitted tail) and fsync; the new mark
        (to be committed by the caller) and the bytes written."""
        data = encode(rows)
        fd = os.open(self.dir / mark.file, os.O_WRONLY | os.O_CREAT | os.O_CLOEXEC, 0o600)
        try:
            view, offset = memoryview(data), mark.bytes
            while view:
                n = os.pwrite(fd, view, offset)
                view, offset = view[n:], offset + n
            os.ftruncate(fd, mark.bytes + len(data))
            os.fsync(fd)
        finally:
            os.close(fd)
        return Mark(mark.file, mark.bytes + len(data), mark.rows + len(rows)), len(data)

    def rewrite(self, rows: list[dict[str, Any]]) -> tuple[Mark, int]:
        """A new generation holding exactly `rows` (atomic, fsynced); its mark and the bytes written."""
        self.dir.mkdir(parents=True, exist_ok=True, mode=0o700)
        gens = [int(m.group(1)) for m in map(self._match, os.listdir(self.dir)) if m]
        name = f"{self.kind}.{max(gens, default=0) + 1:06d}.jsonl"
        data = encode(rows)
        atomic_write(self.dir / name, data)
        return Mark(name, len(data), len(rows)), len(data)

    def prune(self, keep: set[str]) -> None:
        """Delete this journal's generations (and temp files of interrupted compactions) not named in `keep`."""
        for name in os.listdir(self.dir):
            if (self._match(name) and name not in keep) or (
                name.startswith(f".{self.kind}.") and name.endswith(".tmp")
            ):
                try:
                    (self.dir / name).unlink()
                except FileNotFoundError:
                    pass

    def _match(self, name: str) -> re.Match[str] | None:
        return re.fullmatch(rf"{re.escape(self.kind)}\.(\d+)\.jsonl", name)
