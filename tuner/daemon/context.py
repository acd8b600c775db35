"""The daemon's state and the primitives every part of the control loop uses: the lock-guarded snapshot RPC
threads read, the policy in force, counters, applying a point (state marked dirty first), timed optimiser
calls, paced measurement windows, publishing decisions, and config reload."""

from __future__ import annotations

import logging
import queue
import threading
import time
from collections.abc import Callable
from dataclasses import replace
from typing import Any

from actuators.host import Host, KnobSpace, Measurement, OperatingPoint, apply_point
from core.errors import TunerError
from tuner.config import Config, PolicyConfig, load_config
from tuner.daemon.plain import ModelTable, bounded_space, measurement_dict, validate_policy
from tuner.daemon.powercurve import LoadTable
from tuner.daemon.state import DaemonState, StateStore

log = logging.getLogger("tuner.daemon.loop")  # one logger for the whole control loop (operators filter on it)


class DaemonBase:
    """State and primitives of `tuner.daemon.loop.Daemon` (see the module docstring)."""

    def __init__(
        self,
        config: Config,
        *,
        host: Host | None = None,
        optimizers: Any = None,
        notifier: Any = None,
        serve: bool = True,
    ) -> None:
        from tuner.daemon.sdnotify import Notifier

        self.config = config
        self.host: Host | None = host
        if optimizers is None:
            from tuner.daemon.worker import ProcessOptimizers

            optimizers = ProcessOptimizers()  # Ax runs in a worker process per retune (memory, isolation)
        self.optimizers = optimizers
        self.notifier = notifier or Notifier()
        self.serve = serve
        self.store = StateStore(config.state_dir)
        self.state = DaemonState()
        self.space: KnobSpace | None = None
        self.metrics: Any = None
        self.grpc: Any = None  # tuner.daemon.service.GrpcServer
        self.grpc_address: str | None = None
        self.metrics_port: int | None = None
        self._metrics_server: Any = None
        self._lock = threading.RLock()
        self._stop = threading.Event()
        self._wake = threading.Event()
        self._ready = threading.Event()
        self._finished = threading.Event()
        self._retune_request: str | None = None
        self._restart_retune = False
        self._reload_requested = False
        self._load_trigger = False
        self._loop_state = "starting"
        self._heartbeat = time.monotonic()
        self._started_at = time.time()
        self._last_measurement: dict[str, Any] | None = None
        self._current_point: OperatingPoint | None = None
        self._over_streak = 0  # holding windows in a row over the SLA at the held point, the load in its band
        self._retune_progress = (0, 0)
        self._history_trials = 0  # history trials the current/last retune's optimiser was seeded with
        self._models: dict[str, ModelTable] = {}
        self._load_table: LoadTable | None = None  # the newest retune's model over a grid of loads (power curve)
        self._open_optimizer_close: Any = None
        self._subscribers: list[queue.Queue] = []
        self._fault: str | None = None  # why tuning stopped on a permanent host fault (None: it did not)

    @property
    def live_host(self) -> Host:
        """The host, once `start()` has built it (`TunerError` before)."""
        if self.host is None:
            raise TunerError("the daemon has no host yet: start() builds it")
        return self.host

    @property
    def knob_space(self) -> KnobSpace:
        """The host's knob space within the configured bounds, once `start()` has read it (`TunerError` before)."""
        if self.space is None:
            raise TunerError("the daemon has no knob space yet: start() reads it")
        return self.space

    # ------------------------------------------------------------------ policy

    def policy(self) -> PolicyConfig:
        o = self.state.policy_override
        return PolicyConfig(**o) if o else self.config.policy

    def set_policy(self, sla_us: float | None, percentile: float | None, reward: str | None) -> PolicyConfig:
        """Validate and apply a run-time policy (unset fields keep their value); retune if it changed."""
        with self._lock:
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
            self._restart_retune = True
            self._retune_request = "policy"
            if self.metrics:
                self.metrics.set_sla(new.sla_us)
        log.info("policy set at run time: %s", new)
        self._wake.set()
        return new

    @property
    def stopping(self) -> bool:
        return self._stop.is_set()

    # ------------------------------------------------------------------ loop internals

    def _beat(self) -> None:
        self._heartbeat = time.monotonic()

    def _set_loop_state(self, name: str) -> None:
        with self._lock:
            self._loop_state = name
        if self.metrics:
            self.metrics.state.state(name)

    def _count(self, name: str, n: int = 1) -> None:
        with self._lock:
            self.state.counters[name] = int(self.state.counters.get(name, 0)) + n

    def _restore_counter(self, name: str, n: int) -> None:
        m = self.metrics
        if name == "sla_violations":  # the total; those outside the tuned band are restored by their own key
            m.violations.labels(load="steady").inc(
                max(0, n - int(self.state.counters.get("sla_violations:shifted", 0)))
            )
        elif name == "sla_violations:shifted":
            m.violations.labels(load="shifted").inc(n)
        elif name == "guardrail_reverts":
            m.reverts.inc(n)
        elif name.startswith("retunes:"):
            m.retunes.labels(reason=name.split(":", 1)[1]).inc(n)
        elif name.startswith("trials:"):
            m.trials.labels(status=name.split(":", 1)[1]).inc(n)

    def _save(self) -> None:
        with self._lock:
            self.store.save(self.state)

    def _wait(self, seconds: float, *, interruptible: bool) -> bool:
        """Sleep up to `seconds`; True if stopping. Interruptible waits also end on retune/reload requests."""
        if seconds > 0:
            (self._wake if interruptible else self._stop).wait(seconds)
        return self._stop.is_set()

    def _apply(self, point: OperatingPoint) -> OperatingPoint:
        with self._lock:
            if not self.state.knobs_dirty:
                self.state.knobs_dirty = True
                self.store.save(self.state)  # persisted before the first write, so a crash is noticed
        checked = apply_point(self.live_host, self.knob_space.check(point))
        with self._lock:
            self._current_point = checked
        self.metrics.set_point(checked)
        self._after_apply()
        return checked

    def _after_apply(self) -> None:
        """Called after every knob write (the DVFS read-back warnings are then fresh)."""

    def _timed(self, fn: Callable, *args: Any) -> Any:
        t0 = time.perf_counter()
        try:
            return fn(*args)
        finally:
            self.metrics.optimizer_seconds.observe(time.perf_counter() - t0)

    def _measure(self, seconds: float | None = None) -> tuple[Measurement, float]:
        """Measure one window (`window_s` by default), paced to wall-clock time (a simulated host returns at once)."""
        window = self.config.tuning.window_s if seconds is None else seconds
        t0 = time.monotonic()
        m = self.live_host.measure(window)
        self._wait(window - (time.monotonic() - t0), interruptible=False)
        now = time.time()
        md = measurement_dict(m, now)
        with self._lock:
            self._last_measurement = md
        self.metrics.observe(m)
        return m, now

    def _publish(self, decision: dict[str, Any]) -> None:
        with self._lock:
            subs = list(self._subscribers)
        for q in subs:
            try:
                q.put_nowait(decision)
            except queue.Full:
                pass

    def _apply_reload(self) -> None:
        if not self._reload_requested:
            return
        self._reload_requested = False
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
        with self._lock:
            if self.state.policy_override and new.policy != old.policy:
                log.info("reload: config policy changed; dropping the run-time policy from SetPolicy")
                self.state.policy_override = None
            before = (self.policy(), self.space)
            self.config = new
            self.space = space
            after = (self.policy(), self.space)
            if before != after:
                self._restart_retune = True
                self._retune_request = "config"
            self._save()
        self.metrics.set_sla(self.policy().sla_us)
        log.info("config reloaded from %s%s", path, "; retuning" if before != after else "")
