"""The optimiser worker process dies with the daemon, and never writes a traceback for a closed pipe."""

from __future__ import annotations

import os
import subprocess
import sys
from multiprocessing import Pipe
from pathlib import Path

from tests.children import kill_and_find_orphans
from tuner.daemon import worker

REPO = Path(__file__).resolve().parents[3]

#: A daemon stand-in: one worker (the light optimiser), busy in a slow suggest when the parent is killed.
PARENT = r"""
from tests.daemon_fakes import FakeOptimizer
from tests.fakes import FakeHost
from tuner.daemon.worker import ProcessOptimizers
proxy = ProcessOptimizers(module="tests.daemon_fakes").load(
    FakeOptimizer(FakeHost().knobs(), 500.0, 99.0, 4, 1, "r1").to_json()
)
print("loaded", flush=True)
proxy.suggest()
"""


def test_sigkill_of_the_daemon_mid_call_leaves_no_worker_and_no_traceback(tmp_path):
    env = {**os.environ, "PYTHONPATH": str(REPO), "TUNER_FAKE_SUGGEST_S": "60"}
    log = tmp_path / "parent.log"
    with open(log, "w") as out:
        parent = subprocess.Popen([sys.executable, "-c", PARENT], env=env, stdout=out, stderr=subprocess.STDOUT)
    try:
        from tests.daemon_fakes import wait_for

        wait_for(lambda: "loaded" in log.read_text(), timeout=60, interval=0.05)
        assert kill_and_find_orphans(parent, within_s=1.0) == []
    finally:
        if parent.poll() is None:
            parent.kill()
            parent.wait()
    assert "Traceback" not in log.read_text(), log.read_text()


def test_an_answer_to_a_daemon_that_is_gone_ends_the_worker_quietly(monkeypatch):
    monkeypatch.setattr(worker, "_child_setup", lambda module: (None, None))  # no renice of the test process
    mine, theirs = Pipe()
    mine.send(("suggest", ()))  # no optimiser yet: an error answer, which nobody reads
    mine.close()
    worker._serve(theirs, "tests.daemon_fakes")  # returns instead of raising BrokenPipeError
    theirs.close()
