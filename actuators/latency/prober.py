"""Built-in latency prober: real memcached requests at a fixed low rate, open-loop, into an HdrHistogram.

Open-loop pacing (wrk2 / HdrHistogram convention, Maricq et al. 2018, Antoniou et al.): request k is
*intended* at `t0 + k / rate` and its latency is measured from that intended time, not from when it
was actually sent. If the server (or the prober) stalls, the requests that should have gone out
during the stall are sent late, back to back, and each carries the stall in its latency --
coordinated omission cannot hide it. The thread sleeps until `spin_us` before the intended time and
then spins, so timer slack does not bias the samples; any remaining send lag *is* counted (it never
hides a stall, it may overstate) and is reported as `ProbeWindow.send_lag_p99_us` so you can see it.

Latencies are recorded in nanoseconds (sub-µs resolution, 3 significant digits) and reported in µs.
Percentile CIs come from order statistics (`core.stats.quantile_ci_ranks`) read off the histogram:
the low end at the lowest value of its bucket, the high end at the highest, so quantisation never
narrows the interval.

The prober also records the client-side settings that change measured tails (`ClientSettings`:
cpufreq governor, cpuidle driver/governor and C-states of the CPUs it may run on), read-only from
sysfs under a configurable root.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import asdict, dataclass, field
from pathlib import Path

from hdrh.histogram import HdrHistogram

from actuators.latency.dist import PERCENTILES, HdrDist, histogram_quantiles
from actuators.latency.memcached import MemcachedAddress, MemcachedClient, MemcachedTimeout, as_address, check_key
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


# -- client-side settings (read-only) ---------------------------------------------------------------
@dataclass(frozen=True)
class IdleState:
    """One cpuidle state as the kernel lists it for the first prober CPU."""

    name: str
    exit_latency_us: int | None
    disabled_on: tuple[int, ...]


@dataclass(frozen=True)
class ClientSettings:
    """Client-side settings that change measured tails (Antoniou et al.: C-states, DVFS, governor).

    Read from sysfs/procfs under `root`, never written. None means the file does not exist here.
    """

    cpus: tuple[int, ...]
    governors: dict[int, str | None]
    cpufreq_driver: str | None
    boost: str | None
    idle_driver: str | None
    idle_governor: str | None
    idle_states: tuple[IdleState, ...]
    intel_idle_max_cstate: str | None
    cmdline_flags: tuple[str, ...]

    def deep_states(self, threshold_us: int = 10) -> list[IdleState]:
        """Enabled idle states whose exit latency exceeds `threshold_us`."""
        return [
            s
            for s in self.idle_states
            if s.exit_latency_us is not None
            and s.exit_latency_us > threshold_us
            and set(s.disabled_on) != set(self.cpus)
        ]

    def warnings(self) -> list[str]:
        """What in these settings can inflate the prober's measured latency, with the fix."""
        out = []
        slow = sorted({g for g in self.governors.values() if g and g != "performance"})
        if slow:
            out.append(
                f"prober CPUs use cpufreq governor {'/'.join(slow)}: client-side frequency ramps add tens of µs "
                "to measured tails (Antoniou et al.); use 'performance' on the prober CPUs or a dedicated client"
            )
        deep = self.deep_states()
        if deep:
            names = ", ".join(f"{s.name} ({s.exit_latency_us} µs)" for s in deep)
            out.append(
                f"deep C-states enabled on prober CPUs: {names}; wake-ups add their exit latency to measured "
                "tails; disable them for the prober CPUs (cpupower idle-set -D 10) or probe from a tuned client"
            )
        return out

    def lines(self) -> list[str]:
        """Human-readable summary for `tuner doctor`."""
        govs = sorted({g or "none" for g in self.governors.values()})
        states = (
            ", ".join(
                f"{s.name}({s.exit_latency_us}µs{', off' if set(s.disabled_on) == set(self.cpus) else ''})"
                for s in self.idle_states
            )
            or "none listed"
        )
        return [
            f"prober CPUs: {_cpu_list(self.cpus)}",
            f"cpufreq: driver {self.cpufreq_driver or 'none'}, governor {', '.join(govs)}, boost {self.boost or 'n/a'}",
            f"cpuidle: driver {self.idle_driver or 'none'}, governor {self.idle_governor or 'none'}, states {states}",
            f"intel_idle.max_cstate {self.intel_idle_max_cstate or 'n/a'}; kernel flags: "
            f"{' '.join(self.cmdline_flags) or 'none relevant'}",
        ]

    def as_dict(self) -> dict:
        """JSON-ready form (for `tuner doctor --json`)."""
        d = asdict(self)
        d["governors"] = {str(k): v for k, v in self.governors.items()}
        d["warnings"] = self.warnings()
        return d


