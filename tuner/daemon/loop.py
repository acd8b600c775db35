"""The control loop of `tuner daemon`: retune (schedule, load change, request), hold, guardrail, persist.

One thread (the loop) owns the host and the optimiser; RPC threads only read snapshots and post requests
under `Daemon._lock`. Every completed trial is written to the state directory (atomically, together with
the optimiser) before the next one starts; a trial interrupted by SIGTERM is abandoned, never reported.

A retune (`tuner.daemon.trials`): create the optimiser (a worker process, started on its own thread while the
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

from core.errors import HostError, TunerError, is_permanent
from core.memory import HeapTrimmer
from tuner.daemon.plain import VERSION, bounded_space, point_from, point_of
from tuner.daemon.trials import RetuneDriver

log = logging.getLogger("tuner.daemon.loop")  # one logger for the whole control loop (operators filter on it)

#: Extra seconds beyond one trial the loop may take before the watchdog stops pinging systemd.
WATCHDOG_SLACK_S = 600.0


class Daemon(RetuneDriver):
    """The tuner daemon. `start()` opens state, host and servers; `run()` loops until `request_stop()`.

    Layers, one module each: `base` (state and primitives), `status` (what RPCs read), `guardrail` (holding a
    point), `trials` (retunes); this class adds the lifecycle and the loop itself.
    """

    # ------------------------------------------------------------------ lifecycle

    def start(self) -> None:
        """Load state, build the host, undo a dead run's knob writes, start gRPC and metrics, notify READY."""
        from tuner.daemon.metrics import DaemonMetrics, start_metrics_server
        from tuner.daemon.startup import build_host, is_dry_run

        dry_run = is_dry_run(self.config.host.options)
        self.mode_label = "dry_run" if dry_run else self.config.host.mode
        self.store.ensure()
        self.state = self.store.load()
        if self.serve:
            from tuner.daemon.service import check_listen_free

            check_listen_free(self.config.grpc.listen)  # before the host is touched: another daemon may own it
        if self.host is None:
            self.host = build_host(self.config)  # start-up checks: StartupError listing every problem
        if self.state.knobs_dirty:
            log.warning("previous run ended with knobs changed; restoring the original ITR/DVFS first")
        self.host.restore()  # idempotent; a real host restores originals persisted by a dead process
        with self._lock:
            self.state.knobs_dirty = False
            self.store.save(self.state)
        self.space = None if self.mode_label == "observe" else bounded_space(self.host.knobs(), self.config.knobs)
        self.metrics = DaemonMetrics.create(VERSION, self.config.host.spec, self.mode_label)
        self._load_bands()
        self._refresh_warnings({"startup": self._mode_warnings()})
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

    def _mode_warnings(self) -> list[str]:
        if self.mode_label == "dry_run":
            lines = [
                "DRY RUN (host option dry_run = true): no knob is written; the daemon measures at the OS's own "
                "settings like observe mode, records no trial and writes no history"
            ]
            if self.space is not None:  # show what a tuning run's first write would be
                from tuner.daemon.plain import safe_corner

                corner = safe_corner(self.space)
                apply = getattr(self.host, "apply", None)
                if callable(apply):
                    apply(itr_us=corner.itr_us, dvfs_ghz=corner.dvfs_ghz)  # dry run: logged, not made
                    lines.append(f"dry run: the writes a tuning run would make for {corner} are logged above")
            return lines
        if self.mode_label == "observe":
            log.info(
                "observe mode: measuring QPS, latency and energy at the OS's own settings; no knob is written and "
                "no trial recorded; the per-load-band baseline goes to %s",
                self.store.dir / "baseline.json",
            )
        return []

    def run(self) -> int:
        """The loop; returns 0 after a requested stop (knobs restored). Exceptions propagate after restoring;
        a permanent host fault (`core.errors.is_permanent`) stops tuning instead (`_degrade`)."""
        try:
            try:
                self._loop()
            except HostError as exc:
                if not is_permanent(exc) or self._stop.is_set():
                    raise
                self._degrade(exc)
                self._degraded_loop()
            return 0
        finally:
            self._shutdown()

    def _loop(self) -> None:
        trimmer = HeapTrimmer()  # RSS tracks what the daemon holds, not what glibc's arenas kept (core.memory)
        if self.observing:
            while not self._stop.is_set():
                self._beat()
                trimmer.maybe()
                self._wake.clear()
                self._apply_reload()
                self._observe_window()
            return
        self._prepare_models()
        self._resume_held()
        while not self._stop.is_set():
            self._beat()
            trimmer.maybe()
            self._wake.clear()
            self._apply_reload()
            reason = self._due_retune()
            if reason:
                self._retune(reason)
            elif self._baseline_due():
                self._baseline_window()
            else:
                self._hold_window()

    # ------------------------------------------------------------------ permanent faults

    def _degrade(self, exc: HostError) -> None:
        """A fault retrying cannot fix (the NIC lost coalescing, a cpufreq file is gone, a capability was
        dropped): restore the OS's settings, stop retuning, and say why -- once in the log, in GetStatus
        (state `degraded` and a warning), as `tuner_degraded 1` and in systemd's STATUS=. The daemon keeps
        serving and keeps measuring at the OS's settings; a restart (after fixing the host) tunes again."""
        why = f"tuning stopped on a permanent host fault: {exc}"
        self._fault = why
        log.error("%s; restoring the OS's ITR/DVFS; restart the daemon once the host is fixed", why)
        self._drop_kept()
        with self._lock:
            self._current_point = None  # the daemon holds no point from now on, whatever the restore manages
        self.metrics.set_point(None)
        try:
            if self.host is not None:
                self.host.restore()
            with self._lock:
                self.state.knobs_dirty = False
                self._save()
        except Exception as restore_exc:  # noqa: BLE001 - still degraded; the stop and a restart retry it
            log.error("restoring the OS's ITR/DVFS failed too: %s", restore_exc)
        self.metrics.degraded.set(1)
        self._refresh_warnings({"fault": [why]})
        self._set_loop_state("degraded")  # last: a reader seeing this state sees the reason too
        self.notifier.status(f"degraded: {why}")

    def _degraded_loop(self) -> None:
        """Measure windows at the OS's settings (exported like observe mode) until stopped; a measurement that
        fails permanently is logged once and not tried again."""
        measuring = True
        while not self._stop.is_set():
            self._beat()
            self._wake.clear()
            if self._reload_requested:
                self._reload_requested = False
                log.warning("reload ignored while degraded: restart the daemon once the host is fixed")
            if not measuring:
                self._wait(self.config.tuning.window_s, interruptible=True)
                continue
            try:
                m, _ = self._measure()
            except Exception as exc:  # noqa: BLE001 - a sensor fault must not end the degraded loop
                if self._stop.is_set():
                    return
                measuring = not is_permanent(exc)
                log.warning("measurement failed while degraded: %s%s", exc, "" if measuring else "; not retried")
                self._wait(self.config.tuning.window_s, interruptible=True)
                continue
            if m.point is None:  # the OS's own settings: a baseline window
                self._record_baseline(m)

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
            if self._fault:
                return False, f"{self._fault}; restart the daemon once the host is fixed"
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

    def _resume_held(self) -> None:
        """After a restart, put the held point back (start() restored the originals)."""
        held = self.state.held
        if held and not self.state.current_retune:
            try:
                self._apply(point_of(held["point"]))
                log.info("holding %s from %s", point_from(held["point"]), held.get("retune_id"))
            except TunerError as exc:
                if is_permanent(exc):
                    raise
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

    # ------------------------------------------------------------------ shutdown

    def _watchdog(self) -> None:
        watchdog_s = self.notifier.watchdog_s
        if not watchdog_s:  # started only when systemd asked for a watchdog
            return
        interval = watchdog_s / 2
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
        self._drop_kept()
        if self.metrics is not None and hasattr(self, "baseline"):
            self._save_bands()
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
            self._close_history_store()
            self.store.release()
            self._finished.set()


__all__ = ["Daemon"]
