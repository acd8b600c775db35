"""The prober's child process dies with the process that started it, and never writes a traceback for a pipe
its parent left closed."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from multiprocessing.connection import Pipe
from pathlib import Path

from actuators.latency.prober import serve
from core.errors import HostError
from tests.children import kill_and_find_orphans

REPO = Path(__file__).resolve().parents[3]

#: A parent whose prober child is seeding keys on a server that never answers (each get waits for its timeout).
PARENT = r"""
import sys
from actuators.latency.prober import ProberConfig, ProcessProber
ProcessProber(ProberConfig(target=sys.argv[1], timeout_s=2.0, keys=4)).begin()
"""


def test_sigkill_of_the_parent_mid_command_leaves_no_child_and_no_traceback(tmp_path):
    silent = socket.create_server(("127.0.0.1", 0))
    silent.settimeout(60)
    log = open(tmp_path / "parent.log", "w")
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    port = silent.getsockname()[1]
    parent = subprocess.Popen(
        [sys.executable, "-c", PARENT, f"127.0.0.1:{port}"], env=env, stdout=log, stderr=subprocess.STDOUT
    )
    try:
        conn, _ = silent.accept()  # the child is in begin(), waiting for an answer that never comes
        assert kill_and_find_orphans(parent, within_s=1.0) == []
        conn.close()
    finally:
        if parent.poll() is None:
            parent.kill()
            parent.wait()
        silent.close()
        log.close()
    text = (tmp_path / "parent.log").read_text()
    assert "Traceback" not in text and "BrokenPipeError" not in text, text


class Engine:
    """A `ThreadProber` stand-in whose begin fails (as seeding an unreachable server does)."""

    def __init__(self) -> None:
        self.closed = False

    def begin(self) -> None:
        raise HostError("127.0.0.1:1: connection refused")

    def end(self) -> None:  # pragma: no cover - not asked here
        raise AssertionError

    def close(self) -> None:
        self.closed = True


def test_an_answer_to_a_parent_that_is_gone_ends_the_child_quietly():
    cmd_rx, cmd_tx = Pipe(duplex=False)
    res_rx, res_tx = Pipe(duplex=False)
    cmd_tx.send("begin")
    res_rx.close()  # the parent is gone: its end of the answer pipe is closed
    engine = Engine()
    serve(cmd_rx, res_tx, engine)  # returns instead of raising BrokenPipeError
    assert engine.closed
    cmd_tx.close()
    cmd_rx.close()
    res_tx.close()
