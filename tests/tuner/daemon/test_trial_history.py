"""The daemon's history store and warm start: imported trials seed the next retune's optimiser,
every retune appends its completed trials, the store survives restarts, the stopping rule ends a retune early.
In process with the fake host and the light optimiser (50 ms windows)."""

from __future__ import annotations

import json

from actuators.host import OperatingPoint
from tests.daemon_fakes import FakeOptimizers, Running, read_state, wait_for, write_config
from tests.fakes import FakeHost
from tuner.cli.app import main
from tuner.optimize.records import TrialRecord
from tuner.optimize.settings import Objective
from tuner.store.history import read_entries, write_trials
from tuner.store.sqlite import SqliteStore


def _config(tmp_path, *, history: str = "", tuning: str = "", **kw):
    cfg = write_config(tmp_path, sla_us=5000.0, tuning=tuning, **kw)
    cfg.write_text(cfg.read_text() + (f"\n[history]\n{history}\n" if history else ""))
    return cfg


def _trials_file(tmp_path, loads: list[float], name: str = "other.jsonl"):
    """Trials measured on another (fake) host at the given loads, as `tuner trials export` writes them."""
    recs = []
    for i, qps in enumerate(loads):
        host = FakeHost(qps=qps)
        point = OperatingPoint(100 + 20 * i, 2.0)
        host.set_itr(point.itr_us)
        host.set_dvfs(point.dvfs_ghz)
        m = host.measure(1.0)
        recs.append(TrialRecord(i, point, qps, "completed", m, m.power_w, None))
    path = tmp_path / name
    write_trials(path, recs, host="other/fake", objective=Objective(), times=[1000.0 + i for i in range(len(recs))])
    return path


def _decisions(tmp_path, reason=None):
    return [d for d in read_state(tmp_path).get("decisions", []) if reason is None or d["reason"] == reason]


def test_imported_history_seeds_the_first_retune_and_survives_restart(tmp_path, capsys):
    cfg = _config(tmp_path, history="warm_start = true")
    # 5 trials near this host's load (100k QPS) and 2 far outside the load band (a non-context model skips them)
    src = _trials_file(tmp_path, [100_000.0, 95_000.0, 105_000.0, 100_000.0, 110_000.0, 300_000.0, 20_000.0])
    assert main(["trials", "import", str(src), "--config", str(cfg)]) == 0
    assert "imported 7 trial(s)" in capsys.readouterr().out
    opts = FakeOptimizers()
    with Running(cfg, serve=False, optimizers=opts) as r:
        wait_for(lambda: r.daemon.status().state == "holding")
        assert r.daemon.status().retune_history_trials == 5
        first = opts.made[0]
        assert sorted(first.history) == [95_000.0, 100_000.0, 100_000.0, 105_000.0, 110_000.0]
        assert first.begun_qps == 100_000.0  # begin_retune at the host's offered load
        d = _decisions(tmp_path, "startup")[0]
        assert d["history_trials"] == 5 and d["trials"] == 4
        assert r.stop() == 0
    store = SqliteStore(tmp_path / "state" / "trials.sqlite")
    stored = store.read()
    assert len(stored) == 7 + 4  # the retune's 4 completed trials were appended
    own = [e for e in stored if e.host != "other/fake"]
    assert len(own) == 4 and all(e.objective.sla_us == 5000.0 and e.record.qps == 100_000.0 for e in own)
    # a restarted daemon seeds its next retune from everything stored, its own earlier trials included
    opts2 = FakeOptimizers()
    with Running(cfg, serve=False, optimizers=opts2) as r:
        wait_for(lambda: r.daemon.status().state == "holding")
        assert opts2.created == 0  # holding the decision from before the restart
        assert r.daemon.request_retune("rpc")[0]
        wait_for(lambda: _decisions(tmp_path, "rpc"))
        assert _decisions(tmp_path, "rpc")[0]["history_trials"] == 5 + 4
        assert len(opts2.made[0].history) == 9
    assert len(store.read()) == 7 + 8


def test_warm_start_off_starts_cold_but_still_records_history(tmp_path):
    cfg = _config(tmp_path)
    src = _trials_file(tmp_path, [100_000.0] * 3)
    assert (
        main(
            [
                "trials",
                "import",
                str(src),
                "--state-dir",
                str(tmp_path / "state"),
                "--host",
                "tests.fakes:make_fake_host",
            ]
        )
        == 0
    )
    opts = FakeOptimizers()
    with Running(cfg, serve=False, optimizers=opts) as r:
        wait_for(lambda: r.daemon.status().state == "holding")
        assert opts.made[0].history == [] and r.daemon.status().retune_history_trials == 0
        assert _decisions(tmp_path, "startup")[0]["history_trials"] == 0
    assert len(SqliteStore(tmp_path / "state" / "trials.sqlite").read()) == 3 + 4


