"""The daemon's persistence: a save costs what changed (not the kept history), a crash at any point of a save
loses no committed trial and leaves the retune's optimiser consistent with its trials, and an old
single-file state.json still loads and is migrated."""

from __future__ import annotations

import importlib.util
import json
import os
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from actuators.host import OperatingPoint
from core.errors import TunerError
from tests.daemon_fakes import wait_for
from tuner.daemon import state as S
from tuner.daemon.state import DaemonState, StateStore

REPO = Path(__file__).resolve().parents[3]


def _bench() -> Any:
    """bench/state_save.py as a module: its rows are the ones the bench measures."""
    spec = importlib.util.spec_from_file_location(
        "state_save_bench", Path(__file__).resolve().parents[3] / "bench" / "state_save.py"
    )
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def trial_row(i: int) -> dict:
    """A trial row as the daemon records it (~1 KB of JSON): the bench's."""
    return dict(_BENCH.trial_row(i))


_BENCH = _bench()


def optimizer_like(kb: int) -> str:
    """A JSON text of about `kb` KB shaped like an optimiser snapshot (trial records with measurements)."""
    trials = [{"index": i, "arm": {"itr_us": 2 + i}, "data": _BENCH.json_measurement(i)} for i in range(kb * 2)]
    while len(json.dumps(trials)) > kb * 1024:
        trials.pop()
    return json.dumps({"version": 1, "trials": trials})


