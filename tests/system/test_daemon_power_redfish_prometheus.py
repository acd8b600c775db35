"""The daemon in observe mode on a real host (fake sysfs tree, real memcached) whose energy source is a BMC over
Redfish (the mockup BMC in its own process) or a Prometheus query (a real Prometheus scraping an exporter the
test sets): it reports that power, as `tuner_power_watts` and `tuner_energy_joules_total{zone,source}`, a BMC
that stops answering costs the power, never the daemon (no traceback), and a BMC that starts after the daemon is
read once it answers."""

from __future__ import annotations

import contextlib
import json
import logging
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests import fakefs
from tests.daemon_fakes import Running, registry_samples, wait_for, write_config
from tests.memcached_server import free_port, memcached_binary, start_memcached
from tests.prometheus_server import start_exporter

REPO = Path(__file__).resolve().parents[2]
NCPU = 2
LATENCY = '[host.options.latency]\nisolation = "thread"\nrate_hz = 200\n'


@pytest.fixture(autouse=True)
def _guard(monkeypatch, tmp_path):
    fakefs.guard_writes(monkeypatch, tmp_path)
    fakefs.msr_device_semantics(monkeypatch)


@pytest.fixture
def memcached_port():
    if memcached_binary() is None:
        pytest.skip("memcached binary not installed (Debian package `memcached`)")
    server = start_memcached()
    yield server.port
    server.stop()


