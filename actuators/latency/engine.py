"""The probe engine of `actuators.latency.prober`: its settings (`ProberConfig`), its window (`ProbeWindow`),
and `ThreadProber`, the open-loop paced memcached or Redis requests into an HdrHistogram (see the `prober` module
docstring for the measurement method)."""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace

from hdrh.histogram import HdrHistogram

from actuators.latency.dist import PERCENTILES, HdrDist, histogram_quantiles
from actuators.latency.memcached import MemcachedAddress, MemcachedClient, check_key
from actuators.latency.probe_env import cpu_list
from actuators.latency.resp import RespClient
from actuators.latency.servers import SERVER_KINDS, parse_address
from actuators.latency.stream import ServerTimeout
from actuators.sensors import LatencyWindow
from core.errors import HostError

#: HdrHistogram range: 1 ns .. 60 s, 3 significant digits (<= 0.1 % quantisation).
HIST_LOWEST_NS = 1
HIST_HIGHEST_NS = 60_000_000_000
HIST_DIGITS = 3


def new_histogram() -> HdrHistogram:
    """An empty latency histogram in nanoseconds."""
    return HdrHistogram(HIST_LOWEST_NS, HIST_HIGHEST_NS, HIST_DIGITS)


def record_ns(hist: HdrHistogram, value_ns: int) -> None:
    """Record a latency, clamped into the histogram's range (a 60 s+ latency is recorded as 60 s)."""
    hist.record_value(min(max(int(value_ns), HIST_LOWEST_NS), HIST_HIGHEST_NS))


#: A send that took longer than this from its stamp to the system call's return was interrupted (the process was
#: descheduled around it): its stamp is not when the request left, so it gives no service time.
SEND_INTERRUPTED_NS = 50_000


# -- the prober ------------------------------------------------------------------------------------
@dataclass(frozen=True)
class ProberConfig:
    """Prober settings. `target` may be a remote memcached: run the prober on a client machine.

    `rate_hz` probes/s (open loop); `keys` seeded keys of `value_bytes` bytes under `key_prefix`, read
    round robin; `set_every` N makes every Nth probe a set (0: gets only); `timeout_s` per request;
    `spin_us` busy-wait before each intended send time (timer slack); `busy_poll` spin while waiting
    for replies; `isolation` "process" (own interpreter, default) or "thread"; `cpus` pins the probe
    loop (empty: inherit); `confidence` of the percentile CIs; `protocol` the server's: memcached, or redis (RESP
    GET and SET of the prober's own keys: Redis or Valkey).
    """

    target: str = "127.0.0.1:11211"
    rate_hz: float = 200.0
    keys: int = 16
    value_bytes: int = 64
    set_every: int = 0
    timeout_s: float = 0.5
    spin_us: float = 200.0
    busy_poll: bool = False
    key_prefix: str = "tuner:probe:"
    confidence: float = 0.95
    isolation: str = "process"
    cpus: tuple[int, ...] = ()
    protocol: str = "memcached"

    def __post_init__(self) -> None:
        object.__setattr__(self, "cpus", tuple(int(c) for c in self.cpus))
        if any(c < 0 for c in self.cpus):
            raise HostError(f"prober cpus {self.cpus!r}: expected CPU numbers >= 0")
        if self.isolation not in ("process", "thread"):
            raise HostError(f"prober isolation {self.isolation!r}: expected 'process' or 'thread'")
        if not 0 < self.rate_hz <= 100_000:
            raise HostError(f"prober rate {self.rate_hz!r} Hz: expected 0 < rate <= 100000")
        if not 1 <= self.keys <= 100_000 or not 0 <= self.value_bytes <= 1 << 20:
            raise HostError("prober keys must be 1..100000 and value_bytes 0..1048576")
        if self.set_every < 0 or not self.timeout_s > 0 or self.spin_us < 0:
            raise HostError("prober set_every must be >= 0, timeout_s > 0, spin_us >= 0")
        if not 0 < self.confidence < 1:
            raise HostError(f"prober confidence {self.confidence!r}: expected 0 < c < 1")
        if self.protocol not in SERVER_KINDS:
            raise HostError(f"prober protocol {self.protocol!r}: expected one of {', '.join(SERVER_KINDS)}")
        parse_address(self.protocol, self.target)  # fail early on a malformed address
        try:
            check_key(f"{self.key_prefix}{self.keys - 1}")
        except ValueError as exc:
            raise HostError(f"prober key_prefix {self.key_prefix!r}: {exc}") from None


