"""The control loop of `tuner daemon`: retune (schedule, load change, request), hold, guardrail, persist.

One thread (the loop) owns the host and the optimiser; RPC threads only read snapshots and post requests
under `Daemon._lock`. Every completed trial is written to the state directory (atomically, together with
the optimiser) before the next one starts; a trial interrupted by SIGTERM is abandoned, never reported.

A retune (issue 6): create the optimiser (worker process) -> warm start from the history store
(`Optimizer.add_history`, when `history.warm_start` or `tuning.context`) -> `begin_retune(offered QPS)` ->
trials (windows sized by `tuner.optimize.windowing` when `tuning.window_mode = "adaptive"`) until the budget or the
stopping rule (`should_stop`, when `tuning.stop_ei_pct > 0`) -> decision -> the retune's completed trials
are appended to the history store. Optimisers without the optional methods run as before.
"""

from __future__ import annotations

import logging
import math
import queue
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any

from actuators.host import Host, KnobSpace, Measurement, OperatingPoint, apply_point
from core.errors import InputError, TunerError
from tuner.config import ALLOWED_PERCENTILES, Config, KnobBounds, PolicyConfig, known_rewards, load_config
from tuner.daemon.state import DaemonState, StateStore

log = logging.getLogger("tuner.daemon.loop")

VERSION = "0.1.0"
#: ITR values sampled for the model's prediction table (all DVFS steps are used).
MODEL_ITR_SAMPLES = 48
#: One-sided 95 % z: a model point is recommended only if mean + Z * sem <= SLA.
MODEL_Z = 1.645
#: How many finished retunes keep a prediction table in memory.
MODEL_TABLES = 8
#: Extra seconds beyond one trial the loop may take before the watchdog stops pinging systemd.
WATCHDOG_SLACK_S = 600.0


# --------------------------------------------------------------------------------------------------
# Plain-data conversions (state and RPC both use these dicts)


def point_list(p: OperatingPoint | None) -> list | None:
    return [p.itr_us, p.dvfs_ghz] if p is not None else None


def point_from(v: Any) -> OperatingPoint | None:
    return OperatingPoint(int(v[0]), float(v[1])) if v else None


def measurement_dict(m: Measurement, when: float) -> dict[str, Any]:
    """`Measurement.to_dict` plus power and time, with the point as [itr_us, dvfs_ghz] (the state format)."""
    return {**m.to_dict(), "power_w": m.power_w, "point": point_list(m.point), "time": when}


def latency_at(md: dict[str, Any], pct: float) -> float | None:
    v = md.get("latency_us", {}).get(f"{pct:g}")
    return float(v) if v is not None else None


def latency_sem_at(md: dict[str, Any], pct: float) -> float:
    ci = md.get("latency_ci_us", {}).get(f"{pct:g}")
    return max(ci[1] - ci[0], 0.0) / (2 * 1.96) if ci else 0.0


def bounded_space(space: KnobSpace, bounds: KnobBounds) -> KnobSpace:
    """The host's knob space restricted to the configured bounds; `TunerError` if nothing is left."""
    itr = tuple(v for v in space.itr_us if bounds.itr_us[0] <= v <= bounds.itr_us[1])
    ghz = tuple(v for v in space.dvfs_ghz if bounds.dvfs_ghz[0] - 5e-4 <= v <= bounds.dvfs_ghz[1] + 5e-4)
    if not itr:
        raise TunerError(
            f"knobs.itr_us: expected bounds overlapping the host's ITR range "
            f"{space.itr_us[0]}..{space.itr_us[-1]} µs, got {list(bounds.itr_us)}"
        )
    if not ghz:
        raise TunerError(
            f"knobs.dvfs_ghz: expected bounds overlapping the host's frequencies "
            f"{space.dvfs_ghz[0]:g}..{space.dvfs_ghz[-1]:g} GHz, got {list(bounds.dvfs_ghz)}"
        )
    return KnobSpace(itr, ghz)


def safe_corner(space: KnobSpace) -> OperatingPoint:
    """Lowest latency the knobs allow: minimum interrupt delay, maximum frequency."""
    return OperatingPoint(space.itr_us[0], space.dvfs_ghz[-1])


def validate_policy(sla_us: Any, percentile: Any, reward: Any) -> PolicyConfig:
    """A policy from run-time input; `InputError` naming the first bad field."""
    if (
        isinstance(sla_us, bool)
        or not isinstance(sla_us, (int, float))
        or not math.isfinite(sla_us)
        or not 0 < sla_us <= 1e9
    ):
        raise InputError(f"sla_us: expected a finite number of microseconds in (0, 1e9], got {sla_us!r}")
    if (
        isinstance(percentile, bool)
        or not isinstance(percentile, (int, float))
        or not any(abs(percentile - p) < 1e-9 for p in ALLOWED_PERCENTILES)
    ):
        raise InputError(
            "percentile: expected one of " + ", ".join(f"{p:g}" for p in ALLOWED_PERCENTILES) + f", got {percentile!r}"
        )
    names = known_rewards()
    if reward not in names:
        raise InputError(f"reward: expected one of {', '.join(names)}, got {reward!r}")
    pct = next(p for p in ALLOWED_PERCENTILES if abs(percentile - p) < 1e-9)
    return PolicyConfig(reward=str(reward), sla_us=float(sla_us), percentile=pct)


