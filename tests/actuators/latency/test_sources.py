"""Latency sources beside the prober: Prometheus queries, command and file hooks, and the config factory."""

from __future__ import annotations

import json
import os
import socket
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import parse_qs, urlsplit

import pytest

from actuators.host import PERCENTILES
from actuators.latency.prober import Prober
from actuators.latency.sources import CommandLatency, ExternalWindow, FileLatency, PrometheusLatency, parse_hook_json
from actuators.sensors import LatencySource
from core.errors import HostError

# -- Prometheus ------------------------------------------------------------------------------------
QUERY = "histogram_quantile({q}, sum(rate(app_latency_seconds_bucket[{window}])) by (le))"


def _vector(value: str, series: int = 1) -> dict:
    return {
        "status": "success",
        "data": {"resultType": "vector", "result": [{"metric": {}, "value": [1700000000.0, value]}] * series},
    }


class _Prom:
    """A tiny Prometheus stand-in on 127.0.0.1: `reply(query) -> (status, body)`; records requests."""

    def __init__(self, reply):
        self.reply = reply
        self.seen: list[dict] = []
        self.release = threading.Event()
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self):
                url = urlsplit(self.path)
                params = {k: v[0] for k, v in parse_qs(url.query).items()}
                outer.seen.append({"path": url.path, "auth": self.headers.get("Authorization"), **params})
                status, body = outer.reply(params.get("query", ""))
                if status == "hang":
                    outer.release.wait(5)
                    return
                data = body if isinstance(body, bytes) else json.dumps(body).encode()
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
        self.thread = threading.Thread(target=self.server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
        self.thread.start()

    def close(self):
        self.release.set()
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def prom():
    servers = []

    def make(reply):
        servers.append(_Prom(reply))
        return servers[-1]

    yield make
    for s in servers:
        s.close()


def test_prometheus_percentiles_and_count(prom):
    def reply(query):
        if query.startswith("sum(increase"):
            return 200, _vector("1234.6")
        q = float(query.split("(", 1)[1].split(",", 1)[0])
        return 200, _vector(str(q * 0.001))  # p-quantile = q ms, in seconds

    server = prom(reply)
    clock = iter([1000.0, 1001.5])
    src = PrometheusLatency(
        server.url + "/",
        QUERY,
        count_query="sum(increase(app_latency_seconds_count[{window}]))",
        headers={"Authorization": "Bearer t0k"},
        clock=lambda: next(clock),
    )
    assert isinstance(src, LatencySource)
    src.begin()
    w = src.end()
    assert isinstance(w, ExternalWindow) and not w.ci_known
    assert w.latency_us == {p: pytest.approx(p / 100 * 1000) for p in PERCENTILES}
    assert w.latency_ci_us[99.0] == (w.latency_us[99.0], w.latency_us[99.0])
    assert w.requests == 1235 and w.seconds == 1.5
    first = server.seen[0]
    assert first["path"] == "/api/v1/query" and first["time"] == "1001.500" and first["auth"] == "Bearer t0k"
    assert first["query"] == QUERY.format(q="0.5", window="1500ms")
    assert {s["query"].split(",")[0] for s in server.seen} >= {"histogram_quantile(0.999"}


@pytest.mark.parametrize(
    "status,body,match",
    [
        (
            400,
            {"status": "error", "errorType": "bad_data", "error": "parse error at char 5"},
            "HTTP 400: bad_data: parse error at char 5",
        ),
        (503, b"<html>down</html>", "HTTP 503"),
        (200, {"status": "success", "data": {"resultType": "vector", "result": []}}, "no series"),
        (200, _vector("NaN"), "NaN"),
        (200, _vector("+Inf"), "not a finite latency"),
        (200, _vector("0.1", series=3), "3 series"),
        (200, b"not json", "not JSON"),
        (200, {"status": "success", "data": {"resultType": "matrix", "result": []}}, "resultType 'matrix'"),
    ],
)
def test_prometheus_errors(prom, status, body, match):
    server = prom(lambda q: (status, body))
    src = PrometheusLatency(server.url, QUERY)
    src.begin()
    with pytest.raises(HostError, match=match) as e:
        src.end()
    assert server.url in str(e.value) and "\n" not in str(e.value)


def test_prometheus_unreachable_and_timeout(prom):
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        url = f"http://127.0.0.1:{s.getsockname()[1]}"
        src = PrometheusLatency(url, QUERY, timeout_s=0.5)
        src.begin()
        with pytest.raises(HostError, match=rf"Prometheus {url}: cannot connect"):
            src.end()
    server = prom(lambda q: ("hang", None))
    src = PrometheusLatency(server.url, QUERY, timeout_s=0.2)
    src.begin()
    t0 = time.monotonic()
    with pytest.raises(HostError, match="timed out"):
        src.end()
    assert time.monotonic() - t0 < 2


def test_prometheus_config_errors():
    with pytest.raises(HostError, match="http"):
        PrometheusLatency("file:///etc/passwd", QUERY)
    with pytest.raises(HostError, match=r"\{q\}"):
        PrometheusLatency("http://127.0.0.1:9090", "up")


# -- hooks -----------------------------------------------------------------------------------------
GOOD = {"requests": 500, "p50": 40, "p90": 55.5, "p95": 60, "p99": 90, "p99.9": 150}


def test_hook_json_good_and_ci():
    w = parse_hook_json(json.dumps(GOOD), "hook")
    assert w.latency_us[99.9] == 150.0 and w.requests == 500 and not w.ci_known
    ci = {k: [v * 0.9, v * 1.1] for k, v in GOOD.items() if k != "requests"}
    w = parse_hook_json(json.dumps({**GOOD, "ci": ci, "extra": "ignored"}), "hook")
    assert w.ci_known and w.latency_ci_us[99.0] == pytest.approx((81.0, 99.0))


@pytest.mark.parametrize(
    "doc,match",
    [
        ("oops", "not JSON"),
        ("[1, 2]", "expected a JSON object"),
        ({k: v for k, v in GOOD.items() if k != "p95"}, "missing 'p95'"),
        ({**GOOD, "requests": True}, "'requests' must be an integer"),
        ({**GOOD, "requests": -1}, "'requests' must be an integer"),
        ({**GOOD, "p50": "40"}, "'p50' must be a finite number"),
        ({**GOOD, "p99": -5}, "'p99' must be a finite number"),
        ({**GOOD, "p90": 100}, "must not decrease: p90=100 > p95=60"),
        ({**GOOD, "p999": 1}, "unknown percentile key 'p999'"),
        ({**GOOD, "ci": {"p99": [95, 99]}}, r"ci.p99 \[95, 99\] does not contain p99=90"),
        ({**GOOD, "ci": {"p98": [1, 2]}}, "ci key 'p98'"),
        ({**GOOD, "ci": {"p99": 3}}, "must be \\[lo, hi\\]"),
        ({**GOOD, "window_end_unix": 10.0}, "stale result"),
    ],
)
def test_hook_json_bad(doc, match):
    text = doc if isinstance(doc, str) else json.dumps(doc)
    with pytest.raises(HostError, match=match) as e:
        parse_hook_json(text, "hook command 'x'", not_before_unix=100.0)
    assert str(e.value).startswith("hook command 'x': ") and "\n" not in str(e.value)


def _py(code: str) -> list[str]:
    return [sys.executable, "-c", code]


def test_command_hook_gets_the_window_in_its_environment():
    code = (
        "import json, os; s = float(os.environ['TUNER_WINDOW_SECONDS']); "
        f"d = {GOOD!r}; d['requests'] = int(s * 1000); print(json.dumps(d))"
    )
    clock = iter([time.time(), time.time() + 2.0])
    src = CommandLatency(_py(code), clock=lambda: next(clock))
    assert isinstance(src, LatencySource)
    src.begin()
    w = src.end()
    assert w.requests == 2000 and w.latency_us[50.0] == 40.0


@pytest.mark.parametrize(
    "argv,timeout,match",
    [
        (_py("import sys; print('boom', file=sys.stderr); sys.exit(3)"), 10, "exited with status 3: boom"),
        (_py("print('hello')"), 10, "not JSON"),
        (_py("import time; time.sleep(10)"), 0.3, "did not finish within 0.3 s"),
        (["/nonexistent/hook"], 10, "not found"),
    ],
)
def test_command_hook_errors(argv, timeout, match):
    src = CommandLatency(argv, timeout_s=timeout)
    src.begin()
    t0 = time.monotonic()
    with pytest.raises(HostError, match=match):
        src.end()
    assert time.monotonic() - t0 < 5


def test_command_hook_refuses_a_shell_string():
    with pytest.raises(HostError, match="argv list"):
        CommandLatency("echo {} | cat")


def test_file_hook_fresh_and_stale(tmp_path):
    path = tmp_path / "latency.json"
    src = FileLatency(path)
    src.begin()
    with pytest.raises(HostError, match="does not exist"):
        src.end()
    path.write_text(json.dumps(GOOD))
    os.utime(path, (time.time() - 3600, time.time() - 3600))  # written an hour ago
    src.begin()
    with pytest.raises(HostError, match="stale: not modified since the window began"):
        src.end()
    src.begin()
    path.write_text(json.dumps({**GOOD, "window_end_unix": time.time() + 1}))
    assert src.end().latency_us[99.0] == 90.0
    old = FileLatency(path, require_fresh=False)
    os.utime(path, (0, 0))
    old.begin()
    assert old.end().requests == 500


def test_span_hook_drives_a_prober_until_eof(memcached):
    src = CommandLatency(
        [
            sys.executable,
            "-m",
            "actuators.latency.prober",
            "--target",
            memcached.address,
            "--rate-hz",
            "200",
            "--until-eof",
        ],
        mode="span",
        timeout_s=20,
    )
    try:
        src.begin()
        time.sleep(1.0)  # the window (the child's interpreter start-up is cut off its front)
        w = src.end()
    finally:
        src.close()
    assert w.ci_known and 1 <= w.requests <= 201
    assert w.latency_us[50.0] <= w.latency_us[99.9]


def test_span_hook_errors_and_close():
    src = CommandLatency(_py("import sys; sys.stdin.read(); sys.exit(4)"), mode="span")
    src.begin()
    with pytest.raises(HostError, match="exited with status 4"):
        src.end()
    src = CommandLatency(_py("import time; time.sleep(30)"), mode="span", timeout_s=0.3)
    src.begin()
    with pytest.raises(HostError, match="did not finish within 0.3 s of end"):
        src.end()
    src = CommandLatency(_py("import sys; sys.stdin.read()"), mode="span")
    src.begin()
    proc = src._proc
    src.close()
    assert proc.poll() is not None  # killed, not left behind
    with pytest.raises(HostError, match="mode"):
        CommandLatency(["x"], mode="during")


def test_make_latency_source_from_config(tmp_path):
    from actuators.latency.sources import make_latency_source

    p = make_latency_source({"kind": "prober", "target": "10.0.0.5:11211", "rate_hz": 500}, settings_root=tmp_path)
    assert isinstance(p, Prober) and p.config.rate_hz == 500 and p.settings.cpus
    p.close()
    c = make_latency_source({"kind": "command", "argv": ["/bin/true"], "mode": "span"})
    assert isinstance(c, CommandLatency) and c.mode == "span"
    assert isinstance(make_latency_source({"kind": "file", "path": str(tmp_path / "x.json")}), FileLatency)
    prom = make_latency_source({"kind": "prometheus", "url": "http://127.0.0.1:9090", "quantile_query": QUERY})
    assert isinstance(prom, PrometheusLatency) and isinstance(prom, LatencySource)
    with pytest.raises(HostError, match="kind 'statsd'"):
        make_latency_source({"kind": "statsd"})
    with pytest.raises(HostError, match="unknown option 'rate'"):
        make_latency_source({"kind": "prober", "rate": 5})
    with pytest.raises(HostError, match="prober rate"):
        make_latency_source({"kind": "prober", "rate_hz": -1})


def test_prometheus_min_window_floor(prom):
    server = prom(lambda q: (200, _vector("0.0001")))
    clock = iter([10.0, 11.5])
    src = PrometheusLatency(server.url, QUERY, min_window_s=60, percentiles=[99.0], clock=lambda: next(clock))
    src.begin()
    w = src.end()
    assert server.seen[0]["query"] == QUERY.format(q="0.99", window="60000ms")
    assert w.latency_us == {99.0: pytest.approx(100.0)} and w.seconds == 1.5