def test_context_mode_uses_history_at_every_load(tmp_path):
    # the fake optimiser ignores context; what is checked is which trials the daemon hands it
    cfg = _config(tmp_path, tuning="context = true\ncontext_max_qps = 1000000.0")
    src = _trials_file(tmp_path, [100_000.0, 300_000.0, 20_000.0])
    assert main(["trials", "import", str(src), "--config", str(cfg)]) == 0
    opts = FakeOptimizers()
    with Running(cfg, serve=False, optimizers=opts) as r:
        wait_for(lambda: r.daemon.status().state == "holding")
        assert sorted(opts.made[0].history) == [20_000.0, 100_000.0, 300_000.0]


def test_history_outside_the_knob_bounds_is_left_out(tmp_path):
    cfg = _config(tmp_path, history="warm_start = true")
    src = _trials_file(tmp_path, [100_000.0] * 4)  # ITR 100, 120, 140, 160 µs
    assert main(["trials", "import", str(src), "--config", str(cfg)]) == 0
    cfg.write_text(cfg.read_text() + "\n[knobs]\nitr_us = [2, 130]\n")
    opts = FakeOptimizers()
    with Running(cfg, serve=False, optimizers=opts) as r:
        wait_for(lambda: r.daemon.status().state == "holding")
        assert len(opts.made[0].history) == 2


def test_stopping_rule_ends_a_retune_after_min_trials(tmp_path):
    cfg = _config(tmp_path, tuning="stop_ei_pct = 1.0\nmin_trials = 2", trials=6)
    opts = FakeOptimizers(stop_after=2)
    with Running(cfg, serve=False, optimizers=opts) as r:
        wait_for(lambda: r.daemon.status().state == "holding")
        d = _decisions(tmp_path, "startup")[0]
        assert d["trials"] == 2 and d["stopped"] == "fake rule after 2 trials"
        assert len(read_state(tmp_path)["trials"]) == 2
    # off (stop_ei_pct = 0): the same optimiser runs the whole budget
    other = tmp_path / "off"
    other.mkdir()
    with Running(_config(other, trials=6), serve=False, optimizers=FakeOptimizers(stop_after=2)) as r:
        wait_for(lambda: r.daemon.status().state == "holding")
        assert _decisions(other, "startup")[0]["trials"] == 6 and "stopped" not in _decisions(other)[0]


def test_export_from_a_running_daemons_state_dir(tmp_path, capsys):
    cfg = _config(tmp_path)
    with Running(cfg, serve=False) as r:
        wait_for(lambda: r.daemon.status().state == "holding")
        out = tmp_path / "export.jsonl"
        assert main(["trials", "export", "--config", str(cfg), "--out", str(out)]) == 0
    entries = read_entries(out)
    rows = [t for t in read_state(tmp_path)["trials"] if t["status"] == "completed"]
    assert sorted((e.record.point.itr_us, e.time) for e in entries) == sorted((t["point"][0], t["time"]) for t in rows)
    assert all(json.loads(line)["objective"]["sla_us"] == 5000.0 for line in out.read_text().splitlines())


def test_unreadable_old_history_file_means_a_cold_retune_not_a_dead_daemon(tmp_path, caplog):
    cfg = _config(tmp_path, history="warm_start = true")
    (tmp_path / "state").mkdir()
    (tmp_path / "state" / "history.jsonl").write_text("{broken\n")
    opts = FakeOptimizers()
    with caplog.at_level("WARNING", logger="tuner.store"):
        with Running(cfg, serve=False, optimizers=opts) as r:
            wait_for(lambda: r.daemon.status().state == "holding")
            assert opts.made[0].history == []
    assert any(
        "not imported into the trial store" in m and "history.jsonl:1: expected one JSON object" in m
        for m in caplog.messages
    )
    # the retune's own trials go to the trial store; the damaged file is left where it was, for inspection
    assert len(SqliteStore(tmp_path / "state" / "trials.sqlite").read()) == 4
    assert (tmp_path / "state" / "history.jsonl").read_text() == "{broken\n"


def test_an_old_history_file_is_imported_once_and_seeds_the_first_retune(tmp_path, capsys):
    cfg = _config(tmp_path, history="warm_start = true")
    (tmp_path / "state").mkdir()
    src = _trials_file(tmp_path, [100_000.0, 98_000.0])
    (tmp_path / "state" / "history.jsonl").write_bytes(src.read_bytes())
    opts = FakeOptimizers()
    with Running(cfg, serve=False, optimizers=opts) as r:
        wait_for(lambda: r.daemon.status().state == "holding")
        assert sorted(opts.made[0].history) == [98_000.0, 100_000.0]
    assert not (tmp_path / "state" / "history.jsonl").exists()
    assert len(list((tmp_path / "state").glob("history.jsonl.imported-*"))) == 1
    assert len(SqliteStore(tmp_path / "state" / "trials.sqlite").read()) == 2 + 4


