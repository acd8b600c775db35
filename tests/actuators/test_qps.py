"""Offered-QPS readers: rate math, memcached `stats` against a real memcached, NIC counters via psutil."""

from __future__ import annotations

import socket
import time
from types import SimpleNamespace

import pytest

from actuators.latency.memcached import MemcachedAddress, MemcachedClient
from actuators.qps import (
    MEMCACHED_REQUEST_COUNTERS,
    CounterReading,
    MemcachedStatsQps,
    MonotonicTotal,
    NicRxQps,
    RateMeter,
    counter_rate,
    qps_source_from_spec,
)
from actuators.sensors import QpsSource
from core.errors import HostError
from tests.memcached_server import start_memcached


# -- pure rate math ---------------------------------------------------------------------------------
def test_counter_rate_plain_and_reset():
    r = counter_rate(CounterReading(10.0, 1000), CounterReading(12.0, 1600))
    assert (r.per_second, r.increase, r.reset) == (300.0, 600.0, False)
    # counter went down (memcached restarted): treated as a reset, the new value is a lower bound
    r = counter_rate(CounterReading(10.0, 1000), CounterReading(12.0, 50))
    assert (r.increase, r.reset) == (50.0, True)
    # a restart that already counted past the old value is caught by the epoch (pid@start time)
    r = counter_rate(CounterReading(10.0, 1000, "1@100"), CounterReading(12.0, 5000, "2@111"))
    assert (r.increase, r.reset) == (5000.0, True)
    with pytest.raises(ValueError, match="time order"):
        counter_rate(CounterReading(12.0, 1), CounterReading(12.0, 2))


def test_monotonic_total_survives_resets():
    t = MonotonicTotal()
    seq = [(100, "a"), (150, "a"), (20, "a"), (70, "a"), (5, "b")]
    totals = [t.update(v, e) for v, e in seq]
    assert totals == [100, 150, 170, 220, 225]
    assert t.resets == 2


def test_rate_meter_two_reads():
    counts = iter([10.0, 40.0, 100.0])
    clock = iter([0.0, 0.5, 1.5])
    meter = RateMeter(SimpleNamespace(total_requests=lambda: next(counts)), clock=lambda: next(clock))
    assert meter.sample() is None
    assert meter.sample().per_second == pytest.approx(60.0)
    assert meter.sample().per_second == pytest.approx(60.0)


@pytest.mark.parametrize(
    "text,expected",
    [
        ("127.0.0.1:11311", MemcachedAddress("127.0.0.1", 11311)),
        ("localhost", MemcachedAddress("localhost", 11211)),
        ("[::1]:5000", MemcachedAddress("::1", 5000)),
        ("unix:/run/mc.sock", MemcachedAddress(path="/run/mc.sock")),
        ("/run/mc.sock", MemcachedAddress(path="/run/mc.sock")),
    ],
)
def test_address_parsing(text, expected):
    addr = MemcachedAddress.parse(text)
    assert addr == expected
    assert MemcachedAddress.parse(str(addr)) == addr
    assert addr.is_loopback()


@pytest.mark.parametrize(
    "text", ["host:notaport", "host:70000", "127.0.0.1:99999", "127.0.0.1:", "unix:", "[::1", ":11211", "::1:11211"]
)
def test_bad_addresses_are_one_line_errors(text):
    with pytest.raises(HostError, match="memcached address") as e:
        MemcachedAddress.parse(text)
    assert "\n" not in str(e.value)


def test_remote_address_is_not_loopback():
    assert not MemcachedAddress.parse("10.0.0.5:11211").is_loopback()


# -- memcached stats against the real binary --------------------------------------------------------
def test_stats_qps_rises_by_exactly_the_requests_sent(memcached):
    src = MemcachedStatsQps(memcached.address)
    assert isinstance(src, QpsSource)
    before = src.total_requests()
    with MemcachedClient(memcached.address) as c:
        for i in range(20):
            c.set(f"k{i}", b"v")
        for i in range(130):
            c.get(f"k{i % 25}")  # 100 hits, 30 misses: both count once in cmd_get
        c.stats()  # `stats` itself is not a request
    after = src.total_requests()
    assert after - before == 150  # exact: memcached counts synchronously before replying
    snap = src.last
    assert snap.counters["cmd_get"] == 130 and snap.counters["cmd_set"] == 20
    assert snap.get_hits + snap.get_misses == snap.counters["cmd_get"]
    src.close()


def _raw(sock: socket.socket, cmd: bytes, end: bytes) -> bytes:
    sock.sendall(cmd)
    data = b""
    while not data.endswith(end):
        chunk = sock.recv(4096)
        assert chunk, "connection closed"
        data += chunk
    return data


