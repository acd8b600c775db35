"""SIGKILL of a daemon tuning the fake-hardware kit under a real memcached: no child process outlives it (the
prober's, the optimiser worker's), its log holds no traceback, and `tuner restore --root KIT` puts back every knob
of the kit, NIC included."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import psutil

from actuators.fakehw import create
from tests.children import kill_and_find_orphans
from tests.daemon_fakes import start_daemon, wait_for, write_config
from tests.fakefs import kit_knobs as knob_files

REPO = Path(__file__).resolve().parents[2]
PY = sys.executable


def _children(pid: int) -> list[str]:
    try:
        return [" ".join(c.cmdline()) for c in psutil.Process(pid).children(recursive=True)]
    except psutil.NoSuchProcess:
        return []


def test_sigkill_leaves_no_child_no_traceback_and_restore_puts_the_kit_back(tmp_path, memcached) -> None:
    root = create(tmp_path / "hw")
    boot = knob_files(root)
    options = {"root": str(root), "qps": f"memcached:{memcached.address}", "state_dir": str(tmp_path / "hwstate")}
    latency = f'[host.options.latency]\nkind = "prober"\ntarget = "{memcached.address}"\nrate_hz = 200\n'
    cfg = write_config(
        tmp_path,
        host="actuators.fakehw:make_fake_host",
        options=options,
        extra=latency,
        trials=50,
        window_s=0.3,
        sla_us=1e6,
        metrics="off",
        tuning="idle_qps = 0",
    )
    log_path = tmp_path / "daemon.log"
    with open(log_path, "w") as log:
        daemon = start_daemon(cfg, tmp_path, log)
    try:
        # mid-retune: trials under way (the kit's knobs changed), the prober's child and the worker both running
        wait_for(
            lambda: (
                knob_files(root) != boot
                and any("prober import _serve" in c for c in _children(daemon.pid))
                and any("spawn_main" in c for c in _children(daemon.pid))
            ),
            timeout=60,
            interval=0.05,
        )
        assert kill_and_find_orphans(daemon, within_s=1.0) == []
    finally:
        if daemon.poll() is None:
            daemon.kill()
            daemon.wait()
    text = log_path.read_text()
    assert "Traceback" not in text and "BrokenPipeError" not in text, text
    assert knob_files(root) != boot  # nobody restored them
    r = subprocess.run(
        [PY, "-m", "tuner.cli", "restore", "--root", str(root), "--state-dir", str(tmp_path / "hwstate")],
        cwd=tmp_path,
        env={**os.environ, "PYTHONPATH": str(REPO)},
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert r.returncode == 0, r.stdout + r.stderr
    assert knob_files(root) == boot, r.stdout
    assert json.loads((root / "fakehw/nic/eth1.json").read_text())["coalesce"]["use_adaptive_rx_coalesce"] == 1
