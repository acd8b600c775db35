"""State files and `OperatingPoint`s: points are [itr_us, dvfs_ghz] on disk and `OperatingPoint`s in memory; a
state directory written before the daemon kept points as such (at dfe75c2) still loads and saves the same."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from actuators.host import OperatingPoint
from core.errors import TunerError
from tuner.daemon.state import StateStore, plain_state

OLD = Path(__file__).resolve().parents[2] / "data" / "daemon_state_dfe75c2"


def test_a_state_directory_of_the_earlier_format_loads_with_operating_points(tmp_path):
    shutil.copytree(OLD, tmp_path / "state")
    store = StateStore(tmp_path / "state")
    st = store.load()
    a, b = OperatingPoint(50, 2.9), OperatingPoint(200, 1.6)
    assert [t["point"] for t in st.trials] == [a, b] and st.trials[1]["measurement"]["point"] == b
    assert st.held is not None and st.held["point"] == b and st.held["measurement"]["point"] == b
    assert st.decisions[0]["point"] == b and st.windows[0]["point"] == b
    assert st.windows[0]["measurement"]["point"] == b and st.counters["trials"] == 2
    # saved again, the files hold what they held
    before = plain_state(st)
    store.ensure()
    st.windows.append({"point": a, "qps": 1.0, "measurement": None, "time": 2e9})
    store.save(st)
    state_json = json.loads((tmp_path / "state" / "state.json").read_text())
    assert state_json["held"] == json.loads((OLD / "state.json").read_text())["held"]
    back = StateStore(tmp_path / "state").load()
    assert plain_state(back)["trials"] == before["trials"] and back.windows[-1]["point"] == a
    lines = (tmp_path / "state" / "journal").glob("windows.*.jsonl")
    assert [json.loads(x)["point"] for f in lines for x in f.read_text().splitlines()] == [[200, 1.6], [50, 2.9]]
    store.release()


def test_a_journal_row_with_a_bad_point_names_its_file_and_line(tmp_path):
    shutil.copytree(OLD, tmp_path / "state")
    path = next((tmp_path / "state" / "journal").glob("trials.*.jsonl"))
    rows = path.read_text().splitlines()
    bad = json.loads(rows[1])
    bad["point"] = ["x"]
    text = "\n".join([rows[0], json.dumps(bad, separators=(",", ":"))]) + "\n"
    path.write_text(text)
    state = json.loads((tmp_path / "state" / "state.json").read_text())
    state["journal"]["trials"]["bytes"] = len(text.encode())
    (tmp_path / "state" / "state.json").write_text(json.dumps(state))
    with pytest.raises(TunerError, match=rf"{path.name}:2: corrupt journal record \(point: expected"):
        StateStore(tmp_path / "state").load()