_CMDLINE_KEYS = (
    "idle=",
    "intel_idle.max_cstate=",
    "processor.max_cstate=",
    "intel_pstate=",
    "cpuidle.off=",
    "nohz=",
    "nohz_full=",
    "cpufreq.default_governor=",
    "cpuidle_haltpoll.force=",
)


def read_client_settings(root: str | os.PathLike = "/", cpus: Iterable[int] | None = None) -> ClientSettings:
    """Read the governor/C-state settings of `cpus` (default: this process's affinity) under `root`."""
    base = Path(root)
    cpu_dir = base / "sys/devices/system/cpu"
    cpu_set = tuple(sorted(cpus if cpus is not None else os.sched_getaffinity(0)))
    governors = {c: _read(cpu_dir / f"cpu{c}/cpufreq/scaling_governor") for c in cpu_set}
    driver = next((d for c in cpu_set if (d := _read(cpu_dir / f"cpu{c}/cpufreq/scaling_driver"))), None)
    boost = _read(cpu_dir / "cpufreq/boost")
    if boost is None and (no_turbo := _read(cpu_dir / "intel_pstate/no_turbo")) is not None:
        boost = "0" if no_turbo == "1" else "1"
    states: list[IdleState] = []
    first = cpu_set[0] if cpu_set else 0
    state_dirs = sorted((cpu_dir / f"cpu{first}/cpuidle").glob("state*"), key=lambda p: int(p.name[5:] or 0))
    for sd in state_dirs:
        lat = _read(sd / "latency")
        disabled_on = tuple(c for c in cpu_set if _read(cpu_dir / f"cpu{c}/cpuidle/{sd.name}/disable") == "1")
        states.append(
            IdleState(_read(sd / "name") or sd.name, int(lat) if lat and lat.isdigit() else None, disabled_on)
        )
    cmdline = _read(base / "proc/cmdline") or ""
    flags = tuple(tok for tok in cmdline.split() if tok.startswith(_CMDLINE_KEYS))
    return ClientSettings(
        cpus=cpu_set,
        governors=governors,
        cpufreq_driver=driver,
        boost=boost,
        idle_driver=_read(cpu_dir / "cpuidle/current_driver"),
        idle_governor=_read(cpu_dir / "cpuidle/current_governor") or _read(cpu_dir / "cpuidle/current_governor_ro"),
        idle_states=tuple(states),
        intel_idle_max_cstate=_read(base / "sys/module/intel_idle/parameters/max_cstate"),
        cmdline_flags=flags,
    )


def _read(path: Path) -> str | None:
    try:
        return path.read_text().strip()
    except OSError:
        return None


def _cpu_list(cpus: tuple[int, ...]) -> str:
    return ",".join(map(str, cpus)) if cpus else "none"


# -- where the probes go --------------------------------------------------------------------------
def local_path_reason(address: MemcachedAddress, local_ips: Iterable[str] | None = None) -> str | None:
    """Why probes to `address` would never cross a NIC, or None when they do (as far as we can tell).

    Linux delivers traffic to *any* address of this host over `lo` -- not just 127.0.0.1 -- so a
    prober targeting the host's own eth0 address still bypasses the NIC and its interrupt throttling.
    """
    import ipaddress
    import socket

    if address.path is not None:
        return f"{address} is a unix socket"
    try:
        infos = socket.getaddrinfo(address.host, address.port, type=socket.SOCK_STREAM)
    except OSError:
        return None  # cannot resolve here: cannot tell
    if local_ips is None:
        import psutil

        local_ips = [
            a.address
            for addrs in psutil.net_if_addrs().values()
            for a in addrs
            if a.family in (socket.AF_INET, socket.AF_INET6)
        ]
    local = {ip.split("%", 1)[0] for ip in local_ips}
    for info in infos:
        ip = str(info[4][0]).split("%", 1)[0]
        if ipaddress.ip_address(ip).is_loopback:
            return f"{address} resolves to loopback {ip}"
        if ip in local:
            return f"{address} is an address of this host ({ip}; Linux routes it over lo)"
    return None


