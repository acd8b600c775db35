"""The trial store's versioned schema: ordered migrations, applied once each, recorded in `tuner_migrations`.

The same tables exist in SQLite (the default, embedded store) and PostgreSQL (a fleet's shared store):

* `trials`: one completed trial per row -- the `tuner.trial/v1` line itself (`line`, what readers parse)
  plus the columns queries filter and sort on (host, hardware class, time, load, point, power);
  `key` (host + the measured window's identity) is unique, so a trial written twice (a re-import, a
  flush retried after a crash) is stored once;
* `hosts`: per host its class and the drift test's latest verdict (a drifting host's trials are left out
  of its class's warm start);
* `tuner_migrations`: which versions are applied (a store newer than this code is refused, not guessed at).

To change the schema, append a migration; never edit an applied one.
"""

from __future__ import annotations

from dataclasses import dataclass

SCHEMA_VERSION_TABLE = "tuner_migrations"


@dataclass(frozen=True)
class Migration:
    version: int
    name: str
    sqlite: tuple[str, ...]
    postgres: tuple[str, ...]


_TRIALS_COLUMNS = """
    key TEXT NOT NULL UNIQUE,
    host TEXT NOT NULL,
    hw_class TEXT NOT NULL DEFAULT '',
    time DOUBLE PRECISION NOT NULL,
    qps DOUBLE PRECISION NOT NULL,
    itr_us INTEGER NOT NULL,
    dvfs_ghz DOUBLE PRECISION NOT NULL,
    power_w DOUBLE PRECISION,
    line TEXT NOT NULL"""

_HOSTS = """CREATE TABLE hosts (
    host TEXT PRIMARY KEY,
    hw_class TEXT NOT NULL DEFAULT '',
    hw_json TEXT NOT NULL DEFAULT '{}',
    drift INTEGER NOT NULL DEFAULT 0,
    drift_z DOUBLE PRECISION,
    drift_n INTEGER NOT NULL DEFAULT 0,
    checked_at DOUBLE PRECISION
)"""

_INDEXES = (
    "CREATE INDEX trials_class_time ON trials (hw_class, time)",
    "CREATE INDEX trials_host_time ON trials (host, time)",
)

MIGRATIONS: tuple[Migration, ...] = (
    Migration(
        1,
        "trials and hosts",
        sqlite=(f"CREATE TABLE trials (id INTEGER PRIMARY KEY AUTOINCREMENT,{_TRIALS_COLUMNS})", _HOSTS, *_INDEXES),
        postgres=(f"CREATE TABLE trials (id BIGSERIAL PRIMARY KEY,{_TRIALS_COLUMNS})", _HOSTS, *_INDEXES),
    ),
)

LATEST = MIGRATIONS[-1].version


def migrations_table(postgres: bool) -> str:
    return (
        f"CREATE TABLE IF NOT EXISTS {SCHEMA_VERSION_TABLE} (version INTEGER PRIMARY KEY, name TEXT NOT NULL, "
        f"applied_at {'DOUBLE PRECISION' if postgres else 'REAL'} NOT NULL)"
    )


__all__ = ["LATEST", "MIGRATIONS", "SCHEMA_VERSION_TABLE", "Migration", "migrations_table"]