@pytest.mark.parametrize(
    "setup,cmd,end,delta",
    [
        (b"", b"get a b c\r\n", b"END\r\n", 3),  # multi-get counts keys
        (b"", b"mg a v\r\n", b"\r\n", 1),  # meta get counts in cmd_get, not on top of it
        (b"", b"touch a 10\r\n", b"\r\n", 1),
        (b"", b"gat 10 a b\r\n", b"END\r\n", 2),  # get-and-touch: cmd_touch per key, not cmd_get
        (b"", b"delete nope\r\n", b"\r\n", 1),
        (b"", b"incr a 1\r\n", b"\r\n", 1),
        (b"", b"decr nope 1\r\n", b"\r\n", 1),
        (b"", b"cas a 0 0 1 99\r\nz\r\n", b"\r\n", 1),  # failing cas still counts in cmd_set
        (b"", b"flush_all\r\n", b"OK\r\n", 1),
        (b"", b"version\r\n", b"\r\n", 0),  # not a request
        (b"", b"mn\r\n", b"MN\r\n", 0),
    ],
)
def test_which_commands_count(memcached, setup, cmd, end, delta):
    src = MemcachedStatsQps(memcached.address)
    with socket.create_connection((memcached.host, memcached.port), timeout=2) as s:
        _raw(s, b"set a 0 0 1\r\n5\r\n", b"STORED\r\n")
        before = src.total_requests()
        _raw(s, cmd, end)
        assert src.total_requests() - before == delta
    src.close()


def test_connections_reported(memcached):
    src = MemcachedStatsQps(memcached.address)
    base = src.snapshot()
    assert base.curr_connections >= 1  # includes the reader's own connection
    extra = [socket.create_connection((memcached.host, memcached.port), timeout=2) for _ in range(3)]
    try:
        deadline = time.monotonic() + 5
        while (snap := src.snapshot()).curr_connections < base.curr_connections + 3:
            assert time.monotonic() < deadline, "memcached never saw the 3 extra connections"
        assert snap.total_connections >= base.total_connections + 3
    finally:
        for s in extra:
            s.close()
        src.close()


def test_unix_socket_and_restart_counted_as_reset(memcached_unix):
    path = memcached_unix.socket_path
    src = qps_source_from_spec(f"memcached:unix:{path}")
    assert isinstance(src, MemcachedStatsQps)
    with MemcachedClient(memcached_unix.address) as c:
        for _ in range(10):
            c.get("x")
    t1 = src.total_requests()
    memcached_unix.stop()  # restart: counters start again from 0
    second = start_memcached(socket_path=path)
    try:
        with MemcachedClient(second.address) as c:
            for _ in range(4):
                c.get("x")
        t2 = src.total_requests()  # the old connection is stale: one reconnect, then a new epoch
        assert t2 == t1 + 4
        assert src.resets == 1
    finally:
        second.stop()
        src.close()


def test_connection_refused_names_the_address():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]  # bound but not listening: connect is refused
        src = MemcachedStatsQps(f"127.0.0.1:{port}", timeout_s=0.5)
        with pytest.raises(HostError, match=rf"memcached 127\.0\.0\.1:{port}: cannot connect") as e:
            src.total_requests()
    assert "\n" not in str(e.value)


def test_timeout_names_the_address():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen(1)  # accepts the TCP handshake, never answers
        port = s.getsockname()[1]
        src = MemcachedStatsQps(f"127.0.0.1:{port}", timeout_s=0.2)
        t0 = time.monotonic()
        with pytest.raises(HostError, match=rf"memcached 127\.0\.0\.1:{port}: .*timed out after 0.2 s"):
            src.total_requests()
        assert time.monotonic() - t0 < 2.0


def test_missing_unix_socket(tmp_path):
    with pytest.raises(HostError, match="unix:.*nope.sock: cannot connect"):
        MemcachedStatsQps(f"unix:{tmp_path}/nope.sock").total_requests()


def test_not_memcached_counters_rejected(memcached):
    src = MemcachedStatsQps(memcached.address, counters=("cmd_get", "cmd_frobnicate"))
    with pytest.raises(HostError, match="no 'cmd_frobnicate'"):
        src.total_requests()


def test_default_counters_exist_in_real_stats(memcached):
    with MemcachedClient(memcached.address) as c:
        raw = c.stats()
    missing = [name for name in MEMCACHED_REQUEST_COUNTERS if name not in raw]
    assert not missing
    assert "cmd_meta" in raw and "cmd_meta" not in MEMCACHED_REQUEST_COUNTERS  # would double count meta cmds


# -- NIC counters -----------------------------------------------------------------------------------
def test_nic_counter_reset_and_scale():
    seq = iter([1000, 1500, 200, 300])
    src = NicRxQps(
        "eth9",
        requests_per_packet=0.5,
        counters_fn=lambda: {"eth9": SimpleNamespace(packets_recv=next(seq)), "lo": None},
    )
    assert [src.total_requests() for _ in range(4)] == [500.0, 750.0, 850.0, 900.0]
    assert src.resets == 1


def test_nic_missing_interface_lists_the_ones_present():
    src = NicRxQps("eth9", counters_fn=lambda: {"lo": None, "eth0": None})
    with pytest.raises(HostError, match=r"NIC 'eth9' not found \(interfaces: eth0, lo\)"):
        src.total_requests()
    with pytest.raises(HostError, match="expected one of"):
        NicRxQps("lo", counter="dropin")


def test_nic_real_loopback_counts_our_packets(memcached):
    src = qps_source_from_spec("nic:lo")
    before = src.total_requests()
    with MemcachedClient(memcached.address) as c:
        for _ in range(50):
            c.get("x")
    # each round trip is >= 2 packets on lo (request and reply are both received by lo)
    assert src.total_requests() - before >= 100


def test_bad_spec():
    with pytest.raises(HostError, match="expected memcached:HOST:PORT"):
        qps_source_from_spec("snmp:foo")
