"""Run a plan: fork the worker processes, start them together, gather their stamps into per-second statistics.

The parent does all histogram work (workers only stamp times), so its cost never delays a send. A second is
reported once every worker has flushed past its end; latency is binned by completion second and send lag by send
second (the HdrHistogram interval-log convention: an interval holds what was recorded in it).
"""

from __future__ import annotations

import contextlib
import multiprocessing
import os
import signal
import socket
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from multiprocessing.connection import Connection, wait
from typing import Any, TextIO, cast

import numpy as np
from hdrh.histogram import HdrHistogram

from actuators.latency.hlog import LAG_TAG, ON_TIME_NS, RESPONSE_TAG, SERVICE_TAG, HlogWriter
from actuators.latency.memcached import MemcachedAddress
from actuators.latency.servers import parse_address
from core.errors import HostError, TunerError
from tuner.load.hist import new_histogram, percentiles_us, record_ns
from tuner.load.plan import Plan
from tuner.load.sender import WorkerSpec, run_worker
from tuner.load.wire import WIRES

NS = 1_000_000_000
#: Longest run (s): a load run is bounded in time as well as in requests.
MAX_DURATION_S = 7 * 86400


@dataclass(frozen=True)
class LoadSettings:
    address: MemcachedAddress
    duration_s: float
    processes: int = 1
    connections: int = 4
    drain_s: float = 1.0
    spin_us: float = 200.0
    batch_us: float = 0.0


@dataclass
class Second:
    """One second of the run (seconds after the start)."""

    second: int
    scheduled: int = 0
    sent: int = 0
    completed: int = 0
    latency: HdrHistogram = field(default_factory=new_histogram)
    lag: HdrHistogram = field(default_factory=new_histogram)
    response: HdrHistogram = field(default_factory=new_histogram)  # reply read minus actual send: lag taken out
    # requests sent on time: kernel receive stamp of the reply minus send (the client's delays taken out)
    service: HdrHistogram = field(default_factory=new_histogram)

    def row(self) -> dict[str, Any]:
        lat = percentiles_us(self.latency)
        lag = percentiles_us(self.lag, (99.0,))
        resp = percentiles_us(self.response, (99.0,))
        return {
            "second": self.second,
            "scheduled": self.scheduled,
            "sent": self.sent,
            "completed": self.completed,
            "achieved_ratio": round(self.completed / self.scheduled, 5) if self.scheduled else None,
            "latency_us": None if lat is None else {k: v["us"] for k, v in lat.items()},
            "send_lag_p99_us": None if lag is None else lag["p99"]["us"],
            "response_p99_us": None if resp is None else resp["p99"]["us"],
        }


@dataclass
class LoadResult:
    settings: LoadSettings
    source: str
    seconds: list[Second]
    latency: HdrHistogram
    lag: HdrHistogram
    response: HdrHistogram
    service: HdrHistogram
    planned: int
    errors: int
    unanswered: int
    interrupted: bool
    start_epoch_s: float
    ops: dict[str, int]

    stopped_at_s: float | None = None  # seconds after the start when an interrupt ended the run

    @property
    def run_seconds(self) -> float:
        """How long the schedule ran: its duration, or until the interrupt."""
        if self.stopped_at_s is None:
            return self.settings.duration_s
        return min(self.settings.duration_s, self.stopped_at_s)

    @property
    def full_seconds(self) -> list[Second]:
        """The seconds wholly inside the run (not the drain after it, nor the one an interrupt cut short)."""
        return [s for s in self.seconds if s.second < int(self.run_seconds)]

    def worst_achieved_ratio(self) -> float | None:
        """The largest |completed / scheduled - 1| over the full seconds (None if no scheduled second)."""
        errs = [abs(s.completed / s.scheduled - 1.0) for s in self.full_seconds if s.scheduled]
        return max(errs) if errs else None

    def summary(self) -> dict[str, Any]:
        sent = sum(s.sent for s in self.seconds)
        done = sum(s.completed for s in self.seconds)
        lag = percentiles_us(self.lag, (50.0, 99.0, 99.9))
        worst = self.worst_achieved_ratio()
        return {
            "server": str(self.settings.address),
            "loopback": self.settings.address.is_loopback(),
            "source": self.source,
            "duration_s": self.settings.duration_s,
            "processes": self.settings.processes,
            "connections_per_process": self.settings.connections,
            "batch_us": self.settings.batch_us,
            "planned": self.planned,
            "sent": sent,
            "completed": done,
            "unanswered": self.unanswered,
            "start_epoch_s": round(self.start_epoch_s, 3),
            "errors": self.errors,
            "interrupted": self.interrupted,
            "ops": self.ops,
            "run_s": round(self.run_seconds, 3),
            "scheduled_qps": round(sum(s.scheduled for s in self.full_seconds) / max(len(self.full_seconds), 1), 1),
            "achieved_qps": round(sum(s.completed for s in self.full_seconds) / max(len(self.full_seconds), 1), 1),
            "worst_second_achieved_error": None if worst is None else round(worst, 5),
            "latency_us": percentiles_us(self.latency),
            "response_us": percentiles_us(self.response),
            "service_us": percentiles_us(self.service),
            "service_samples": self.service.get_total_count(),
            "send_lag_us": None if lag is None else {k: v["us"] for k, v in lag.items()},
            "send_lag_max_us": round(self.lag.get_max_value() / 1e3, 3) if self.lag.get_total_count() else None,
            "per_second": [s.row() for s in self.seconds],
        }


