"""Offered load from Redis's own INFO counters (`RedisInfoQps`) against Debian's redis-server: data commands count
once each, introspection and the source's own reads do not, restarts and resets keep the total monotonic."""

from __future__ import annotations

import socket

import pytest

from actuators.latency.resp import RespClient
from actuators.qps import RedisInfoQps, RedisStats, qps_source_from_spec, server_version
from actuators.sensors import QpsSource, ServerStats
from core.errors import HostError
from tests.redis_server import start_redis


def test_data_commands_count_once_and_introspection_not_at_all(redis_server):
    src = qps_source_from_spec(f"redis:{redis_server.address}")
    assert isinstance(src, RedisInfoQps) and isinstance(src, QpsSource) and isinstance(src, ServerStats)
    before = src.total_requests()
    with RespClient(redis_server.address) as c:
        for i in range(30):
            c.set(f"k{i}", b"v")  # 30 sets
        for i in range(50):
            c.get(f"k{i}")  # 30 hits, 20 misses
        c.command(b"MGET", b"k1", b"k2", b"k3")  # one command, three keys
        c.delete("k1")
        for _ in range(7):  # introspection: not requests
            c.ping()
            c.info("stats")
        c.command(b"CLIENT", b"SETNAME", b"probe")
        with pytest.raises(HostError):
            c.command(b"GET")  # rejected (wrong arity): counted nowhere
    for _ in range(5):
        src.total_requests()  # the source's own INFO reads
    assert src.total_requests() - before == 30 + 50 + 1 + 1
    snap = src.last
    assert snap is not None and snap.version.startswith("redis ") and snap.run_id
    assert snap.not_requests >= 7 + 7 + 1 + 5 and snap.total_commands == snap.requests + snap.not_requests


def test_unix_socket_source(redis_unix):
    src = qps_source_from_spec(f"redis:{redis_unix.address}")
    with RespClient(redis_unix.address) as c:
        c.set("a", b"1")
    assert src.total_requests() == 1
    src.close()


def test_a_restart_or_a_stats_reset_never_makes_the_total_go_down(tmp_path):
    server = start_redis()
    try:
        port = server.port
        src = RedisInfoQps(server.address, timeout_s=1.0)
        with RespClient(server.address) as c:
            for i in range(10):
                c.set(f"k{i}", b"v")
            assert src.total_requests() == 10
            c.command(b"CONFIG", b"RESETSTAT")  # the counter goes down: a reset, counted from the new value
            c.set("k", b"v")
        assert src.total_requests() == 11 and src.resets == 1
        server.stop()
        with pytest.raises(HostError, match=rf"^redis 127\.0\.0\.1:{port}: INFO failed"):
            src.total_requests()
        server = start_redis(port=port)  # the same address, a new run_id
        with RespClient(server.address) as c:
            c.set("k", b"v")
        assert src.total_requests() == 12 and src.resets == 2
    finally:
        server.stop()


def test_unreachable_server_is_a_one_line_error():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    with pytest.raises(HostError, match=rf"^redis 127\.0\.0\.1:{port}: INFO failed: ") as err:
        RedisInfoQps(f"127.0.0.1:{port}", timeout_s=0.3).total_requests()
    assert "\n" not in str(err.value)


def test_valkey_is_recognised_in_info_server():
    assert server_version({"redis_version": "7.0.15"}) == "redis 7.0.15"
    valkey = {"redis_version": "7.2.4", "server_name": "valkey", "valkey_version": "8.0.1"}
    assert server_version(valkey) == "valkey 8.0.1"
    assert server_version({"redis_version": "7.2.4", "server_name": "valkey"}) == "valkey 7.2.4"


def test_info_without_the_counters_names_the_field():
    with pytest.raises(HostError, match=r"redis h:1: INFO has no 'total_commands_processed'"):
        RedisStats.parse({"redis_version": "7"}, "h:1")
    with pytest.raises(HostError, match="is not an integer"):
        RedisStats.parse({"total_commands_processed": "many"}, "h:1")


def test_spec_errors_name_the_accepted_forms():
    with pytest.raises(HostError, match=r"redis:HOST:PORT, redis:unix:/path"):
        qps_source_from_spec("valkey:127.0.0.1:6379")
    with pytest.raises(HostError, match=r"redis address 'h:x': port 'x' is not a number"):
        qps_source_from_spec("redis:h:x")