@dataclass(frozen=True)
class ProbeWindow(LatencyWindow):
    """A `LatencyWindow` plus what the prober saw: `requests` counts recorded samples.

    `timeouts` are included in the samples (at their elapsed time, a lower bound); `incomplete` are
    requests intended before the window end whose reply had not arrived when `end()` gave up waiting
    (included at their elapsed time, a lower bound). `ci_achieved[p]` is False when n is too small for
    a two-sided CI at that percentile (the interval is then the sample range). `latency_dist` is the
    window's histogram as a mergeable `HdrDist` (pooled by `Measurement.merge_all` / `tuner.optimize.windowing`).
    """

    seconds: float = 0.0
    intended: int = 0
    timeouts: int = 0
    incomplete: int = 0
    misses: int = 0
    send_lag_p99_us: float = 0.0
    send_lag_max_us: float = 0.0
    ci_achieved: dict[float, bool] = field(default_factory=dict)
    ci_known: bool = True
    latency_dist: HdrDist | None = field(default=None, compare=False, repr=False)
    #: with `ThreadProber(keep_samples=True)`: one row per recorded probe, (intended, sent, done, received) in
    #: ns since the epoch -- `received` is the kernel's receive timestamp of the reply (SO_TIMESTAMPNS; `done`
    #: where there is none), `sent` = `done` = the window's end for requests censored there; else None
    samples: list[tuple[int, int, int, int]] | None = field(default=None, compare=False, repr=False)