def target_warning(address: MemcachedAddress, local_ips: Iterable[str] | None = None) -> str | None:
    """A warning when the prober cannot see NIC-side delay (ITR), with the fix; None when it can."""
    reason = local_path_reason(address, local_ips)
    if reason is None:
        return None
    return (
        f"prober target {reason}: probes never cross the NIC, so they miss interrupt-throttling (ITR) "
        "delay and the tuner would see large ITR as free; run the prober on a client machine "
        "(target this host's NIC address) or use the prometheus/hook latency source"
    )


# -- the prober ------------------------------------------------------------------------------------
@dataclass(frozen=True)
class ProberConfig:
    """Prober settings. `target` may be a remote memcached: run the prober on a client machine.

    `rate_hz` probes/s (open loop); `keys` seeded keys of `value_bytes` bytes under `key_prefix`, read
    round robin; `set_every` N makes every Nth probe a set (0: gets only); `timeout_s` per request;
    `spin_us` busy-wait before each intended send time (timer slack); `busy_poll` spin while waiting
    for replies; `isolation` "process" (own interpreter, default) or "thread"; `cpus` pins the probe
    loop (empty: inherit); `confidence` of the percentile CIs.
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
        as_address(self.target)  # fail early on a malformed address
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


class Prober:
    """`LatencySource`: paced memcached gets (and optional sets), open-loop, into an HdrHistogram.

    Probing runs only between `begin()` and `end()`; `begin()` seeds the keys (first window, and after
    misses), resets the histogram and restarts the schedule at now. `end()` stops new sends at the
    window end, waits up to `timeout_s` for requests still owed, and returns a `ProbeWindow`. It raises
    HostError naming the address when requests failed (refused, reset, protocol error).

    With `isolation="process"` (default) the probe loop runs in a spawned child process with its own
    interpreter: a Python thread shares the GIL with the tuner, and a busy tuner thread delays every
    probe by up to the 5 ms GIL switch interval (measured: p50 from 82 µs to 265 ms on this VM).
    `isolation="thread"` runs it in-process (tests, or a process that is idle while it measures).
    """

    def __init__(
        self,
        config: ProberConfig | None = None,
        *,
        settings_root: str | os.PathLike | None = "/",
        **overrides: object,
    ) -> None:
        if config is None:
            config = ProberConfig(**overrides)  # type: ignore[arg-type]
        elif overrides:
            raise TypeError("pass either a ProberConfig or keyword overrides, not both")
        self.config = config
        self.address: MemcachedAddress = as_address(config.target)
        self.settings: ClientSettings | None = (
            read_client_settings(settings_root, cpus=config.cpus or None) if settings_root is not None else None
        )
        self._engine: ThreadProber | ProcessProber = (
            ThreadProber(config) if config.isolation == "thread" else ProcessProber(config)
        )

    def begin(self) -> None:
        """Seed keys if needed (HostError if unreachable), reset the window, start probing now."""
        self._engine.begin()

    def end(self) -> ProbeWindow:
        """Close the window and summarise it."""
        return self._engine.end()

    def close(self) -> None:
        """Stop the probe thread/process and close its connection (idempotent)."""
        self._engine.close()

    def warnings(self) -> list[str]:
        """What limits this prober's view: a target that bypasses the NIC, client-side settings."""
        out = [w] if (w := target_warning(self.address)) else []
        return out + (self.settings.warnings() if self.settings is not None else [])


