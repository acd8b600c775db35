"""The trial store on a real SQLite file and a real PostgreSQL (throwaway cluster): round trip, class warm start,
migrations, concurrent writers, and no trial lost to a kill -9 of a writer or a database restart."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
from collections.abc import Callable
from pathlib import Path

import pytest

from core.errors import TunerError
from tests.pg_server import PgServer
from tests.store_fakes import entry
from tuner.store.base import TrialStore
from tuner.store.history import write_entries
from tuner.store.open import SPOOL_FILE, import_legacy, open_store
from tuner.store.postgres import PostgresStore
from tuner.store.sqlite import SqliteStore

REPO = Path(__file__).resolve().parents[3]


@pytest.fixture(params=["sqlite", "pg"])
def opener(request: pytest.FixtureRequest, tmp_path: Path) -> Callable[[], TrialStore]:
    """Opens (again) one store of each kind: a SQLite file, or a fresh PostgreSQL database + spool."""
    if request.param == "sqlite":
        return lambda: open_store(f"sqlite://{tmp_path / 'trials.sqlite'}", tmp_path)
    url = request.getfixturevalue("pg_url")
    return lambda: PostgresStore(url, tmp_path / SPOOL_FILE, retry_s=0.0)


def test_round_trip_dedupe_and_persistence(opener: Callable[[], TrialStore]) -> None:
    s = opener()
    assert s.add([entry(i) for i in range(5)]) == (5, 0)
    assert s.add([entry(i) for i in range(3, 8)]) == (3, 2)  # 3 and 4 were there
    s.close()
    s = opener()
    got = s.read()
    assert [e.record.measurement.energy_j for e in got] == [entry(i).record.measurement.energy_j for i in range(8)]
    assert got[0].hw_class == "c1" and got[0].host == "h1/sim"
    assert got[2].to_line() == entry(2).to_line()  # the v1 line is stored whole
    assert [e.time for e in s.read(limit=3)] == [5.0, 6.0, 7.0]  # the newest, oldest first
    assert s.count() == 8
    s.close()


def test_warm_start_own_plus_class_without_drifting_hosts(opener: Callable[[], TrialStore]) -> None:
    s = opener()
    s.add([entry(i, "me") for i in range(4)])
    s.add([entry(10 + i, "peer", time=10 + i) for i in range(3)])
    s.add([entry(20 + i, "drifter", time=20 + i) for i in range(3)])
    s.add([entry(30 + i, "other-class", "c2", time=30 + i) for i in range(3)])
    s.set_host("drifter", "c1", {"cpu_model": "x"}, drift=True, drift_z=5.1, drift_n=3)
    own, cls = s.warm_start("me", "c1", limit=100)
    assert {e.host for e in own} == {"me"} and len(own) == 4
    assert {e.host for e in cls} == {"peer"}  # not the drifting host, not another class, not itself
    own, cls = s.warm_start("me", "c1", limit=2)
    assert [e.time for e in own] == [2.0, 3.0] and [e.time for e in cls] == [11.0, 12.0]
    assert s.warm_start("me", "", limit=100)[1] == []
    info = {h.host: h for h in s.hosts()}
    assert info["drifter"].drift and info["drifter"].drift_z == 5.1 and info["drifter"].hw == {"cpu_model": "x"}
    s.set_host("drifter", "c1", drift=False, drift_z=0.3, drift_n=9)  # hw kept when not given
    assert {e.host for e in s.warm_start("me", "c1", limit=100)[1]} == {"peer", "drifter"}
    assert {h.host: h for h in s.hosts()}["drifter"].hw == {"cpu_model": "x"}
    s.close()


def test_migrations_recorded_once_and_newer_schema_refused(tmp_path: Path) -> None:
    s = SqliteStore(tmp_path / "t.sqlite")
    assert s.schema_version() == 1
    s.close()
    s = SqliteStore(tmp_path / "t.sqlite")  # reopening applies nothing twice
    with s._tx() as cur:
        cur.execute("SELECT count(*) FROM tuner_migrations")
        assert cur.fetchall()[0][0] == 1
        cur.execute("INSERT INTO tuner_migrations VALUES (99, 'future', 0)")
    s.close()
    with pytest.raises(TunerError, match=r"t\.sqlite: trial store schema version 99 is newer"):
        SqliteStore(tmp_path / "t.sqlite")


def test_open_store_urls(tmp_path: Path) -> None:
    assert isinstance(open_store("", tmp_path), SqliteStore)
    assert (tmp_path / "trials.sqlite").is_file()
    with pytest.raises(TunerError, match=r"history\.url 'mysql://x': expected postgresql://"):
        open_store("mysql://x", tmp_path)


def test_legacy_jsonl_imported_once(tmp_path: Path) -> None:
    legacy = tmp_path / "history.jsonl"
    write_entries(legacy, [entry(i, hw_class="") for i in range(6)])
    s = open_store("", tmp_path)
    assert import_legacy(s, legacy) == 6
    assert not legacy.exists() and len(list(tmp_path.glob("history.jsonl.imported-*"))) == 1
    assert import_legacy(s, legacy) == 0 and s.count() == 6
    write_entries(legacy, [entry(i, hw_class="") for i in range(8)])  # a crash before the rename: re-run
    assert import_legacy(s, legacy) == 2 and s.count() == 8


def _kill_writer_mid_write(kind: str, target: str, state_dir: Path, acks_wanted: int) -> int:
    """Start a writer process, SIGKILL it after `acks_wanted` acknowledged adds; returns the last acked index."""
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    proc = subprocess.Popen(
        [sys.executable, "-m", "tests.store_fakes", kind, target, str(state_dir), "victim"],
        stdout=subprocess.PIPE,
        text=True,
        env=env,
    )
    assert proc.stdout is not None
    last = -1
    for line in proc.stdout:
        last = int(line)
        if last + 1 >= acks_wanted:
            break
    os.kill(proc.pid, signal.SIGKILL)  # while it is inside its next add
    proc.wait(timeout=30)
    assert last + 1 >= acks_wanted, "the writer died before acknowledging enough trials"
    return last


def test_kill_9_of_a_sqlite_writer_loses_no_trial(tmp_path: Path) -> None:
    db = tmp_path / "trials.sqlite"
    last = _kill_writer_mid_write("sqlite", str(db), tmp_path, 40)
    s = SqliteStore(db)
    with s._tx() as cur:
        cur.execute("PRAGMA integrity_check")
        assert cur.fetchall() == [("ok",)]
    times = {e.time for e in s.read(host="victim")}
    assert set(map(float, range(last + 1))) <= times  # every acknowledged trial is there


def test_kill_9_of_a_postgres_writer_loses_no_trial(tmp_path: Path, pg_url: str) -> None:
    last = _kill_writer_mid_write("pg", pg_url, tmp_path, 40)
    s = PostgresStore(pg_url, tmp_path / SPOOL_FILE, retry_s=0.0)  # the restarted daemon, same spool
    assert s.flush(force=True) == 0
    times = [e.time for e in s.read(host="victim")]
    assert set(map(float, range(last + 1))) <= set(times)
    assert len(times) == len(set(times))  # a re-sent batch is stored once
    s.close()


def test_database_restart_loses_no_trial(tmp_path: Path, pg_server: PgServer) -> None:
    url = pg_server.create_db()
    s = PostgresStore(url, tmp_path / SPOOL_FILE, retry_s=0.0)
    s.add([entry(i) for i in range(5)])
    assert s.spool.count() == 0
    pg_server.stop()
    try:
        assert s.add([entry(i) for i in range(5, 12)]) == (7, 0)  # durable in the spool, no error
        s.set_host("h1/sim", "c1", drift=True, drift_z=4.0, drift_n=7)
        assert s.spool.count() == 7
        assert s.flush(force=True) == 7  # still down: still waiting
        own, _ = s.warm_start("h1/sim", "c1", limit=100)  # degraded: the spooled trials only
        assert len(own) == 7
    finally:
        pg_server.start()
    assert s.flush(force=True) == 0
    assert s.spool.count() == 0
    other = PostgresStore(url, tmp_path / "other-spool.sqlite")  # another daemon sees them all
    assert sorted(e.time for e in other.read()) == [float(i) for i in range(12)]
    assert [h.drift for h in other.hosts()] == [True]
    s.close()
    other.close()


def test_concurrent_writers_from_many_daemons(tmp_path: Path, pg_url: str) -> None:
    stores = [PostgresStore(pg_url, tmp_path / f"spool{k}.sqlite") for k in range(4)]
    errors: list[BaseException] = []

    def write(k: int) -> None:
        try:
            for b in range(10):
                stores[k].add([entry(100 * b + j, f"host{k}", time=100 * b + j) for j in range(20)])
        except BaseException as exc:  # noqa: BLE001 - reported by the assert below
            errors.append(exc)

    threads = [threading.Thread(target=write, args=(k,)) for k in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    assert stores[0].count() == 4 * 200
    assert {h: len(stores[1].read(host=h)) for h in ("host0", "host3")} == {"host0": 200, "host3": 200}
    for s in stores:
        s.close()


def test_cli_import_export_through_postgres_with_a_legacy_file(
    tmp_path: Path, pg_url: str, capsys: pytest.CaptureFixture[str]
) -> None:
    from tuner.cli.app import main
    from tuner.store.history import read_entries

    src = tmp_path / "in.jsonl"
    write_entries(src, [entry(i, "peer/sim") for i in range(5)])
    state = tmp_path / "state"
    state.mkdir()
    write_entries(state / "history.jsonl", [entry(100 + i, "old/sim", hw_class="") for i in range(3)])
    args = ["trials", "import", str(src), "--state-dir", str(state), "--url", pg_url, "--host", "sim"]
    assert main(args) == 0
    assert "imported 5 trial(s) into" in capsys.readouterr().out
    assert not (state / "history.jsonl").exists()  # imported once, renamed
    out = tmp_path / "out.jsonl"
    assert main(["trials", "export", "--state-dir", str(state), "--url", pg_url, "--out", str(out)]) == 0
    back = read_entries(out)
    assert sorted((e.host, e.time) for e in back) == sorted(
        [("old/sim", 100.0 + i) for i in range(3)] + [("peer/sim", float(i)) for i in range(5)]
    )
    assert {e.hw_class for e in back if e.host == "peer/sim"} == {"c1"}  # the class travels in the v1 line


def test_a_new_migration_is_applied_once_to_an_existing_store(
    opener: Callable[[], TrialStore], monkeypatch: pytest.MonkeyPatch
) -> None:
    import tuner.store.postgres as pg_mod
    import tuner.store.sqlite as sqlite_mod
    from tuner.store.migrations import MIGRATIONS, Migration

    s = opener()
    s.add([entry(1)])
    s.close()
    extra = "CREATE INDEX trials_qps ON trials (qps)"
    v2 = (*MIGRATIONS, Migration(2, "index on load", sqlite=(extra,), postgres=(extra,)))
    for mod in (sqlite_mod, pg_mod):
        monkeypatch.setattr(mod, "MIGRATIONS", v2)
        monkeypatch.setattr(mod, "LATEST", 2)
    s = opener()  # applies version 2 only (a second CREATE INDEX would fail)
    assert s.schema_version() == 2 and s.count() == 1
    s.close()
    s = opener()
    assert s.schema_version() == 2
    s.close()
