"""`PostgresStore`: a fleet's shared trial store in PostgreSQL (psycopg 3), with a durable local spool.

An `add` is durable when it returns: committed to PostgreSQL when it is reachable and nothing waits in the
spool, else committed to a local SQLite spool (`SqliteStore`, synchronous=FULL). The spool is flushed to
PostgreSQL in one transaction per batch and the flushed rows are deleted from it only after that transaction
committed. So:

* the database down or restarting: trials wait in the spool (logged once), the next `add`/`read`/`flush`
  after `retry_s` reconnects and sends them;
* a writer killed between the commit and the spool delete: the rows are sent again and the unique `key`
  (`INSERT ... ON CONFLICT DO NOTHING`) stores them once;
* many daemons write at once: each inserts its own rows; duplicates are impossible by the same key.

The schema (`tuner.store.migrations`) is migrated under a transaction-scoped advisory lock, so daemons
starting together apply each migration once. Reads go to PostgreSQL (plus the spool's unflushed rows);
while it is unreachable they fall back to the spool alone, with a warning.
"""

from __future__ import annotations

import contextlib
import logging
import time as _time
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import Any

from actuators.host import KnobSpace
from core.errors import TunerError
from tuner.store.base import HostInfo, SqlTrials, to_row
from tuner.store.history import HistoryEntry, in_space
from tuner.store.migrations import LATEST, MIGRATIONS, SCHEMA_VERSION_TABLE, migrations_table
from tuner.store.sqlite import SqliteStore

log = logging.getLogger("tuner.store.postgres")

_MIGRATION_LOCK = 0x7475_6E65  # pg_advisory_xact_lock key ("tune")
FLUSH_BATCH = 2000


def redact(url: str) -> str:
    """The URL without its password (for logs and errors)."""
    try:
        from psycopg.conninfo import conninfo_to_dict, make_conninfo

        d = conninfo_to_dict(url)
        if "password" in d:
            d["password"] = "***"
        return make_conninfo(**d)  # type: ignore[arg-type]
    except Exception:  # noqa: BLE001 - a malformed URL is reported by connect(), not here
        return url.split("@")[-1]


