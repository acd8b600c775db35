"""deploy/: the systemd unit verifies, the scrape config checks, the dashboard queries only real metrics."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from pathlib import Path

import pytest

from tuner.config import Config, load_config

DEPLOY = Path(__file__).resolve().parents[2] / "deploy"


def _unit() -> str:
    return (DEPLOY / "tuner.service").read_text()


@pytest.mark.skipif(shutil.which("systemd-analyze") is None, reason="systemd-analyze not installed")
def test_systemd_analyze_verify_is_clean(tmp_path):
    # ExecStart must exist for verify: point it at a real executable, keep everything else verbatim
    exe = shutil.which("true")
    unit = tmp_path / "tuner.service"
    unit.write_text(_unit().replace("/usr/local/bin/tuner", exe))
    r = subprocess.run(["systemd-analyze", "verify", str(unit)], capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    # unknown keys or bad values are only warnings: there must be none about our unit
    assert "tuner.service" not in r.stdout + r.stderr, r.stdout + r.stderr
    # and the check is not vacuous: a broken unit is reported
    unit.write_text(_unit().replace("/usr/local/bin/tuner", exe).replace("NoNewPrivileges=yes", "NoNewPrivilege=yes"))
    r = subprocess.run(["systemd-analyze", "verify", str(unit)], capture_output=True, text=True, timeout=60)
    assert "Unknown key" in r.stderr


def test_unit_hardening_and_capabilities():
    unit = _unit()
    settings = dict(re.findall(r"^(\w+)=(.*)$", unit, re.M))
    assert settings["Type"] == "notify" and settings["Restart"] == "on-failure"
    assert settings["WatchdogSec"].endswith("s") and settings["User"] == "tuner"
    assert settings["AmbientCapabilities"] == settings["CapabilityBoundingSet"] == "CAP_NET_ADMIN CAP_SYS_RAWIO"
    assert settings["ProtectSystem"] == "strict" and settings["StateDirectory"] == "tuner"
    assert settings["NoNewPrivileges"] == "yes" and settings["PrivateTmp"] == "yes"
    assert set(settings["RestrictAddressFamilies"].split()) == {"AF_UNIX", "AF_INET", "AF_INET6", "AF_NETLINK"}
    assert settings["DeviceAllow"] == "char-cpu/msr rw"
    # options that would break MSR / sysfs writes are absent (only mentioned in comments)
    for key in ("PrivateDevices", "ProtectKernelTunables", "PrivateNetwork"):
        assert key not in settings
    assert "--config /etc/tuner/tuner.toml" in settings["ExecStart"]


def test_unit_does_not_restart_on_a_config_that_cannot_work(tmp_path):
    """The start-up checks' exit status is exempt from Restart=on-failure, and systemd accepts the line."""
    from core.errors import EXIT_CONFIG

    settings = dict(re.findall(r"^(\w+)=(.*)$", _unit(), re.M))
    assert settings["RestartPreventExitStatus"].split() == [str(EXIT_CONFIG)]
    if shutil.which("systemd-analyze") is None:
        pytest.skip("systemd-analyze not installed")
    exe = shutil.which("true")
    unit = tmp_path / "tuner.service"
    unit.write_text(_unit().replace("/usr/local/bin/tuner", exe))
    r = subprocess.run(["systemd-analyze", "verify", str(unit)], capture_output=True, text=True, timeout=60)
    assert r.returncode == 0 and "RestartPreventExitStatus" not in r.stderr, r.stderr
    unit.write_text(
        _unit()
        .replace("/usr/local/bin/tuner", exe)
        .replace("RestartPreventExitStatus=78", "RestartPreventExitStatus=EX_NOPE")
    )
    r = subprocess.run(["systemd-analyze", "verify", str(unit)], capture_output=True, text=True, timeout=60)
    assert "Failed to parse value" in r.stderr and "EX_NOPE" in r.stderr  # a bad value is reported: not vacuous


@pytest.mark.skipif(shutil.which("promtool") is None, reason="promtool not installed")
def test_prometheus_config_checks():
    r = subprocess.run(
        ["promtool", "check", "config", str(DEPLOY / "prometheus.yml")], capture_output=True, text=True, timeout=60
    )
    assert r.returncode == 0, r.stdout + r.stderr
    assert "127.0.0.1:9464" in (DEPLOY / "prometheus.yml").read_text()


