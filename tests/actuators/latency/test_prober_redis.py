"""The prober speaking RESP to Debian's redis-server: paced GETs (and SETs) of its own keys, counted by the server."""

from __future__ import annotations

import pytest

from actuators.latency.prober import Prober, ProberConfig, main
from actuators.latency.resp import RespClient
from actuators.qps import RedisInfoQps
from core.errors import HostError


@pytest.mark.parametrize("iso", ["thread", "process"])
def test_probes_are_redis_gets_and_sets_of_its_own_keys(redis_server, iso):
    stats = RedisInfoQps(redis_server.address)
    prober = Prober(
        target=redis_server.address, protocol="redis", rate_hz=400, keys=4, set_every=4, isolation=iso, timeout_s=1.0
    )
    try:
        before = stats.snapshot().requests
        prober.begin()  # seeds its 4 keys
        with RespClient(redis_server.address) as c:
            assert c.get("tuner:probe:3") == b"x" * 64
        window = prober.end()
        after = stats.snapshot().requests
    finally:
        prober.close()
    sent = window.requests - window.incomplete
    assert window.requests >= 1 and window.misses == 0 and window.timeouts == 0
    assert after - before == 4 + sent + 1  # the seeding SETs, every probe sent, the check's own GET
    assert window.latency_us[50.0] > 0


def test_a_redis_prober_against_memcached_fails_loudly(memcached):
    prober = Prober(target=memcached.address, protocol="redis", isolation="thread", timeout_s=0.3)
    try:
        with pytest.raises(HostError, match=r"^redis 127\.0\.0\.1:\d+: "):
            prober.begin()
    finally:
        prober.close()


def test_protocol_and_address_are_checked_when_configured():
    with pytest.raises(HostError, match="prober protocol 'valkey': expected one of memcached, redis"):
        ProberConfig(protocol="valkey")
    assert ProberConfig(target="10.0.0.2", protocol="redis").target == "10.0.0.2"  # port 6379
    assert Prober(target="10.0.0.2", protocol="redis", settings_root=None).address.port == 6379


def test_standalone_prober_speaks_redis(redis_server, capsys):
    assert main(["--target", redis_server.address, "--protocol", "redis", "--rate-hz", "300", "--seconds", "0.3"]) == 0
    out = capsys.readouterr().out
    assert '"target": "%s"' % redis_server.address in out and '"p99"' in out