@contextlib.contextmanager
def _mockup_bmc(password_file: Path, port: int = 0):
    """The mockup BMC in its own process (`python -m tests.redfish_mockup`) on `port` (0: a free one): (process,
    url, username); it writes its password to `password_file`."""
    proc = subprocess.Popen(
        [sys.executable, "-m", "tests.redfish_mockup", "--watts", "412", "--password-file", str(password_file)]
        + ["--port", str(port)],
        cwd=REPO,
        env={**os.environ, "PYTHONPATH": str(REPO)},
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        started = json.loads(proc.stdout.readline())
        yield proc, started["url"], started["username"]
    finally:
        proc.kill()
        proc.wait(timeout=5)


@pytest.fixture
def bmc(tmp_path):
    """The mockup BMC, started before the daemon: (process, url, username, password file)."""
    password_file = tmp_path / "bmc-password"
    with _mockup_bmc(password_file) as (proc, url, username):
        yield proc, url, username, str(password_file)


def _observe(tmp_path, port, energy_toml: str) -> Path:
    root = tmp_path / "root"
    fakefs.realhost_tree(root, NCPU, 20 << 8)
    shutil.rmtree(root / "sys/class/powercap")  # no RAPL: the power is the BMC's or Prometheus's only
    opts = {"root": str(root), "state_dir": str(tmp_path / "orig"), "qps": f"memcached:127.0.0.1:{port}"}
    cfg = write_config(tmp_path, host="real", options=opts, window_s=0.3, extra=LATENCY + energy_toml)
    cfg.write_text(cfg.read_text().replace("[host]\n", '[host]\nmode = "observe"\n', 1))
    return cfg


def _windows(daemon) -> int:
    return sum(b.windows for b in daemon.observer.baseline.data.values())


def _power_is(daemon, watts: float) -> bool:
    """The last window's power within 1 % of the source's (the host's window also spans its QPS read after the
    energy source's last reading: ~0.2 % of a 0.3 s window on this VM)."""
    m = daemon.status().last_measurement or {}
    return m.get("power_w") is not None and abs(m["power_w"] - watts) < 0.01 * watts


def test_observe_reports_the_power_of_a_redfish_bmc_and_survives_it_going_away(tmp_path, memcached_port, bmc, caplog):
    proc, url, username, password_file = bmc
    energy = (
        f'[host.options.energy]\nkind = "redfish"\nbase_url = "{url}"\nusername = "{username}"\n'
        f'password_file = "{password_file}"\ntimeout_s = 0.5\ngive_up_s = 1.0\n'
    )
    cfg = _observe(tmp_path, memcached_port, energy)
    with caplog.at_level(logging.WARNING), Running(cfg, serve=False) as r:
        assert r.host.energy.info.source == "redfish"
        wait_for(lambda: _power_is(r.daemon, 412.0), timeout=20)
        metrics = registry_samples(r.daemon.metrics.registry)
        assert metrics[("tuner_power_watts", ())] == pytest.approx(412.0, rel=0.01)
        assert metrics[("tuner_energy_joules_total", (("source", "redfish"), ("zone", "platform")))] > 0
        proc.kill()  # the BMC stops answering: windows go on, their power unknown, then the source is dropped
        proc.wait(timeout=5)
        seen = _windows(r.daemon)
        wait_for(lambda: "energy" in r.host.absent and _windows(r.daemon) >= seen + 3, timeout=30)
        assert r.daemon.status().last_measurement["power_w"] is None
        assert r.daemon.status().mode == "observe" and r.thread.is_alive()
    assert "connection refused" in r.host.absent["energy"]
    assert not [rec for rec in caplog.records if rec.exc_info], "a traceback was logged"


def test_observe_reads_a_redfish_bmc_that_starts_after_the_daemon(tmp_path, memcached_port, caplog):
    port = free_port()
    password_file = tmp_path / "bmc-password"
    password_file.write_text("s3cret\n")  # the mockup's password, there before the daemon reads it
    energy = (
        f'[host.options.energy]\nkind = "redfish"\nbase_url = "http://127.0.0.1:{port}"\nusername = "admin"\n'
        f'password_file = "{password_file}"\ntimeout_s = 0.5\ngive_up_s = 60.0\n'
    )
    cfg = _observe(tmp_path, memcached_port, energy)
    # the BMC, once up, outlives the daemon (its stopping first would be a second outage, a second warning)
    with contextlib.ExitStack() as bmc, caplog.at_level(logging.WARNING), Running(cfg, serve=False) as r:
        assert r.host.energy.info.source == "redfish" and "energy" not in r.host.absent
        wait_for(lambda: _windows(r.daemon) >= 3, timeout=20)  # windows go on while the BMC is down
        assert r.daemon.status().last_measurement["power_w"] is None  # unknown, never 0
        bmc.enter_context(_mockup_bmc(tmp_path / "bmc-own-password", port))  # the BMC comes up (same password)
        wait_for(lambda: _power_is(r.daemon, 412.0), timeout=20)
        metrics = registry_samples(r.daemon.metrics.registry)
        assert r.daemon.status().mode == "observe" and r.thread.is_alive()
    assert "energy" not in r.host.absent
    assert metrics[("tuner_energy_joules_total", (("source", "redfish"), ("zone", "platform")))] > 0
    assert not [rec for rec in caplog.records if rec.exc_info], "a traceback was logged"
    said = [rec.getMessage() for rec in caplog.records]
    assert len([m for m in said if "backing off" in m]) == 1, said  # the source's one warning of the outage
    assert len([m for m in said if "energy unknown for this window" in m]) == 1, said  # and the windows' one


def test_observe_reports_the_power_of_a_prometheus_query(tmp_path, memcached_port, prometheus):
    exporter = start_exporter()
    try:
        exporter.watts.set(250.0)
        server = prometheus([exporter.target], scrape_interval="200ms")
        server.wait_for("test_pdu_watts", lambda s: len(s) == 1)  # the first scrape (~5 s after start)
        energy = (
            f'[host.options.energy]\nkind = "prometheus"\nurl = "{server.url}"\nquery = "test_pdu_watts"\n'
            'type = "gauge"\nzone = "pdu"\n'
        )
        cfg = _observe(tmp_path, memcached_port, energy)
        with Running(cfg, serve=False) as r:
            assert r.host.energy.info.source == "prometheus" and r.host.energy.info.update_period_s == 0.2
            wait_for(lambda: _power_is(r.daemon, 250.0), timeout=20)
            exporter.watts.set(180.0)
            wait_for(lambda: _power_is(r.daemon, 180.0), timeout=20)
            metrics = registry_samples(r.daemon.metrics.registry)
        assert metrics[("tuner_energy_joules_total", (("source", "prometheus"), ("zone", "pdu")))] > 0
        assert metrics[("tuner_energy_source_watts", (("source", "prometheus"),))] == pytest.approx(180.0, rel=0.01)
    finally:
        exporter.stop()
