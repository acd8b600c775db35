"""/metrics of a running daemon: promtool-clean, base units, values that follow the loop."""

from __future__ import annotations

import shutil
import subprocess
import urllib.request

import pytest
from prometheus_client.parser import text_string_to_metric_families

from tests.daemon_fakes import Running, wait_for, write_config


def _scrape(port: int) -> str:
    return urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5).read().decode()


def _samples(text: str) -> dict:
    out = {}
    for fam in text_string_to_metric_families(text):
        for s in fam.samples:
            out[(s.name, tuple(sorted(s.labels.items())))] = s.value
    return out


@pytest.fixture(scope="module")
def scraped(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("metrics")
    with Running(write_config(tmp, sla_us=900.0)) as r:
        wait_for(lambda: r.daemon.status().state == "holding")
        n = r.host.measure_count
        wait_for(lambda: r.host.measure_count >= n + 2)  # a couple of holding windows
        yield r, _scrape(r.daemon.metrics_port)


@pytest.mark.skipif(shutil.which("promtool") is None, reason="promtool not installed")
def test_promtool_check_metrics_passes(scraped):
    _, text = scraped
    r = subprocess.run(["promtool", "check", "metrics"], input=text, capture_output=True, text=True, timeout=60)
    assert r.returncode == 0 and not (r.stdout + r.stderr).strip(), r.stdout + r.stderr


def test_values_follow_the_loop(scraped):
    r, text = scraped
    s = _samples(text)
    point = r.daemon.status().point
    assert s[("tuner_itr_seconds", ())] == pytest.approx(point.itr_us * 1e-6)
    assert s[("tuner_cpu_frequency_hertz", ())] == pytest.approx(point.dvfs_ghz * 1e9)
    assert s[("tuner_offered_requests_per_second", ())] == 100_000.0
    assert s[("tuner_trials_total", (("status", "completed"),))] == 4
    assert s[("tuner_retunes_total", (("reason", "startup"),))] == 1
    assert s[("tuner_sla_seconds", ())] == pytest.approx(900e-6)
    assert 0 < s[("tuner_latency_seconds", (("percentile", "99"),))] < 1
    assert s[("tuner_energy_joules_total", (("source", "rapl"), ("zone", "package")))] > 0
    assert s[("tuner_energy_source_watts", (("source", "rapl"),))] > 0
    assert s[("tuner_power_watts", ())] > 0
    assert s[("tuner_optimizer_seconds_count", ())] >= 9  # 4 suggest + 4 complete + best (+ to_json)
    assert s[("tuner_trial_seconds_count", ())] == 4
    assert s[("tuner_loop_state", (("tuner_loop_state", "holding"),))] == 1
    assert (
        "tuner_build_info",
        (
            ("host", "tests.daemon_fakes:make_file_host"),
            ("python", __import__("platform").python_version()),
            ("version", "0.1.0"),
        ),
    ) in s


def test_no_microsecond_or_global_registry_names(scraped):
    _, text = scraped
    names = {f.name for f in text_string_to_metric_families(text)}
    assert not [n for n in names if "micro" in n or "usec" in n or n.endswith("_us")]
    # own registry: no process_/python_ collectors from the global default registry
    assert not [n for n in names if n.startswith(("process_", "python_"))]


def test_metrics_listen_defaults_to_loopback():
    from tuner.config import Config

    assert Config().metrics_listen.startswith("127.0.0.1:")


def test_energy_is_counted_by_zone_and_source_with_compared_sources_beside():
    """The tuner's own source and a compared one (a BMC) each get their zones' joules and a watts gauge; a window
    whose own energy is unknown still counts the compared source."""
    from actuators.host import Measurement
    from tuner.daemon.metrics import DaemonMetrics

    metrics = DaemonMetrics.create("0", "real")
    m = Measurement(
        seconds=2.0,
        offered_qps=1.0,
        achieved_qps=1.0,
        requests=1,
        latency_us={99.0: 10.0},
        latency_ci_us={99.0: (9.0, 11.0)},
        energy_j=100.0,
        point=None,
        energy_by_zone_j={"package-0": 100.0, "dram": 20.0, "psys": 180.0},
        energy_source="rapl",
        energy_compare_j={"ipmi": 400.0},
        energy_compare_by_zone_j={"ipmi": {"platform": 400.0}},
    )
    metrics.observe(m)
    metrics.observe(__import__("dataclasses").replace(m, energy_known=False))
    s = _samples(__import__("prometheus_client").generate_latest(metrics.registry).decode())
    assert s[("tuner_energy_joules_total", (("source", "rapl"), ("zone", "package-0")))] == 100.0
    assert s[("tuner_energy_joules_total", (("source", "rapl"), ("zone", "psys")))] == 180.0
    assert s[("tuner_energy_joules_total", (("source", "ipmi"), ("zone", "platform")))] == 800.0
    assert s[("tuner_energy_source_watts", (("source", "ipmi"),))] == 200.0
    assert s[("tuner_energy_source_watts", (("source", "rapl"),))] == 50.0  # the packages, not psys again
