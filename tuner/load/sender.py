"""One generator process: its share of a plan, sent open-loop over a few memcached (or Redis) connections.

The loop sends every request whose scheduled time has come (back to back on each connection, one `send` per
connection per pass), reads whatever replies have arrived, and counts completed requests per connection without
parsing the replies (`tuner.load.wire`: memcached's `MN\\r\\n` terminators, or RESP replies; a server answers a
connection's requests in order, so the k-th reply on a connection completes its k-th request). It only stamps times into preallocated arrays -- send time and completion time per
request -- and hands the raw stamps to the parent process every `flush_s`; latency is completion minus the
*scheduled* time (a late send is charged to the request, so coordinated omission cannot hide a stall), send lag
is send minus scheduled time. `batch_ns` > 0 holds a connection's due requests until the oldest has waited that
long and sends them in one write: fewer system calls per request at a bounded, measured cost in send lag.
When the next send is more than `spin_ns` away the process sleeps in `select`
(µs timeout, ~50 µs kernel timer slack); closer than that it spins.
"""

from __future__ import annotations

import select
import signal
import socket
import time
from dataclasses import dataclass
from multiprocessing.connection import Connection

import numpy as np

from actuators.latency.engine import SEND_INTERRUPTED_NS
from actuators.latency.memcached import MemcachedAddress
from actuators.latency.stream import RX_ANCILLARY_BYTES, enable_rx_timestamps, rx_timestamp_ns
from tuner.load.plan import Plan
from tuner.load.wire import WIRES, Counter

# rx_ns of a request sent in one write with others, or onto a connection with requests in flight (memcached
# answers a connection in order: it waits on them): no service time
_CLUMPED = -2


@dataclass(frozen=True)
class WorkerSpec:
    address: MemcachedAddress
    connections: int
    duration_s: float
    drain_s: float = 1.0  # how long to wait for outstanding replies after the last send
    flush_s: float = 0.25
    spin_ns: int = 200_000
    batch_ns: int = 0  # send a connection's due requests once the oldest has waited this long (fewer syscalls)
    connect_timeout_s: float = 2.0
    protocol: str = "memcached"  # the server's (`tuner.load.wire.WIRES`)


def _connect(address: MemcachedAddress, timeout_s: float) -> socket.socket:
    if address.path is not None:
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        sock.settimeout(timeout_s)
        sock.connect(address.path)
    else:
        sock = socket.create_connection((address.host, address.port), timeout=timeout_s)
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    sock.setblocking(False)
    return sock


@dataclass
class _Conn:
    sock: socket.socket
    times: np.ndarray  # scheduled ns of this connection's requests
    reqs: list[bytes]
    send_ns: np.ndarray
    done_ns: np.ndarray
    # kernel receive time of the reply (SO_TIMESTAMPNS, on the run's clock) where it is exact -- the last reply of
    # each read (TCP reports the newest segment's stamp) -- for requests sent alone onto an idle connection (a
    # probe's situation: a prober sends its next probe after the last reply); < 0 otherwise
    rx_ns: np.ndarray
    sent: int = 0
    done: int = 0
    flushed_sent: int = 0
    flushed_done: int = 0
    tail: bytes = b""
    pending: bytes = b""  # bytes the kernel did not take yet (socket buffer full)
    errors: int = 0


def run_worker(spec: WorkerSpec, plan: Plan, pipe: Connection) -> None:
    """Entry point of a forked worker: connect, report ready with the per-second schedule, wait for the start
    time, run, flush stamps, send the final counts. Errors go back through the pipe as one line."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the parent handles Ctrl-C and stops us with SIGTERM
    stop = {"flag": False}
    signal.signal(signal.SIGTERM, lambda *_: stop.__setitem__("flag", True))
    try:
        conns = []
        n_conn = spec.connections
        for index in range(n_conn):
            part = plan.part(index, n_conn)
            reqs = [plan.templates[j] for j in part.template.tolist()]
            n = len(part)
            conns.append(
                _Conn(
                    _connect(spec.address, spec.connect_timeout_s),
                    part.times_ns,
                    reqs,
                    np.zeros(n, np.int64),
                    np.zeros(n, np.int64),
                    np.full(n, -1, np.int64),
                    tail=WIRES[spec.protocol].first_tail,
                )
            )
            enable_rx_timestamps(conns[-1].sock)
    except OSError as exc:
        pipe.send(("error", f"{spec.protocol} {spec.address}: cannot connect: {exc.strerror or type(exc).__name__}"))
        return
    pipe.send(("ready", plan.per_second(int(np.ceil(spec.duration_s)))))
    msg = pipe.recv()
    if msg[0] != "start":
        return
    t0: int = msg[1]
    try:
        _loop(spec, conns, t0, pipe, stop)
    except OSError as exc:
        pipe.send(("error", f"{spec.protocol} {spec.address}: {exc.strerror or type(exc).__name__}"))
    except Exception as exc:  # noqa: BLE001 -- a process boundary: the parent reports it as one line
        pipe.send(("error", f"generator process failed: {type(exc).__name__}: {exc}"))
    finally:
        for conn in conns:
            conn.sock.close()


def _flush(conns: list[_Conn], pipe: Connection, now: int, final: bool) -> None:
    sched_s, send_s, sched_d, sent_d, done_d, rx_d = [], [], [], [], [], []
    errors = 0
    for c in conns:
        sched_s.append(c.times[c.flushed_sent : c.sent])
        send_s.append(c.send_ns[c.flushed_sent : c.sent])
        sched_d.append(c.times[c.flushed_done : c.done])
        sent_d.append(c.send_ns[c.flushed_done : c.done])
        rx_d.append(c.rx_ns[c.flushed_done : c.done])
        done_d.append(c.done_ns[c.flushed_done : c.done])
        c.flushed_sent, c.flushed_done = c.sent, c.done
        errors += c.errors
        c.errors = 0
    pipe.send(
        (
            "final" if final else "data",
            now,
            np.concatenate(sched_s),
            np.concatenate(send_s),
            np.concatenate(sched_d),
            np.concatenate(sent_d),
            np.concatenate(done_d),
            np.concatenate(rx_d),
            errors,
            sum(c.sent - c.done for c in conns) if final else 0,  # sent, never answered
        )
    )


_NEVER = 1 << 62  # the next send time of a connection with nothing left to send


def _send(c: _Conn, data: bytes) -> int:
    """Bytes of `data` the socket took (0 when its buffer is full)."""
    try:
        return c.sock.send(data)
    except BlockingIOError:
        return 0


def _send_due(c: _Conn, now: int, t0: int) -> int:
    """Send `c`'s requests scheduled by `now` (after what an earlier send left) and stamp them; returns the next
    request's scheduled time, `_NEVER` when none is left."""
    a = c.sent
    b = int(c.times.searchsorted(now, "right"))
    data = b"".join(c.reqs[a:b])
    if c.pending:
        data = c.pending + data
        c.pending = b""
    k = _send(c, data)
    if k < len(data):
        c.pending = data[k:]
    c.send_ns[a:b] = now
    # not alone, behind requests still in flight on the connection, or descheduled around its send
    if b > a + 1 or c.done < a or time.monotonic_ns() - t0 - now > SEND_INTERRUPTED_NS:
        c.rx_ns[a:b] = _CLUMPED
    c.sent = b
    return int(c.times[b]) if b < len(c.times) else _NEVER