def _exposed_names() -> set[str]:
    from prometheus_client import generate_latest

    from actuators.host import OperatingPoint
    from tuner.daemon.metrics import DaemonMetrics

    m = DaemonMetrics.create("test", "sim")
    m.energy.labels(zone="package", source="rapl").inc(1)
    m.source_power.labels(source="rapl").set(80.0)
    m.latency.labels(percentile="99").set(1)
    m.set_point(OperatingPoint(50, 2.0))  # present once the tuner holds a point
    m.power.set(80.0)  # present once energy is measured
    m.set_savings(0.2, 0.1, 0.3)
    m.set_baseline("1000-1200", 50.0, {99.0: 100.0}, 3)
    text = generate_latest(m.registry).decode()
    return {line.split("{")[0].split(" ")[0] for line in text.splitlines() if line and not line.startswith("#")}


def test_dashboard_queries_only_exported_metrics():
    dash = json.loads((DEPLOY / "grafana-dashboard.json").read_text())
    exprs = [t["expr"] for p in dash["panels"] for t in p["targets"]]
    exprs += [a["expr"] for a in dash["annotations"]["list"]]
    used = {n for e in exprs for n in re.findall(r"\b(tuner_[a-z_]+)", e)}
    exposed = _exposed_names()
    assert used and used <= exposed, used - exposed
    # every headline metric (docs/daemon.md, Metrics) is on the dashboard
    for name in (
        "tuner_itr_seconds",
        "tuner_cpu_frequency_hertz",
        "tuner_offered_requests_per_second",
        "tuner_latency_seconds",
        "tuner_power_watts",
        "tuner_energy_joules_total",
        "tuner_energy_source_watts",
        "tuner_trials_total",
        "tuner_retunes_total",
        "tuner_sla_violations_total",
        "tuner_guardrail_reverts_total",
        "tuner_optimizer_seconds_bucket",
    ):
        assert name in used, name
    assert len({p["id"] for p in dash["panels"]}) == len(dash["panels"])


def test_example_config_is_valid_and_documents_every_key():
    cfg = load_config(DEPLOY / "tuner.example.toml")
    assert isinstance(cfg, Config) and cfg.grpc.listen == "unix:///run/tuner/tuner.sock"
    assert cfg.metrics_listen == "127.0.0.1:9464" and cfg.tuning.retune_period_s == 3600
    text = (DEPLOY / "tuner.example.toml").read_text()
    for key in (
        "spec",
        "itr_us",
        "dvfs_ghz",
        "reward",
        "sla_us",
        "percentile",
        "trials",
        "sobol_trials",
        "window_s",
        "settle_s",
        "retune_period_s",
        "load_change_pct",
        "guardrail_margin_pct",
        "dir",
        "listen",
        "tls_cert",
        "tls_key",
        "tls_client_ca",
        "token_file",
    ):
        assert re.search(rf"^{key} = .*#|^# .*\n{key} = |^{key} = ", text, re.M), key


def test_udev_and_tmpfiles_grant_group_tuner():
    assert 'GROUP="tuner"' in (DEPLOY / "60-tuner-msr.rules").read_text()
    lines = [l for l in (DEPLOY / "tuner.tmpfiles").read_text().splitlines() if l and not l.startswith("#")]
    assert all(l.split()[0] == "z" and l.split()[3:5] == ["root", "tuner"] for l in lines)


@pytest.mark.skipif(shutil.which("promtool") is None, reason="promtool not installed")
def test_alert_rules_check_and_use_exported_metrics():
    r = subprocess.run(
        ["promtool", "check", "rules", str(DEPLOY / "tuner-alerts.yml")], capture_output=True, text=True, timeout=60
    )
    assert r.returncode == 0, r.stdout + r.stderr
    used = set(re.findall(r"\b(tuner_[a-z_]+)", (DEPLOY / "tuner-alerts.yml").read_text()))
    assert used and used <= _exposed_names(), used - _exposed_names()
