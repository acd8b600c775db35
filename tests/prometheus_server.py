"""Start Debian's `prometheus` binary for tests, and a small exporter for it to scrape.

Test modules take the fixture `prometheus` (tests/conftest.py), a factory::

    def test_x(prometheus):
        exporter = start_exporter()                       # prometheus_client on 127.0.0.1:free port
        server = prometheus([exporter.target], scrape_interval="200ms")
        ...                                               # server.url, server.wait_for(query, predicate)

The server listens on 127.0.0.1 and a free port with its TSDB in a temp dir, is polled until `/-/ready`
answers (deadline, no fixed sleeps) and killed at teardown. Tests that use it are skipped, with the reason,
when the `prometheus` binary is not installed.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import tempfile
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from prometheus_client import CollectorRegistry, Counter, Gauge, start_http_server

from tests.memcached_server import free_port

START_DEADLINE_S = 20.0


def prometheus_binary() -> str | None:
    """Path of the prometheus binary, or None."""
    return shutil.which("prometheus")


@dataclass
class PrometheusServer:
    """A running Prometheus: `url` is `http://127.0.0.1:PORT`."""

    process: subprocess.Popen
    url: str
    root: Path

    def query(self, promql: str) -> list[dict]:
        """The instant vector's series (`[]` on no data); raises on an HTTP error."""
        address = f"{self.url}/api/v1/query?{urllib.parse.urlencode({'query': promql})}"
        with urllib.request.urlopen(address, timeout=2) as resp:
            return json.loads(resp.read())["data"]["result"]

    def wait_for(self, promql: str, ok: Callable[[list[dict]], bool], deadline_s: float = 15.0) -> list[dict]:
        """Poll `promql` until `ok(series)`; the series, or AssertionError at the deadline."""
        end = time.monotonic() + deadline_s
        series: list[dict] = []
        while time.monotonic() < end:
            series = self.query(promql)
            if ok(series):
                return series
            time.sleep(0.05)
        raise AssertionError(f"prometheus: {promql!r} not as expected within {deadline_s} s: {series}")

    def stop(self) -> None:
        """Kill the server, wait for it and remove its data (idempotent)."""
        if self.process.poll() is None:
            self.process.kill()
        self.process.wait(timeout=5)
        shutil.rmtree(self.root, ignore_errors=True)


def _config(targets: Sequence[str], scrape_interval: str, job: str) -> str:
    listed = ", ".join(json.dumps(t) for t in targets)
    return (
        f"global:\n  scrape_interval: {scrape_interval}\n  scrape_timeout: {scrape_interval}\n"
        f"scrape_configs:\n  - job_name: {job}\n    static_configs:\n      - targets: [{listed}]\n"
    )


def _ready(url: str) -> bool:
    try:
        with urllib.request.urlopen(f"{url}/-/ready", timeout=0.5) as resp:
            return resp.status == 200
    except (urllib.error.URLError, OSError):
        return False


def start_prometheus(
    targets: Sequence[str], scrape_interval: str = "200ms", job: str = "exporter", port: int | None = None
) -> PrometheusServer:
    """Start prometheus scraping `targets` (host:port) every `scrape_interval` and wait until it is ready; on
    `port` when given (one attempt), else on a free one."""
    binary = prometheus_binary()
    if binary is None:
        raise FileNotFoundError("prometheus binary not found (apt-get install prometheus)")
    root = Path(tempfile.mkdtemp(prefix="tuner-prom-"))
    (root / "prometheus.yml").write_text(_config(targets, scrape_interval, job))
    for _attempt in range(1 if port else 3):  # a free port can be taken between probe and bind: retry on another
        listen = port or free_port()
        args = [
            binary,
            f"--config.file={root / 'prometheus.yml'}",
            f"--storage.tsdb.path={root / 'data'}",
            f"--web.listen-address=127.0.0.1:{listen}",
            "--log.level=warn",
        ]
        with open(root / "prometheus.log", "wb") as log:  # a file, not a pipe nobody reads
            proc = subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=log)
        url = f"http://127.0.0.1:{listen}"
        end = time.monotonic() + START_DEADLINE_S
        while time.monotonic() < end and proc.poll() is None:
            if _ready(url):
                return PrometheusServer(process=proc, url=url, root=root)
            time.sleep(0.05)
        if proc.poll() is None:
            proc.kill()
        proc.wait(timeout=5)
        err = (root / "prometheus.log").read_text(errors="replace")
        if "address already in use" not in err:
            shutil.rmtree(root, ignore_errors=True)
            raise RuntimeError(f"prometheus did not start: {err[-400:]}")
    shutil.rmtree(root, ignore_errors=True)
    raise RuntimeError("prometheus: no free port after 3 attempts")


@dataclass
class Exporter:
    """A prometheus_client exporter on 127.0.0.1: a joules counter and a watts gauge the test sets."""

    target: str
    joules: Counter
    watts: Gauge
    server: object = field(repr=False)

    def stop(self) -> None:
        self.server.shutdown()  # type: ignore[attr-defined]
        self.server.server_close()  # type: ignore[attr-defined]


def start_exporter() -> Exporter:
    """An exporter of `test_node_joules_total` (counter) and `test_pdu_watts` (gauge) on a free port."""
    registry = CollectorRegistry()
    joules = Counter("test_node_joules", "energy the test adds", registry=registry)
    watts = Gauge("test_pdu_watts", "power the test sets", registry=registry)
    server, _thread = start_http_server(0, addr="127.0.0.1", registry=registry)
    return Exporter(target=f"127.0.0.1:{server.server_port}", joules=joules, watts=watts, server=server)
