"""The optimiser runs in a worker process per retune: it exits after the decision, a stop kills it mid-fit,
and a crashed worker costs no measured trial (the retune resumes from the persisted experiment)."""

from __future__ import annotations

import json
import os
import signal
import time

from tests.daemon_fakes import Running, read_state, wait_for, write_config
from tuner.daemon.worker import ProcessOptimizers


def _state(tmp_path):
    return read_state(tmp_path)


def test_worker_exits_after_the_decision(tmp_path):
    opts = ProcessOptimizers(module="tests.daemon_fakes")
    with Running(write_config(tmp_path, sla_us=2000.0), optimizers=opts) as r:
        wait_for(lambda: r.daemon.status().state == "holding", timeout=30)
        wait_for(lambda: opts.live_pids() == [], timeout=10)
        assert len(_state(tmp_path)["trials"]) == 4
        assert (tmp_path / "state" / "experiments" / f"{_state(tmp_path)['held']['retune_id']}.table.json").is_file()
        ans = r.daemon.operating_point(100_000.0)
        assert ans.point.dvfs_ghz > 0


def test_stop_kills_a_worker_stuck_in_a_fit(tmp_path, monkeypatch):
    monkeypatch.setenv("TUNER_FAKE_SUGGEST_S", "60")
    opts = ProcessOptimizers(module="tests.daemon_fakes")
    r = Running(write_config(tmp_path), optimizers=opts)
    wait_for(lambda: r.daemon.status().state == "retuning" and opts.live_pids(), timeout=30)
    pid = opts.live_pids()[0]
    time.sleep(0.5)  # let it enter the slow suggest (not synchronisation: any moment in the fit will do)
    t0 = time.monotonic()
    assert r.stop() == 0
    assert time.monotonic() - t0 < 10
    assert not os.path.exists(f"/proc/{pid}")  # killed and reaped
    st = _state(tmp_path)
    assert st["trials"] == [] and st["current_retune"] is not None and st["knobs_dirty"] is False


def test_crashed_worker_loses_no_trial(tmp_path, monkeypatch):
    monkeypatch.setenv("TUNER_FAKE_SUGGEST_S", "0.2")
    opts = ProcessOptimizers(module="tests.daemon_fakes")
    with Running(write_config(tmp_path, trials=8, sla_us=2000.0), optimizers=opts) as r:
        wait_for(lambda: len(_state(tmp_path).get("trials", [])) >= 2, timeout=30)
        done = [(t["index"], t["point"]) for t in _state(tmp_path)["trials"]]
        os.kill(opts.live_pids()[0], signal.SIGKILL)
        wait_for(lambda: r.daemon.status().state == "holding", timeout=60)
        st = _state(tmp_path)
        assert [(t["index"], t["point"]) for t in st["trials"]][: len(done)] == done
        assert len(st["trials"]) == 8 and st["held"]["retune_id"] == "r000001"


def test_missing_optimizer_module_is_a_clear_error_not_a_dead_pipe():
    import pytest

    from core.errors import TunerError
    from tests.daemon_fakes import FakeHost
    from tuner.config import PolicyConfig, TuningConfig

    opts = ProcessOptimizers(module="no_such_optimizer_module")
    with pytest.raises(TunerError, match="cannot import the optimiser 'no_such_optimizer_module'"):
        opts.create(FakeHost().knobs(), PolicyConfig(), TuningConfig(), "r1", 0)
    assert opts.live_pids() == []


def test_worker_runs_niced_with_few_threads(tmp_path, monkeypatch):
    import psutil

    monkeypatch.setenv("TUNER_FAKE_SUGGEST_S", "30")
    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    opts = ProcessOptimizers(module="tests.daemon_fakes")
    r = Running(write_config(tmp_path), optimizers=opts)
    try:
        wait_for(lambda: opts.live_pids(), timeout=30)
        w = psutil.Process(opts.live_pids()[0])
        wait_for(lambda: _state(tmp_path).get("current_retune"), timeout=10)  # the worker is serving
        assert w.nice() >= psutil.Process().nice() + 10
        assert json.loads(_state(tmp_path)["current_retune"]["optimizer"])["omp_threads"] == "2"
    finally:
        assert r.stop() == 0
