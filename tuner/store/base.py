"""The trial store interface (`TrialStore`) and the SQL both of its databases share (`SqlTrials`).

A store holds completed trials (`tuner.trial/v1` entries, `tuner.store.history.HistoryEntry`) from one host
or a fleet, with each host's hardware class and drift verdict. What the daemon asks of it:

* `add(entries)` -- durable when it returns (a duplicate of a stored trial is skipped);
* `warm_start(host, hw_class, limit)` -- the newest `limit` trials of this host, and the newest `limit` of
  other hosts of its class that are not flagged as drifting (what a retune is seeded from);
* `set_host(...)` -- record a host's class and its latest drift verdict;
* `read(...)` -- everything (or one host's / one class's), oldest first, for export and the fleet view.

`tuner.store.sqlite.SqliteStore` (embedded, the default) and `tuner.store.postgres.PostgresStore` (a fleet's
shared database, with a local durable spool) implement it; `tuner.store.open.open_store` picks one from
the config's `[history] url`.
"""

from __future__ import annotations

import json
import logging
import math
import time as _time
from collections.abc import Iterable, Iterator, Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass
from typing import Any, Protocol, runtime_checkable

from actuators.host import KnobSpace, Measurement, OperatingPoint
from core.errors import InputError
from tuner.optimize.optimizer import Objective, TrialRecord
from tuner.store.history import SCHEMA, HistoryEntry, in_space, is_exportable, parse_line

log = logging.getLogger("tuner.store")

#: (key, host, hw_class, time, qps, itr_us, dvfs_ghz, power_w, line): one `trials` row as written.
Row = tuple[str, str, str, float, float, int, float, float | None, str]

_COLS = "key, host, hw_class, time, qps, itr_us, dvfs_ghz, power_w, line"


@dataclass(frozen=True)
class HostInfo:
    """A host known to the store: its class and the drift test's latest verdict."""

    host: str
    hw_class: str
    hw: dict[str, Any]
    drift: bool
    drift_z: float | None
    drift_n: int
    checked_at: float | None


@runtime_checkable
class TrialStore(Protocol):
    """Completed trials of one host or a fleet (see the module docstring)."""

    location: str

    def add(self, entries: Iterable[HistoryEntry]) -> tuple[int, int]: ...

    def read(
        self,
        space: KnobSpace | None = None,
        *,
        host: str | None = None,
        hw_class: str | None = None,
        limit: int | None = None,
    ) -> list[HistoryEntry]: ...

    def warm_start(
        self, host: str, hw_class: str, limit: int, space: KnobSpace | None = None
    ) -> tuple[list[HistoryEntry], list[HistoryEntry]]: ...

    def set_host(
        self,
        host: str,
        hw_class: str,
        hw: dict[str, Any] | None = None,
        *,
        drift: bool | None = None,
        drift_z: float | None = None,
        drift_n: int = 0,
    ) -> None: ...

    def hosts(self) -> list[HostInfo]: ...

    def count(self) -> int: ...

    def schema_version(self) -> int: ...

    def close(self) -> None: ...


def entry_key(e: HistoryEntry) -> str:
    """The row's unique key: the host and the measured window's identity (`HistoryEntry.key`)."""
    return e.host + "|" + "|".join(str(v) for v in e.key())


def to_row(e: HistoryEntry) -> Row | None:
    """The `trials` row of an entry, or None if it is not storable (failed, unmeasured, non-finite)."""
    if not is_exportable(e.record):
        return None
    try:
        line = e.to_line()
    except ValueError:  # a non-finite number: no reader could use the line
        return None
    m = e.record.measurement
    assert m is not None
    power = m.power_w
    return (
        entry_key(e),
        e.host,
        e.hw_class,
        float(e.time),
        float(e.record.qps),
        int(e.record.point.itr_us),
        float(e.record.point.dvfs_ghz),
        power if math.isfinite(power) else None,
        line,
    )


