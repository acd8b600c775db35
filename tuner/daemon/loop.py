"""The control loop of `tuner daemon`: retune (schedule, load change, request), hold, guardrail, persist.

One thread (the loop) owns the host and the optimiser; RPC threads only read snapshots and post requests
under the shared lock (`tuner.daemon.context`). Every completed trial is written to the state directory (atomically, together with
the optimiser) before the next one starts; a trial interrupted by SIGTERM is abandoned, never reported.

A retune (`tuner.daemon.retune_driver`): create the optimiser (a worker process, started on its own thread while the
loop keeps measuring with the guardrail on) -> warm start from the history store
(`Optimizer.add_history`, when `history.warm_start` or `tuning.context`) -> `begin_retune(offered QPS)` ->
trials (windows sized by `tuner.optimize.windowing` when `tuning.window_mode = "adaptive"`) until the budget or the
stopping rule (`should_stop`, when `tuning.stop_ei_pct > 0`) -> decision -> the retune's completed trials
are appended to the history store. Optimisers without the optional methods run as before.

Faults (docs/daemon.md, "Faults at run time"): a transient one fails the trial or retries the retune with a
capped exponential back-off on the same worker; a permanent one (`core.errors.is_permanent`) ends tuning once:
the OS's settings are restored and the daemon stays up as `degraded` (`_degrade`).
"""

from __future__ import annotations

import logging
import threading
import time
from typing import Any

from actuators.abilities import AtomicApply, Closable, Interruptible
from actuators.host import Host, KnobSpace, OperatingPoint
from core.errors import HostError, TunerError, is_permanent
from core.memory import HeapTrimmer
from tuner.config import Config, PolicyConfig
from tuner.daemon.context import LoopContext
from tuner.daemon.guardrail import Guardrail
from tuner.daemon.host_warnings import HostWarnings
from tuner.daemon.metrics import DaemonMetrics
from tuner.daemon.model_tables import ModelTables
from tuner.daemon.observer import Observer
from tuner.daemon.plain import VERSION, bounded_space
from tuner.daemon.powercurve import Curve
from tuner.daemon.retune_driver import RetuneDriver
from tuner.daemon.state import DaemonState, StateStore
from tuner.daemon.status_reader import DaemonStatus, PointAnswer, StatusReader
from tuner.daemon.trial_history import TrialHistory

log = logging.getLogger("tuner.daemon.loop")  # one logger for the whole control loop (operators filter on it)

#: Extra seconds beyond one trial the loop may take before the watchdog stops pinging systemd.
WATCHDOG_SLACK_S = 600.0


