"""A tiny blocking memcached ASCII-protocol client: `stats`, `get`, `set`, over TCP or a unix socket.

Just enough for the QPS reader and the latency prober; every socket failure becomes a one-line
`HostError` naming the address. Addresses: `host:port`, `[v6]:port`, `unix:/path` (or an absolute path).
"""

from __future__ import annotations

import os
import socket
import struct
import sys
import time
from dataclasses import dataclass
from typing import Any

from core.errors import HostError

DEFAULT_PORT = 11211


#: Linux's SO_TIMESTAMPNS (= SCM_TIMESTAMPNS; 35 on every architecture but a few Python does not name it on):
#: the kernel stamps each received segment with CLOCK_REALTIME when it reaches the socket.
SO_TIMESTAMPNS = getattr(socket, "SO_TIMESTAMPNS", 35)
#: Room for one `struct timespec` control message.
RX_ANCILLARY_BYTES = socket.CMSG_SPACE(16)
_TIMESPEC = struct.Struct("qq")


def enable_rx_timestamps(sock: socket.socket) -> bool:
    """Ask the kernel to timestamp what `sock` receives (read them with `recvmsg` and `rx_timestamp_ns`).

    The stamp is when the reply reached the client's socket, before the client process woke up to read it, so a
    latency to it leaves out the client's own wake-up and scheduling delay (the client-side effects Antoniou et
    al. show bias the tail). False where unsupported (not Linux, or the socket refuses)."""
    if not sys.platform.startswith("linux"):
        return False
    try:
        sock.setsockopt(socket.SOL_SOCKET, SO_TIMESTAMPNS, 1)
    except OSError:
        return False
    return True


def rx_timestamp_ns(ancdata: list[tuple[int, int, bytes]]) -> int | None:
    """The kernel receive time (ns since the epoch) in `recvmsg`'s ancillary data, or None. For TCP it is the
    newest segment's stamp among those this read returned."""
    for level, kind, data in ancdata:
        if level == socket.SOL_SOCKET and kind == SO_TIMESTAMPNS and len(data) >= _TIMESPEC.size:
            sec, nsec = _TIMESPEC.unpack_from(data)
            return int(sec) * 1_000_000_000 + int(nsec)
    return None


class MemcachedTimeout(HostError):
    """No answer (or no connection) within the client's timeout."""


@dataclass(frozen=True)
class MemcachedAddress:
    """Where memcached listens: TCP (`host`, `port`) or a unix socket (`path`)."""

    host: str | None = None
    port: int | None = None
    path: str | None = None

    @classmethod
    def parse(cls, text: str) -> MemcachedAddress:
        """Parse `host:port`, `[v6]:port`, `host` (port 11211), `unix:/path` or `/path`."""
        spec = text.strip()
        if spec.startswith("unix:") or spec.startswith("/"):
            path = spec[5:] if spec.startswith("unix:") else spec
            if not path:
                raise HostError(f"memcached address {text!r}: expected unix:/path/to/socket")
            return cls(path=path)
        if spec.startswith("["):
            host, sep, rest = spec[1:].partition("]")
            port_text = rest[1:] if rest.startswith(":") else ""
            if not sep or (rest and not rest.startswith(":")):
                raise HostError(f"memcached address {text!r}: expected [v6addr]:port")
        elif spec.count(":") > 1:
            raise HostError(f"memcached address {text!r}: put IPv6 addresses in brackets, e.g. [::1]:11211")
        else:
            host, _, port_text = spec.rpartition(":") if ":" in spec else (spec, "", "")
        if not host:
            raise HostError(f"memcached address {text!r}: expected host:port or unix:/path")
        if spec.endswith(":"):
            raise HostError(f"memcached address {text!r}: the port after ':' is missing (memcached's is 11211)")
        try:
            port = int(port_text) if port_text else DEFAULT_PORT
        except ValueError:
            raise HostError(f"memcached address {text!r}: port {port_text!r} is not a number") from None
        if not 0 < port < 65536:
            raise HostError(f"memcached address {text!r}: port {port} outside 1..65535")
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


