"""What `tuner load` writes and reads per server protocol (`Wire`): how a get, a set and a delete are encoded, how
the replies in a read are counted without parsing them, and which requests store a key.

* memcached: text-protocol commands, each followed by a meta no-op (`mn`), so the k-th `MN\\r\\n` on a connection
  completes its k-th request (values are ours, filled with `x`, so they never contain it);
* redis (Redis and Valkey): RESP `GET`, `SET`, `DEL`, counted by `actuators.latency.resp.count_replies` (replies
  end in CRLF, bulk values are ours, all `x`).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from actuators.latency.resp import count_replies, encode

#: The memcached reply terminator every request ends with (`mn` -> `MN\r\n`).
MN = b"MN\r\n"
_ERR = b"ERROR"

#: (bytes read, how many of them, the previous read's tail) -> (replies completed, error replies, the new tail)
Counter = Callable[[bytes | bytearray, int, bytes], tuple[int, int, bytes]]


def count_mn(buf: bytes | bytearray, n: int, tail: bytes) -> tuple[int, int, bytes]:
    """memcached: the `MN\\r\\n` terminators in `buf[:n]` (one split over two reads counted on the joint, the tail
    being the previous read's last 3 bytes), and the `ERROR` replies."""
    k = buf.count(MN, 0, n)
    if tail:
        k += (tail + buf[: min(n, 3)]).count(MN)
    errors = buf.count(_ERR, 0, n) if buf.find(_ERR, 0, n) >= 0 else 0
    return k, errors, bytes(buf[max(n - 3, 0) : n])


@dataclass(frozen=True)
class Wire:
    """One protocol's requests and replies: `get(key)`, `set(key, value_bytes)`, `delete(key)` encode a request;
    `count` counts the replies in a read from `first_tail` on; `stores(request)` says whether a request is a set."""

    name: str
    get: Callable[[bytes], bytes]
    set: Callable[[bytes, int], bytes]
    delete: Callable[[bytes], bytes]
    count: Counter
    first_tail: bytes
    set_prefix: bytes

    def stores(self, request: bytes) -> bool:
        return request.startswith(self.set_prefix)


def _mc_get(key: bytes) -> bytes:
    return b"get " + key + b"\r\nmn\r\n"


def _mc_set(key: bytes, value_bytes: int) -> bytes:
    return b"set %s 0 0 %d\r\n%s\r\nmn\r\n" % (key, value_bytes, b"x" * value_bytes)


def _mc_delete(key: bytes) -> bytes:
    return b"delete " + key + b"\r\nmn\r\n"


def _resp_get(key: bytes) -> bytes:
    return encode(b"GET", key)


def _resp_set(key: bytes, value_bytes: int) -> bytes:
    return encode(b"SET", key, b"x" * value_bytes)


def _resp_delete(key: bytes) -> bytes:
    return encode(b"DEL", key)


MEMCACHED = Wire("memcached", _mc_get, _mc_set, _mc_delete, count_mn, b"", b"set ")
RESP = Wire("redis", _resp_get, _resp_set, _resp_delete, count_replies, b"\n", b"*3\r\n$3\r\nSET\r\n")
#: Every protocol `tuner load --protocol` speaks, by name (`actuators.latency.servers.SERVER_KINDS`).
WIRES: dict[str, Wire] = {"memcached": MEMCACHED, "redis": RESP}