class ProcessProber:
    """Runs a `ThreadProber` in a child interpreter (`python -c ...`, its own GIL and session).

    Commands and `ProbeWindow`s travel over two pipes as `multiprocessing.connection` messages. The
    child exits when told to, or when the parent goes away (EOF on its command pipe).
    """

    #: First call: starting the interpreter and importing numpy/scipy/hdrh.
    START_TIMEOUT_S = 60.0

    def __init__(self, config: ProberConfig) -> None:
        self.config = config
        self.address = as_address(config.target)
        self.process: subprocess.Popen | None = None
        self._tx = None
        self._rx = None
        self._closed = False

    def begin(self) -> None:
        first = self.process is None
        budget = self.config.timeout_s * (self.config.keys + 2) + (self.START_TIMEOUT_S if first else 5.0)
        self._call("begin", budget)

    def end(self) -> ProbeWindow:
        return self._call("end", self.config.timeout_s + 10.0)

    def close(self) -> None:
        self._closed = True
        if self.process is None:
            return
        try:
            self._tx.send("close")
            if self._rx.poll(self.config.timeout_s + 3.0):
                self._rx.recv()
        except (EOFError, OSError):
            pass
        self._abandon(grace_s=3.0)

    def _start(self) -> None:
        from multiprocessing.connection import Connection

        cmd_r, cmd_w = os.pipe()
        res_r, res_w = os.pipe()
        env = dict(os.environ)
        pkg_root = str(Path(__file__).resolve().parents[2])  # importable without an installed package
        env["PYTHONPATH"] = pkg_root + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
        try:
            self.process = subprocess.Popen(
                [
                    sys.executable,
                    "-c",
                    "from actuators.latency.prober import _serve; _serve()",
                    str(cmd_r),
                    str(res_w),
                    json.dumps(asdict(self.config)),
                ],
                pass_fds=(cmd_r, res_w),
                stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL,
                env=env,
                start_new_session=True,  # Ctrl-C goes to the parent, which closes us
            )
        except OSError as exc:
            for fd in (cmd_r, cmd_w, res_r, res_w):
                os.close(fd)
            raise HostError(f"cannot start the prober process: {exc.strerror or exc}") from None
        os.close(cmd_r)
        os.close(res_w)
        self._tx = Connection(cmd_w, readable=False)
        self._rx = Connection(res_r, writable=False)

    def _call(self, cmd: str, timeout_s: float):
        if self._closed:
            raise HostError("prober is closed")
        if self.process is None:
            self._start()
        try:
            self._tx.send(cmd)
            if not self._rx.poll(timeout_s):
                self._abandon()
                raise HostError(f"prober process did not answer {cmd!r} within {timeout_s:g} s (killed)")
            status, payload = self._rx.recv()
        except (EOFError, OSError):
            code = self.process.poll() if self.process else None
            self._abandon()
            raise HostError(f"prober process died (exit status {code}); the next begin() starts a new one") from None
        if status != "ok":
            raise HostError(payload)
        return payload

    def _abandon(self, grace_s: float = 0.0) -> None:
        proc, tx, rx = self.process, self._tx, self._rx
        self.process = self._tx = self._rx = None
        for conn in (tx, rx):
            if conn is not None:
                conn.close()
        if proc is not None:
            try:
                proc.wait(timeout=grace_s) if grace_s else None
            except subprocess.TimeoutExpired:
                pass
            if proc.poll() is None:
                proc.kill()
                proc.wait(timeout=5.0)


def _serve() -> None:
    """Child interpreter: serve begin/end/close for one `ThreadProber` until told to close or orphaned."""
    from multiprocessing.connection import Connection

    import scipy.stats  # noqa: F401 - import now, not inside the first window (it would steal the GIL)

    rx = Connection(int(sys.argv[1]), writable=False)
    tx = Connection(int(sys.argv[2]), readable=False)
    engine = ThreadProber(ProberConfig(**json.loads(sys.argv[3])))
    while True:
        try:
            cmd = rx.recv()
        except (EOFError, OSError):
            cmd = "close"  # parent gone
        try:
            if cmd == "close":
                engine.close()
                try:
                    tx.send(("ok", None))
                except OSError:
                    pass
                return
            if cmd == "begin":
                engine.begin()
                tx.send(("ok", None))
            elif cmd == "end":
                tx.send(("ok", engine.end()))
            else:
                raise HostError(f"prober: unknown command {cmd!r}")
        except HostError as exc:
            tx.send(("err", str(exc)))
        except Exception as exc:  # noqa: BLE001 - report, keep serving
            tx.send(("err", f"prober: {type(exc).__name__}: {exc}"))


