"""A tiny blocking memcached ASCII-protocol client: `stats`, `get`, `set`, over TCP or a unix socket.

Just enough for the QPS reader and the latency prober; every socket failure becomes a one-line
`HostError` naming the address (the socket plumbing is `actuators.latency.stream`'s). Addresses: `host:port`,
`[v6]:port`, `unix:/path` (or an absolute path).
"""

from __future__ import annotations

import os
import socket
from dataclasses import dataclass
from typing import Any

from actuators.latency.stream import ServerTimeout, StreamClient
from core.errors import HostError

DEFAULT_PORT = 11211


#: No answer (or no connection) within the client's timeout (every stream client raises it).
MemcachedTimeout = ServerTimeout


@dataclass(frozen=True)
class MemcachedAddress:
    """Where memcached listens: TCP (`host`, `port`) or a unix socket (`path`)."""

    host: str | None = None
    port: int | None = None
    path: str | None = None

    @classmethod
    def parse(cls, text: str, kind: str = "memcached", default_port: int = DEFAULT_PORT) -> MemcachedAddress:
        """Parse `host:port`, `[v6]:port`, `host` (port `default_port`, memcached's 11211), `unix:/path` or `/path`;
        errors name the server `kind`."""
        spec = text.strip()
        if spec.startswith("unix:") or spec.startswith("/"):
            path = spec[5:] if spec.startswith("unix:") else spec
            if not path:
                raise HostError(f"{kind} address {text!r}: expected unix:/path/to/socket")
            return cls(path=path)
        if spec.startswith("["):
            host, sep, rest = spec[1:].partition("]")
            port_text = rest[1:] if rest.startswith(":") else ""
            if not sep or (rest and not rest.startswith(":")):
                raise HostError(f"{kind} address {text!r}: expected [v6addr]:port")
        elif spec.count(":") > 1:
            raise HostError(f"{kind} address {text!r}: put IPv6 addresses in brackets, e.g. [::1]:{default_port}")
        else:
            host, _, port_text = spec.rpartition(":") if ":" in spec else (spec, "", "")
        if not host:
            raise HostError(f"{kind} address {text!r}: expected host:port or unix:/path")
        if spec.endswith(":"):
            raise HostError(f"{kind} address {text!r}: the port after ':' is missing ({kind}'s is {default_port})")
        try:
            port = int(port_text) if port_text else default_port
        except ValueError:
            raise HostError(f"{kind} address {text!r}: port {port_text!r} is not a number") from None
        if not 0 < port < 65536:
            raise HostError(f"{kind} address {text!r}: port {port} outside 1..65535")
        return cls(host=host, port=port)

    def __str__(self) -> str:
        if self.path is not None:
            return f"unix:{self.path}"
        return f"[{self.host}]:{self.port}" if self.host and ":" in self.host else f"{self.host}:{self.port}"

    def is_loopback(self) -> bool:
        """True for unix sockets and loopback IPs/`localhost` (traffic never crosses a NIC)."""
        if self.path is not None:
            return True
        import ipaddress

        if self.host == "localhost":
            return True
        try:
            return ipaddress.ip_address(self.host or "").is_loopback
        except ValueError:
            return False


def endpoints(address: MemcachedAddress) -> frozenset[tuple[str, Any]]:
    """Where `address` connects: ("unix", realpath) or every (ip, port) its name resolves to; empty when
    the name does not resolve (then it matches nothing)."""
    if address.path is not None:
        return frozenset({("unix", os.path.realpath(address.path))})
    try:
        infos = socket.getaddrinfo(address.host, address.port, type=socket.SOCK_STREAM)
    except (OSError, UnicodeError):
        return frozenset()
    return frozenset((str(info[4][0]), int(info[4][1])) for info in infos)


def same_server(a: str | MemcachedAddress, b: str | MemcachedAddress) -> bool:
    """Whether two spellings reach the same memcached (`localhost:11211` and `127.0.0.1:11211` do):
    their resolved endpoints overlap."""
    return bool(endpoints(as_address(a)) & endpoints(as_address(b)))


def as_address(address: str | MemcachedAddress) -> MemcachedAddress:
    """Accept a string or a parsed address."""
    return address if isinstance(address, MemcachedAddress) else MemcachedAddress.parse(address)


class MemcachedClient(StreamClient):
    """One blocking connection speaking memcached's text protocol (`stats`, `get`, `set`, `version`); the socket,
    its timeouts, busy polling and receive timestamps are `StreamClient`'s. Not thread-safe: give each thread its
    own client."""

    kind = "memcached"

    def __init__(
        self,
        address: str | MemcachedAddress,
        timeout_s: float = 1.0,
        busy_poll: bool = False,
        rx_timestamps: bool = False,
    ) -> None:
        super().__init__(as_address(address), timeout_s, busy_poll, rx_timestamps)

    # -- commands ---------------------------------------------------------------------------------
    def stats(self) -> dict[str, str]:
        """`stats`: every `STAT name value` line as a dict of strings."""
        self._send(b"stats\r\n")
        out: dict[str, str] = {}
        while True:
            line = self._readline()
            if line == b"END":
                return out
            parts = line.split(b" ", 2)
            if len(parts) != 3 or parts[0] != b"STAT":
                raise self._protocol(f"unexpected stats line {line[:60]!r}")
            out[parts[1].decode()] = parts[2].decode(errors="replace")

    def get(self, key: str) -> bytes | None:
        """`get key`: the value, or None on a miss."""
        check_key(key)
        self._send(b"get " + key.encode() + b"\r\n")
        value: bytes | None = None
        while True:
            line = self._readline()
            if line == b"END":
                return value
            parts = line.split(b" ")
            if parts[0] != b"VALUE" or len(parts) < 4:
                raise self._protocol(f"unexpected get reply {line[:60]!r}")
            try:
                size = int(parts[3])
            except ValueError:
                raise self._protocol(f"bad value length in {line[:60]!r}") from None
            value = self._readexact(size + 2)[:-2]

    def set(self, key: str, value: bytes, exptime: int = 0, flags: int = 0) -> None:
        """`set key flags exptime bytes`; raises HostError unless the server says STORED."""
        check_key(key)
        self._send(b"set %s %d %d %d\r\n%s\r\n" % (key.encode(), flags, exptime, len(value), value))
        line = self._readline()
        if line != b"STORED":
            raise self._protocol(f"set {key!r} answered {line[:60]!r}")

    def version(self) -> str:
        """`version`: the server's version string."""
        self._send(b"version\r\n")
        line = self._readline()
        if not line.startswith(b"VERSION "):
            raise self._protocol(f"unexpected version reply {line[:60]!r}")
        return line[8:].decode(errors="replace")

    def _check_line(self, line: bytes) -> None:
        if line.startswith((b"ERROR", b"CLIENT_ERROR", b"SERVER_ERROR")):
            raise HostError(f"memcached {self.address}: server error {line[:80].decode(errors='replace')!r}")


def check_key(key: str) -> None:
    """Raise ValueError unless `key` is a valid memcached key (1..250 bytes, no spaces/controls)."""
    raw = key.encode()
    if not raw or len(raw) > 250 or any(c <= 32 or c == 127 for c in raw):
        raise ValueError(f"invalid memcached key {key!r}: 1..250 bytes, no spaces or control characters")
