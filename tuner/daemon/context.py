"""What the parts of the control loop share (`LoopContext`): the config, host, knob space, state and its store,
metrics and the lock RPC threads read under; the requests posted to the loop; and the primitives every part
uses -- the policy in force, counters, applying a point (state marked dirty first), timed optimiser calls,
paced measurement windows, publishing decisions (`DecisionFeed`), and config reload."""

from __future__ import annotations

import logging
import queue
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any

from actuators.host import Host, KnobSpace, Measurement, OperatingPoint, apply_point
from core.errors import TunerError
from tuner.config import Config, PolicyConfig, load_config
from tuner.daemon.metrics import DaemonMetrics
from tuner.daemon.plain import bounded_space, measurement_dict, validate_policy
from tuner.daemon.state import DaemonState, StateStore

log = logging.getLogger("tuner.daemon.loop")  # one logger for the whole control loop (operators filter on it)


@dataclass
class Requests:
    """What RPC threads, signals and the parts ask of the loop; read and cleared by the loop under the lock."""

    #: Reason of a requested retune (rpc, policy, config), None when none is asked for.
    retune: str | None = None
    #: The retune in progress is to be dropped (policy or bounds changed).
    restart_retune: bool = False
    #: Re-read the config file at the next step (SIGHUP).
    reload: bool = False
    #: The load left the band (or came back from idle): retune at the next step.
    load: bool = False


@dataclass
class RetuneProgress:
    """The current (or last) retune's trials done and planned, and the history trials it was seeded with."""

    done: int = 0
    planned: int = 0
    history_trials: int = 0