class PostgresStore(SqlTrials):
    """Trials in PostgreSQL at `url`, spooled through the SQLite file `spool` (see the module docstring)."""

    _ph = "%s"

    def __init__(
        self,
        url: str,
        spool: str | Path,
        *,
        retry_s: float = 5.0,
        connect_timeout_s: int = 3,
        clock: Callable[[], float] = _time.monotonic,
    ) -> None:
        self.url = url
        self.location = redact(url)
        self.spool = SqliteStore(spool)
        self.retry_s = float(retry_s)
        self.connect_timeout_s = int(connect_timeout_s)
        self._clock = clock
        self._conn: Any = None
        self._sent = 0  # trials this store inserted into the database (new there)
        self._next_try = 0.0
        self._down_logged = False
        self.connected()  # first connection now: a wrong URL or a too-new schema is reported at start

    # -- connection -----------------------------------------------------------------------------------
    def connected(self, force: bool = False) -> bool:
        """Whether a connection is up (connecting if the retry delay is over, or `force`)."""
        import psycopg

        if self._conn is not None and not self._conn.closed:
            if not force:
                return True
            try:  # a forced check finds a connection the server dropped (e.g. restarted) before using it
                self._conn.execute("SELECT 1")
                return True
            except (psycopg.OperationalError, psycopg.InterfaceError) as exc:
                self._lost(exc)
        if not force and self._clock() < self._next_try:
            return False
        try:
            self._conn = psycopg.connect(self.url, autocommit=True, connect_timeout=self.connect_timeout_s)
            self._migrate()
        except psycopg.OperationalError as exc:
            self._lost(exc)
            return False
        if self._down_logged:
            log.info("trial store %s reachable again", self.location)
        self._down_logged = False
        return True

    def _lost(self, exc: Exception) -> None:
        if self._conn is not None:
            with contextlib.suppress(Exception):
                self._conn.close()
        self._conn = None
        self._next_try = self._clock() + self.retry_s
        if not self._down_logged:
            log.warning(
                "trial store %s unreachable (%s); trials wait in %s",
                self.location,
                str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__,
                self.spool.path,
            )
            self._down_logged = True

    @contextlib.contextmanager
    def _tx(self) -> Iterator[Any]:
        if self._conn is None:
            raise _Down("not connected")
        with self._conn.transaction(), self._conn.cursor() as cur:
            yield cur

    def _migrate(self) -> None:
        with self._tx() as cur:
            cur.execute("SELECT pg_advisory_xact_lock(%s)", (_MIGRATION_LOCK,))
            cur.execute(migrations_table(postgres=True))
            cur.execute(f"SELECT version FROM {SCHEMA_VERSION_TABLE}")
            done = {int(v) for (v,) in cur.fetchall()}
            if done and max(done) > LATEST:
                raise TunerError(
                    f"{self.location}: trial store schema version {max(done)} is newer than this tuner's "
                    f"({LATEST}); upgrade the tuner"
                )
            for m in MIGRATIONS:
                if m.version not in done:
                    for stmt in m.postgres:
                        cur.execute(stmt)
                    cur.execute(
                        f"INSERT INTO {SCHEMA_VERSION_TABLE} (version, name, applied_at) VALUES (%s, %s, %s)",
                        (m.version, m.name, _time.time()),
                    )

    def schema_version(self) -> int:
        with self._tx() as cur:
            cur.execute(f"SELECT max(version) FROM {SCHEMA_VERSION_TABLE}")
            return int(cur.fetchall()[0][0] or 0)

    def _guard(self, fn: Callable[[], Any]) -> tuple[bool, Any]:
        """Run `fn` against the database: (True, result), or (False, None) if it is unreachable."""
        import psycopg

        if not self.connected():
            return False, None
        try:
            return True, fn()
        except (psycopg.OperationalError, psycopg.InterfaceError, _Down) as exc:
            self._lost(exc)
            return False, None

    # -- writes ---------------------------------------------------------------------------------------
    def add(self, entries: Iterable[HistoryEntry]) -> tuple[int, int]:
        """Store `entries` durably before returning: straight into the database when it is reachable and
        nothing waits in the spool (its commit is the durability), else into the spool, then flush. Returns
        (added, skipped): added counts the trials new to the database (while it is unreachable: new to the
        spool, sent at a later flush)."""
        new = list(entries)
        rows = [r for r in (to_row(e) for e in new) if r is not None]
        if self.flush() == 0:
            ok, n = self._guard(lambda: self._send(rows))
            if ok:
                return n, len(new) - n
        spooled = self.spool.add_rows(rows)
        sent = self._sent
        added = spooled if self.flush() else min(self._sent - sent, spooled)
        return added, len(new) - added

    def flush(self, force: bool = False) -> int:
        """Send spooled trials and host records to the database; returns how many trials are still waiting."""
        if force:
            self.connected(force=True)
        while True:
            batch = self.spool.pending(FLUSH_BATCH)
            if not batch:
                break
            ok, _ = self._guard(lambda b=batch: self._send([r for _, r in b]))  # type: ignore[misc]
            if not ok:
                return len(batch) + max(self.spool.count() - len(batch), 0)
            self.spool.discard([i for i, _ in batch])  # only after the database committed them
        hosts = self.spool.hosts()
        if hosts:
            self._guard(lambda: self._send_hosts(hosts))
        return 0

    def _send(self, rows: list[Any]) -> int:
        with self._tx() as cur:
            n = self._insert(cur, rows)
        self._sent += n
        return n

    def _send_hosts(self, hosts: list[HostInfo]) -> None:
        with self._tx() as cur:
            for h in hosts:
                self._upsert_host(
                    cur, h.host, h.hw_class, h.hw, h.drift if h.checked_at else None, h.drift_z, h.drift_n, h.checked_at
                )

    def set_host(
        self,
        host: str,
        hw_class: str,
        hw: dict[str, Any] | None = None,
        *,
        drift: bool | None = None,
        drift_z: float | None = None,
        drift_n: int = 0,
    ) -> None:
        """Record the host in the spool (kept: it is small) and in the database when reachable."""
        self.spool.set_host(host, hw_class, hw, drift=drift, drift_z=drift_z, drift_n=drift_n)
        self.flush()

    # -- reads ----------------------------------------------------------------------------------------
    def read(
        self,
        space: KnobSpace | None = None,
        *,
        host: str | None = None,
        hw_class: str | None = None,
        limit: int | None = None,
    ) -> list[HistoryEntry]:
        self.flush()
        ok, shared = self._guard(lambda: SqlTrials.read(self, None, host=host, hw_class=hw_class, limit=limit))
        waiting = self.spool.read(None, host=host, hw_class=hw_class, limit=limit)
        entries = _merge(shared if ok else [], waiting, limit)
        return in_space(entries, space) if space is not None else entries

    def warm_start(
        self, host: str, hw_class: str, limit: int, space: KnobSpace | None = None
    ) -> tuple[list[HistoryEntry], list[HistoryEntry]]:
        self.flush()
        ok, got = self._guard(lambda: SqlTrials.warm_start(self, host, hw_class, limit, None))
        own_waiting = self.spool.read(None, host=host, limit=limit)
        if not ok:
            log.warning("trial store %s unreachable: warm start from this host's spooled trials only", self.location)
            got = ([], [])
        own = _merge(got[0], own_waiting, limit)
        cls = got[1]
        if space is not None:
            own, cls = in_space(own, space), in_space(cls, space)
        return own, cls

    def hosts(self) -> list[HostInfo]:
        ok, got = self._guard(lambda: SqlTrials.hosts(self))
        return got if ok else self.spool.hosts()

    def count(self) -> int:
        """Trials in the database plus those still waiting in the spool."""
        ok, n = self._guard(lambda: SqlTrials.count(self))
        return (n if ok else 0) + self.spool.count()

    def iter_lines(self, batch: int = 5000) -> Iterator[str]:
        self.flush()
        if self.connected():
            yield from SqlTrials.iter_lines(self, batch)
        for _, row in self.spool.pending(10**9):
            yield row[-1]

    def close(self) -> None:
        if self._conn is not None:
            with contextlib.suppress(Exception):
                self._conn.close()
        self._conn = None
        self.spool.close()


class _Down(Exception):
    """No connection (raised inside `_guard`)."""


def _merge(a: list[HistoryEntry], b: list[HistoryEntry], limit: int | None) -> list[HistoryEntry]:
    """`a` + `b` without duplicates, by time, the newest `limit`."""
    seen, out = set(), []
    for e in [*a, *b]:
        k = (e.host, e.key())
        if k not in seen:
            seen.add(k)
            out.append(e)
    out.sort(key=lambda e: e.time)
    return out[-limit:] if limit is not None else out


__all__ = ["PostgresStore", "redact"]