def parse_rows(rows: Iterable[tuple[str, str]], where: str) -> list[HistoryEntry]:
    """Entries from (line, hw_class) rows; a row that no longer parses is logged and skipped.

    Rows were validated when written, so each is read on a fast path (no per-field checks; objectives and
    rewards shared); any row it cannot read goes through the full parser, whose error is logged."""
    out: list[HistoryEntry] = []
    objectives: dict[tuple, tuple[Objective, Any]] = {}
    for i, (line, hw_class) in enumerate(rows):
        try:
            e = _fast_entry(line, len(out), objectives, hw_class)
        except Exception:  # noqa: BLE001 - anything odd: the full parser says what (or accepts it)
            try:
                e = parse_line(line, len(out))
            except InputError as exc:
                log.warning("%s: stored trial %d unreadable (%s); skipped", where, i, exc)
                continue
            if hw_class and e.hw_class != hw_class:
                e = HistoryEntry(e.record, e.host, e.time, e.objective, hw_class)
        out.append(e)
    return out


def _fast_entry(line: str, index: int, objectives: dict[tuple, tuple[Objective, Any]], hw_class: str) -> HistoryEntry:
    d = json.loads(line)
    if d["schema"] != SCHEMA:
        raise ValueError(d["schema"])
    o = d["objective"]
    okey = (o["reward"], float(o["percentile"]), float(o["sla_us"]))
    if okey not in objectives:
        from reward import get_reward

        objectives[okey] = (Objective(*okey), get_reward(okey[0]))
    obj, fn = objectives[okey]
    m = Measurement.from_dict(d["measurement"])
    p = d["point"]
    point = OperatingPoint(int(p["itr_us"]), float(p["dvfs_ghz"]))
    reward = float(fn(m.power_w, m.latency_us[obj.percentile], obj.sla_us))
    rec = TrialRecord(index, point, float(d["qps"]), "completed", m, reward, None)
    return HistoryEntry(rec, str(d["host"]), float(d["time"]), obj, hw_class or str(d.get("class", "")))


