"""Fixtures shared by test modules in every directory: throwaway memcached, Redis, PostgreSQL and Prometheus
servers, and a fake BMC (ipmi_sim).

The servers themselves are started by the helper modules (`tests.memcached_server`, `tests.redis_server`,
`tests.pg_server`, `tests.prometheus_server`), which bench/ scripts use too; a test asks for a server by naming the
fixture as an argument."""

from __future__ import annotations

import shutil
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path

import pytest

from actuators.fakehw.bmc import FakeBmc, ipmi_sim_binary, start_bmc
from tests.memcached_server import MemcachedServer, memcached_binary, start_memcached
from tests.pg_server import PgServer, start_pg
from tests.prometheus_server import PrometheusServer, prometheus_binary, start_prometheus
from tests.redis_server import RedisServer, redis_binary, start_redis


def _skip_without_memcached() -> None:
    if memcached_binary() is None:
        pytest.skip("memcached binary not installed (Debian package `memcached`)")


@pytest.fixture
def memcached() -> Iterator[MemcachedServer]:
    """A fresh memcached on 127.0.0.1 and a free port, killed at teardown."""
    _skip_without_memcached()
    server = start_memcached()
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture
def memcached_unix(tmp_path: Path) -> Iterator[MemcachedServer]:
    """A fresh memcached on a unix socket in the test's temp dir, killed at teardown."""
    _skip_without_memcached()
    server = start_memcached(socket_path=str(tmp_path / "memcached.sock"))
    try:
        yield server
    finally:
        server.stop()


def _skip_without_redis() -> None:
    if redis_binary() is None:
        pytest.skip("redis-server binary not installed (Debian package `redis-server`)")


@pytest.fixture
def redis_server() -> Iterator[RedisServer]:
    """A fresh redis-server (no persistence) on 127.0.0.1 and a free port, killed at teardown."""
    _skip_without_redis()
    server = start_redis()
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture
def redis_unix(tmp_path: Path) -> Iterator[RedisServer]:
    """A fresh redis-server (no persistence) on a unix socket in the test's temp dir only, killed at teardown."""
    _skip_without_redis()
    server = start_redis(socket_path=str(tmp_path / "redis.sock"))
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture(scope="session")
def pg_server() -> Iterator[PgServer]:
    """One throwaway PostgreSQL cluster for the session (skips when PostgreSQL is not installed)."""
    server = start_pg()
    try:
        yield server
    finally:
        try:
            server.stop("immediate")
        except RuntimeError:
            pass  # already stopped (a test's restart failed half-way)
        shutil.rmtree(server.root, ignore_errors=True)


@pytest.fixture
def pg_url(pg_server: PgServer) -> str:
    """A fresh database on the session's server."""
    return pg_server.create_db()


@pytest.fixture
def prometheus() -> Iterator[Callable[..., PrometheusServer]]:
    """A factory: `prometheus(["127.0.0.1:PORT"], scrape_interval="200ms")` starts a throwaway Prometheus
    scraping those targets (killed at teardown; `port=` to listen on a given one); skips when the `prometheus`
    binary is not installed."""
    if prometheus_binary() is None:
        pytest.skip("prometheus binary not installed (Debian package `prometheus`)")
    servers: list[PrometheusServer] = []

    def start(
        targets: Sequence[str], scrape_interval: str = "200ms", job: str = "exporter", port: int | None = None
    ) -> PrometheusServer:
        servers.append(start_prometheus(targets, scrape_interval=scrape_interval, job=job, port=port))
        return servers[-1]

    try:
        yield start
    finally:
        for server in servers:
            server.stop()


@pytest.fixture
def fake_bmc(tmp_path: Path) -> Iterator[FakeBmc]:
    """A fresh `ipmi_sim` BMC on 127.0.0.1 and a free UDP port (its power sensor at 150 W, polled every 0.2 s),
    killed at teardown; skips without openipmi's ipmi_sim or ipmitool."""
    if ipmi_sim_binary() is None:
        pytest.skip("ipmi_sim not installed (Debian package `openipmi`)")
    if shutil.which("ipmitool") is None:
        pytest.skip("ipmitool not installed (Debian package `ipmitool`)")
    bmc = start_bmc(tmp_path / "bmc", watts=150, poll_ms=200)
    try:
        yield bmc
    finally:
        bmc.stop()
