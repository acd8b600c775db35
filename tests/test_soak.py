"""Short soaks (about a minute each; the long ones are bench/soak_replay.py and bench/soak_daemon.py).

* replay: an hour in 5-minute windows, every policy, with the simulator's long-run cache squeezed to a few
  cells so it evicts constantly -- no exception, no failed window, the cache really evicted;
* daemon: the daemon on the simulated host whose load swings every few seconds, with one optimiser worker
  process per retune (the light test optimiser in it: bench/soak_daemon.py soaks the Ax one) -- every
  retune ends, no traceback, the daemon's RSS, open fds and threads stay flat across the later retunes.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import psutil
import pytest

from actuators.sim.cells import ExpectedCache

REPO = Path(__file__).resolve().parent.parent
TINY_CELL_BYTES = 20 * 550  # about 20 cells: a window's oracle grid alone needs hundreds


def tiny_cache_sim(cache: Any = None, **options: Any) -> Any:
    """The `sim` host with a long-run cache of ~20 cells (hosts after the first share the first's)."""
    from tuner.hosts import make_sim

    return make_sim(cache=cache or ExpectedCache(cell_bytes=TINY_CELL_BYTES, default_bytes=2000), **options)


def test_replay_in_fine_windows_survives_a_cache_that_evicts_constantly(tmp_path):
    from tuner.cli.app import main

    out = tmp_path / "out"
    argv = ["replay", "--host", "tests.test_soak:tiny_cache_sim", "--hours", "1", "--bin", "300", "--quiet"]
    # the per-window oracle too (fine windows default to the hourly one): its grids stress the cache most
    argv += ["--policies", "tuner,linux-default,static-performance,oracle"]
    assert main([*argv, "--trials", "4", "--out", str(out)]) == 0
    summary = json.loads((out / "summary.json").read_text())
    assert summary["windows"] == 12
    assert set(summary["policies"]) == {"tuner", "linux-default", "static-performance", "oracle"}
    for name, pol in summary["policies"].items():
        assert pol["available"] and pol["failed_windows"] == 0, name
        assert pol["energy_j"] > 0, name


def _config(tmp: Path) -> Path:
    text = f"""[host]
spec = "sim"
[host.options]
seed = 1
cores = 4
[host.options.load_schedule]
shape = "steps"
levels = [40000, 160000]
step_s = 8
[policy]
sla_us = 700.0
[tuning]
trials = 3
sobol_trials = 3
window_s = 0.1
settle_s = 0
window_mode = "fixed"
context = false
stop_ei_pct = 0
safe_delta = 0
[state]
dir = "{tmp / "state"}"
[grpc]
listen = "unix://{tmp / "t.sock"}"
[metrics]
listen = ""
"""
    path = tmp / "tuner.toml"
    path.write_text(text)
    return path


def _workers(ps: psutil.Process) -> list[psutil.Process]:
    out = []
    for c in ps.children(recursive=True):
        try:
            if "resource_tracker" not in " ".join(c.cmdline()):
                out.append(c)
        except psutil.Error:
            pass
    return out


def test_daemon_on_a_moving_load_retunes_repeatedly_without_growing(tmp_path):
    log_path = tmp_path / "daemon.log"
    cmd = [sys.executable, "-m", "tests.daemon_fakes", str(_config(tmp_path))]
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    with open(log_path, "w") as log:
        proc = subprocess.Popen(cmd, cwd=REPO, env=env, stdout=log, stderr=subprocess.STDOUT)
    ps = psutil.Process(proc.pid)
    after: list[tuple[int, int, int, int]] = []  # (rss, fds, threads, workers) once each decision is logged
    try:
        deadline = time.monotonic() + 120
        seen = 0
        while len(after) < 5:
            assert proc.poll() is None, log_path.read_text()[-3000:]
            assert time.monotonic() < deadline, "fewer than 5 retunes in 120 s:\n" + log_path.read_text()[-3000:]
            decisions = log_path.read_text().count("decision ")
            if decisions > seen:
                seen = decisions
                # the worker exits once the decision is made: wait for it (bounded), then sample the daemon
                t_end = time.monotonic() + 30
                while _workers(ps) and time.monotonic() < t_end and "retune" not in _last_line(log_path):
                    time.sleep(0.1)
                after.append((ps.memory_info().rss, ps.num_fds(), ps.num_threads(), len(_workers(ps))))
            time.sleep(0.1)
    finally:
        proc.send_signal(signal.SIGTERM)
        rc = proc.wait(60)
    text = log_path.read_text()
    assert rc == 0, text[-3000:]
    assert "Traceback" not in text
    started = re.findall(r"retune (\S+) \([^)]*\): up to", text)
    ended = set(re.findall(r"decision (\S+) \(", text))
    assert len(started) >= 5
    assert [r for r in started[:-1] if r not in ended] == []  # all but one in flight at SIGTERM ended
    assert "left the band" in text  # retunes were started by the load moving
    rss = [a[0] for a in after]
    fds = [a[1] for a in after]
    threads = [a[2] for a in after]
    # the first retunes warm the daemon up (imports, gRPC, caches); after that nothing accumulates
    assert max(rss[1:]) - rss[1] < 8 * 2**20, [r / 2**20 for r in rss]
    assert max(fds[1:]) - min(fds[1:]) <= 2, fds
    assert max(threads[1:]) - min(threads[1:]) <= 2, threads


def _last_line(path: Path) -> str:
    lines = path.read_text().splitlines()
    return lines[-1] if lines else ""


@pytest.fixture(autouse=True)
def _quiet_ax(monkeypatch):
    monkeypatch.setenv("PYTHONWARNINGS", "ignore")