def _full(trials: int) -> DaemonState:
    st = DaemonState(knobs_dirty=True, retune_seq=trials // 30)
    st.trials = [trial_row(i) for i in range(trials)]
    st.decisions = [{"retune_id": f"r{i:06d}", "reason": "period", "point": [50, 2.0]} for i in range(500)]
    st.windows = [{"point": [50, 2.0], "qps": 2e5, "measurement": trial_row(i)["measurement"]} for i in range(300)]
    return st


def _sizes(d: Path) -> dict[str, int]:
    return {p.name: p.stat().st_size for p in (d / "journal").iterdir()}


def _wchar() -> int | None:
    try:
        text = Path("/proc/self/io").read_text()
    except OSError:
        return None
    return next(int(line.split()[1]) for line in text.splitlines() if line.startswith("wchar:"))


def _one_trial_save(d: Path, kept: int) -> tuple[int, int | None]:
    """Bytes the save of one more trial writes (files' growth, and the process's write() count when the
    kernel reports it) with `kept` trials already saved, and a retune in progress (a 220 KB optimiser, as
    the real one is halfway through a 30-trial retune)."""
    store = StateStore(d)
    store.ensure()
    st = _full(kept)
    store.save(st)
    before = _sizes(d)
    st.trials.append(trial_row(kept))
    st.current_retune = {"id": "r000001", "optimizer": optimizer_like(220)}
    w0 = _wchar()
    store.save(st)
    w1 = _wchar()
    after = _sizes(d)
    assert set(after) == set(before)  # appended, not compacted into a new file
    grown = sum(after[k] - before[k] for k in after) + (d / "state.json").stat().st_size
    assert grown == store.last_save_bytes
    store.release()
    return grown, None if w0 is None or w1 is None else w1 - w0


def test_a_save_writes_what_changed_not_the_kept_history(tmp_path: Path) -> None:
    empty, w_empty = _one_trial_save(tmp_path / "a", 0)
    full, w_full = _one_trial_save(tmp_path / "b", S.KEEP_TRIALS)
    assert full < 64 * 1024, full
    assert abs(full - empty) < 512, (empty, full)  # flat: 5000 kept trials add nothing to a save
    if w_full is not None and w_empty is not None:  # what the process wrote, temp files included
        assert w_full < 64 * 1024 and abs(w_full - w_empty) < 512, (w_empty, w_full)
    st = StateStore(tmp_path / "b").load()
    assert len(st.trials) == S.KEEP_TRIALS and st.trials[-1] == trial_row(S.KEEP_TRIALS)
    assert (len(st.decisions), len(st.windows)) == (S.KEEP_DECISIONS, S.KEEP_WINDOWS)
    assert st.current_retune == {"id": "r000001", "optimizer": optimizer_like(220)} and st.knobs_dirty
    saved = json.loads((tmp_path / "b" / "state.json").read_text())["current_retune"]
    assert "optimizer" not in saved and len(saved["optimizer_zlib"]) < 40 * 1024  # stored compressed


def test_a_corrupt_compressed_optimiser_is_a_one_line_error(tmp_path: Path) -> None:
    _saved(tmp_path, 2)
    doc = json.loads((tmp_path / "state.json").read_text())
    doc["current_retune"]["optimizer_zlib"] = "bm90IHpsaWI="
    (tmp_path / "state.json").write_text(json.dumps(doc))
    with pytest.raises(TunerError, match=r"state.json: corrupt state \(current_retune.optimizer_zlib: "):
        StateStore(tmp_path).load()


def _saved(d: Path, n: int) -> StateStore:
    store = StateStore(d)
    store.ensure()
    st = store.load()
    for i in range(n):
        st.trials.append({"index": i})
        st.current_retune = {"id": "r1", "optimizer": str(i + 1)}
        store.save(st)
    store.release()
    return store


def _journal(d: Path, kind: str = "trials") -> Path:
    (path,) = (d / "journal").glob(f"{kind}.*.jsonl")
    return path


def test_a_torn_journal_tail_loads_every_committed_record_and_nothing_is_lost(tmp_path: Path) -> None:
    _saved(tmp_path, 5)
    with open(_journal(tmp_path), "ab") as f:
        f.write(b'{"index":5,"meas')  # kill -9 in the middle of appending the sixth trial
    store = StateStore(tmp_path)
    st = store.load()
    assert [t["index"] for t in st.trials] == [0, 1, 2, 3, 4]
    assert st.current_retune == {"id": "r1", "optimizer": "5"}  # the optimiser agrees with its trials
    (note,) = store.notes
    assert "ignored 16 bytes" in note and "all 5 committed records are loaded, none is lost" in note
    st.trials.append({"index": 5})
    st.current_retune = {"id": "r1", "optimizer": "6"}
    store.save(st)  # written over the torn tail
    again = StateStore(tmp_path)
    assert [t["index"] for t in again.load().trials] == [0, 1, 2, 3, 4, 5] and again.notes == []
    assert _journal(tmp_path).read_bytes().endswith(b'{"index":4}\n{"index":5}\n')


def test_a_record_appended_but_not_committed_is_not_loaded(tmp_path: Path) -> None:
    """Killed between the journal's fsync and state.json's rename: the trial is not committed, and the
    optimiser in state.json does not have it either, so the resumed retune measures that index again."""
    _saved(tmp_path, 3)
    with open(_journal(tmp_path), "ab") as f:
        f.write(b'{"index":3}\n')
    st = StateStore(tmp_path).load()
    assert [t["index"] for t in st.trials] == [0, 1, 2] and st.current_retune["optimizer"] == "3"


WRITER = """
import sys
from pathlib import Path
from tuner.daemon import state as S
S.KEEP_TRIALS, S.KEEP_DECISIONS, S.KEEP_WINDOWS = 7, 3, 5  # compactions every few saves
store = S.StateStore(Path(sys.argv[1]))
store.ensure()
st = store.load()
n = int((st.current_retune or {}).get("optimizer", "0"))
while True:
    st.trials.append({"index": n, "pad": "x" * 300})
    if n % 3 == 0:
        st.decisions.append({"n": n})
    st.windows.append({"n": n})
    n += 1
    st.current_retune = {"id": "r1", "optimizer": str(n)}
    store.save(st)
"""


def _consistent(d: Path) -> int:
    """Load `d` as a restarted daemon would (lowered caps) and check every list against the optimiser's count."""
    st = StateStore(d).load()
    n = int((st.current_retune or {}).get("optimizer", "0"))
    assert [t["index"] for t in st.trials] == list(range(max(n - 7, 0), n))
    assert [w["n"] for w in st.windows] == list(range(max(n - 5, 0), n))
    assert [x["n"] for x in st.decisions] == [k for k in range(n) if k % 3 == 0][-3:]
    return n


def test_kill_9_at_any_point_of_a_save_keeps_trials_and_optimiser_consistent(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setattr(S, "KEEP_TRIALS", 7)
    monkeypatch.setattr(S, "KEEP_DECISIONS", 3)
    monkeypatch.setattr(S, "KEEP_WINDOWS", 5)
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    n = 0
    for _ in range(6):  # each writer killed wherever it is in its save loop; the next resumes from the state
        proc = subprocess.Popen([sys.executable, "-c", WRITER, str(tmp_path)], env=env, cwd=REPO)
        try:
            start = n
            # read beside the writer: every snapshot is consistent too
            wait_for(lambda start=start: _consistent(tmp_path) >= start + 25, timeout=60, interval=0.01)
        finally:
            proc.send_signal(signal.SIGKILL)
            proc.wait()
        n = _consistent(tmp_path)
        assert n >= start + 25
    # a kill between a compaction's commit and its pruning leaves one generation more: the next compaction of
    # the restarted writer removes it (old generations never pile up)
    store = StateStore(tmp_path)
    store.ensure()
    st = store.load()
    for i in range(2 * S.KEEP_TRIALS + 1):
        st.trials.append({"index": n + i})
        store.save(st)
    store.release()
    assert len(list((tmp_path / "journal").glob("trials.*.jsonl"))) <= 2  # compacted, old generations removed


def test_a_version_1_state_json_loads_and_is_migrated(tmp_path: Path) -> None:
    old = {
        "version": 1,
        "knobs_dirty": True,
        "retune_seq": 4,
        "current_retune": {"id": "r000004", "optimizer": "{}"},
        "held": {"retune_id": "r000003", "point": [50, 2.0]},
        "trials": [S.row_json(trial_row(i)) for i in range(40)],  # points as [itr_us, dvfs_ghz], as the file holds them
        "decisions": [{"retune_id": "r000003", "reason": "period"}],
        "windows": [{"point": [50, 2.0], "qps": 1.0}],
        "counters": {"trials": 40},
    }
    (tmp_path / "state.json").write_text(json.dumps(old))
    store = StateStore(tmp_path)
    st = store.load()
    assert st.trials == [trial_row(i) for i in range(40)]  # points loaded as `OperatingPoint`s
    assert st.decisions == old["decisions"] and st.windows == [{"point": OperatingPoint(50, 2.0), "qps": 1.0}]
    assert (st.knobs_dirty, st.retune_seq, st.counters, st.version) == (True, 4, {"trials": 40}, S.STATE_VERSION)
    assert "version 1" in store.notes[0] and "migrated" in store.notes[0]
    assert json.loads((tmp_path / "state.json").read_text()) == old  # loading alone writes nothing
    store.save(st)
    saved = json.loads((tmp_path / "state.json").read_text())
    assert saved["version"] == S.STATE_VERSION and "trials" not in saved and saved["journal"]["trials"]["rows"] == 40
    back = StateStore(tmp_path).load()
    assert back.trials == st.trials and back.current_retune == old["current_retune"]
    assert back.held == {"retune_id": "r000003", "point": OperatingPoint(50, 2.0)}


def test_compaction_keeps_the_newest_rows_and_two_generations_at_most(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setattr(S, "KEEP_TRIALS", 10)
    store = StateStore(tmp_path)
    store.ensure()
    st = store.load()
    for i in range(45):
        st.trials.append({"index": i})
        store.save(st)
        assert len(st.trials) == min(i + 1, 10)
        rows = json.loads((tmp_path / "state.json").read_text())["journal"]["trials"]["rows"]
        assert rows <= 20
    assert len(list((tmp_path / "journal").glob("trials.*.jsonl"))) == 2  # the current and the one it replaced
    assert [t["index"] for t in StateStore(tmp_path).load().trials] == list(range(35, 45))


def test_a_corrupt_committed_record_is_a_one_line_error_naming_file_and_line(tmp_path: Path) -> None:
    _saved(tmp_path, 3)
    path = _journal(tmp_path)
    path.write_bytes(path.read_bytes().replace(b'{"index":1}', b'{"index":1!'))
    with pytest.raises(TunerError, match=rf"{path}:2: corrupt journal record") as exc:
        StateStore(tmp_path).load()
    assert "\n" not in str(exc.value)


def test_a_missing_journal_is_reported_and_rewritten(tmp_path: Path) -> None:
    _saved(tmp_path, 3)
    _journal(tmp_path).unlink()
    store = StateStore(tmp_path)
    st = store.load()
    assert st.trials == [] and st.current_retune["optimizer"] == "3"
    assert any("missing; its 3 committed records are lost" in n for n in store.notes)
    st.trials.append({"index": 3})
    store.save(st)
    assert [t["index"] for t in StateStore(tmp_path).load().trials] == [3]