def warm(
    address: MemcachedAddress, requests: list[bytes], timeout_s: float = 10.0, protocol: str = "memcached"
) -> None:
    """Store the given pipelined requests (a Poisson plan's keys, in the server's `protocol`) before the run,
    waiting for every reply."""
    from tuner.load.sender import _connect

    count = WIRES[protocol].count
    try:
        sock = _connect(address, timeout_s)
    except OSError as exc:
        raise HostError(f"{protocol} {address}: cannot connect: {exc.strerror or type(exc).__name__}") from None
    sock.setblocking(True)
    sock.settimeout(timeout_s)
    try:
        for i in range(0, len(requests), 500):
            batch = requests[i : i + 500]
            sock.sendall(b"".join(batch))
            got, tail = 0, WIRES[protocol].first_tail
            while got < len(batch):
                data = sock.recv(1 << 16)
                if not data:
                    raise HostError(f"{protocol} {address}: connection closed while storing the key set")
                k, _, tail = count(data, len(data), tail)
                got += k
    except OSError as exc:
        raise HostError(f"{protocol} {address}: storing the key set failed: {exc}") from None
    finally:
        sock.close()


def _check(settings: LoadSettings) -> None:
    if not 1 <= settings.processes <= (os.cpu_count() or 1) * 4:
        raise TunerError(f"--processes must be in 1..{(os.cpu_count() or 1) * 4}, got {settings.processes}")
    if not 0 <= settings.batch_us <= 10_000 or not 0 <= settings.spin_us <= 100_000:
        raise TunerError("--batch-us must be in 0..10000 and --spin-us in 0..100000")
    if not 1 <= settings.connections <= 256:
        raise TunerError(f"--connections must be in 1..256, got {settings.connections}")
    if not 0 < settings.duration_s <= MAX_DURATION_S:
        raise TunerError(f"--duration must be in (0, {MAX_DURATION_S}] s, got {settings.duration_s}")


def run_load(
    plan: Plan,
    settings: LoadSettings,
    *,
    on_second: Callable[[Second], None] | None = None,
    hlog: TextIO | None = None,
) -> LoadResult:
    """Send `plan` to the server with `settings.processes` forked workers; SIGINT/SIGTERM end it early
    (what was measured is kept, `interrupted` is set)."""
    _check(settings)
    ctx = multiprocessing.get_context("fork")
    n_sec = int(np.ceil(settings.duration_s + settings.drain_s)) + 1
    seconds = [Second(s) for s in range(n_sec)]
    spec = WorkerSpec(
        settings.address,
        settings.connections,
        settings.duration_s,
        settings.drain_s,
        spin_ns=int(settings.spin_us * 1000),
        batch_ns=int(settings.batch_us * 1000),
        protocol=plan.protocol,
    )
    pipes, procs = [], []
    for w in range(settings.processes):
        parent, child = ctx.Pipe()
        proc = ctx.Process(target=run_worker, args=(spec, plan.part(w, settings.processes), child), daemon=True)
        proc.start()
        child.close()
        pipes.append(parent)
        procs.append(proc)
    stopped = {"flag": False}

    def _stop(*_: object) -> None:
        stopped["flag"] = True

    old = {}
    with contextlib.suppress(ValueError):  # not the main thread: no signal handling
        for sig in (signal.SIGINT, signal.SIGTERM):
            old[sig] = signal.signal(sig, _stop)
    try:
        return _collect(plan, settings, seconds, pipes, procs, stopped, on_second, hlog)
    finally:
        for sig, handler in old.items():
            signal.signal(sig, handler)
        for proc in procs:
            if proc.is_alive():
                proc.terminate()
            proc.join(timeout=5)


