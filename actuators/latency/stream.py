"""The socket plumbing of the tiny blocking cache-server clients (`MemcachedClient`, `RespClient`): one TCP or
unix-socket connection with a timeout, optional busy polling and kernel receive timestamps, line and exact-length
reads; every socket failure a one-line `HostError` naming the server and its address.
"""

from __future__ import annotations

import socket
import struct
import sys
import time
from typing import Protocol, Self

from core.errors import HostError

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


class ServerTimeout(HostError):
    """No answer (or no connection) within the client's timeout."""


class Address(Protocol):
    """Where a server listens: TCP (`host`, `port`) or a unix socket (`path`); printed as it is written."""

    @property
    def host(self) -> str | None: ...

    @property
    def port(self) -> int | None: ...

    @property
    def path(self) -> str | None: ...


class StreamClient:
    """One blocking connection to a cache server: the socket plumbing a protocol's client adds its commands to
    (`MemcachedClient`, `actuators.latency.resp.RespClient`). Not thread-safe: give each thread its own client.
    `kind` names the server in every error line.

    `busy_poll=True` spins on a non-blocking socket while waiting for a reply instead of sleeping in
    `recv`, so the client's CPU does not enter an idle state and its wake-up is not added to the
    measured latency (the client-side C-state effect of Antoniou et al.), at the cost of a busy core
    for the duration of each request.
    """

    kind = "server"

    def __init__(
        self,
        address: Address,
        timeout_s: float = 1.0,
        busy_poll: bool = False,
        rx_timestamps: bool = False,
    ) -> None:
        if not timeout_s > 0:
            raise ValueError("timeout_s must be positive")
        self.address = address
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
                sock = socket.create_connection(
                    (self.address.host or "", self.address.port or 0), timeout=self.timeout_s
                )
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

    def __enter__(self) -> Self:
        self.connect()
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

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
            raise HostError(f"{self.kind} {self.address}: connection closed by the server")
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
                self._check_line(line)
                return line
            if self._sock is None:
                raise HostError(f"{self.kind} {self.address}: connection closed")
            self._fill()

    def _check_line(self, line: bytes) -> None:
        """Raise HostError when `line` is the server's error reply (the protocol's client knows which are)."""

    def _readexact(self, n: int) -> bytes:
        while len(self._buf) < n:
            if self._sock is None:
                raise HostError(f"{self.kind} {self.address}: connection closed")
            self._fill()
        data = bytes(self._buf[:n])
        del self._buf[:n]
        return data

    def _error(self, what: str, exc: OSError) -> HostError:
        if isinstance(exc, TimeoutError):
            return ServerTimeout(f"{self.kind} {self.address}: {what}: timed out after {self.timeout_s:g} s")
        return HostError(f"{self.kind} {self.address}: {what}: {exc.strerror or type(exc).__name__}")

    def _protocol(self, what: str) -> HostError:
        self.close()  # the stream position is unknown now: never reuse it
        return HostError(f"{self.kind} {self.address}: protocol error: {what}")