class DecisionFeed:
    """Decisions published to `WatchDecisions` streams: one bounded queue per subscriber, never blocking."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._subscribers: list[queue.Queue] = []

    def subscribe(self) -> queue.Queue:
        q: queue.Queue = queue.Queue(maxsize=256)
        with self._lock:
            self._subscribers.append(q)
        return q

    def unsubscribe(self, q: queue.Queue) -> None:
        with self._lock:
            if q in self._subscribers:
                self._subscribers.remove(q)

    def publish(self, decision: dict[str, Any]) -> None:
        with self._lock:
            subs = list(self._subscribers)
        for q in subs:
            try:
                q.put_nowait(decision)
            except queue.Full:
                pass

    def __len__(self) -> int:
        with self._lock:
            return len(self._subscribers)


class LoopContext:
    """The control loop's shared state and primitives (see the module docstring)."""

    def __init__(self, config: Config, metrics: DaemonMetrics, *, host: Host | None = None, mode: str = "tune") -> None:
        self.config = config
        self.host: Host | None = host
        self.metrics = metrics
        self.mode = mode  # tune | observe | dry_run
        self.store = StateStore(config.state_dir)
        self.state = DaemonState()
        self.space: KnobSpace | None = None
        self.lock = threading.RLock()
        self.stop = threading.Event()
        self.wake = threading.Event()
        self.requests = Requests()
        self.progress = RetuneProgress()
        self.feed = DecisionFeed()
        self.loop_state = "starting"
        self.current_point: OperatingPoint | None = None
        self.last_measurement: dict[str, Any] | None = None
        #: When the loop last made progress (the systemd watchdog pings only while it does).
        self.heartbeat = time.monotonic()
        #: Called after every knob write (the DVFS read-back warnings are then fresh).
        self.on_apply: list[Callable[[], None]] = []
        #: Called after every measured window (an energy source dropped mid-run is said at once).
        self.on_measure: list[Callable[[], None]] = []

    @property
    def live_host(self) -> Host:
        """The host, once `Daemon.start()` has built it (`TunerError` before)."""
        if self.host is None:
            raise TunerError("the daemon has no host yet: start() builds it")
        return self.host

    @property
    def knob_space(self) -> KnobSpace:
        """The host's knob space within the configured bounds, once `Daemon.start()` has read it."""
        if self.space is None:
            raise TunerError("the daemon has no knob space yet: start() reads it")
        return self.space

    @property
    def observing(self) -> bool:
        """Observe mode, or a dry run (which measures like observe mode and records no trial)."""
        return self.mode != "tune"

    # ------------------------------------------------------------------ policy

    def policy(self) -> PolicyConfig:
        o = self.state.policy_override
        return PolicyConfig(**o) if o else self.config.policy

    def set_policy(self, sla_us: float | None, percentile: float | None, reward: str | None) -> PolicyConfig:
        """Validate and apply a run-time policy (unset fields keep their value); retune if it changed."""
        with self.lock:
            cur = self.policy()
            new = validate_policy(
                cur.sla_us if sla_us is None else sla_us,
                cur.percentile if percentile is None else percentile,
                cur.reward if reward is None else reward,
            )
            if new == cur:
                return cur
            self.state.policy_override = dict(new.__dict__)
            self.state.policy_override_base = dict(self.config.policy.__dict__)
            self.store.save(self.state)
            self.requests.restart_retune = True
            self.requests.retune = "policy"
            self.metrics.set_sla(new.sla_us)
        log.info("policy set at run time: %s", new)
        self.wake.set()
        return new

    # ------------------------------------------------------------------ primitives

    def beat(self) -> None:
        """The loop is making progress."""
        self.heartbeat = time.monotonic()

    def set_loop_state(self, name: str) -> None:
        with self.lock:
            self.loop_state = name
        self.metrics.state.state(name)

    def count(self, name: str, n: int = 1) -> None:
        with self.lock:
            self.state.counters[name] = int(self.state.counters.get(name, 0)) + n

    def save(self) -> None:
        with self.lock:
            self.store.save(self.state)

    def wait(self, seconds: float, *, interruptible: bool) -> bool:
        """Sleep up to `seconds`; True if stopping. Interruptible waits also end on retune/reload requests."""
        if seconds > 0:
            (self.wake if interruptible else self.stop).wait(seconds)
        return self.stop.is_set()

    def apply(self, point: OperatingPoint) -> OperatingPoint:
        """Write `point` to the host (checked against the knob space); the state is marked dirty first."""
        with self.lock:
            if not self.state.knobs_dirty:
                self.state.knobs_dirty = True
                self.store.save(self.state)  # persisted before the first write, so a crash is noticed
        checked = apply_point(self.live_host, self.knob_space.check(point))
        self.set_point(checked)
        for hook in self.on_apply:
            hook()
        return checked

    def set_point(self, point: OperatingPoint | None) -> None:
        """The point the knobs hold now (None: the OS's own settings)."""
        with self.lock:
            self.current_point = point
        self.metrics.set_point(point)

    def timed(self, fn: Callable, *args: Any) -> Any:
        """`fn(*args)`, its time observed as optimiser time."""
        t0 = time.perf_counter()
        try:
            return fn(*args)
        finally:
            self.metrics.optimizer_seconds.observe(time.perf_counter() - t0)

    def measure(self, seconds: float | None = None) -> tuple[Measurement, float]:
        """Measure one window (`window_s` by default), paced to wall-clock time (a simulated host returns at once)."""
        window = self.config.tuning.window_s if seconds is None else seconds
        t0 = time.monotonic()
        m = self.live_host.measure(window)
        self.wait(window - (time.monotonic() - t0), interruptible=False)
        return self.measured(m)

    def measured(self, m: Measurement) -> tuple[Measurement, float]:
        """Note a window just measured (last measurement, metrics); (it, when)."""
        now = time.time()
        md = measurement_dict(m, now)
        with self.lock:
            self.last_measurement = md
        self.metrics.observe(m)
        for hook in self.on_measure:
            hook()
        return m, now

    # ------------------------------------------------------------------ reload

    def apply_reload(self) -> None:
        """Re-read the config file if a reload was requested; a bad file keeps the running config."""
        if not self.requests.reload:
            return
        self.requests.reload = False
        path = self.config.path
        if path is None:
            log.error("reload ignored: the running config was not read from a file")
            return
        try:
            new = load_config(path)
        except TunerError as exc:
            for line in str(exc).splitlines():
                log.error("reload rejected, keeping the running config: %s", line)
            return
        old = self.config
        fixed = {"host": "host", "state_dir": "state.dir", "grpc": "grpc", "metrics_listen": "metrics.listen"}
        for attr, key in fixed.items():
            if getattr(new, attr) != getattr(old, attr):
                log.warning("reload: %s changed; it takes effect after a restart", key)
                new = replace(new, **{attr: getattr(old, attr)})
        try:
            space = bounded_space(self.live_host.knobs(), new.knobs) if self.space is not None else None
        except TunerError as exc:
            log.error("reload rejected, keeping the running config: %s: %s", path, exc)
            return
        with self.lock:
            if self.state.policy_override and new.policy != old.policy:
                log.info("reload: config policy changed; dropping the run-time policy from SetPolicy")
                self.state.policy_override = None
            before = (self.policy(), self.space)
            self.config = new
            self.space = space
            after = (self.policy(), self.space)
            if before != after:
                self.requests.restart_retune = True
                self.requests.retune = "config"
            self.save()
        self.metrics.set_sla(self.policy().sla_us)
        log.info("config reloaded from %s%s", path, "; retuning" if before != after else "")
