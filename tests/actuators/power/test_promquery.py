"""The Prometheus query power reader: against a real Prometheus scraping an exporter the test sets, and against a
scripted server for what a real one does not do on demand (a stale sample, a counter reset, no config endpoint)."""

from __future__ import annotations

import json
import threading
import urllib.parse
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from actuators.power.promquery import FALLBACK_UPDATE_PERIOD_S, PromQueryReader, make_reader
from actuators.power.source import PowerReader
from core.errors import HostError, is_permanent
from tests.prometheus_server import prometheus_binary, start_exporter, start_prometheus

JOULES = "test_node_joules_total"
WATTS = "test_pdu_watts"


@pytest.fixture(scope="module")
def scraped():
    """One Prometheus for the module (its first scrape comes ~5 s after start) scraping two exporters: `kept`
    and `gone` (which a test stops)."""
    if prometheus_binary() is None:
        pytest.skip("prometheus binary not installed (Debian package `prometheus`)")
    kept, gone = start_exporter(), start_exporter()
    server = start_prometheus([kept.target, gone.target], scrape_interval="200ms")
    try:
        yield server, kept, gone
    finally:
        server.stop()
        kept.stop()
        gone.stop()


def _value_is(expected: float):
    return lambda series: len(series) == 1 and float(series[0]["value"][1]) == expected


def _of(metric: str, exporter) -> str:
    return f'{metric}{{instance="{exporter.target}"}}'


def test_reads_a_joules_counter_and_a_watts_gauge_from_real_prometheus(scraped):
    server, kept, _gone = scraped
    joules, watts = _of(JOULES, kept), _of(WATTS, kept)
    kept.joules.inc(1000.0)
    kept.watts.set(123.5)
    server.wait_for(joules, _value_is(1000.0))
    server.wait_for(watts, _value_is(123.5))

    counter = make_reader(url=server.url, query=joules, type="counter", timeout_s=2.0)
    gauge = make_reader(url=server.url + "/", query=watts, type="gauge", zone="pdu")
    assert isinstance(counter, PowerReader) and isinstance(gauge, PowerReader)
    assert counter.info.source == "prometheus" and counter.info.zones == ("platform",)
    assert counter.info.update_period_s == pytest.approx(0.2)  # the job's scrape interval, read from Prometheus
    assert counter.update_period_from == "scrape_interval of job 'exporter'"
    assert (counter.info.resolution_unit, gauge.info.resolution_unit) == ("J", "W")
    assert gauge.info.zones == ("pdu",) and gauge.info.resolution == 1.0

    first = counter.read()
    assert first.joules == 1000.0 and first.watts is None
    assert gauge.read().watts == 123.5

    kept.joules.inc(250.0)
    kept.watts.set(99.0)
    server.wait_for(joules, _value_is(1250.0))
    server.wait_for(watts, _value_is(99.0))
    second = counter.read()
    assert second.joules == 1250.0 and second.t > first.t
    assert gauge.read().watts == 99.0
    assert make_reader(url=server.url, query=watts, type="gauge", update_period_s=5).info.update_period_s == 5.0


def test_no_series_several_series_and_a_vanished_target_name_the_query(scraped):
    server, _kept, gone = scraped
    server.wait_for(WATTS, lambda s: len(s) == 2)
    with pytest.raises(HostError, match=r"query 'no_such_metric': no series") as e:
        make_reader(url=server.url, query="no_such_metric")
    assert not is_permanent(e.value) and "\n" not in str(e.value)
    with pytest.raises(HostError, match=rf"query '{WATTS}': 2 series; narrow the selector") as e:
        make_reader(url=server.url, query=WATTS)
    assert is_permanent(e.value)  # the query can never give one number

    reader = make_reader(url=server.url, query=_of(WATTS, gone), type="gauge")
    reader.read()
    gone.stop()  # the target stops answering: Prometheus marks its series stale at the next scrape
    server.wait_for(_of("up", gone), _value_is(0.0))
    with pytest.raises(HostError, match=r"query 'test_pdu_watts\{.*\}': no series") as e:
        reader.read()
    assert not is_permanent(e.value)


def test_prometheus_down_is_transient(scripted):
    scripted.set("pdu_watts", 300.0, evaluated_at=1000.0, scraped_at=999.0)
    reader = PromQueryReader(scripted.url, "pdu_watts", metric_type="gauge", update_period_s=1)
    scripted.close()
    with pytest.raises(HostError, match=rf"Prometheus {scripted.url}: cannot connect") as e:
        reader.read()
    assert not is_permanent(e.value)