class MemcachedClient:
    """One blocking connection. Not thread-safe: give each thread its own client.

    `busy_poll=True` spins on a non-blocking socket while waiting for a reply instead of sleeping in
    `recv`, so the client's CPU does not enter an idle state and its wake-up is not added to the
    measured latency (the client-side C-state effect of Antoniou et al.), at the cost of a busy core
    for the duration of each request.
    """

    def __init__(
        self,
        address: str | MemcachedAddress,
        timeout_s: float = 1.0,
        busy_poll: bool = False,
        rx_timestamps: bool = False,
    ) -> None:
        if not timeout_s > 0:
            raise ValueError("timeout_s must be positive")
        self.address = as_address(address)
        self.timeout_s = timeout_s
        self.busy_poll = busy_poll
        self.rx_timestamps = rx_timestamps
        #: with `rx_timestamps`: the kernel's receive time (ns since the epoch) of the last data read, else None
        self.last_rx_ns: int | None = None
        #: with `rx_timestamps`: when the last request's send returned (`time.perf_counter_ns`), else None
        self.last_sent_ns: int | None = None
        self._stamped = False
        self._sock: socket.socket | None = None
        self._buf = bytearray()

    # -- connection -------------------------------------------------------------------------------
    def connect(self) -> None:
        """Open the connection (no-op when open); HostError naming the address on failure."""
        if self._sock is not None:
            return
        try:
            if self.address.path is not None:
                sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
                sock.settimeout(self.timeout_s)
                try:
                    sock.connect(self.address.path)
                except OSError:
                    sock.close()
                    raise
            else:
                sock = socket.create_connection((self.address.host, self.address.port), timeout=self.timeout_s)
                sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        except OSError as exc:
            raise self._error("cannot connect", exc) from None
        self._sock = sock
        self._stamped = self.rx_timestamps and enable_rx_timestamps(sock)
        self._buf.clear()

    @property
    def connected(self) -> bool:
        """Whether a connection is open (it may still have been dropped by the peer)."""
        return self._sock is not None

    def close(self) -> None:
        """Close the connection (idempotent)."""
        if self._sock is not None:
            try:
                self._sock.close()
            finally:
                self._sock = None
                self._buf.clear()

    def __enter__(self) -> MemcachedClient:
        self.connect()
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

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

    # -- plumbing ---------------------------------------------------------------------------------
    def _send(self, data: bytes) -> None:
        self.connect()
        assert self._sock is not None
        try:
            self._sock.sendall(data)
        except OSError as exc:
            self.close()
            raise self._error("send failed", exc) from None
        if self._stamped:
            self.last_sent_ns = time.perf_counter_ns()

    def _fill(self) -> None:
        assert self._sock is not None
        try:
            chunk = self._recv_spin() if self.busy_poll else self._recv()
        except OSError as exc:
            self.close()
            raise self._error("receive failed", exc) from None
        if not chunk:
            self.close()
            raise HostError(f"memcached {self.address}: connection closed by the server")
        self._buf += chunk

    def _recv(self) -> bytes:
        assert self._sock is not None
        if not self._stamped:
            return self._sock.recv(65536)
        data, anc, _, _ = self._sock.recvmsg(65536, RX_ANCILLARY_BYTES)
        self.last_rx_ns = rx_timestamp_ns(anc)
        return data

    def _recv_spin(self) -> bytes:
        assert self._sock is not None
        deadline = time.monotonic() + self.timeout_s
        self._sock.setblocking(False)
        try:
            while True:
                try:
                    return self._recv()
                except BlockingIOError:
                    if time.monotonic() > deadline:
                        raise TimeoutError from None
        finally:
            self._sock.settimeout(self.timeout_s)

    def _readline(self) -> bytes:
        while True:
            i = self._buf.find(b"\r\n")
            if i >= 0:
                line = bytes(self._buf[:i])
                del self._buf[: i + 2]
                if line.startswith((b"ERROR", b"CLIENT_ERROR", b"SERVER_ERROR")):
                    raise HostError(f"memcached {self.address}: server error {line[:80].decode(errors='replace')!r}")
                return line
            if self._sock is None:
                raise HostError(f"memcached {self.address}: connection closed")
            self._fill()

    def _readexact(self, n: int) -> bytes:
        while len(self._buf) < n:
            if self._sock is None:
                raise HostError(f"memcached {self.address}: connection closed")
            self._fill()
        data = bytes(self._buf[:n])
        del self._buf[:n]
        return data

    def _error(self, what: str, exc: OSError) -> HostError:
        if isinstance(exc, TimeoutError):
            return MemcachedTimeout(f"memcached {self.address}: {what}: timed out after {self.timeout_s:g} s")
        return HostError(f"memcached {self.address}: {what}: {exc.strerror or type(exc).__name__}")

    def _protocol(self, what: str) -> HostError:
        self.close()  # the stream position is unknown now: never reuse it
        return HostError(f"memcached {self.address}: protocol error: {what}")


def check_key(key: str) -> None:
    """Raise ValueError unless `key` is a valid memcached key (1..250 bytes, no spaces/controls)."""
    raw = key.encode()
    if not raw or len(raw) > 250 or any(c <= 32 or c == 127 for c in raw):
        raise ValueError(f"invalid memcached key {key!r}: 1..250 bytes, no spaces or control characters")
