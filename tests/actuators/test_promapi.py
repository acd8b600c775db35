"""The Prometheus HTTP API helpers shared by the latency and power sources: durations and scrape intervals.

The instant query itself is tested through its users (tests/actuators/latency/test_sources.py's Prometheus
tests, tests/actuators/power/test_promquery.py against a real Prometheus)."""

from __future__ import annotations

import pytest

from actuators.promapi import check_url, parse_duration, scrape_intervals
from core.errors import HostError

#: what Prometheus 2.42 serves at /api/v1/status/config for a two-job configuration (defaults filled in)
SERVED = """global:
  scrape_interval: 1s
  scrape_timeout: 1s
  evaluation_interval: 1m
scrape_configs:
- job_name: exp
  honor_timestamps: true
  scrape_interval: 500ms
  scrape_timeout: 500ms
  metrics_path: /metrics
  static_configs:
  - targets:
    - 127.0.0.1:1
- job_name: "kepler"
  honor_timestamps: true
  scrape_interval: 1m30s
  static_configs:
  - targets:
    - 127.0.0.1:2
"""


@pytest.mark.parametrize(
    "text,seconds",
    [("15s", 15.0), ("500ms", 0.5), ("1m30s", 90.0), ("2h", 7200.0), (" '5s'", 5.0), ("15", None), ("1x", None)],
)
def test_parse_duration(text, seconds):
    assert parse_duration(text) == seconds


def test_scrape_intervals_per_job_and_global():
    assert scrape_intervals(SERVED) == (1.0, {"exp": 0.5, "kepler": 90.0})
    assert scrape_intervals("") == (None, {})


def test_check_url():
    assert check_url("http://prom:9090/") == "http://prom:9090"
    with pytest.raises(HostError, match="expected http"):
        check_url("prom:9090")