def _read_replies(c: _Conn, buf: bytearray, into: list[memoryview], got: int, real_offset: int, count: Counter) -> int:
    """Read what arrived on `c` into `buf` and stamp the requests it completes at `got` (replies counted by the
    protocol's `count`); returns how many."""
    n, anc, _, _ = c.sock.recvmsg_into(into, RX_ANCILLARY_BYTES)
    if not n:
        raise ConnectionResetError(104, "connection closed by the server")
    k, errors, c.tail = count(buf, n, c.tail)
    c.errors += errors
    k = min(k, c.sent - c.done)  # never more replies than requests sent (a stray terminator in a value)
    if k:
        c.done_ns[c.done : c.done + k] = got
        last = c.done + k - 1
        if c.rx_ns[last] != _CLUMPED and (rx := rx_timestamp_ns(anc)) is not None:
            c.rx_ns[last] = min(rx - real_offset, got)  # the newest segment's stamp: exact for the last
        c.done += k
    return k


def _loop(spec: WorkerSpec, conns: list[_Conn], t0: int, pipe: Connection, stop: dict[str, bool]) -> None:
    clock = time.monotonic_ns
    by_fd = {c.sock.fileno(): c for c in conns}
    fds = list(by_fd)
    poller = select.epoll()
    for fd in fds:
        poller.register(fd, select.EPOLLIN)
    end_ns = int(spec.duration_s * 1e9)
    drain_end = end_ns + int(spec.drain_s * 1e9)
    flush_every = int(spec.flush_s * 1e9)
    next_flush = flush_every
    spin = spec.spin_ns
    batch = spec.batch_ns
    big = _NEVER
    nexts = [int(c.times[0]) if len(c.times) else big for c in conns]
    total = sum(len(c.times) for c in conns)
    completed = 0
    buf = bytearray(1 << 18)  # one receive buffer, reused (a fresh 256 KiB bytes per recv costs more than the read)
    into = [memoryview(buf)]
    # kernel receive stamps are CLOCK_REALTIME: this maps them onto the run's clock (monotonic since t0)
    real_offset = time.time_ns() - clock() + t0
    count = WIRES[spec.protocol].count
    while True:
        now = clock() - t0
        soonest = big
        for i, c in enumerate(conns):
            due = nexts[i] + batch
            if due <= now:
                nexts[i] = _send_due(c, now, t0)
                due = nexts[i] + batch
            elif c.pending:
                c.pending = c.pending[_send(c, c.pending) :]
            if due < soonest:
                soonest = due
        wait = soonest - now - spin
        if wait > 0 and not any(c.pending for c in conns):
            ready = select.select(fds, [], [], max(min(wait, next_flush - now, 50_000_000), 0) / 1e9)[0]
            events = [(fd, 0) for fd in ready]
        else:
            events = poller.poll(0)
        if events:
            got = clock() - t0
            for fd, _ in events:
                completed += _read_replies(by_fd[fd], buf, into, got, real_offset, count)
        if now >= next_flush:
            if stop["flag"]:
                break
            _flush(conns, pipe, now, final=False)
            next_flush = now + flush_every
        if completed >= total and soonest == big:
            break
        if now >= drain_end or (now >= end_ns and soonest == big and stop["flag"]):
            break
    poller.close()
    _flush(conns, pipe, clock() - t0, final=True)
