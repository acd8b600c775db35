"""`tuner trials export|import` through the CLI: round trips between state directories, knob-space checks,
replay output, one-line errors."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from actuators.host import OperatingPoint
from tests.fakes import FakeHost
from tuner.cli.app import main
from tuner.daemon.state import DaemonState, StateStore
from tuner.optimize.records import TrialRecord, record_to_dict
from tuner.optimize.settings import Objective
from tuner.store.history import read_entries, write_trials
from tuner.store.sqlite import SqliteStore

REPO = Path(__file__).resolve().parents[3]
POLICY = {"reward": "constrained", "sla_us": 500.0, "percentile": 99.0}


def _measure(host: FakeHost, itr: int, ghz: float, seconds: float = 1.0):
    host.set_itr(itr)
    host.set_dvfs(ghz)
    return host.measure(seconds)


def _daemon_state(state_dir: Path, n: int = 4) -> list[dict]:
    """A state dir as the daemon leaves it: n trial rows (one failed) and one saved experiment."""
    from tuner.daemon.plain import measurement_dict

    host = FakeHost(qps=150_000.0)
    rows = []
    for i in range(n):
        m = _measure(host, 50 + 40 * i, 2.0 + 0.1 * i)
        failed = i == 1
        rows.append(
            {
                "retune_id": "r000001",
                "index": i,
                "point": [m.point.itr_us, m.point.dvfs_ghz],
                "qps": m.offered_qps,
                "status": "failed" if failed else "completed",
                "measurement": None if failed else measurement_dict(m, 1000.0 + i),
                "reward": None if failed else m.power_w,
                "error": "boom" if failed else None,
                "time": 1000.0 + i,
                **({"objective": POLICY, "host": "db1/fake"} if i else {}),
            }
        )
    store = StateStore(state_dir)
    store.ensure()
    store.save(DaemonState(trials=rows, decisions=[{"retune_id": "r000001", "sla_us": 500.0, "percentile": 99.0}]))
    # an experiment saved by the optimiser (Optimizer.to_json's trial format) with one more trial
    m = _measure(host, 300, 1.5)
    extra = TrialRecord(9, OperatingPoint(300, 1.5), m.offered_qps, "completed", m, m.power_w, None)
    store.save_experiment(
        DaemonState(), "r000000", json.dumps({"version": 1, "objective": POLICY, "trials": [record_to_dict(extra)]})
    )
    store.save_table("r000000", {"tuned_qps": 1.0})
    store.release()
    return rows


def test_export_import_round_trip_between_state_dirs(tmp_path, capsys):
    rows = _daemon_state(tmp_path / "a")
    out = tmp_path / "a.jsonl"
    assert main(["trials", "export", "--state-dir", str(tmp_path / "a"), "--out", str(out)]) == 0
    assert "exported 4 completed trial(s)" in capsys.readouterr().out  # 3 completed rows + 1 from the experiment
    entries = read_entries(out)
    assert [e.record.point.itr_us for e in entries] == [50, 130, 170, 300]  # failed trial 1 (90 µs) not exported
    assert entries[0].objective == Objective(**POLICY)  # from the retune's decision
    assert [e.time for e in entries[:3]] == [1000.0, 1002.0, 1003.0]
    assert entries[1].host == "db1/fake"
    assert entries[0].record.measurement.percentile(99) == rows[0]["measurement"]["latency_us"]["99"]

    b = tmp_path / "b"
    args = ["trials", "import", str(out), "--state-dir", str(b), "--host", "tests.fakes:make_fake_host"]
    assert main(args) == 0
    assert "imported 4 trial(s)" in capsys.readouterr().out
    assert main(args) == 0
    assert "imported 0 trial(s)" in (text := capsys.readouterr().out) and "skipped 4 already there" in text
    # what b's store holds exports back to the same trials
    out_b = tmp_path / "b.jsonl"
    assert main(["trials", "export", "--state-dir", str(b), "--out", str(out_b)]) == 0
    back = read_entries(out_b)
    assert [(e.record.point, e.record.qps, e.record.measurement, e.time, e.host, e.objective) for e in back] == [
        (e.record.point, e.record.qps, e.record.measurement, e.time, e.host, e.objective) for e in entries
    ]


def test_import_rejects_a_foreign_knob_space_line_and_adds_nothing(tmp_path, capsys):
    host = FakeHost()
    recs = [
        TrialRecord(i, OperatingPoint(itr, 2.0), 1e5, "completed", _measure(host, itr, 2.0), 1.0, None)
        for i, itr in enumerate((100, 200, 250, 300))
    ]
    src = tmp_path / "other-host.jsonl"
    write_trials(src, recs, host="other/fake", objective=Objective(), times=[1.0, 2.0, 3.0, 4.0])
    state = tmp_path / "state"
    code = main(["trials", "import", str(src), "--state-dir", str(state), "--host", "tests.fakes:make_small_host"])
    err = capsys.readouterr().err
    assert code == 2
    assert err == (
        f"tuner: error: {src}:3: point: outside this host's knob space: ITR 250 µs is not supported: "
        "expected an integer in 100..500 in steps of 100\n"
    )
    assert not (state / "trials.sqlite").exists() or SqliteStore(state / "trials.sqlite").read() == []


def test_import_checks_the_configs_knob_bounds_and_uses_its_store(tmp_path, capsys):
    host = FakeHost()
    recs = [
        TrialRecord(0, OperatingPoint(40, 2.0), 1e5, "completed", _measure(host, 40, 2.0), 1.0, None),
        TrialRecord(1, OperatingPoint(600, 2.0), 1e5, "completed", _measure(host, 600, 2.0), 1.0, None),
    ]
    src = tmp_path / "t.jsonl"
    write_trials(src, recs, host="x", objective=Objective(), times=[1.0, 2.0])
    cfg = tmp_path / "tuner.toml"
    cfg.write_text(
        '[host]\nspec = "tests.fakes:make_fake_host"\n[knobs]\nitr_us = [2, 400]\n'
        '[state]\ndir = "st"\n[history]\nfile = "hist/h.jsonl"\nkeep_trials = 10\n'
    )
    assert main(["trials", "import", str(src), "--config", str(cfg)]) == 2
    assert f"{src}:2: point: outside this host's knob space: ITR 600 µs" in capsys.readouterr().err
    cfg.write_text(cfg.read_text().replace("[2, 400]", "[2, 1022]"))
    assert main(["trials", "import", str(src), "--config", str(cfg)]) == 0
    assert len(SqliteStore(tmp_path / "st" / "trials.sqlite").read()) == 2
    out = tmp_path / "o.jsonl"
    assert main(["trials", "export", "--config", str(cfg), "--out", str(out)]) == 0  # the config's store
    assert len(read_entries(out)) == 2


def test_export_from_replay_output(tmp_path, capsys):
    host = FakeHost()
    recs = [
        TrialRecord(
            i,
            OperatingPoint(10 * (i + 1), 2.9),
            3e5,
            "failed" if i == 2 else "completed",
            None if i == 2 else _measure(host, 10 * (i + 1), 2.9),
            1.0,
            None,
        )
        for i in range(4)
    ]
    replay = tmp_path / "out"
    replay.mkdir()
    assert main(["trials", "export", "--from-replay", str(replay), "--out", str(tmp_path / "x.jsonl")]) == 2
    assert "no trials.jsonl: expected the --out directory of a `tuner replay` run" in capsys.readouterr().err
    write_trials(replay / "trials.jsonl", recs, host="h/sim", objective=Objective(), times=[4.0, 3.0, 2.0, 1.0])
    assert main(["trials", "export", "--from-replay", str(replay), "--out", str(tmp_path / "x.jsonl")]) == 0
    assert [e.time for e in read_entries(tmp_path / "x.jsonl")] == [1.0, 3.0, 4.0]  # sorted, failed dropped


def test_export_of_an_empty_place_is_an_error(tmp_path, capsys):
    assert main(["trials", "export", "--state-dir", str(tmp_path), "--out", str(tmp_path / "o.jsonl")]) == 2
    assert capsys.readouterr().err == (
        f"tuner: error: {tmp_path}: no daemon state here "
        "(expected state.json, experiments/, trials.sqlite or history.jsonl)\n"
    )
    assert not (tmp_path / "o.jsonl").exists()


def test_cli_errors_are_one_line_without_traceback(tmp_path):
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"schema": "tuner.trial/v1"}\n')
    p = subprocess.run(
        [
            sys.executable,
            "-m",
            "tuner.cli",
            "trials",
            "import",
            str(bad),
            "--state-dir",
            str(tmp_path / "s"),
            "--host",
            "tests.fakes:make_fake_host",
        ],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert p.returncode == 2 and p.stdout == ""
    assert p.stderr == f"tuner: error: {bad}:1: host: expected a non-empty string, got None\n"
    p = subprocess.run(
        [
            sys.executable,
            "-m",
            "tuner.cli",
            "trials",
            "export",
            "--out",
            str(tmp_path / "o"),
            "--state-dir",
            str(tmp_path / "s"),
            "--from-replay",
            str(tmp_path),
        ],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert p.returncode == 2 and "not allowed with argument" in p.stderr and "Traceback" not in p.stderr


@pytest.mark.parametrize("argv", [["trials"], ["trials", "export"], ["trials", "import"]])
def test_missing_arguments_are_usage_errors(argv, capsys):
    with pytest.raises(SystemExit) as e:
        main(argv)
    assert e.value.code == 2 and "usage: tuner trials" in capsys.readouterr().err


def test_import_against_the_real_hosts_knob_space_reads_only(tmp_path, monkeypatch, capsys):
    """`--host real` (here on a fake sysfs/devfs tree with a mocked NIC): the knob space comes from the
    ixgbe driver and the MSR frequencies; nothing is written to the "hardware"."""
    import actuators.real
    from actuators.linux.dvfs import IA32_PERF_CTL
    from actuators.linux.itr import RX_USECS
    from tests import fakefs

    fakefs.guard_writes(monkeypatch, tmp_path)
    root = tmp_path / "root"
    nic = fakefs.realhost_tree(root, 2, 20 << 8)
    monkeypatch.setattr(actuators.real, "default_nic", lambda _root: nic)
    host = FakeHost()
    ok = TrialRecord(0, OperatingPoint(250, 2.0), 1e5, "completed", _measure(host, 250, 2.0), 1.0, None)
    src = tmp_path / "t.jsonl"
    write_trials(src, [ok], host="x", objective=Objective(), times=[1.0])
    cfg = tmp_path / "tuner.toml"
    cfg.write_text(
        f'[host]\nspec = "real"\n[host.options]\nroot = "{root}"\nbackend = "msr"\n'
        f'state_dir = "{tmp_path / "originals"}"\n[state]\ndir = "st"\n'
    )
    assert main(["trials", "import", str(src), "--config", str(cfg)]) == 0, capsys.readouterr().err
    assert "imported 1 trial(s)" in capsys.readouterr().out
    assert nic.coalesce["eth1"][RX_USECS] == 1 and fakefs.get_msr(root, 0, IA32_PERF_CTL) == 20 << 8
    bad = TrialRecord(0, OperatingPoint(250, 3.3), 1e5, "completed", _measure(host, 250, 2.0), 1.0, None)
    write_trials(src, [bad], host="x", objective=Objective(), times=[2.0])
    assert main(["trials", "import", str(src), "--config", str(cfg)]) == 2
    assert "t.jsonl:1: point: outside this host's knob space: DVFS 3.3 GHz is not available" in capsys.readouterr().err
