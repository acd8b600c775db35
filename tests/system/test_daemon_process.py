"""The daemon as a real process: `tuner ctl` against it, SIGTERM restores the knobs, SIGKILL + restart resumes.

The host is `tests.daemon_fakes:make_file_host`, which keeps its knobs (and the originals it saved before
its first write) in a file, as the real host does on disk -- so what a dead process left behind is visible.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import grpc
from grpc_health.v1 import health_pb2, health_pb2_grpc

from tests.daemon_fakes import read_knobs, read_state, start_daemon, wait_for, write_config

REPO = Path(__file__).resolve().parents[2]
PY = sys.executable


def _start(cfg: Path) -> subprocess.Popen:
    return start_daemon(cfg, REPO, subprocess.PIPE)


def _serving(sock: Path) -> bool:
    if not sock.exists():
        return False
    try:
        with grpc.insecure_channel(f"unix://{sock}") as ch:
            r = health_pb2_grpc.HealthStub(ch).Check(health_pb2.HealthCheckRequest(service="tuner.v1.Tuner"), timeout=1)
            return r.status == health_pb2.HealthCheckResponse.SERVING
    except grpc.RpcError:
        return False


def _ctl(tmp: Path, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [PY, "-m", "tuner.cli", "ctl", "--address", f"unix://{tmp / 't.sock'}", *args],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=30,
    )


def _stop(p: subprocess.Popen) -> tuple[int, str]:
    p.send_signal(signal.SIGTERM)
    out, _ = p.communicate(timeout=20)
    return p.returncode, out


def test_ctl_every_command_then_sigterm_restores_knobs(tmp_path):
    cfg = write_config(tmp_path, sla_us=900.0, window_s=0.05)
    p = _start(cfg)
    try:
        wait_for(lambda: _serving(tmp_path / "t.sock"), timeout=20)
        wait_for(lambda: (read_state(tmp_path).get("held") or {}).get("reason") == "startup", timeout=20)
        # the loop reports "holding" once the decision's model table is saved and the worker has exited
        r = wait_for(
            lambda: (lambda r: r if r.returncode == 0 and json.loads(r.stdout)["state"] == "holding" else None)(
                _ctl(tmp_path, "--json", "status")
            ),
            timeout=20,
            interval=0.1,
        )
        s = json.loads(r.stdout)
        assert s["state"] == "holding" and s["policy"]["slaUs"] == 900.0
        assert read_knobs(tmp_path)["itr"] == s["point"]["itrUs"]  # the knobs really are set
        r = _ctl(tmp_path, "point", "--qps", "100000")
        assert r.returncode == 0 and "meets SLA: True" in r.stdout and "measured" in r.stdout, r.stdout + r.stderr
        r = _ctl(tmp_path, "point", "--qps", "-1")
        assert r.returncode == 2 and "INVALID_ARGUMENT: qps: expected" in r.stderr
        r = _ctl(tmp_path, "--json", "trials")
        assert len(json.loads(r.stdout)["trials"]) == 4
        assert len(_ctl(tmp_path, "trials").stdout.splitlines()) == 5
        r = _ctl(tmp_path, "policy", "--sla-us", "950", "--percentile", "99.9")
        assert r.returncode == 0 and "p99.9 <= 950 µs" in r.stdout
        r = _ctl(tmp_path, "policy", "--reward", "money")
        assert r.returncode == 2 and "reward: expected one of" in r.stderr
        wait_for(lambda: (read_state(tmp_path).get("held") or {}).get("reason") == "policy", timeout=20)
        r = _ctl(tmp_path, "retune", "--reason", "test")
        assert r.returncode == 0 and r.stdout.startswith("accepted")
        wait_for(lambda: (read_state(tmp_path).get("held") or {}).get("reason") == "rpc", timeout=20)
        r = _ctl(tmp_path, "watch", "--count", "1")
        assert r.returncode == 0 and " rpc: ITR " in r.stdout
    finally:
        code, out = _stop(p)
    assert code == 0, out
    assert "original ITR/DVFS restored" in out
    k = read_knobs(tmp_path)
    assert (k["itr"], k["dvfs"], k["originals"]) == ("adaptive", "schedutil", None) and k["writes"] > 0
    assert read_state(tmp_path)["knobs_dirty"] is False


def test_ctl_unreachable_daemon_is_one_line(tmp_path):
    r = _ctl(tmp_path, "--timeout", "1", "status")
    assert r.returncode == 2 and r.stderr.count("\n") == 1 and "UNAVAILABLE" in r.stderr


def test_sigkill_then_restart_resumes_without_losing_a_trial_and_restores_knobs(tmp_path):
    cfg = write_config(tmp_path, trials=40, sobol=2, window_s=0.05)
    p = _start(cfg)
    try:
        wait_for(lambda: len(read_state(tmp_path).get("trials", [])) >= 4, timeout=20)
    finally:
        p.kill()
        p.wait(10)
    st = read_state(tmp_path)
    done = [(t["index"], t["point"]) for t in st["trials"]]
    assert st["knobs_dirty"] is True and read_knobs(tmp_path)["originals"] is not None  # died with knobs changed
    p = _start(cfg)
    try:
        wait_for(lambda: len(read_state(tmp_path).get("trials", [])) >= len(done) + 2, timeout=20)
        st2 = read_state(tmp_path)
        assert [(t["index"], t["point"]) for t in st2["trials"]][: len(done)] == done
        assert st2["current_retune"]["id"] == st["current_retune"]["id"]
        assert read_knobs(tmp_path)["restores"] >= 1  # the dead run's writes were undone at start
    finally:
        code, out = _stop(p)
    assert code == 0, out
    assert "restoring the original ITR/DVFS first" in out
    assert read_knobs(tmp_path)["originals"] is None


def test_invalid_config_lists_every_problem_and_exits_ex_config(tmp_path):
    """A bad config once exited 2, which `Restart=on-failure` restarts every 5 s into the same error; it now
    exits 78 (EX_CONFIG) like failed start-up checks, which `RestartPreventExitStatus=` covers."""
    cfg = tmp_path / "bad.toml"
    cfg.write_text('[tuning]\ntrials = 0\nwindow_s = "x"\n[grpc]\nlisten = "0.0.0.0:50051"\n[bogus]\n')
    r = subprocess.run(
        [PY, "-m", "tuner.cli", "daemon", "--config", str(cfg)], cwd=REPO, capture_output=True, text=True, timeout=30
    )
    assert r.returncode == 78
    lines = r.stderr.strip().splitlines()
    assert lines[0].startswith("tuner: error: ")
    text = r.stderr
    assert f"{cfg}:6: bogus: unknown table" in text
    assert f"{cfg}:2: tuning.trials: expected 1..1000, got 0" in text
    assert f"{cfg}:3: tuning.window_s: expected a number, got 'x'" in text
    assert f"{cfg}:5: grpc.listen: expected a unix socket or loopback address" in text
    assert len(lines) == 4 and "Traceback" not in text


def test_sd_notify_ready_watchdog_stopping(tmp_path):
    import socket

    name = f"tuner-notify-{os.getpid()}"
    cfg = write_config(tmp_path, sla_us=900.0, window_s=0.05)
    with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM) as srv:
        srv.bind("\0" + name)
        srv.settimeout(20)
        p = start_daemon(cfg, REPO, subprocess.PIPE, {"NOTIFY_SOCKET": "@" + name, "WATCHDOG_USEC": "200000"})
        try:
            msgs = [srv.recv(200).decode()]
            assert msgs[0].startswith("READY=1")
            assert _serving(tmp_path / "t.sock")  # READY only once the API answers
            while msgs.count("WATCHDOG=1") < 3:  # pinged every WATCHDOG_USEC / 2
                msgs.append(srv.recv(200).decode())
        finally:
            code, out = _stop(p)
        rest = []
        srv.settimeout(2)
        try:
            while True:
                rest.append(srv.recv(200).decode())
        except TimeoutError:
            pass
    assert code == 0, out
    assert "STOPPING=1" in rest


def test_sighup_reload_rejects_bad_file_and_applies_good_one(tmp_path):
    cfg = write_config(tmp_path, sla_us=900.0, window_s=0.05)
    log = tmp_path / "daemon.log"
    with open(log, "w") as out:
        p = start_daemon(cfg, REPO, out)
    try:
        wait_for(lambda: (read_state(tmp_path).get("held") or {}).get("reason") == "startup", timeout=20)
        good = cfg.read_text()
        cfg.write_text(good.replace("percentile = 99", "percentile = 42"))
        p.send_signal(signal.SIGHUP)
        wait_for(lambda: "reload rejected" in log.read_text(), timeout=10)
        assert "tuner.toml:8: policy.percentile: expected one of 50, 90, 95, 99, 99.9, got 42" in log.read_text()
        cfg.write_text(good.replace("sla_us = 900.0", "sla_us = 1200.0"))
        p.send_signal(signal.SIGHUP)
        wait_for(lambda: (read_state(tmp_path).get("held") or {}).get("reason") == "config", timeout=20)
        r = _ctl(tmp_path, "--json", "status")
        assert json.loads(r.stdout)["policy"]["slaUs"] == 1200.0
    finally:
        p.send_signal(signal.SIGTERM)
        p.wait(20)
    assert p.returncode == 0