class _Scripted:
    """A Prometheus API the test scripts: `values[query]` is the (value, timestamp) it answers."""

    def __init__(self) -> None:
        self.values: dict[str, tuple[float, float]] = {}
        self.config: str | None = None
        self.closed = False
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self):
                url = urllib.parse.urlsplit(self.path)
                if url.path == "/api/v1/status/config" and outer.config is not None:
                    self._send(200, {"status": "success", "data": {"yaml": outer.config}})
                    return
                if url.path != "/api/v1/query":
                    self._send(404, {"status": "error", "errorType": "not_found", "error": "no such path"})
                    return
                query = urllib.parse.parse_qs(url.query)["query"][0]
                value, ts = outer.values[query]
                series = [{"metric": {"job": "pdu"}, "value": [ts, repr(value)]}]
                self._send(200, {"status": "success", "data": {"resultType": "vector", "result": series}})

            def _send(self, status, body):
                data = json.dumps(body).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, *args):
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True).start()

    def set(self, query: str, value: float, evaluated_at: float, scraped_at: float) -> None:
        self.values[query] = (value, evaluated_at)
        self.values[f"timestamp({query})"] = (scraped_at, evaluated_at)

    def close(self) -> None:
        if not self.closed:
            self.server.shutdown()
            self.server.server_close()
        self.closed = True


@pytest.fixture
def scripted():
    server = _Scripted()
    yield server
    server.close()


def test_a_sample_whose_timestamp_stops_advancing_is_reported_stale(scripted):
    scripted.config = "global:\n  scrape_interval: 1s\nscrape_configs:\n- job_name: pdu\n  scrape_interval: 2s\n"
    scripted.set("pdu_watts", 300.0, evaluated_at=1000.0, scraped_at=999.0)
    reader = PromQueryReader(scripted.url, "pdu_watts", metric_type="gauge")
    assert reader.info.update_period_s == 2.0  # the series' job's interval, not the global one
    assert reader.read().watts == 300.0
    scripted.set("pdu_watts", 300.0, evaluated_at=1006.0, scraped_at=999.0)  # 7 s old: over 3 periods of 2 s
    with pytest.raises(HostError, match=r"query 'pdu_watts': stale: the newest sample is 7\.0 s old") as e:
        reader.read()
    assert not is_permanent(e.value)
    scripted.set("pdu_watts", 310.0, evaluated_at=1008.0, scraped_at=1007.5)
    assert reader.read().watts == 310.0


def test_a_counter_reset_keeps_the_joules_going_up_and_no_config_endpoint_assumes_60_s(scripted):
    scripted.set("node_joules_total", 5000.0, evaluated_at=100.0, scraped_at=100.0)
    clock = iter([1.0, 2.0, 3.0, 4.0])
    reader = PromQueryReader(scripted.url, "node_joules_total", clock=lambda: next(clock))
    assert reader.info.update_period_s == FALLBACK_UPDATE_PERIOD_S == 60.0
    assert reader.update_period_from.startswith("assumed")
    assert reader.read().joules == 5000.0
    scripted.set("node_joules_total", 40.0, evaluated_at=101.0, scraped_at=101.0)  # the exporter restarted
    assert reader.read().joules == 5040.0
    scripted.set("node_joules_total", 100.0, evaluated_at=102.0, scraped_at=102.0)
    sample = reader.read()
    assert sample.joules == 5100.0 and sample.t == 3.0
    scripted.set("node_joules_total", float("nan"), evaluated_at=103.0, scraped_at=103.0)
    with pytest.raises(HostError, match="nan is not a cumulative energy in joules"):
        reader.read()


@pytest.mark.parametrize(
    "options,match",
    [
        ({"url": "ftp://x", "query": "q"}, r"energy.url: 'ftp://x': expected http\(s\)"),
        ({"url": "http://127.0.0.1:9", "query": " "}, "energy.query: expected a PromQL expression"),
        ({"url": "http://127.0.0.1:9", "query": "q", "type": "rate"}, "energy.type: 'rate': expected counter"),
        ({"url": "http://127.0.0.1:9", "query": "q", "timeout_s": 0}, "energy.timeout_s: 0: expected a number > 0"),
        ({"url": "http://127.0.0.1:9", "query": "q", "password": "x"}, "energy.password: unknown option"),
        ({"query": "q"}, "energy.url: required"),
        (
            {"url": "http://127.0.0.1:9", "query": "q", "bearer_token_file": "/nonexistent/t"},
            "energy.bearer_token_file",
        ),
    ],
)
def test_bad_options_are_one_permanent_line_naming_the_field(options, match):
    with pytest.raises(HostError, match=match) as e:
        make_reader(**options)
    assert is_permanent(e.value) and "\n" not in str(e.value)
    assert str(e.value).startswith("energy.") and str(e.value).endswith("(prometheus energy source)")