class Daemon:
    """The tuner daemon. `start()` opens state, host and servers; `run()` loops until `request_stop()`.

    It owns the parts and wires them over one `LoopContext` (`ctx`): `observer` (baseline bands, savings),
    `warnings` (what limits the host), `models` (prediction tables), `guardrail` (holding a point),
    `history` (the trial store), `retune_driver` (retunes) and `reader` (what RPCs read); this class adds the
    lifecycle and the loop itself.
    """

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
        from tuner.daemon.startup import is_dry_run

        if optimizers is None:
            from tuner.daemon.worker import ProcessOptimizers

            optimizers = ProcessOptimizers()  # Ax runs in a worker process per retune (memory, isolation)
        self.optimizers = optimizers
        self.notifier = notifier or Notifier()
        self.serve = serve
        mode = "dry_run" if is_dry_run(config.host.options) else config.host.mode
        metrics = DaemonMetrics.create(VERSION, config.host.spec, mode)
        self.ctx = LoopContext(config, metrics, host=host, mode=mode)
        self.warnings = HostWarnings(self.ctx)
        self.ctx.on_apply.append(self.warnings.refresh)
        self.ctx.on_measure.append(self.warnings.refresh)
        self.observer = Observer(self.ctx)
        self.models = ModelTables(self.ctx)
        self.guardrail = Guardrail(self.ctx, self.observer, self.models)
        self.history = TrialHistory(self.ctx)
        self.retune_driver = RetuneDriver(self.ctx, optimizers, self.history, self.guardrail, self.models)
        self.reader = StatusReader(self.ctx, self.observer, self.warnings, self.models)
        self.grpc: Any = None  # tuner.daemon.service.GrpcServer
        self.grpc_address: str | None = None
        self.metrics_port: int | None = None
        self._metrics_server: Any = None
        self._ready = threading.Event()
        self._finished = threading.Event()
        self._fault: str | None = None  # why tuning stopped on a permanent host fault (None: it did not)

    # ------------------------------------------------------------------ what the parts share, for callers

    @property
    def config(self) -> Config:
        return self.ctx.config

    @property
    def host(self) -> Host | None:
        return self.ctx.host

    @property
    def space(self) -> KnobSpace | None:
        return self.ctx.space

    @property
    def state(self) -> DaemonState:
        return self.ctx.state

    @property
    def store(self) -> StateStore:
        return self.ctx.store

    @property
    def metrics(self) -> DaemonMetrics:
        return self.ctx.metrics

    @property
    def mode_label(self) -> str:
        """tune | observe | dry_run."""
        return self.ctx.mode

    @property
    def observing(self) -> bool:
        return self.ctx.observing

    @property
    def stopping(self) -> bool:
        return self.ctx.stop.is_set()

    # ------------------------------------------------------------------ what RPCs call (`service.DaemonApi`)

    def status(self) -> DaemonStatus:
        return self.reader.status()

    def trials(self, limit: int = 0, retune_id: str = "") -> list[dict[str, Any]]:
        return self.reader.trials(limit, retune_id)

    def subscribe(self) -> tuple[Any, dict[str, Any] | None]:
        """A queue of the decisions to come, and the latest one (None before the first)."""
        with self.ctx.lock:
            return self.ctx.feed.subscribe(), self.reader.latest_decision()

    def unsubscribe(self, q: Any) -> None:
        self.ctx.feed.unsubscribe(q)

    def operating_point(self, qps: Any, sla_us: Any = 0.0, percentile: Any = 0.0) -> PointAnswer:
        return self.reader.operating_point(qps, sla_us, percentile)

    def power_curve(
        self, sla_us: Any = 0.0, percentile: Any = 0.0, qps_min: Any = 0.0, qps_max: Any = 0.0, points: Any = 0
    ) -> Curve:
        return self.reader.power_curve(sla_us, percentile, qps_min, qps_max, points)

    def fleet_view(self, sla_us: Any = 0.0, percentile: Any = 0.0, band_pct: Any = 0.0, hw_class: str = "") -> Any:
        return self.history.fleet_view(sla_us, percentile, band_pct, hw_class)

    def policy(self) -> PolicyConfig:
        return self.ctx.policy()

    def set_policy(self, sla_us: float | None, percentile: float | None, reward: str | None) -> PolicyConfig:
        return self.ctx.set_policy(sla_us, percentile, reward)

    # ------------------------------------------------------------------ lifecycle

    def start(self) -> None:
        """Load state, build the host, undo a dead run's knob writes, start gRPC and metrics, notify READY."""
        from tuner.daemon.startup import build_host

        ctx = self.ctx
        ctx.store.ensure()
        ctx.state = ctx.store.load()
        if self.serve:
            from tuner.daemon.service import check_listen_free

            check_listen_free(ctx.config.grpc.listen)  # before the host is touched: another daemon may own it
        if ctx.host is None:
            ctx.host = build_host(ctx.config)  # start-up checks: StartupError listing every problem
        if ctx.state.knobs_dirty:
            log.warning("previous run ended with knobs changed; restoring the original ITR/DVFS first")
        ctx.host.restore()  # idempotent; a real host restores originals persisted by a dead process
        with ctx.lock:
            ctx.state.knobs_dirty = False
            ctx.store.save(ctx.state)
        ctx.space = None if ctx.mode == "observe" else bounded_space(ctx.host.knobs(), ctx.config.knobs)
        self.observer.load()
        self.warnings.refresh({"startup": self._mode_warnings()})
        ctx.metrics.set_sla(ctx.policy().sla_us)
        ctx.metrics.state.state("starting")
        ctx.metrics.restore_counters(ctx.state.counters)  # counters continue across restarts
        if self.serve:
            self._start_servers()
        self._ready.set()
        self.notifier.ready(f"tuner {VERSION}: host {ctx.config.host.spec}")
        if self.notifier.watchdog_s:
            threading.Thread(target=self._watchdog, name="tuner-watchdog", daemon=True).start()
        log.info(
            "started: host %s, state %s, grpc %s, metrics %s",
            ctx.config.host.spec,
            ctx.config.state_dir,
            self.grpc_address,
            self.metrics_port,
        )

    def _start_servers(self) -> None:
        from tuner.daemon.metrics import start_metrics_server
        from tuner.daemon.service import GrpcServer

        if self.ctx.config.metrics_listen:
            self._metrics_server, self.metrics_port = start_metrics_server(
                self.ctx.metrics, self.ctx.config.metrics_listen
            )
        self.grpc = GrpcServer(self, self.ctx.config.grpc)
        self.grpc_address = self.grpc.start()
        self.grpc.set_serving(True)

    def _mode_warnings(self) -> list[str]:
        if self.ctx.mode == "dry_run":
            lines = [
                "DRY RUN (host option dry_run = true): no knob is written; the daemon measures at the OS's own "
                "settings like observe mode, records no trial and writes no history"
            ]
            if self.ctx.space is not None:  # show what a tuning run's first write would be
                from tuner.daemon.plain import safe_corner

                corner = safe_corner(self.ctx.space)
                if isinstance(self.ctx.host, AtomicApply):  # dry run: logged, not made
                    self.ctx.host.apply(itr_us=corner.itr_us, dvfs_ghz=corner.dvfs_ghz)
                    lines.append(f"dry run: the writes a tuning run would make for {corner} are logged above")
            return lines
        if self.ctx.mode == "observe":
            log.info(
                "observe mode: measuring QPS, latency and energy at the OS's own settings; no knob is written and "
                "no trial recorded; the per-load-band baseline goes to %s",
                self.ctx.store.dir / "baseline.json",
            )
        return []

    def run(self) -> int:
        """The loop; returns 0 after a requested stop (knobs restored). Exceptions propagate after restoring;
        a permanent host fault (`core.errors.is_permanent`) stops tuning instead (`_degrade`)."""
        try:
            try:
                self._loop()
            except HostError as exc:
                if not is_permanent(exc) or self.ctx.stop.is_set():
                    raise
                self._degrade(exc)
                self._degraded_loop()
            return 0
        finally:
            self._shutdown()

    def _loop(self) -> None:
        trimmer = HeapTrimmer()  # RSS tracks what the daemon holds, not what glibc's arenas kept (core.memory)
        if self.observing:
            while not self.ctx.stop.is_set():
                self.ctx.beat()
                trimmer.maybe()
                self.ctx.wake.clear()
                self.ctx.apply_reload()
                self.observer.observe_window()
            return
        self.models.prepare()
        self._resume_held()
        while not self.ctx.stop.is_set():
            self.ctx.beat()
            trimmer.maybe()
            self.ctx.wake.clear()
            self.ctx.apply_reload()
            reason = self._due_retune()
            if reason:
                self.retune_driver.retune(reason)
            elif self.observer.baseline_due():
                self.observer.baseline_window()
            else:
                self.guardrail.hold_window()

    # ------------------------------------------------------------------ permanent faults

    def _degrade(self, exc: HostError) -> None:
        """A fault retrying cannot fix (the NIC lost coalescing, a cpufreq file is gone, a capability was
        dropped): restore the OS's settings, stop retuning, and say why -- once in the log, in GetStatus
        (state `degraded` and a warning), as `tuner_degraded 1` and in systemd's STATUS=. The daemon keeps
        serving and keeps measuring at the OS's settings; a restart (after fixing the host) tunes again."""
        why = f"tuning stopped on a permanent host fault: {exc}"
        self._fault = why
        log.error("%s; restoring the OS's ITR/DVFS; restart the daemon once the host is fixed", why)
        self.retune_driver.drop_kept()
        self.ctx.set_point(None)  # the daemon holds no point from now on, whatever the restore manages
        try:
            if self.ctx.host is not None:
                self.ctx.host.restore()
            with self.ctx.lock:
                self.ctx.state.knobs_dirty = False
                self.ctx.save()
        except Exception as restore_exc:  # noqa: BLE001 - still degraded; the stop and a restart retry it
            log.error("restoring the OS's ITR/DVFS failed too: %s", restore_exc)
        self.ctx.metrics.degraded.set(1)
        self.warnings.refresh({"fault": [why]})
        self.ctx.set_loop_state("degraded")  # last: a reader seeing this state sees the reason too
        self.notifier.status(f"degraded: {why}")

    def _degraded_loop(self) -> None:
        """Measure windows at the OS's settings (exported like observe mode) until stopped; a measurement that
        fails permanently is logged once and not tried again."""
        measuring = True
        while not self.ctx.stop.is_set():
            self.ctx.beat()
            self.ctx.wake.clear()
            if self.ctx.requests.reload:
                self.ctx.requests.reload = False
                log.warning("reload ignored while degraded: restart the daemon once the host is fixed")
            if not measuring:
                self.ctx.wait(self.ctx.config.tuning.window_s, interruptible=True)
                continue
            try:
                m, _ = self.ctx.measure()
            except Exception as exc:  # noqa: BLE001 - a sensor fault must not end the degraded loop
                if self.ctx.stop.is_set():
                    return
                measuring = not is_permanent(exc)
                log.warning("measurement failed while degraded: %s%s", exc, "" if measuring else "; not retried")
                self.ctx.wait(self.ctx.config.tuning.window_s, interruptible=True)
                continue
            if m.point is None:  # the OS's own settings: a baseline window
                self.observer.record_baseline(m)

    def request_stop(self) -> None:
        """Stop now: a measurement in flight is interrupted (if the host can) and its trial abandoned."""
        self.ctx.stop.set()
        self.ctx.wake.set()
        for what in (self.ctx.host, self.optimizers):
            if isinstance(what, Interruptible):
                try:
                    what.interrupt()
                except Exception as exc:  # noqa: BLE001 - stopping must not fail
                    log.warning("interrupt of %s failed: %s", type(what).__name__, exc)

    def request_reload(self) -> None:
        """Re-read the config file at the next step (SIGHUP)."""
        self.ctx.requests.reload = True
        self.ctx.wake.set()

    def request_retune(self, reason: str = "rpc") -> tuple[bool, str]:
        with self.ctx.lock:
            if self.ctx.stop.is_set():
                return False, "daemon is stopping"
            if self._fault:
                return False, f"{self._fault}; restart the daemon once the host is fixed"
            # refused only while trials run: once the decision is saved (current_retune cleared) a request is
            # taken even if the loop is still finishing up (model table, worker exit)
            if self.ctx.loop_state == "retuning" and self.ctx.state.current_retune is not None and reason == "rpc":
                return False, "a retune is already running"
            self.ctx.requests.retune = reason
        self.ctx.wake.set()
        return True, "retune scheduled"

    def wait_ready(self, timeout: float) -> bool:
        return self._ready.wait(timeout)

    def wait_finished(self, timeout: float) -> bool:
        return self._finished.wait(timeout)

    def _resume_held(self) -> None:
        """After a restart, put the held point back (start() restored the originals)."""
        held = self.ctx.state.held
        if held and not self.ctx.state.current_retune:
            try:
                point = held.get("point")
                if not isinstance(point, OperatingPoint):
                    raise TunerError(f"expected a held point, got {point!r}")
                self.ctx.apply(point)
                origin = held.get("retune_id") or f"the {held.get('reason') or 'last'} hold"  # a hold has no retune
                log.info("holding %s from %s", point, origin)
            except TunerError as exc:
                if is_permanent(exc):
                    raise
                log.warning("cannot re-apply held point (%s); retuning", exc)
                self.ctx.state.held = None

    def _due_retune(self) -> str | None:
        with self.ctx.lock:
            if self.ctx.state.current_retune:
                return "resume"
            if self.ctx.requests.retune:
                reason, self.ctx.requests.retune = self.ctx.requests.retune, None
                self.ctx.requests.restart_retune = False
                return reason
            if self.ctx.state.held is None:
                return "startup"
            if self.ctx.requests.load:  # the load moved (or came back from idle): the more specific reason
                self.ctx.requests.load = False
                return "load"
            # the period runs from the last retune; a host that has held only the idle point since it started has
            # had none: from that first hold
            since = self.ctx.state.last_retune_time or float(self.ctx.state.held.get("time") or time.time())
            if time.time() - since >= self.ctx.config.tuning.retune_period_s:
                return "schedule"
        return None

    # ------------------------------------------------------------------ shutdown

    def _watchdog(self) -> None:
        watchdog_s = self.notifier.watchdog_s
        if not watchdog_s:  # started only when systemd asked for a watchdog
            return
        interval = watchdog_s / 2
        limit = self.ctx.config.tuning.window_s + self.ctx.config.tuning.settle_s + WATCHDOG_SLACK_S
        while not self._finished.wait(interval):
            if time.monotonic() - self.ctx.heartbeat < limit:
                self.notifier.watchdog()
            else:
                log.error(
                    "control loop stuck for %.0f s; withholding the watchdog ping",
                    time.monotonic() - self.ctx.heartbeat,
                )

    def _shutdown(self) -> None:
        self.ctx.set_loop_state("stopping")
        self.notifier.stopping()
        self.retune_driver.drop_kept()
        if self.observer.loaded:
            self.observer.save()
        try:
            if self.grpc is not None:
                self.grpc.set_serving(False)
            if self.ctx.host is not None:
                self.ctx.host.restore()
                with self.ctx.lock:
                    self.ctx.state.knobs_dirty = False
                    self.ctx.save()
                self.ctx.set_point(None)
                log.info("original ITR/DVFS restored")
                if isinstance(self.ctx.host, Closable):
                    self.ctx.host.close()
        finally:
            if self.grpc is not None:
                self.grpc.stop()
            if self._metrics_server is not None:
                self._metrics_server.shutdown()
                self._metrics_server.server_close()
            self.history.close()
            self.ctx.store.release()
            self._finished.set()


__all__ = ["Daemon"]
