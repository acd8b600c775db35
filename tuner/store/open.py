"""Open the trial store a config names: `[history] url` (PostgreSQL or SQLite), else `<state.dir>/trials.sqlite`.

    url = ""                                        -> SQLite at <state.dir>/trials.sqlite (the default)
    url = "sqlite:///var/lib/tuner/trials.sqlite"   -> SQLite at that path
    url = "postgresql://tuner@db.example/tuner"     -> PostgreSQL, spooled through <state.dir>/trials-spool.sqlite

A `history.jsonl` left by an older daemon in the state directory is imported once (`import_legacy`).
"""

from __future__ import annotations

import logging
import time as _time
from pathlib import Path

from core.errors import TunerError
from tuner.store.base import TrialStore
from tuner.store.history import HISTORY_FILE, read_entries

log = logging.getLogger("tuner.store")

SQLITE_FILE = "trials.sqlite"
SPOOL_FILE = "trials-spool.sqlite"


def open_store(url: str | None, state_dir: str | Path) -> TrialStore:
    """The store for `url` (see the module docstring); `TunerError` naming `history.url` if it is not one."""
    text = (url or "").strip()
    state = Path(state_dir)
    if not text:
        from tuner.store.sqlite import SqliteStore

        return SqliteStore(state / SQLITE_FILE)
    if text.startswith("sqlite:///") or text.startswith("sqlite://"):
        from tuner.store.sqlite import SqliteStore

        path = text.removeprefix("sqlite://")
        if not path or path == "/":
            raise TunerError(f"history.url {text!r}: expected sqlite:///absolute/path")
        return SqliteStore(Path(path))
    if text.startswith(("postgresql://", "postgres://")):
        try:
            import psycopg  # noqa: F401
        except ImportError:
            raise TunerError(
                "history.url: a PostgreSQL trial store needs psycopg 3 (pip install 'psycopg[binary]', "
                "or the tuner's `postgres` extra)"
            ) from None
        from tuner.store.postgres import PostgresStore

        return PostgresStore(text, state / SPOOL_FILE)
    raise TunerError(f"history.url {text!r}: expected postgresql://..., sqlite:///path or empty (the default)")


def import_legacy(store: TrialStore, jsonl: str | Path) -> int:
    """Add the trials of an old `history.jsonl` to `store` once, then rename the file `*.imported-<time>`.

    A crash before the rename repeats the import at the next start; the store's unique keys make that
    harmless. Returns how many trials were new. A damaged file is left in place with a warning."""
    p = Path(jsonl)
    if not p.is_file():
        return 0
    try:
        entries = read_entries(p)
    except TunerError as exc:
        log.warning("%s not imported into the trial store: %s", p, exc)
        return 0
    added, _ = store.add(entries)
    p.rename(p.with_name(f"{p.name}.imported-{int(_time.time())}"))
    log.info("imported %d trial(s) from %s into %s", added, p, store.location)
    return added


__all__ = ["HISTORY_FILE", "SPOOL_FILE", "SQLITE_FILE", "import_legacy", "open_store"]
