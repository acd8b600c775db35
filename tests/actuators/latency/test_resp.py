"""The RESP client against Debian's redis-server, and the reply counter `tuner load` uses on RESP streams."""

from __future__ import annotations

import socket
import threading

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from actuators.latency.resp import DEFAULT_PORT, RespClient, count_replies, encode, parse_info, redis_address
from actuators.latency.stream import ServerTimeout
from core.errors import HostError


def test_commands_are_arrays_of_bulk_strings():
    assert encode(b"GET", b"k") == b"*2\r\n$3\r\nGET\r\n$1\r\nk\r\n"
    assert encode(b"SET", b"a b", b"") == b"*3\r\n$3\r\nSET\r\n$3\r\na b\r\n$0\r\n\r\n"


def test_addresses_default_to_redis_port_and_errors_name_redis():
    assert redis_address("10.0.0.2").port == DEFAULT_PORT == 6379
    assert str(redis_address("unix:/run/redis.sock")) == "unix:/run/redis.sock"
    with pytest.raises(HostError, match=r"redis address 'h:': the port after ':' is missing \(redis's is 6379\)"):
        redis_address("h:")


REPLIES = st.one_of(
    st.integers(0, 300).map(lambda n: b"$%d\r\n%s\r\n" % (n, b"x" * n)),  # a hit
    st.just(b"$-1\r\n"),  # a miss
    st.just(b"+OK\r\n"),  # a set
    st.integers(0, 1).map(lambda n: b":%d\r\n" % n),  # a delete
    st.just(b"-ERR wrong number of arguments for 'get' command\r\n"),
)


@settings(max_examples=200, deadline=None)
@given(st.lists(REPLIES, min_size=1, max_size=40), st.lists(st.integers(1, 400), max_size=10))
def test_replies_are_counted_however_the_stream_is_split(replies, cuts):
    """The count over any split of the stream into reads equals the number of replies, errors included."""
    stream = b"".join(replies)
    bounds = sorted({c % len(stream) for c in cuts} - {0}) + [len(stream)]
    total = errors = 0
    tail, start = b"\n", 0
    for end in bounds:
        buf = bytearray(stream[start:end]) + bytearray(b"junk after n")  # a reused buffer holds old bytes past n
        k, e, tail = count_replies(buf, end - start, tail)
        total, errors, start = total + k, errors + e, end
    assert total == len(replies)
    assert errors == sum(r.startswith(b"-") for r in replies)


def test_info_text_parses_to_a_dict():
    assert parse_info(b"# Server\r\nredis_version:7.0.15\r\nrun_id:abc\r\n\r\n# Stats\r\nx:1:2\r\n") == {
        "redis_version": "7.0.15",
        "run_id": "abc",
        "x": "1:2",
    }


def test_get_set_delete_ping_info_against_redis(redis_server):
    with RespClient(redis_server.address) as c:
        assert c.ping()
        assert c.get("tuner:t:a") is None
        c.set("tuner:t:a", b"v\r\nwith crlf")
        assert c.get("tuner:t:a") == b"v\r\nwith crlf"
        assert c.delete("tuner:t:a", "tuner:t:b") == 1
        assert c.info("server")["redis_version"]
        assert c.command(b"INCR", b"tuner:t:n") == 1
        assert c.command(b"MGET", b"tuner:t:n", b"tuner:t:none") == [b"1", None]


def test_a_server_error_reply_keeps_the_connection_usable(redis_server):
    with RespClient(redis_server.address) as c:
        with pytest.raises(HostError, match=r"redis 127\.0\.0\.1:\d+: server error \"ERR unknown command"):
            c.command(b"NOSUCHCOMMAND")
        assert c.connected and c.ping()


def test_unix_socket(redis_unix):
    with RespClient(redis_unix.address) as c:
        c.set("k", b"1")
        assert c.get("k") == b"1"


def test_refused_and_silent_servers_are_one_line_errors():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    with pytest.raises(HostError, match=rf"^redis 127\.0\.0\.1:{port}: cannot connect: "):
        RespClient(f"127.0.0.1:{port}", timeout_s=0.5).ping()
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen()
        accepted: list[socket.socket] = []
        t = threading.Thread(target=lambda: accepted.append(listener.accept()[0]))
        t.start()
        try:
            with pytest.raises(ServerTimeout, match="receive failed: timed out after 0.2 s"):
                RespClient(f"127.0.0.1:{listener.getsockname()[1]}", timeout_s=0.2).ping()
        finally:
            t.join(timeout=5)
            for conn in accepted:
                conn.close()