def test_adaptive_windows_size_each_trial_between_min_and_max(tmp_path):
    import pytest

    pytest.importorskip("actuators.sim.host")
    sim = {"seed": 1, "cores": 4, "qps": 100000}
    # a loose CI target (±50 %) is met by the first chunk: every trial window is the minimum, not window_s
    cfg = _config(
        tmp_path,
        host="sim",
        options=sim,
        window_s=0.4,
        tuning='window_mode = "adaptive"\nwindow_min_s = 0.05\nwindow_ci_pct = 50',
    )
    with Running(cfg, serve=False) as r:
        wait_for(lambda: r.daemon.status().state == "holding", timeout=30)
        secs = [t["measurement"]["seconds"] for t in read_state(tmp_path)["trials"]]
    assert len(secs) == 4 and all(abs(s - 0.05) < 1e-6 for s in secs), secs
    # like `tuner replay`, a window whose estimate is over the limit the final choice applies ends at its minimum
    with Running(cfg, serve=False) as r:
        pol = r.daemon.retune_driver.trial_window_policy()
        assert pol.stop_above_us == pytest.approx(r.daemon.policy().sla_us * 0.95)
        assert pol.abort_above_us == pytest.approx(r.daemon.policy().sla_us)
        assert (pol.min_s, pol.max_s, pol.ci_pct) == (0.05, 0.4, 50.0)
    fixed = tmp_path / "fixed"
    fixed.mkdir()
    with Running(_config(fixed, host="sim", options=sim, window_s=0.4), serve=False) as r:
        wait_for(lambda: r.daemon.status().state == "holding", timeout=30)
        assert [t["measurement"]["seconds"] for t in read_state(fixed)["trials"]] == [0.4] * 4


def test_a_trial_clearly_over_the_sla_ends_in_the_second_half_of_its_settle(tmp_path):
    import pytest

    pytest.importorskip("actuators.sim.host")
    sim = {"seed": 1, "cores": 4, "qps": 100000}
    adaptive = 'window_mode = "adaptive"\nwindow_min_s = 0.06\nsettle_s = 0.1'
    # an SLA of 1 µs that every point breaks: each trial is measured for the settle's second half (0.05 s) only
    cfg = write_config(tmp_path, host="sim", options=sim, window_s=0.4, sla_us=1.0, tuning=adaptive)
    with Running(cfg, serve=False) as r:
        wait_for(lambda: r.daemon.status().state == "holding", timeout=30)
        secs = [t["measurement"]["seconds"] for t in read_state(tmp_path)["trials"]]
    assert len(secs) == 4 and all(abs(s - 0.05) < 1e-6 for s in secs), secs
    # the settle guard off: the window guard still ends each trial, after its first chunk (0.02 s) of the window
    off = tmp_path / "off"
    off.mkdir()
    cfg = write_config(
        off, host="sim", options=sim, window_s=0.4, sla_us=1.0, tuning=adaptive + "\nsettle_guard = false"
    )
    with Running(cfg, serve=False) as r:
        wait_for(lambda: r.daemon.status().state == "holding", timeout=30)
        secs = [t["measurement"]["seconds"] for t in read_state(off)["trials"]]
    assert len(secs) == 4 and all(abs(s - 0.02) < 1e-6 for s in secs), secs


def test_reload_turns_warm_start_on_for_the_next_retune(tmp_path):
    cfg = _config(tmp_path)
    opts = FakeOptimizers()
    with Running(cfg, serve=False, optimizers=opts) as r:
        wait_for(lambda: r.daemon.status().state == "holding")
        assert opts.made[0].history == []
        cfg.write_text(cfg.read_text() + "\n[history]\nwarm_start = true\n")
        r.daemon.request_reload()
        wait_for(lambda: r.daemon.config.history.warm_start)
        assert r.daemon.request_retune("rpc")[0]
        wait_for(lambda: _decisions(tmp_path, "rpc"))
        assert _decisions(tmp_path, "rpc")[0]["history_trials"] == 4  # the first retune's own trials


def test_warm_start_through_the_worker_process_and_resume_after_stop(tmp_path, capsys):
    from tuner.daemon.worker import ProcessOptimizers

    cfg = _config(tmp_path, history="warm_start = true", trials=30)
    src = _trials_file(tmp_path, [100_000.0] * 3)
    assert main(["trials", "import", str(src), "--config", str(cfg)]) == 0
    r = Running(cfg, serve=False, optimizers=ProcessOptimizers(module="tests.daemon_fakes"))
    try:
        wait_for(lambda: len(read_state(tmp_path).get("trials", [])) >= 2, timeout=30)
        assert r.daemon.status().retune_history_trials == 3  # TrialRecords pickled to the worker
        cur = read_state(tmp_path)["current_retune"]
        saved = json.loads(cur["optimizer"])
        assert cur["history_trials"] == 3 and len(saved["history"]) == 3 and saved["begun_qps"] == 100_000.0
    finally:
        assert r.stop() == 0
    done = len(read_state(tmp_path)["trials"])
    opts = FakeOptimizers()
    with Running(cfg, serve=False, optimizers=opts) as r2:
        wait_for(lambda: len(read_state(tmp_path)["trials"]) >= done + 1)
        # resumed from the saved optimiser (history inside it): not created, not seeded a second time
        assert (opts.created, opts.loaded) == (0, 1) and r2.daemon.status().retune_history_trials == 3