def _collect(
    plan: Plan,
    settings: LoadSettings,
    seconds: list[Second],
    pipes: list[Connection],
    procs: list[Any],
    stopped: dict[str, bool],
    on_second: Callable[[Second], None] | None,
    hlog: TextIO | None,
) -> LoadResult:
    n_sec = len(seconds)
    for pipe in pipes:
        first: Any = pipe.recv()
        if first[0] == "error":
            raise HostError(first[1])
        sched = first[1]
        for s, count in enumerate(sched.tolist()):
            seconds[s].scheduled += count
    t0 = time.monotonic_ns() + 50_000_000
    start_epoch = time.time() + 0.05
    for pipe in pipes:
        pipe.send(("start", t0))
    writer = HlogWriter(hlog, start_epoch, comment=f"tuner load {plan.source} -> {settings.address}") if hlog else None
    total_lat, total_lag, total_resp, total_svc = new_histogram(), new_histogram(), new_histogram(), new_histogram()
    progress = {id(p): 0 for p in pipes}
    live = list(pipes)
    reported = 0
    errors = unanswered = 0
    told_stop = False
    stopped_at = None
    while live:
        if stopped["flag"] and not told_stop:
            stopped_at = (time.monotonic_ns() - t0) / NS
            for proc in procs:
                if proc.is_alive():
                    os.kill(proc.pid, signal.SIGTERM)
            told_stop = True
        for ready in wait(live, timeout=0.2):
            pipe = cast(Connection, ready)  # wait() returns the connections it was given
            try:
                msg: Any = pipe.recv()
            except EOFError:
                raise HostError("a generator process exited without its final report") from None
            if msg[0] == "error":
                raise HostError(msg[1])
            kind, now, sched_s, send_s, sched_d, sent_d, done_d, rx_d, errs, left = msg
            errors += errs
            _add(seconds, sched_s, send_s, "sent", "lag", total_lag)
            _add(seconds, sched_d, done_d, "completed", "latency", total_lat)
            _add_response(seconds, sched_d, sent_d, done_d, rx_d, total_resp, total_svc)
            progress[id(pipe)] = now
            if kind == "final":
                unanswered += left
                live.remove(pipe)
                progress[id(pipe)] = n_sec * NS
        done_until = min(progress.values()) // NS
        while reported < min(done_until, n_sec):
            _report(seconds[reported], writer, on_second)
            reported += 1
    last = max((s.second for s in seconds if s.scheduled or s.sent or s.completed), default=0)
    while reported <= min(last, n_sec - 1):
        _report(seconds[reported], writer, on_second)
        reported += 1
    return LoadResult(
        settings=settings,
        source=plan.source,
        seconds=seconds[: last + 1],
        latency=total_lat,
        lag=total_lag,
        response=total_resp,
        service=total_svc,
        planned=len(plan),
        errors=errors,
        unanswered=unanswered,
        interrupted=stopped["flag"],
        start_epoch_s=start_epoch,
        ops=plan.ops,
        stopped_at_s=stopped_at,
    )


def _add(
    seconds: list[Second],
    sched: np.ndarray,
    stamp: np.ndarray,
    count_attr: str,
    hist_attr: str,
    total: HdrHistogram,
) -> None:
    if not sched.size:
        return
    delta = stamp - sched
    sec = np.minimum(stamp // NS, len(seconds) - 1)
    record_ns(total, delta)
    for s in np.unique(sec).tolist():
        mask = sec == s
        slot = seconds[s]
        setattr(slot, count_attr, getattr(slot, count_attr) + int(mask.sum()))
        record_ns(getattr(slot, hist_attr), delta[mask])


def _add_response(
    seconds: list[Second],
    sched: np.ndarray,
    sent: np.ndarray,
    done: np.ndarray,
    received: np.ndarray,
    total: HdrHistogram,
    total_service: HdrHistogram,
) -> None:
    """Response time (reply read minus actual send) of every completion, and service time (kernel receive stamp
    minus send) of those sent on time, alone onto an idle connection, with an exact stamp (`received` >= 0),
    binned by completion second."""
    if not sent.size:
        return
    delta = done - sent
    sec = np.minimum(done // NS, len(seconds) - 1)
    counted = (received >= 0) & (sent - sched <= ON_TIME_NS)
    service = received - sent
    record_ns(total, delta)
    record_ns(total_service, service[counted])
    for s in np.unique(sec).tolist():
        here = sec == s
        record_ns(seconds[s].response, delta[here])
        record_ns(seconds[s].service, service[here & counted])


def _report(second: Second, writer: HlogWriter | None, on_second: Callable[[Second], None] | None) -> None:
    if writer is not None:
        writer.write(float(second.second), 1.0, second.latency)
        writer.write(float(second.second), 1.0, second.lag, LAG_TAG)
        writer.write(float(second.second), 1.0, second.response, RESPONSE_TAG)
        writer.write(float(second.second), 1.0, second.service, SERVICE_TAG)
    if on_second is not None:
        on_second(second)


def address_of(text: str, protocol: str = "memcached") -> MemcachedAddress:
    """Parse `--server` (host:port, [v6]:port or unix:/path; a bare host is at the `protocol`'s default port); a
    one-line error otherwise."""
    addr = parse_address(protocol, text)
    if addr.path is None:
        with contextlib.suppress(OSError):
            socket.getaddrinfo(addr.host, addr.port)
            return addr
        raise HostError(f"--server {text!r}: cannot resolve host {addr.host!r}")
    return addr
