"""A real host counting a Redis server's load: the prober speaks RESP to it, its own requests are taken out of the
server's count, and the server's version is part of the hardware class."""

from __future__ import annotations

from actuators.latency.prober import Prober
from actuators.latency.resp import RespClient
from actuators.real import make_real_host

PARTS = ("energy", "qps", "latency")


def test_the_prober_follows_the_qps_server_and_its_requests_are_not_load(redis_server, tmp_path):
    port = redis_server.port
    host = make_real_host(
        state_dir=tmp_path,
        qps=f"redis:localhost:{port}",  # another spelling of the prober's 127.0.0.1 target below
        latency={"target": f"127.0.0.1:{port}", "rate_hz": 300, "isolation": "thread", "set_every": 3},
        parts=PARTS,
        optional=("energy",),
    )
    try:
        assert isinstance(host.latency, Prober) and host.latency.config.protocol == "redis"
        assert host.probe_counts_in_qps
        m = host.measure(0.5)
        assert m.requests >= 50 and m.offered_qps == 0.0  # only the prober ran: no load
        assert host.hardware_class().memcached_version.startswith("redis 7.")
    finally:
        host.close()


def test_default_target_is_the_counted_server_and_other_load_is_counted(redis_server, tmp_path):
    host = make_real_host(
        state_dir=tmp_path,
        qps=f"redis:{redis_server.address}",
        latency={"rate_hz": 200, "isolation": "thread"},
        parts=PARTS,
        optional=("energy",),
    )
    try:
        assert host.latency.config.target == redis_server.address and host.probe_counts_in_qps
        host.latency.begin()
        q0 = host.qps.total_requests()
        with RespClient(redis_server.address) as c:
            for i in range(40):
                c.set(f"load:{i}", b"v")
        q1 = host.qps.total_requests()
        host.latency.end()
        assert q1 - q0 >= 40  # the load, plus the probes sent meanwhile
    finally:
        host.close()


def test_a_memcached_prober_beside_a_redis_count_is_not_subtracted(redis_server, memcached, tmp_path):
    host = make_real_host(
        state_dir=tmp_path,
        qps=f"redis:{redis_server.address}",
        latency={"target": memcached.address, "protocol": "memcached", "isolation": "thread"},
        parts=PARTS,
        optional=("energy",),
    )
    try:
        assert host.latency.config.protocol == "memcached" and not host.probe_counts_in_qps
    finally:
        host.close()