class ThreadProber:
    """The probe engine: a background thread in this process (see `Prober` for the semantics)."""

    def __init__(
        self, config: ProberConfig, clock_ns: Callable[[], int] = time.perf_counter_ns, keep_samples: bool = False
    ) -> None:
        self.config = config
        self._keep = keep_samples
        self._samples: list[tuple[int, int, int, int]] = []
        self._epoch_offset = 0  # epoch ns minus clock ns, fixed at begin()
        self.address: MemcachedAddress = parse_address(config.protocol, config.target)
        self._client_class = RespClient if config.protocol == "redis" else MemcachedClient
        self._clock = clock_ns
        self._period_ns = 1e9 / config.rate_hz
        self._keys = [f"{config.key_prefix}{i}" for i in range(config.keys)]
        self._value = b"x" * config.value_bytes
        self._cv = threading.Condition()
        self._thread: threading.Thread | None = None
        self._closed = False
        self._seeded = False
        # window state (guarded by _cv)
        self._gen = 0
        self._active = False
        self._origin = 0
        self._k = 0
        self._stop_at: int | None = None
        self._hist = new_histogram()
        self._lag = new_histogram()
        self._timeouts = 0
        self._misses = 0
        self._errors = 0
        self._last_error = ""
        self._pin_error = ""

    # -- LatencySource ----------------------------------------------------------------------------
    def begin(self) -> None:
        """Seed keys if needed (HostError if unreachable), reset the window, start probing now."""
        if self._closed:
            raise HostError("prober is closed")
        if not self._seeded or self._misses:
            self._seed()
        with self._cv:
            self._gen += 1
            self._hist, self._lag = new_histogram(), new_histogram()
            self._timeouts = self._misses = self._errors = 0
            self._last_error = ""
            self._k = 0
            self._stop_at = None
            self._samples = []
            self._origin = self._clock()
            self._epoch_offset = time.time_ns() - self._origin
            self._active = True
            if self._thread is None:
                self._thread = threading.Thread(target=self._run, name="tuner-prober", daemon=True)
                self._thread.start()
            self._cv.notify_all()

    def end(self) -> ProbeWindow:
        """Close the window: wait (<= timeout_s) for owed replies, then summarise it."""
        with self._cv:
            if not self._active:
                raise HostError("prober: end() without begin()")
            stop = self._clock()
            self._stop_at = stop
            self._cv.notify_all()
            deadline = time.monotonic() + self.config.timeout_s + 0.05
            while self._intended(self._k) < stop and (left := deadline - time.monotonic()) > 0:
                self._cv.wait(left)
            now = self._clock()
            incomplete = 0
            while self._intended(self._k) < stop:  # owed but not answered: censored at their age
                record_ns(self._hist, now - self._intended(self._k))
                if self._keep:
                    self._samples.append(self._row(self._intended(self._k), now, now, None))
                self._k += 1
                incomplete += 1
            self._active = False
            self._gen += 1
            hist, lag, samples = self._hist, self._lag, (self._samples if self._keep else None)
            errors, last_error, timeouts, misses = self._errors, self._last_error, self._timeouts, self._misses
            intended = self._k
            seconds = (stop - self._origin) / 1e9
        if self._pin_error:
            raise HostError(f"prober: {self._pin_error}")
        if errors:
            raise HostError(
                f"{self.config.protocol} {self.address}: {errors} of {intended} probe requests failed in the window: "
                f"{last_error}"
            )
        window = self._summarise(hist, lag, seconds, intended, timeouts, incomplete, misses)
        return window if samples is None else replace(window, samples=samples)

    def close(self) -> None:
        """Stop the thread and close the connection (idempotent)."""
        with self._cv:
            self._closed = True
            self._active = False
            self._gen += 1
            self._cv.notify_all()
            thread = self._thread
        if thread is not None:
            thread.join(timeout=self.config.timeout_s + 2.0)
            if thread.is_alive():
                raise HostError("prober thread did not stop within its timeout")

    # -- internals --------------------------------------------------------------------------------
    def _row(self, intended: int, sent: int, done: int, rx_epoch_ns: int | None) -> tuple[int, int, int, int]:
        off = self._epoch_offset
        done += off
        rx = done if rx_epoch_ns is None else -1 if rx_epoch_ns < 0 else min(rx_epoch_ns, done)
        return (intended + off, sent + off, done, rx)

    def _intended(self, k: int) -> int:
        return self._origin + int(k * self._period_ns)

    def _seed(self) -> None:
        with self._client_class(self.address, self.config.timeout_s) as client:
            for key in self._keys:
                client.set(key, self._value)
        self._seeded = True

    def _summarise(
        self,
        hist: HdrHistogram,
        lag: HdrHistogram,
        seconds: float,
        intended: int,
        timeouts: int,
        incomplete: int,
        misses: int,
    ) -> ProbeWindow:
        from core.stats import quantile_ci_achievable

        n = int(hist.get_total_count())
        if n == 0:
            raise HostError(
                f"{self.config.protocol} {self.address}: no probe replies in a {seconds:.3f} s window at "
                f"{self.config.rate_hz:g} Hz (window shorter than one probe interval?)"
            )
        n, values, cis = histogram_quantiles(hist, PERCENTILES, self.config.confidence)
        achieved = {p: quantile_ci_achievable(n, p / 100.0, self.config.confidence) for p in PERCENTILES}
        lag_n = lag.get_total_count()
        return ProbeWindow(
            requests=n,
            latency_us=values,
            latency_ci_us=cis,
            seconds=seconds,
            intended=intended,
            timeouts=timeouts,
            incomplete=incomplete,
            misses=misses,
            send_lag_p99_us=lag.get_value_at_percentile(99.0) / 1e3 if lag_n else 0.0,
            send_lag_max_us=lag.get_max_value() / 1e3 if lag_n else 0.0,
            ci_achieved=achieved,
            latency_dist=HdrDist(hist),
        )

    def _run(self) -> None:
        if self.config.cpus:  # pid 0 = this thread only (Linux): pin the probe loop, not the caller
            try:
                os.sched_setaffinity(0, self.config.cpus)
            except OSError as exc:
                with self._cv:  # every window fails loudly rather than silently probing unpinned
                    self._pin_error = f"cannot pin the prober to CPUs {cpu_list(self.config.cpus)}: {exc.strerror}"
        client = self._client_class(
            self.address, self.config.timeout_s, busy_poll=self.config.busy_poll, rx_timestamps=self._keep
        )
        spin_ns = int(self.config.spin_us * 1e3)
        try:
            while True:
                with self._cv:
                    while not self._closed and not self._has_work():
                        self._cv.wait()
                    if self._closed:
                        return
                    gen, k = self._gen, self._k
                    intended = self._intended(k)
                    # sleep until just before the intended time; begin()/end()/close() wake us early
                    while (wait_ns := intended - spin_ns - self._clock()) > 0 and gen == self._gen and not self._closed:
                        self._cv.wait(wait_ns / 1e9)
                    if gen != self._gen or self._closed or not self._has_work():
                        continue
                while self._clock() < intended:  # spin the last `spin_us`: no timer-slack bias
                    pass
                sent = self._clock()
                client.last_rx_ns = client.last_sent_ns = None
                outcome = self._request(client, k)
                done = self._clock()
                rx = client.last_rx_ns
                if client.last_sent_ns is not None and client.last_sent_ns - sent > SEND_INTERRUPTED_NS:
                    rx = -1  # descheduled around its own send: no service time (the send stamp is not the send)
                with self._cv:
                    if gen != self._gen:
                        continue  # the window this request belonged to is over
                    self._k = k + 1
                    if outcome in ("ok", "miss", "timeout"):
                        record_ns(self._hist, done - intended)
                        record_ns(self._lag, max(sent - intended, 0))
                        if self._keep:
                            self._samples.append(self._row(intended, sent, done, rx))
                        self._misses += outcome == "miss"
                        self._timeouts += outcome == "timeout"
                    else:
                        self._errors += 1
                        self._last_error = outcome
                    self._cv.notify_all()
        finally:
            client.close()

    def _has_work(self) -> bool:
        return self._active and (self._stop_at is None or self._intended(self._k) < self._stop_at)

    def _request(self, client: MemcachedClient | RespClient, k: int) -> str:
        """One probe request: 'ok', 'miss', 'timeout', or an error text."""
        key = self._keys[k % len(self._keys)]
        every = self.config.set_every
        try:
            if every and k % every == every - 1:
                client.set(key, self._value)
                return "ok"
            return "ok" if client.get(key) is not None else "miss"
        except ServerTimeout:
            client.close()
            return "timeout"
        except HostError as exc:
            client.close()
            return str(exc)
        except Exception as exc:  # noqa: BLE001 - never let the probe thread die silently
            client.close()
            return f"prober: {type(exc).__name__}: {exc}"
