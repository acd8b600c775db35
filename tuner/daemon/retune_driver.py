"""Driving a retune from the control loop: create (or resume) the optimiser, warm start it from the history
store, run trials (apply, settle, measure a fixed or adaptive window, report; every trial saved with the
experiment in one atomic write before the next), stop on the budget or the stopping rule, decide, apply,
and append the retune's trials to the history store."""

from __future__ import annotations

import logging
import math
import threading
import time
from collections.abc import Callable
from typing import Any

from actuators.host import Measurement
from core.errors import TunerError, is_permanent
from tuner.daemon.history import HistoryLayer, _supports
from tuner.daemon.plain import describe, measurement_dict, point_list, safe_corner

log = logging.getLogger("tuner.daemon.loop")  # one logger for the whole control loop (operators filter on it)

#: Longest the loop waits for a starting optimiser worker before it measures a guarded window meanwhile.
WORKER_WAIT_S = 1.0


class RetuneDriver(HistoryLayer):
    """Retunes over the holding and read sides of the daemon (see the module docstring)."""

    def _signature(self) -> dict[str, Any]:
        return {
            "policy": dict(self.policy().__dict__),
            "itr": [self.knob_space.itr_us[0], self.knob_space.itr_us[-1]],
            "dvfs": [self.knob_space.dvfs_ghz[0], self.knob_space.dvfs_ghz[-1]],
        }

    #: Seconds before the next retry of a failed retune (0: the last one succeeded).
    _retry_s = 0.0
    #: The optimiser of a retune that failed for a reason other than its worker: the retry reuses it.
    _kept_opt: Any = None
    #: The optimiser of the retune in progress.
    _live_opt: Any = None

    def _retune(self, reason: str) -> None:
        if self._near_idle(reason):
            return
        opt: Any = None
        try:
            opt = self._retune_with(reason)
            self._retry_s = 0.0
        except TunerError as exc:
            if self._stop.is_set():
                return  # e.g. the optimiser worker was killed by the stop: the trial in flight is abandoned
            if is_permanent(exc):
                raise  # retrying cannot help: the loop stops tuning (Daemon._degrade)
            from tuner.daemon.worker import WorkerError

            t = self.config.tuning
            first = max(t.window_s, 1.0)
            self._retry_s = min(2 * self._retry_s if self._retry_s else first, max(t.retry_max_s, first))
            if self._live_opt is not None and not isinstance(exc, WorkerError):
                self._kept_opt = self._live_opt  # the retry continues with it: no new worker per retry
            log.error(
                "retune failed: %s; retrying in %.0f s (doubling up to %.0f s; completed trials are kept)",
                exc,
                self._retry_s,
                t.retry_max_s,
            )
            self._wait(self._retry_s, interruptible=True)
        finally:
            self._live_opt = None
            if self._kept_opt is None:
                close = getattr(opt, "close", None) or getattr(self, "_open_optimizer_close", None)
                if callable(close):
                    close()
            self._open_optimizer_close = None

    def _near_idle(self, reason: str) -> bool:
        """At a load below `tuning.idle_qps` no retune starts: the idle point is held instead."""
        if self.state.current_retune:
            return False  # an interrupted retune resumes (its trials were measured under load)
        try:
            qps = self._offered_qps()
        except TunerError:
            return False
        if qps >= self.config.tuning.idle_qps:
            return False
        if (self.state.held or {}).get("reason") != "idle":
            self._hold_idle(qps, f"no retune ({reason}) at near-idle load")
        self._wait(self.config.tuning.window_s, interruptible=True)
        return True

    def _drop_kept(self) -> None:
        kept, self._kept_opt = self._kept_opt, None
        close = getattr(kept, "close", None)
        if callable(close):
            close()

    def _current_retune(self) -> dict[str, Any]:
        """The running retune's state record (set before its first trial)."""
        cur = self.state.current_retune
        if cur is None:
            raise TunerError("no retune is running")
        return cur

    def _retune_with(self, reason: str) -> Any:
        tuning = self.config.tuning
        cur = self.state.current_retune
        opt: Any = None
        if cur is not None:
            if cur.get("signature") != self._signature():
                log.info("retune %s was started under another policy/bounds; starting afresh", cur["id"])
                with self._lock:
                    self.state.current_retune = None
                    self._save()
                reason, cur = "config", None
            elif self._kept_opt is not None:
                opt, self._kept_opt = self._kept_opt, None  # the failed attempt's worker, still alive
            else:
                try:
                    opt = self._start_optimizer(self.optimizers.load, cur["optimizer"])
                except TunerError:
                    raise  # the worker died: retry later, keep the experiment
                except Exception as exc:  # noqa: BLE001 - a stale experiment must not stop the daemon
                    log.warning("cannot resume retune %s (%s); starting afresh", cur.get("id"), exc)
                    with self._lock:
                        self.state.current_retune = None
                        self._save()
                    reason, cur = "resume", None
        if cur is None:
            self._drop_kept()
            qps = self._offered_qps()  # before the worker starts: a failing sensor spawns none
            with self._lock:
                self.state.retune_seq += 1
                rid = f"r{self.state.retune_seq:06d}"
            opt = self._start_optimizer(
                self.optimizers.create, self.space, self.policy(), tuning, rid, tuning.seed + self.state.retune_seq
            )
            self._open_optimizer_close = getattr(opt, "close", None)
            self._live_opt = opt
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
        self._live_opt = opt
        rid = self._current_retune()["id"]
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
                        self._current_retune()["stopped"] = why
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

    def _start_optimizer(self, start: Callable[..., Any], *args: Any) -> Any:
        """`start(*args)` (create or load: spawning the worker and importing Ax take seconds) on its own thread;
        meanwhile the loop measures windows and the guardrail acts on them (`_guard_window`), so a breach during
        the start is reverted within one window. Waits up to `WORKER_WAIT_S` first, so a fast start measures no
        extra window. An optimiser that arrives after the loop gave up on it (stop, permanent fault) is closed."""
        box: dict[str, Any] = {}
        done, lock = threading.Event(), threading.Lock()

        def run() -> None:
            try:
                value = self._timed(start, *args)
            except BaseException as exc:  # noqa: BLE001 - handed to the loop
                box["error"] = exc
            else:
                with lock:
                    box["value"] = value
                    if box.get("abandoned"):
                        _close(box.pop("value"))
            finally:
                done.set()

        threading.Thread(target=run, name="tuner-optimizer-start", daemon=True).start()
        try:
            if not done.wait(min(WORKER_WAIT_S, max(self.config.tuning.window_s, 0.01))):
                while not done.is_set():  # back to back: each window is as long as a holding window
                    self._beat()
                    if self._stop.is_set():
                        raise TunerError("stopping while the optimiser worker starts")
                    self._guard_window()
        except BaseException:
            with lock:
                box["abandoned"] = True
                late = box.pop("value", None)
            _close(late)
            raise
        if "error" in box:
            raise box["error"]
        return box["value"]

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
        m = measure_window(self.live_host, policy)
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
            if self._stop.is_set() or is_permanent(exc):  # a stop, or a host that cannot do it: abandoned
                self.metrics.trials.labels(status="abandoned").inc()
                if is_permanent(exc) and not self._stop.is_set():
                    raise  # not the point's fault: never reported as a failed trial
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
            self._current_retune()["optimizer"] = text
            self.state.counters["trials"] = int(self.state.counters.get("trials", 0)) + 1
            self.state.counters[f"trials:{status}"] = int(self.state.counters.get(f"trials:{status}", 0)) + 1
            self._save()  # trial and experiment in one atomic write
        self.metrics.trials.labels(status=status).inc()
        log.info("trial %s/%d %s: %s", rid, row["index"], status, describe(row, self.policy().percentile))

    def _load_moved(self, mdict: dict[str, Any] | None, qps_values: list[float]) -> tuple[float, float] | None:
        """(load the chosen point was measured at, load of the retune's last trial) when the load rose above the
        first by more than the load band (`tuning.load_change_pct`); None when it stayed in the band, fell, or either
        is unknown. A fall keeps the decision: the percentile rises with load, so a point that met the SLA at a
        higher load vouches for a lower one (the holding windows' band check then holds a cheaper point or
        retunes)."""
        if not mdict or not qps_values:
            return None
        at, now = float(mdict.get("offered_qps") or 0.0), float(qps_values[-1])
        return (at, now) if _load_moved_from(at, now, self.config.tuning.load_change_pct / 100) else None

    def _decide(self, opt: Any, rid: str, reason: str) -> None:
        try:
            d = self._timed(opt.best)
            point, met, detail = d.point, bool(d.met_sla), str(d.reason)
            mdict = measurement_dict(d.measurement, time.time()) if d.measurement else None
        except Exception as exc:  # noqa: BLE001 - e.g. every trial failed
            point, met, detail, mdict = safe_corner(self.knob_space), False, f"no decision ({exc}); safe corner", None
        qps_values = [t.qps for t in _retune_trials(opt) if t.status == "completed"]
        tuned = sum(qps_values) / len(qps_values) if qps_values else 0.0
        moved = self._load_moved(mdict, qps_values)
        if moved is not None:
            # the chosen point met the SLA at a load the host has left during the retune (a trial at 100K
            # does not vouch for 600K): hold the safe corner, tuned for the load now, and retune at once
            at, now = moved
            log.warning(
                "decision %s: the chosen point met the SLA at %.0f QPS but the load moved to %.0f QPS during "
                "the retune; holding the safe corner and retuning",
                rid,
                at,
                now,
            )
            point, met, tuned = safe_corner(self.knob_space), False, now
            detail = f"load moved during the retune ({at:.0f} -> {now:.0f} QPS): safe corner, retuning"
        point = self._apply(point)
        pol = self.policy()
        cur = self.state.current_retune or {}
        decision: dict[str, Any] = {
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
            self._load_trigger = moved is not None
            self._save()
        self.metrics.last_retune.set(decision["time"])
        log.info("decision %s (%s): %s, met SLA: %s, tuned for %.0f QPS -- %s", rid, reason, point, met, tuned, detail)
        self._publish(decision)
        self._model_table(rid, opt, tuned, pol.percentile)


def _close(opt: Any) -> None:
    close = getattr(opt, "close", None)
    if callable(close):
        close()


def _load_moved_from(at: float, now: float, band: float) -> bool:
    return at > 0 and now > 0 and now - at > band * now


def _retune_trials(opt: Any) -> list[Any]:
    """The current retune's trials (history attached by warm start excluded)."""
    return opt.retune_trials() if _supports(opt, "retune_trials") else opt.trials()