class ThreadProber:
    """The probe engine: a background thread in this process (see `Prober` for the semantics)."""

    def __init__(self, config: ProberConfig, clock_ns: Callable[[], int] = time.perf_counter_ns) -> None:
        self.config = config
        self.address: MemcachedAddress = as_address(config.target)
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
            self._origin = self._clock()
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
                self._k += 1
                incomplete += 1
            self._active = False
            self._gen += 1
            hist, lag = self._hist, self._lag
            errors, last_error, timeouts, misses = self._errors, self._last_error, self._timeouts, self._misses
            intended = self._k
            seconds = (stop - self._origin) / 1e9
        if self._pin_error:
            raise HostError(f"prober: {self._pin_error}")
        if errors:
            raise HostError(
                f"memcached {self.address}: {errors} of {intended} probe requests failed in the window: {last_error}"
            )
        return self._summarise(hist, lag, seconds, intended, timeouts, incomplete, misses)

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
    def _intended(self, k: int) -> int:
        return self._origin + int(k * self._period_ns)

    def _seed(self) -> None:
        with MemcachedClient(self.address, self.config.timeout_s) as client:
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
                f"memcached {self.address}: no probe replies in a {seconds:.3f} s window at "
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
                    self._pin_error = f"cannot pin the prober to CPUs {_cpu_list(self.config.cpus)}: {exc.strerror}"
        client = MemcachedClient(self.address, self.config.timeout_s, busy_poll=self.config.busy_poll)
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
                outcome = self._request(client, k)
                done = self._clock()
                with self._cv:
                    if gen != self._gen:
                        continue  # the window this request belonged to is over
                    self._k = k + 1
                    if outcome in ("ok", "miss", "timeout"):
                        record_ns(self._hist, done - intended)
                        record_ns(self._lag, max(sent - intended, 0))
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

    def _request(self, client: MemcachedClient, k: int) -> str:
        """One probe request: 'ok', 'miss', 'timeout', or an error text."""
        key = self._keys[k % len(self._keys)]
        every = self.config.set_every
        try:
            if every and k % every == every - 1:
                client.set(key, self._value)
                return "ok"
            return "ok" if client.get(key) is not None else "miss"
        except MemcachedTimeout:
            client.close()
            return "timeout"
        except HostError as exc:
            client.close()
            return str(exc)
        except Exception as exc:  # noqa: BLE001 - never let the probe thread die silently
            client.close()
            return f"prober: {type(exc).__name__}: {exc}"


# -- standalone: run the prober anywhere (e.g. a client machine) and print the hook JSON ----------
def main(argv: list[str] | None = None) -> int:
    """`python -m actuators.latency.prober`: probe a memcached for a window and print hook JSON on stdout.

    With `--until-eof` it probes until its stdin closes, which is how `CommandLatency(mode="span")`
    drives it, locally or over ssh from the tuner host.
    """
    import argparse

    ap = argparse.ArgumentParser(prog="python -m actuators.latency.prober", description=main.__doc__.splitlines()[0])
    ap.add_argument("--target", required=True, help="memcached HOST:PORT or unix:/path (the server's NIC address)")
    ap.add_argument("--rate", type=float, default=200.0, help="probes per second (default 200)")
    ap.add_argument("--timeout", type=float, default=0.5, help="per-request timeout in s (default 0.5)")
    ap.add_argument("--keys", type=int, default=16)
    ap.add_argument("--set-every", type=int, default=0, help="every Nth probe is a set (default 0: gets only)")
    ap.add_argument("--cpus", default="", help="pin the probe loop, e.g. 3 or 2,3")
    when = ap.add_mutually_exclusive_group(required=True)
    when.add_argument("--seconds", type=float, help="probe for this long")
    when.add_argument("--until-eof", action="store_true", help="probe until stdin is closed")
    args = ap.parse_args(argv)
    try:
        cpus = tuple(int(c) for c in args.cpus.split(",") if c.strip())
    except ValueError:
        ap.error(f"--cpus {args.cpus!r}: expected CPU numbers like 2,3")
    try:
        config = ProberConfig(
            target=args.target,
            rate_hz=args.rate,
            timeout_s=args.timeout,
            keys=args.keys,
            set_every=args.set_every,
            isolation="thread",
            cpus=cpus,
        )
        engine = ThreadProber(config)
        try:
            engine.begin()
            if args.until_eof:
                sys.stdin.buffer.read()  # blocks (GIL released) until the tuner closes our stdin
            else:
                time.sleep(max(args.seconds, 0.0))  # the window itself
            window = engine.end()
        finally:
            engine.close()
    except HostError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    from actuators.latency.hook import HOOK_KEYS, hook_json

    doc = hook_json(window, time.time())
    doc.update(
        ci_achieved={HOOK_KEYS[p]: ok for p, ok in window.ci_achieved.items()},
        timeouts=window.timeouts,
        incomplete=window.incomplete,
        send_lag_p99_us=window.send_lag_p99_us,
        target=str(config.target),
        client_warnings=read_client_settings("/", cpus=cpus or None).warnings(),
    )
    print(json.dumps(doc))
    return 0


if __name__ == "__main__":
    sys.exit(main())