class SqlTrials:
    """The queries of `TrialStore` over a DB-API connection; subclasses supply `_tx` and `_ph`.

    `_tx()` is a context manager yielding a cursor-like object with `execute`/`executemany`/`fetchall`
    inside one transaction; `_ph` is the driver's placeholder (`?` sqlite3, `%s` psycopg).
    """

    location: str = ""
    _ph: str = "?"

    def _tx(self) -> AbstractContextManager[Any]:  # pragma: no cover - abstract
        raise NotImplementedError

    def _q(self, sql: str) -> str:
        return sql if self._ph == "?" else sql.replace("?", self._ph)

    # -- writes ---------------------------------------------------------------------------------------
    def _insert(self, cur: Any, rows: Sequence[Row]) -> int:
        if not rows:
            return 0
        cur.executemany(
            self._q(f"INSERT INTO trials ({_COLS}) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?) ON CONFLICT (key) DO NOTHING"),
            list(rows),
        )
        return max(int(cur.rowcount), 0)  # both drivers sum executemany's rows (a skipped duplicate is 0)

    def _count(self, cur: Any) -> int:
        cur.execute("SELECT count(*) FROM trials")
        return int(cur.fetchall()[0][0])

    def _upsert_host(
        self,
        cur: Any,
        host: str,
        hw_class: str,
        hw: dict[str, Any] | None,
        drift: bool | None,
        drift_z: float | None,
        drift_n: int,
        checked_at: float | None,
    ) -> None:
        cur.execute(
            self._q(
                "INSERT INTO hosts (host, hw_class, hw_json) VALUES (?, ?, ?) ON CONFLICT (host) DO UPDATE SET "
                "hw_class = excluded.hw_class, hw_json = CASE WHEN excluded.hw_json = '{}' THEN hosts.hw_json "
                "ELSE excluded.hw_json END"
            ),
            (host, hw_class, json.dumps(hw or {}, sort_keys=True)),
        )
        if drift is not None:
            cur.execute(
                self._q("UPDATE hosts SET drift = ?, drift_z = ?, drift_n = ?, checked_at = ? WHERE host = ?"),
                (1 if drift else 0, drift_z, int(drift_n), checked_at, host),
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
        """Record `host`'s class (and, given `drift`, the drift test's verdict, statistic and trial count)."""
        with self._tx() as cur:
            self._upsert_host(cur, host, hw_class, hw, drift, drift_z, drift_n, _time.time())

    # -- reads ----------------------------------------------------------------------------------------
    def _select(
        self, where: str, params: Sequence[Any], limit: int | None, *, cols: str = "line, hw_class"
    ) -> list[tuple]:
        sql = f"SELECT {cols} FROM trials{' WHERE ' + where if where else ''} ORDER BY time DESC, id DESC"
        args = list(params)
        if limit is not None:
            sql += " LIMIT ?"
            args.append(int(limit))
        with self._tx() as cur:
            cur.execute(self._q(sql), args)
            rows = cur.fetchall()
        rows.reverse()  # oldest first
        return rows

    def read(
        self,
        space: KnobSpace | None = None,
        *,
        host: str | None = None,
        hw_class: str | None = None,
        limit: int | None = None,
    ) -> list[HistoryEntry]:
        """Stored entries, oldest first (the newest `limit`), of one `host` and/or `hw_class` if given;
        with `space`, only those whose point it can set."""
        where, params = [], []
        if host is not None:
            where.append("host = ?")
            params.append(host)
        if hw_class is not None:
            where.append("hw_class = ?")
            params.append(hw_class)
        entries = parse_rows(self._select(" AND ".join(where), params, limit), self.location)
        return in_space(entries, space) if space is not None else entries

    def warm_start(
        self, host: str, hw_class: str, limit: int, space: KnobSpace | None = None
    ) -> tuple[list[HistoryEntry], list[HistoryEntry]]:
        """(this host's newest `limit` trials, the newest `limit` of its class's other non-drifting hosts).

        Trials without a class (imported by hand from `tuner.trial/v1` files of unknown hosts) count as this
        host's own. With no class (`hw_class` ""), only the host's own trials."""
        # two indexed queries (an OR of the two would read all of the host's rows and sort them)
        cols = "line, hw_class, time"
        rows = self._select("host = ?", [host], limit, cols=cols)
        rows += self._select("hw_class = '' AND host <> ?", [host], limit, cols=cols)
        rows.sort(key=lambda r: r[2])
        own = parse_rows([(line, c) for line, c, _ in rows[-limit:]], self.location)
        if space is not None:
            own = in_space(own, space)
        if not hw_class:
            return own, []
        rows = self._select(
            "hw_class = ? AND host <> ? AND host NOT IN (SELECT host FROM hosts WHERE drift = 1)",
            [hw_class, host],
            limit,
        )
        cls = parse_rows(rows, self.location)
        return own, in_space(cls, space) if space is not None else cls

    def hosts(self) -> list[HostInfo]:
        """Every host with a recorded class, by name."""
        with self._tx() as cur:
            cur.execute("SELECT host, hw_class, hw_json, drift, drift_z, drift_n, checked_at FROM hosts ORDER BY host")
            rows = cur.fetchall()
        return [
            HostInfo(str(h), str(c), json.loads(j or "{}"), bool(d), None if z is None else float(z), int(n or 0), t)
            for h, c, j, d, z, n, t in rows
        ]

    def count(self) -> int:
        """Stored trials."""
        with self._tx() as cur:
            return self._count(cur)

    def iter_lines(self, batch: int = 5000) -> Iterator[str]:
        """Every stored `tuner.trial/v1` line, oldest first (for export without parsing)."""
        last = -1
        while True:
            with self._tx() as cur:
                cur.execute(self._q("SELECT id, line FROM trials WHERE id > ? ORDER BY id LIMIT ?"), (last, batch))
                rows = cur.fetchall()
            if not rows:
                return
            for _rid, line in rows:
                yield line
            last = rows[-1][0]


__all__ = ["HostInfo", "Row", "SqlTrials", "TrialStore", "entry_key", "parse_rows", "to_row"]
