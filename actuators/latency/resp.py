"""RESP, the protocol of Redis and Valkey: commands as arrays of bulk strings, a tiny blocking client
(`RespClient`: GET, SET, DEL, PING, INFO) for the latency prober, and a reply counter for `tuner load`'s pipelined
replies that needs no parser.

Why raw RESP here and not redis-py: the prober stamps each request's send and the kernel's receive time of its reply
and may busy-poll the socket (`actuators.latency.stream.StreamClient`, shared with the memcached client), and
`tuner load` writes pre-encoded requests in bulk from a non-blocking loop and counts replies without parsing them.
redis-py's connection pool, retry policy, handshake (HELLO, CLIENT SETINFO: commands the server counts) and reply
parsing would sit between the clock and the wire. The QPS source reads `INFO` once a second, where none of that
matters, and uses redis-py (`actuators.qps_redis`). Valkey speaks the same protocol (RESP2 here), so both work.

Addresses: `host:port`, `[v6]:port`, `host` (port 6379), `unix:/path` (or an absolute path).
"""

from __future__ import annotations

from typing import Any

from actuators.latency.memcached import MemcachedAddress, check_key
from actuators.latency.stream import StreamClient
from core.errors import HostError

DEFAULT_PORT = 6379
CRLF = b"\r\n"


def encode(*args: bytes) -> bytes:
    """One command as RESP: an array of bulk strings (binary safe)."""
    parts = [b"*%d\r\n" % len(args)]
    for arg in args:
        parts.append(b"$%d\r\n%s\r\n" % (len(arg), arg))
    return b"".join(parts)


def redis_address(text: str | MemcachedAddress) -> MemcachedAddress:
    """Parse a Redis/Valkey address (`host:port`, `[v6]:port`, `host` for port 6379, `unix:/path`)."""
    if isinstance(text, MemcachedAddress):
        return text
    return MemcachedAddress.parse(text, "redis", DEFAULT_PORT)


def count_replies(buf: bytes | bytearray, n: int, tail: bytes) -> tuple[int, int, bytes]:
    """(complete replies, error replies, the new tail) in `buf[:n]`, the next read of a stream of replies to GET,
    SET and DEL whose values never hold CR, LF or `$` (`tuner load`'s values are all `x`); `tail` is the previous
    read's last byte (`b"\\n"` before the first read).

    Every such reply ends with one CRLF, except a bulk string with data (`$N\\r\\n<data>\\r\\n`), which has two and
    starts with `$` followed by a digit; a nil bulk string (`$-1\\r\\n`, a miss) has one. So replies = CRLFs - `$`s +
    `$-`s, each counted where it lies, which adds up over reads however the stream is split (a two-byte token split
    over two reads is counted on the joint, `tail` + the first byte). An error reply is a line starting with `-`:
    a `-` right after LF."""
    first = bytes(buf[:1])
    joint = tail + first if n else tail
    k = buf.count(CRLF, 0, n) - buf.count(b"$", 0, n) + buf.count(b"$-", 0, n)
    k += joint.count(CRLF) + joint.count(b"$-")
    errors = buf.count(b"\n-", 0, n) + joint.count(b"\n-")
    return k, errors, bytes(buf[n - 1 : n]) if n else tail


class RespClient(StreamClient):
    """One blocking RESP2 connection (Redis or Valkey). Not thread-safe: give each thread its own client.

    A server error reply (`-ERR ...`) raises `HostError` and leaves the connection usable (the reply was read
    whole); a malformed reply closes it."""

    kind = "redis"

    def __init__(
        self,
        address: str | MemcachedAddress,
        timeout_s: float = 1.0,
        busy_poll: bool = False,
        rx_timestamps: bool = False,
    ) -> None:
        super().__init__(redis_address(address), timeout_s, busy_poll, rx_timestamps)

    # -- commands ---------------------------------------------------------------------------------
    def command(self, *args: bytes) -> Any:
        """Send one command and return its reply: bytes (simple or bulk string), int, None (nil) or a list."""
        self._send(encode(*args))
        return self._reply()

    def get(self, key: str) -> bytes | None:
        """`GET key`: the value, or None on a miss."""
        check_key(key)
        value = self.command(b"GET", key.encode())
        if value is not None and not isinstance(value, bytes):
            raise self._protocol(f"GET {key!r} answered {value!r}")
        return value

    def set(self, key: str, value: bytes) -> None:
        """`SET key value`; raises HostError unless the server says OK."""
        check_key(key)
        reply = self.command(b"SET", key.encode(), value)
        if reply != b"OK":
            raise self._protocol(f"SET {key!r} answered {reply!r}")

    def delete(self, *keys: str) -> int:
        """`DEL key...`: how many keys existed."""
        reply = self.command(b"DEL", *(k.encode() for k in keys))
        if not isinstance(reply, int):
            raise self._protocol(f"DEL answered {reply!r}")
        return reply

    def ping(self) -> bool:
        """`PING`: True when the server answers PONG."""
        return bool(self.command(b"PING") == b"PONG")

    def info(self, section: str = "") -> dict[str, str]:
        """`INFO [section]`: every `name:value` line as a dict of strings."""
        raw = self.command(b"INFO", *((section.encode(),) if section else ()))
        if not isinstance(raw, bytes):
            raise self._protocol(f"INFO answered {raw!r}")
        return parse_info(raw)

    # -- replies ----------------------------------------------------------------------------------
    def _reply(self) -> Any:
        line = self._readline()
        kind, body = line[:1], line[1:]
        if kind == b"+":
            return body
        if kind == b"-":
            raise HostError(f"redis {self.address}: server error {body[:80].decode(errors='replace')!r}")
        if kind in (b":", b"$", b"*"):
            try:
                n = int(body)
            except ValueError:
                raise self._protocol(f"bad length in {line[:60]!r}") from None
            if kind == b":":
                return n
            if n < 0:
                return None
            if kind == b"$":
                return self._readexact(n + 2)[:-2]
            return [self._reply() for _ in range(n)]
        raise self._protocol(f"unexpected reply {line[:60]!r}")


def parse_info(raw: bytes) -> dict[str, str]:
    """`INFO`'s text (`# Section` headers, `name:value` lines) as a dict of strings."""
    out: dict[str, str] = {}
    for line in raw.decode(errors="replace").splitlines():
        if line and not line.startswith("#"):
            name, sep, value = line.partition(":")
            if sep:
                out[name] = value
    return out