@dataclass(frozen=True)
class PointAnswer:
    """Answer to `GetOperatingPoint`."""

    point: OperatingPoint
    latency_us: float
    latency_sem_us: float
    power_w: float
    power_sem_w: float
    from_measured: bool
    meets_sla: bool
    tuned_qps: float
    source: str
    note: str


@dataclass(frozen=True)
class ModelTable:
    """Predictions of one finished retune's model over a grid, computed once in the loop thread."""

    retune_id: str
    tuned_qps: float
    percentile: float
    points: tuple[OperatingPoint, ...]
    latency_us: tuple[float, ...]
    latency_sem: tuple[float, ...]
    power_w: tuple[float, ...]
    power_sem: tuple[float, ...]


# --------------------------------------------------------------------------------------------------


class Daemon:
    """The tuner daemon. `start()` opens state, host and servers; `run()` loops until `request_stop()`."""

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
        self._retune_progress = (0, 0)
        self._history_trials = 0  # history trials the current/last retune's optimiser was seeded with
        self._models: dict[str, ModelTable] = {}
        self._open_optimizer_close: Any = None
        self._subscribers: list[queue.Queue] = []

    # ------------------------------------------------------------------ lifecycle

    def start(self) -> None:
        """Load state, build the host, undo a dead run's knob writes, start gRPC and metrics, notify READY."""
        from tuner.daemon.metrics import DaemonMetrics, start_metrics_server
        from tuner.hosts import make_host

        self.store.ensure()
        self.state = self.store.load()
        if self.host is None:
            self.host = make_host(self.config.host.spec, **self.config.host.options)
        if self.state.knobs_dirty:
            log.warning("previous run ended with knobs changed; restoring the original ITR/DVFS first")
        self.host.restore()  # idempotent; a real host restores originals persisted by a dead process
        with self._lock:
            self.state.knobs_dirty = False
            self.store.save(self.state)
        self.space = bounded_space(self.host.knobs(), self.config.knobs)
        self.metrics = DaemonMetrics.create(VERSION, self.config.host.spec)
        self.metrics.set_sla(self.policy().sla_us)
        self.metrics.state.state("starting")
        for reason, n in self.state.counters.items():  # counters continue across restarts
            self._restore_counter(reason, n)
        if self.serve:
            if self.config.metrics_listen:
                self._metrics_server, self.metrics_port = start_metrics_server(self.metrics, self.config.metrics_listen)
            from tuner.daemon.service import GrpcServer

            self.grpc = GrpcServer(self, self.config.grpc)
            self.grpc_address = self.grpc.start()
            self.grpc.set_serving(True)
        self._ready.set()
        self.notifier.ready(f"tuner {VERSION}: host {self.config.host.spec}")
        if self.notifier.watchdog_s:
            threading.Thread(target=self._watchdog, name="tuner-watchdog", daemon=True).start()
        log.info(
            "started: host %s, state %s, grpc %s, metrics %s",
            self.config.host.spec,
            self.config.state_dir,
            self.grpc_address,
            self.metrics_port,
        )

    def run(self) -> int:
        """The loop; returns 0 after a requested stop (knobs restored). Exceptions propagate after restoring."""
        try:
            self._prepare_models()
            self._resume_held()
            while not self._stop.is_set():
                self._beat()
                self._wake.clear()
                self._apply_reload()
                reason = self._due_retune()
                if reason:
                    self._retune(reason)
                else:
                    self._hold_window()
            return 0
        finally:
            self._shutdown()

    def request_stop(self) -> None:
        """Stop now: a measurement in flight is interrupted (if the host can) and its trial abandoned."""
        self._stop.set()
        self._wake.set()
        for what in (self.host, self.optimizers):
            interrupt = getattr(what, "interrupt", None)
            if callable(interrupt):
                try:
                    interrupt()
                except Exception as exc:  # noqa: BLE001 - stopping must not fail
                    log.warning("interrupt of %s failed: %s", type(what).__name__, exc)

    def request_reload(self) -> None:
        """Re-read the config file at the next step (SIGHUP)."""
        self._reload_requested = True
        self._wake.set()

    def request_retune(self, reason: str = "rpc") -> tuple[bool, str]:
        with self._lock:
            if self._stop.is_set():
                return False, "daemon is stopping"
            # refused only while trials run: once the decision is saved (current_retune cleared) a request is
            # taken even if the loop is still finishing up (model table, worker exit)
            if self._loop_state == "retuning" and self.state.current_retune is not None and reason == "rpc":
                return False, "a retune is already running"
            self._retune_request = reason
        self._wake.set()
        return True, "retune scheduled"

    def wait_ready(self, timeout: float) -> bool:
        return self._ready.wait(timeout)

    def wait_finished(self, timeout: float) -> bool:
        return self._finished.wait(timeout)

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

    # ------------------------------------------------------------------ read side (RPC threads)

    def status(self) -> dict[str, Any]:
        with self._lock:
            s = self.state
            held = s.held or {}
            band = self.config.tuning.load_change_pct / 100
            period = self.config.tuning.retune_period_s
            cur = s.current_retune or {}
            return {
                "state": self._loop_state,
                "point": self._current_point,
                "offered_qps": (self._last_measurement or {}).get("offered_qps", 0.0),
                "last_measurement": self._last_measurement,
                "policy": self.policy(),
                "tuned_qps": s.tuned_qps,
                "band_low_qps": s.tuned_qps * (1 - band) if s.tuned_qps else 0.0,
                "band_high_qps": s.tuned_qps * (1 + band) if s.tuned_qps else 0.0,
                "retune_id": cur.get("id") or held.get("retune_id", ""),
                "retune_trials_done": self._retune_progress[0],
                "retune_trials_planned": self._retune_progress[1],
                "retune_history_trials": self._history_trials,
                "last_retune_time": s.last_retune_time,
                "next_retune_time": s.last_retune_time + period if s.last_retune_time else 0.0,
                "trials_total": int(s.counters.get("trials", 0)),
                "guardrail_reverts_total": int(s.counters.get("guardrail_reverts", 0)),
                "sla_violations_total": int(s.counters.get("sla_violations", 0)),
                "host": getattr(self.host, "name", self.config.host.spec),
                "version": VERSION,
                "uptime_s": time.time() - self._started_at,
            }

    def trials(self, limit: int = 0, retune_id: str = "") -> list[dict[str, Any]]:
        with self._lock:
            rows = [t for t in self.state.trials if not retune_id or t.get("retune_id") == retune_id]
            return [dict(t) for t in (rows[-limit:] if limit else rows)]

    def subscribe(self) -> tuple[queue.Queue, dict[str, Any] | None]:
        q: queue.Queue = queue.Queue(maxsize=256)
        with self._lock:
            self._subscribers.append(q)
            latest = self.state.decisions[-1] if self.state.decisions else None
        return q, latest

    def unsubscribe(self, q: queue.Queue) -> None:
        with self._lock:
            if q in self._subscribers:
                self._subscribers.remove(q)

    @property
    def stopping(self) -> bool:
        return self._stop.is_set()

    def operating_point(self, qps: Any, sla_us: Any = 0.0, percentile: Any = 0.0) -> PointAnswer:
        """Best known point for load `qps` under `sla_us` at `percentile` (0 = policy's); `InputError` if bad."""
        if isinstance(qps, bool) or not isinstance(qps, (int, float)) or not math.isfinite(qps) or not 0 < qps <= 1e10:
            raise InputError(f"qps: expected a finite load in (0, 1e10] requests/s, got {qps!r}")
        pol = self.policy()
        policy = validate_policy(
            pol.sla_us if not sla_us else sla_us, pol.percentile if not percentile else percentile, pol.reward
        )
        sla, pct = policy.sla_us, policy.percentile
        band = self.config.tuning.load_change_pct / 100
        with self._lock:
            trials = [t for t in self.state.trials if t.get("measurement") and t.get("status") == "completed"]
            goods = list(self.state.windows)
            models = list(self._models.values())
            space = self.space
        # 1. measured: every window (trials and holding, met or not) grouped by point, within the load band
        groups: dict[tuple, list[dict]] = {}
        for t in trials:
            md = t["measurement"]
            if abs(md["offered_qps"] - qps) <= band * qps:
                groups.setdefault(tuple(t["point"]), []).append(md)
        for g in goods:
            md = g.get("measurement")
            if md and abs(md["offered_qps"] - qps) <= band * qps:
                groups.setdefault(tuple(g["point"]), []).append(md)
        best: PointAnswer | None = None
        for key, mds in groups.items():
            lats = [latency_at(md, pct) for md in mds]
            if any(v is None for v in lats):
                continue
            lat, lat_sem = _mean_sem(lats, [latency_sem_at(md, pct) for md in mds])
            pw, pw_sem = _mean_sem([md["power_w"] for md in mds], None)
            if lat + MODEL_Z * lat_sem > sla:  # same one-sided 95 % rule as for the model
                continue
            if best is None or pw < best.power_w:
                best = PointAnswer(
                    OperatingPoint(int(key[0]), float(key[1])),
                    lat,
                    lat_sem,
                    pw,
                    pw_sem,
                    True,
                    True,
                    sum(md["offered_qps"] for md in mds) / len(mds),
                    f"{len(mds)} measured window(s)",
                    ""
                    if len(mds) > 1
                    else "one window: latency uncertainty from its order-"
                    "statistic CI; power uncertainty needs >= 2 windows (reported as 0)",
                )
        if best is not None:
            return best
        # 2. model of the retune tuned nearest to this load (only at the percentile it was trained on)
        near = sorted((m for m in models if abs(m.tuned_qps - qps) <= band * qps), key=lambda m: abs(m.tuned_qps - qps))
        note = "no measured point meets the SLA within the load band"
        for m in near:
            if abs(m.percentile - pct) > 1e-9:
                note += f"; model {m.retune_id} predicts p{m.percentile:g} only"
                continue
            idx = [i for i in range(len(m.points)) if m.latency_us[i] + MODEL_Z * m.latency_sem[i] <= sla]
            if idx:
                i = min(idx, key=lambda j: m.power_w[j])
                return PointAnswer(
                    m.points[i],
                    m.latency_us[i],
                    m.latency_sem[i],
                    m.power_w[i],
                    m.power_sem[i],
                    False,
                    True,
                    m.tuned_qps,
                    f"model of retune {m.retune_id}",
                    "predicted; upper 95% bound meets the SLA",
                )
        corner = safe_corner(space) if space else OperatingPoint(0, 0.0)
        return PointAnswer(
            corner,
            0.0,
            0.0,
            0.0,
            0.0,
            False,
            False,
            0.0,
            "safe corner",
            note + "; returning the safe corner (minimum ITR, maximum frequency)",
        )

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
        if name == "sla_violations":
            m.violations.inc(n)
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
        checked = apply_point(self.host, self.space.check(point))
        with self._lock:
            self._current_point = checked
        self.metrics.set_point(checked)
        return checked

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
        m = self.host.measure(window)
        self._wait(window - (time.monotonic() - t0), interruptible=False)
        now = time.time()
        md = measurement_dict(m, now)
        with self._lock:
            self._last_measurement = md
        self.metrics.observe(m)
        return m, now

    def _resume_held(self) -> None:
        """After a restart, put the held point back (start() restored the originals)."""
        held = self.state.held
        if held and not self.state.current_retune:
            try:
                self._apply(point_from(held["point"]))
                log.info("holding %s from %s", point_from(held["point"]), held.get("retune_id"))
            except TunerError as exc:
                log.warning("cannot re-apply held point (%s); retuning", exc)
                self.state.held = None

    def _due_retune(self) -> str | None:
        with self._lock:
            if self.state.current_retune:
                return "resume"
            if self._retune_request:
                reason, self._retune_request = self._retune_request, None
                self._restart_retune = False
                return reason
            if self.state.held is None:
                return "startup"
            if time.time() - self.state.last_retune_time >= self.config.tuning.retune_period_s:
                return "schedule"
            if self._load_trigger:
                self._load_trigger = False
                return "load"
        return None

    def _signature(self) -> dict[str, Any]:
        return {
            "policy": dict(self.policy().__dict__),
            "itr": [self.space.itr_us[0], self.space.itr_us[-1]],
            "dvfs": [self.space.dvfs_ghz[0], self.space.dvfs_ghz[-1]],
        }

    def _retune(self, reason: str) -> None:
        opt = None
        try:
            opt = self._retune_with(reason)
        except TunerError as exc:
            if self._stop.is_set():
                return  # e.g. the optimiser worker was killed by the stop: the trial in flight is abandoned
            log.error("retune failed: %s; retrying after a window (completed trials are kept)", exc)
            self._wait(max(self.config.tuning.window_s, 1.0), interruptible=True)
        finally:
            close = getattr(opt, "close", None) or getattr(self, "_open_optimizer_close", None)
            if callable(close):
                close()
            self._open_optimizer_close = None

    def _retune_with(self, reason: str) -> Any:
        tuning = self.config.tuning
        cur = self.state.current_retune
        opt = None
        if cur is not None:
            if cur.get("signature") != self._signature():
                log.info("retune %s was started under another policy/bounds; starting afresh", cur["id"])
                with self._lock:
                    self.state.current_retune = None
                    self._save()
                reason, cur = "config", None
            else:
                try:
                    opt = self._timed(self.optimizers.load, cur["optimizer"])
                except TunerError:
                    raise  # the worker died: retry later, keep the experiment
                except Exception as exc:  # noqa: BLE001 - a stale experiment must not stop the daemon
                    log.warning("cannot resume retune %s (%s); starting afresh", cur.get("id"), exc)
                    with self._lock:
                        self.state.current_retune = None
                        self._save()
                    reason, cur = "resume", None
        if cur is None:
            with self._lock:
                self.state.retune_seq += 1
                rid = f"r{self.state.retune_seq:06d}"
            opt = self._timed(
                self.optimizers.create, self.space, self.policy(), tuning, rid, tuning.seed + self.state.retune_seq
            )
            self._open_optimizer_close = getattr(opt, "close", None)
            qps = self._offered_qps()
            seeded = self._seed_history(opt, rid, qps)  # before begin_retune: history is not this retune's
            if _supports(opt, "begin_retune"):
                self._timed(opt.begin_retune, qps)
            text = self._timed(opt.to_json)
            with self._lock:
                self.state.current_retune = {
                    "id": rid,
                    "reason": reason,
                    "started": time.time(),
                    "signature": self._signature(),
                    "optimizer": text,
                    "qps": qps,
                    "history_trials": seeded,
                }
                self._history_trials = seeded
                self._save()
        else:
            with self._lock:
                self._history_trials = int(cur.get("history_trials", 0))
        self._open_optimizer_close = getattr(opt, "close", None)
        rid = self.state.current_retune["id"]
        self.metrics.retunes.labels(reason=reason).inc()
        self._count(f"retunes:{reason}")
        self._set_loop_state("retuning")
        log.info("retune %s (%s): up to %d trials", rid, reason, tuning.trials)
        while True:
            done = len(_retune_trials(opt))
            with self._lock:
                self._retune_progress = (done, tuning.trials)
            if done >= tuning.trials:
                break
            if done >= tuning.min_trials and tuning.stop_ei_pct > 0 and _supports(opt, "should_stop"):
                stop, why = self._timed(opt.should_stop)
                if stop:
                    log.info("retune %s stops after %d trials: %s", rid, done, why)
                    with self._lock:
                        self.state.current_retune["stopped"] = why
                    break
            self._beat()
            if self._stop.is_set():
                return opt
            if self._reload_requested:
                self._apply_reload()
            if self._restart_retune:
                log.info("retune %s dropped: policy or bounds changed", rid)
                self._append_history(rid)  # its measured trials are still worth remembering
                with self._lock:
                    self.state.current_retune = None
                    self._save()
                return opt
            if not self._trial(opt, rid):
                return opt  # stopping: the trial in flight is abandoned (never reported)
        self._decide(opt, rid, reason)
        return opt

    # ------------------------------------------------------------------ history (warm start)

    def _host_label(self) -> str:
        from tuner.store.history import host_label

        return host_label(str(getattr(self.host, "name", None) or self.config.host.spec))

    def _history_store(self) -> Any:
        from tuner.store.history import HistoryStore

        return HistoryStore(self.config.history_path, self.config.history.keep_trials)

    def _offered_qps(self) -> float:
        """The load a retune starts at: the host's offered QPS, else the last window's."""
        try:
            qps = float(self.host.offered_qps())
            if math.isfinite(qps) and qps >= 0:
                return qps
        except Exception as exc:  # noqa: BLE001 - a QPS source hiccup must not stop a retune
            log.warning("offered QPS unavailable (%s); using the last window's", exc)
        return float((self._last_measurement or {}).get("offered_qps") or self.state.tuned_qps or 0.0)

    def _seed_history(self, opt: Any, rid: str, qps: float) -> int:
        """Warm start: give a new retune's optimiser the stored trials it can use; returns how many it used.

        In context mode every stored trial informs the model (load is an input); otherwise only trials
        within the load band around `qps` (`tuning.load_change_pct`) do, as a model without the load as
        input would mix up loads.
        """
        if not self.config.warm_start:
            return 0
        if not _supports(opt, "add_history"):
            log.warning("retune %s: the optimiser has no add_history; starting cold", rid)
            return 0
        from tuner.store.history import in_space

        store = self._history_store()
        try:
            entries = store.read()
        except TunerError as exc:
            log.warning("retune %s: history store unreadable (%s); starting cold", rid, exc)
            return 0
        usable = in_space(entries, self.space)
        if not self.config.tuning.context:
            band = self.config.tuning.load_change_pct / 100
            usable = [e for e in usable if abs(e.record.qps - qps) <= band * qps]
        if not usable:
            log.info(
                "retune %s: no usable history trial in %s (%d stored); starting cold", rid, store.path, len(entries)
            )
            return 0
        records = [replace(e.record, index=i) for i, e in enumerate(usable)]
        used = int(self._timed(opt.add_history, records))
        log.info(
            "retune %s: warm start from %d history trial(s) (%d offered, %d stored in %s)",
            rid,
            used,
            len(records),
            len(entries),
            store.path,
        )
        return used

    def _append_history(self, rid: str) -> None:
        """Add the completed trials of retune `rid` to the history store (errors are logged, not fatal)."""
        from actuators.host import Measurement as _M
        from tuner.optimize.records import TrialRecord
        from tuner.store.history import HistoryEntry, as_objective

        entries = []
        with self._lock:
            rows = [
                t
                for t in self.state.trials
                if t.get("retune_id") == rid and t.get("status") == "completed" and t.get("measurement")
            ]
        for t in rows:
            try:
                m = _M.from_dict(t["measurement"])
                obj = as_objective(t.get("objective") or dict(self.policy().__dict__))
                rec = TrialRecord(
                    int(t["index"]),
                    point_from(t["point"]),
                    float(t["measurement"]["offered_qps"]),
                    "completed",
                    m,
                    t.get("reward"),
                    None,
                )
            except (KeyError, TypeError, ValueError, TunerError) as exc:
                log.warning("trial %s/%s not added to the history: %s", rid, t.get("index"), exc)
                continue
            entries.append(HistoryEntry(rec, t.get("host") or self._host_label(), float(t["time"]), obj))
        if not entries:
            return
        try:
            added, _ = self._history_store().add(entries)
        except TunerError as exc:
            log.warning("history store not updated: %s", exc)
            return
        log.info("history: %d trial(s) of %s added to %s", added, rid, self.config.history_path)

    def _trial_window_policy(self) -> Any:
        """The adaptive trial window (`tuner.optimize.windowing.WindowPolicy`): grown until the percentile's CI is within
        ±`window_ci_pct` %, at most `window_s`, ended after `window_min_s` once the estimate is above the
        limit the optimiser's final choice applies (as `tuner replay` does: such a point is never chosen), and
        after any chunk whose CI is wholly above the SLA (the guard)."""
        from tuner.optimize.settings import TunerSettings, met_limit_us
        from tuner.optimize.windowing import WindowPolicy

        pol = self.policy()
        # the optimiser worker builds its TunerSettings with the default sla_check / sla_margin_pct
        return WindowPolicy.from_settings(
            self.config.tuning,
            pol.percentile,
            stop_above_us=met_limit_us(pol.sla_us, TunerSettings()),
            abort_above_us=pol.sla_us if self.config.tuning.window_guard else None,
        )

    def _measure_trial(self) -> tuple[Measurement, float]:
        """A trial's window: `window_s` long, or with `tuning.window_mode = "adaptive"` the window of
        `_trial_window_policy` (`tuner.optimize.windowing.measure_window`)."""
        t = self.config.tuning
        if t.window_mode != "adaptive":
            return self._measure()
        from tuner.optimize.windowing import measure_window

        policy = self._trial_window_policy()
        t0 = time.monotonic()
        m = measure_window(self.host, policy)
        self._wait(m.seconds - (time.monotonic() - t0), interruptible=False)
        now = time.time()
        with self._lock:
            self._last_measurement = measurement_dict(m, now)
        self.metrics.observe(m)
        return m, now

    def _trial(self, opt: Any, rid: str) -> bool:
        t0 = time.monotonic()
        index, point = self._timed(opt.suggest)  # a dead worker raises TunerError -> _retune retries
        settle = None
        try:
            point = self._apply(point)
            if self.config.tuning.settle_s > 0:  # measured: its energy counts against the exploration
                settle, _ = self._measure(self.config.tuning.settle_s)
            if self._stop.is_set():
                self.metrics.trials.labels(status="abandoned").inc()
                return False
            m, when = self._measure_trial()
        except Exception as exc:
            if self._stop.is_set():  # interrupted by a stop: abandon, never report
                self.metrics.trials.labels(status="abandoned").inc()
                return False
            text = str(exc) if isinstance(exc, TunerError) else f"{type(exc).__name__}: {exc}"
            log.warning(
                "trial %s/%d at %s failed: %s", rid, index, point, text, exc_info=not isinstance(exc, TunerError)
            )
            rec = self._timed(opt.fail, index, text, settle)
            self._record_trial(opt, rid, rec, None, time.time(), "failed")
            return True
        if self._stop.is_set():
            self.metrics.trials.labels(status="abandoned").inc()
            return False
        rec = self._timed(opt.complete, index, m, m.offered_qps, settle)
        self._record_trial(opt, rid, rec, m, when, "completed")
        self.metrics.trial_seconds.observe(time.monotonic() - t0)
        return True

    def _record_trial(self, opt: Any, rid: str, rec: Any, m: Measurement | None, when: float, status: str) -> None:
        status = rec.status or status  # the optimiser may fail a window it cannot model
        qps = float(rec.qps) if rec.qps is not None and math.isfinite(rec.qps) else 0.0
        row = {
            "retune_id": rid,
            "index": int(rec.index),
            "point": point_list(rec.point),
            "qps": qps,
            "status": status,
            "measurement": measurement_dict(m, when) if m else None,
            "reward": None if rec.reward is None else float(rec.reward),
            "error": rec.error,
            "time": when,
            "objective": dict(self.policy().__dict__),
            "host": self._host_label(),
        }
        text = self._timed(opt.to_json)
        with self._lock:
            self.state.trials.append(row)
            self.state.current_retune["optimizer"] = text
            self.state.counters["trials"] = int(self.state.counters.get("trials", 0)) + 1
            self.state.counters[f"trials:{status}"] = int(self.state.counters.get(f"trials:{status}", 0)) + 1
            self._save()  # trial and experiment in one atomic write
        self.metrics.trials.labels(status=status).inc()
        log.info("trial %s/%d %s: %s", rid, row["index"], status, _describe(row, self.policy().percentile))

    def _decide(self, opt: Any, rid: str, reason: str) -> None:
        try:
            d = self._timed(opt.best)
            point, met, detail = d.point, bool(d.met_sla), str(d.reason)
            mdict = measurement_dict(d.measurement, time.time()) if d.measurement else None
        except Exception as exc:  # noqa: BLE001 - e.g. every trial failed
            point, met, detail, mdict = safe_corner(self.space), False, f"no decision ({exc}); safe corner", None
        point = self._apply(point)
        qps_values = [t.qps for t in _retune_trials(opt) if t.status == "completed"]
        tuned = sum(qps_values) / len(qps_values) if qps_values else 0.0
        pol = self.policy()
        cur = self.state.current_retune or {}
        decision = {
            "retune_id": rid,
            "reason": reason,
            "point": point_list(point),
            "met_sla": met,
            "detail": detail,
            "qps": tuned,
            "time": time.time(),
            "measurement": mdict,
            "percentile": pol.percentile,
            "sla_us": pol.sla_us,
            "reward": pol.reward,
            "trials": len(qps_values),
            "history_trials": int(cur.get("history_trials", 0)),
        }
        if cur.get("stopped"):
            decision["stopped"] = cur["stopped"]
        self._append_history(rid)
        text = self._timed(opt.to_json)
        with self._lock:
            self.store.save_experiment(self.state, rid, text)
            self.state.current_retune = None
            self.state.held = decision
            self.state.tuned_qps = tuned
            self.state.last_retune_time = decision["time"]
            self.state.decisions.append(decision)
            self._load_trigger = False
            self._save()
        self.metrics.last_retune.set(decision["time"])
        log.info("decision %s (%s): %s, met SLA: %s, tuned for %.0f QPS -- %s", rid, reason, point, met, tuned, detail)
        self._publish(decision)
        self._model_table(rid, opt, tuned, pol.percentile)

    def _publish(self, decision: dict[str, Any]) -> None:
        with self._lock:
            subs = list(self._subscribers)
        for q in subs:
            try:
                q.put_nowait(decision)
            except queue.Full:
                pass

    def _hold_window(self) -> None:
        self._set_loop_state("holding")
        try:
            m, when = self._measure()
        except Exception as exc:
            if self._stop.is_set():
                return
            log.warning("measurement failed while holding: %s", exc, exc_info=not isinstance(exc, TunerError))
            self._wait(self.config.tuning.window_s, interruptible=True)
            return
        self._note_window(m, when)
        pol = self.policy()
        lat = m.latency_us.get(pol.percentile)
        margin = self.config.tuning.guardrail_margin_pct / 100
        if lat is not None and lat > pol.sla_us:
            self.metrics.violations.inc()
            self._count("sla_violations")
        if lat is not None and lat > pol.sla_us * (1 + margin):
            self._guardrail(m, when, lat, pol)
        tuned = self.state.tuned_qps
        band = self.config.tuning.load_change_pct / 100
        if tuned > 0 and abs(m.offered_qps - tuned) > band * tuned:
            log.info("load %.0f QPS left the band %.0f ± %g%%: retuning", m.offered_qps, tuned, band * 100)
            with self._lock:
                self._load_trigger = True
        else:
            with self._lock:
                self.state.counters.setdefault("windows", 0)
                self.state.counters["windows"] += 1

    def _note_window(self, m: Measurement, when: float) -> None:
        """Keep a holding window (met the SLA or not) for `GetOperatingPoint` and the guardrail."""
        if m.point is None:
            return
        with self._lock:
            self.state.windows.append(
                {
                    "point": point_list(m.point),
                    "qps": m.offered_qps,
                    "measurement": measurement_dict(m, when),
                    "time": when,
                }
            )
            if len(self.state.windows) % 20 == 0:
                self._save()

    def fallback_point(self, qps: float, exclude: OperatingPoint | None) -> tuple[OperatingPoint, str]:
        """The most recent point measured meeting the SLA at a load >= `qps` (−5 %), else the safe corner."""
        pol = self.policy()
        with self._lock:
            seen = [
                {
                    "point": t["point"],
                    "qps": t["measurement"]["offered_qps"],
                    "measurement": t["measurement"],
                    "time": t["time"],
                }
                for t in self.state.trials
                if t.get("status") == "completed" and t.get("measurement")
            ] + list(self.state.windows)
        goods = sorted(seen, key=lambda g: g["time"])
        for g in reversed(goods):
            p = point_from(g["point"])
            lat = latency_at(g.get("measurement") or {}, pol.percentile)
            if p == exclude or lat is None or lat > pol.sla_us or g["qps"] < 0.95 * qps:
                continue
            try:
                return self.space.check(p), f"met the SLA at {g['qps']:.0f} QPS ({lat:.0f} µs)"
            except TunerError:
                continue
        return safe_corner(self.space), "safe corner (minimum ITR, maximum frequency)"

    def _guardrail(self, m: Measurement, when: float, lat: float, pol: PolicyConfig) -> None:
        point, why = self.fallback_point(m.offered_qps, self._current_point)
        if point == self._current_point:
            log.warning(
                "guardrail: p%g %.0f µs > SLA %.0f µs but already at %s", pol.percentile, lat, pol.sla_us, point
            )
            return
        point = self._apply(point)
        decision = {
            "retune_id": (self.state.held or {}).get("retune_id", ""),
            "reason": "guardrail",
            "point": point_list(point),
            "met_sla": False,
            "detail": f"p{pol.percentile:g} {lat:.0f} µs > SLA {pol.sla_us:.0f} µs + "
            f"{self.config.tuning.guardrail_margin_pct:g}% at {m.offered_qps:.0f} QPS; "
            f"reverted to {point}: {why}",
            "qps": m.offered_qps,
            "time": time.time(),
            "measurement": measurement_dict(m, when),
        }
        with self._lock:
            self.state.held = {**decision, "met_sla": True}
            self.state.decisions.append(decision)
            self.state.counters["guardrail_reverts"] = int(self.state.counters.get("guardrail_reverts", 0)) + 1
            self._save()
        self.metrics.reverts.inc()
        log.warning("guardrail: %s", decision["detail"])
        self._publish(decision)

    def _apply_reload(self) -> None:
        if not self._reload_requested:
            return
        self._reload_requested = False
        path = self.config.path
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
            space = bounded_space(self.host.knobs(), new.knobs)
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

    # ------------------------------------------------------------------ models for GetOperatingPoint

    def _prepare_models(self) -> None:
        """Load the prediction tables of the last retunes (plain JSON: no optimiser needed)."""
        for rid in list(self.state.experiments)[-MODEL_TABLES:]:
            data = self.store.load_table(rid)
            if not data:
                continue
            try:
                table = ModelTable(
                    rid,
                    float(data["tuned_qps"]),
                    float(data["percentile"]),
                    tuple(OperatingPoint(int(a), float(b)) for a, b in data["points"]),
                    *(tuple(float(v) for v in data[k]) for k in ("latency_us", "latency_sem", "power_w", "power_sem")),
                )
            except (KeyError, TypeError, ValueError) as exc:
                log.warning("ignoring the prediction table of %s: %s", rid, exc)
                continue
            with self._lock:
                self._models[rid] = table

    def _model_table(self, rid: str, opt: Any, tuned_qps: float, pct: float) -> None:
        """Predict over a grid once (in the loop thread) so `GetOperatingPoint` never runs the model."""
        space = self.space
        step = max(1, len(space.itr_us) // MODEL_ITR_SAMPLES)
        itrs = sorted(set(space.itr_us[::step]) | {space.itr_us[-1]})
        points = [OperatingPoint(i, f) for i in itrs for f in space.dvfs_ghz]
        try:
            preds = self._timed(opt.predict, points)
        except Exception as exc:  # noqa: BLE001 - no model yet (e.g. too few trials)
            log.info("no model predictions for %s: %s", rid, exc)
            return
        table = ModelTable(
            rid,
            tuned_qps,
            float(pct),
            tuple(points),
            tuple(p.latency_us for p in preds),
            tuple(p.latency_sem for p in preds),
            tuple(p.power_w for p in preds),
            tuple(p.power_sem for p in preds),
        )
        self.store.save_table(
            rid,
            {
                "tuned_qps": tuned_qps,
                "percentile": pct,
                "points": [[p.itr_us, p.dvfs_ghz] for p in points],
                "latency_us": table.latency_us,
                "latency_sem": table.latency_sem,
                "power_w": table.power_w,
                "power_sem": table.power_sem,
            },
        )
        with self._lock:
            self._models[rid] = table
            for old in list(self._models)[:-MODEL_TABLES]:
                del self._models[old]

    # ------------------------------------------------------------------ shutdown

    def _watchdog(self) -> None:
        interval = self.notifier.watchdog_s / 2
        limit = self.config.tuning.window_s + self.config.tuning.settle_s + WATCHDOG_SLACK_S
        while not self._finished.wait(interval):
            if time.monotonic() - self._heartbeat < limit:
                self.notifier.watchdog()
            else:
                log.error(
                    "control loop stuck for %.0f s; withholding the watchdog ping", time.monotonic() - self._heartbeat
                )

    def _shutdown(self) -> None:
        self._set_loop_state("stopping")
        self.notifier.stopping()
        try:
            if self.grpc is not None:
                self.grpc.set_serving(False)
            if self.host is not None:
                self.host.restore()
                with self._lock:
                    self._current_point = None
                    self.state.knobs_dirty = False
                    self._save()
                if self.metrics:
                    self.metrics.set_point(None)
                log.info("original ITR/DVFS restored")
                close = getattr(self.host, "close", None)
                if callable(close):
                    close()
        finally:
            if self.grpc is not None:
                self.grpc.stop()
            if self._metrics_server is not None:
                self._metrics_server.shutdown()
                self._metrics_server.server_close()
            self.store.release()
            self._finished.set()


def _supports(opt: Any, name: str) -> bool:
    """Whether optimiser `opt` (in process, or a worker proxy) has the optional method `name`."""
    check = getattr(opt, "supports", None)
    return bool(check(name)) if callable(check) else callable(getattr(opt, name, None))


def _retune_trials(opt: Any) -> list[Any]:
    """The current retune's trials (history attached by warm start excluded)."""
    return opt.retune_trials() if _supports(opt, "retune_trials") else opt.trials()


def _mean_sem(values: list[float], sems: list[float] | None) -> tuple[float, float]:
    n = len(values)
    mean = sum(values) / n
    if n > 1:
        var = sum((v - mean) ** 2 for v in values) / (n - 1)
        return mean, math.sqrt(var / n)
    return mean, (sems[0] if sems else 0.0)


def _describe(row: dict[str, Any], pct: float) -> str:
    md = row.get("measurement")
    p = point_from(row["point"])
    if not md:
        return f"{p}: {row.get('error')}"
    lat = latency_at(md, pct)
    return f"{p}: {md['offered_qps']:.0f} QPS, p{pct:g} {lat:.0f} µs, {md['power_w']:.1f} W"


__all__ = ["Daemon", "PointAnswer", "bounded_space", "safe_corner", "validate_policy"]
