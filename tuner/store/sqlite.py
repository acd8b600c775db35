"""`SqliteStore`: the default trial store, one embedded SQLite file (stdlib `sqlite3`, nothing to start).

WAL journal with `synchronous=FULL`: an `add` that returned is on disk (a `kill -9` or a power loss after it
loses nothing), and a writer killed mid-transaction leaves the file as it was before that transaction.
Readers (the gRPC fleet view, `tuner trials export`) run beside the daemon's writes; writers from several
processes (the daemon and `tuner trials import`) wait for each other (busy timeout 30 s).
It is also the PostgreSQL store's local spool (`tuner.store.postgres`): `pending`/`discard` serve that.
"""

from __future__ import annotations

import contextlib
import sqlite3
import threading
import time as _time
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

from core.errors import TunerError
from tuner.store.base import Row, SqlTrials, to_row
from tuner.store.history import HistoryEntry
from tuner.store.migrations import LATEST, MIGRATIONS, SCHEMA_VERSION_TABLE, migrations_table


class SqliteStore(SqlTrials):
    """Trials in one SQLite file (created with its directory, mode 0600, on first use)."""

    _ph = "?"

    def __init__(self, path: str | Path, *, synchronous: str = "FULL") -> None:
        self.path = Path(path)
        self.location = str(self.path)
        self._lock = threading.RLock()
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
            fresh = not self.path.exists()
            self._db = sqlite3.connect(self.path, timeout=30.0, isolation_level=None, check_same_thread=False)
            if fresh:
                self.path.chmod(0o600)
            self._db.execute("PRAGMA journal_mode=WAL")
            self._db.execute(f"PRAGMA synchronous={synchronous}")
            self._migrate()
        except sqlite3.DatabaseError as exc:
            raise TunerError(f"{self.path}: cannot open the trial store: {exc}") from None
        except OSError as exc:
            raise TunerError(f"{self.path}: cannot open the trial store: {exc.strerror or exc}") from None

    @contextlib.contextmanager
    def _tx(self) -> Iterator[Any]:
        with self._lock:
            cur = self._db.cursor()
            cur.execute("BEGIN IMMEDIATE")
            try:
                yield cur
            except BaseException:
                cur.execute("ROLLBACK")
                raise
            cur.execute("COMMIT")

    def _migrate(self) -> None:
        with self._tx() as cur:
            cur.execute(migrations_table(postgres=False))
            cur.execute(f"SELECT version FROM {SCHEMA_VERSION_TABLE}")
            done = {int(v) for (v,) in cur.fetchall()}
            if done and max(done) > LATEST:
                raise TunerError(
                    f"{self.path}: trial store schema version {max(done)} is newer than this tuner's ({LATEST}); "
                    "upgrade the tuner"
                )
            for m in MIGRATIONS:
                if m.version not in done:
                    for stmt in m.sqlite:
                        cur.execute(stmt)
                    cur.execute(
                        f"INSERT INTO {SCHEMA_VERSION_TABLE} (version, name, applied_at) VALUES (?, ?, ?)",
                        (m.version, m.name, _time.time()),
                    )

    def schema_version(self) -> int:
        with self._tx() as cur:
            cur.execute(f"SELECT max(version) FROM {SCHEMA_VERSION_TABLE}")
            return int(cur.fetchall()[0][0] or 0)

    def add(self, entries: Iterable[HistoryEntry]) -> tuple[int, int]:
        """Store `entries` in one transaction (durable on return); returns (added, skipped)."""
        new = list(entries)
        rows = [r for r in (to_row(e) for e in new) if r is not None]
        added = self.add_rows(rows)
        return added, len(new) - added

    def add_rows(self, rows: list[Row]) -> int:
        """Insert prepared rows in one transaction; returns how many were new."""
        try:
            with self._tx() as cur:
                return self._insert(cur, rows)
        except sqlite3.DatabaseError as exc:
            raise TunerError(f"{self.path}: cannot write trials: {exc}") from None

    # -- spool (for the PostgreSQL store) -------------------------------------------------------------
    def pending(self, limit: int) -> list[tuple[int, Row]]:
        """The oldest `limit` rows with their ids (what a spool still has to flush)."""
        with self._tx() as cur:
            cur.execute(
                "SELECT id, key, host, hw_class, time, qps, itr_us, dvfs_ghz, power_w, line FROM trials "
                "ORDER BY id LIMIT ?",
                (int(limit),),
            )
            return [(int(r[0]), tuple(r[1:])) for r in cur.fetchall()]

    def discard(self, ids: list[int]) -> None:
        """Delete rows by id (flushed to the shared store)."""
        with self._tx() as cur:
            cur.executemany("DELETE FROM trials WHERE id = ?", [(i,) for i in ids])

    def close(self) -> None:
        with self._lock:
            self._db.close()


__all__ = ["SqliteStore"]
