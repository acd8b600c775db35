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
from tuner.daemon.context import LoopContext
from tuner.daemon.guardrail import Guardrail
from tuner.daemon.model_tables import ModelTables
from tuner.daemon.optimizer_calls import close, retune_trials, supports
from tuner.daemon.plain import describe, measurement_dict, safe_corner
from tuner.daemon.trial_history import TrialHistory

log = logging.getLogger("tuner.daemon.loop")  # one logger for the whole control loop (operators filter on it)

#: Longest the loop waits for a starting optimiser worker before it measures a guarded window meanwhile.
WORKER_WAIT_S = 1.0


class RetuneDriver:
    """Runs retunes (see the module docstring). `optimizers` creates and loads optimisers (`create(space, policy,
    tuning, name, seed)`, `load(text)`: `tuner.daemon.worker.ProcessOptimizers`); `history` warm-starts them and
    keeps their trials; `guardrail` holds the idle point and guards windows while a worker starts; `models` gets
    each decided retune's prediction tables."""

    def __init__(
        self, ctx: LoopContext, optimizers: Any, history: TrialHistory, guardrail: Guardrail, models: ModelTables
    ) -> None:
        self.ctx = ctx
        self.optimizers = optimizers
        self.history = history
        self.guardrail = guardrail
        self.models = models
        #: Seconds before the next retry of a failed retune (0: the last one succeeded).
        self.retry_s = 0.0
        #: The optimiser of a retune that failed for a reason other than its worker: the retry reuses it.
        self._kept_opt: Any = None
        #: The optimiser of the retune in progress.
        self._live_opt: Any = None

    def _signature(self) -> dict[str, Any]:
        space = self.ctx.knob_space
        return {
            "policy": dict(self.ctx.policy().__dict__),
            "itr": [space.itr_us[0], space.itr_us[-1]],
            "dvfs": [space.dvfs_ghz[0], space.dvfs_ghz[-1]],
        }

    def retune(self, reason: str) -> None:
        """One retune for `reason` (or its resumption); a transient failure is retried with a capped back-off."""
        if self._near_idle(reason):
            return
        opt: Any = None
        try:
            opt = self._retune_with(reason)
            self.retry_s = 0.0
        except TunerError as exc:
            if self.ctx.stop.is_set():
                return  # e.g. the optimiser worker was killed by the stop: the trial in flight is abandoned
            if is_permanent(exc):
                raise  # retrying cannot help: the loop stops tuning (Daemon._degrade)
            self._back_off(exc)
        finally:
            live, self._live_opt = self._live_opt, None
            if self._kept_opt is None:
                close(opt if opt is not None else live)

    def _back_off(self, exc: TunerError) -> None:
        from tuner.daemon.worker import WorkerError

        t = self.ctx.config.tuning
        first = max(t.window_s, 1.0)
        self.retry_s = min(2 * self.retry_s if self.retry_s else first, max(t.retry_max_s, first))
        if self._live_opt is not None and not isinstance(exc, WorkerError):
            self._kept_opt = self._live_opt  # the retry continues with it: no new worker per retry
        log.error(
            "retune failed: %s; retrying in %.0f s (doubling up to %.0f s; completed trials are kept)",
            exc,
            self.retry_s,
            t.retry_max_s,
        )
        self.ctx.wait(self.retry_s, interruptible=True)

    def offered_qps(self) -> float:
        """The load a retune starts at: the host's offered QPS, else the last window's."""
        try:
            qps = float(self.ctx.live_host.offered_qps())
            if math.isfinite(qps) and qps >= 0:
                return qps
        except Exception as exc:  # noqa: BLE001 - a QPS source hiccup must not stop a retune
            log.warning("offered QPS unavailable (%s); using the last window's", exc)
        return float((self.ctx.last_measurement or {}).get("offered_qps") or self.ctx.state.tuned_qps or 0.0)

    def _near_idle(self, reason: str) -> bool:
        """At a load below `tuning.idle_qps` no retune starts: the idle point is held instead."""
        ctx = self.ctx
        if ctx.state.current_retune:
            return False  # an interrupted retune resumes (its trials were measured under load)
        try:
            qps = self.offered_qps()
        except TunerError:
            return False
        if qps >= ctx.config.tuning.idle_qps:
            return False
        if (ctx.state.held or {}).get("reason") != "idle":
            self.guardrail.hold_idle(qps, f"no retune ({reason}) at near-idle load")
        ctx.wait(ctx.config.tuning.window_s, interruptible=True)
        return True

    def drop_kept(self) -> None:
        """Close the optimiser a failed retune kept for its retry."""
        kept, self._kept_opt = self._kept_opt, None
        close(kept)

    def _current_retune(self) -> dict[str, Any]:
        """The running retune's state record (set before its first trial)."""
        cur = self.ctx.state.current_retune
        if cur is None:
            raise TunerError("no retune is running")
        return cur

    def _forget_retune(self) -> None:
        with self.ctx.lock:
            self.ctx.state.current_retune = None
            self.ctx.save()

    def _resume(self) -> tuple[Any, str | None]:
        """(optimiser, None) of the retune in progress, or (None, why) when it must start afresh."""
        cur = self._current_retune()
        if cur.get("signature") != self._signature():
            log.info("retune %s was started under another policy/bounds; starting afresh", cur["id"])
            self._forget_retune()
            return None, "config"
        if self._kept_opt is not None:
            opt, self._kept_opt = self._kept_opt, None  # the failed attempt's worker, still alive
            return opt, None
        try:
            return self._start_optimizer(self.optimizers.load, cur["optimizer"]), None
        except TunerError:
            raise  # the worker died: retry later, keep the experiment
        except Exception as exc:  # noqa: BLE001 - a stale experiment must not stop the daemon
            log.warning("cannot resume retune %s (%s); starting afresh", cur.get("id"), exc)
            self._forget_retune()
            return None, "resume"

    def _create(self, reason: str) -> Any:
        """A new retune's optimiser, warm-started, with its state record saved."""
        ctx = self.ctx
        tuning = ctx.config.tuning
        self.drop_kept()
        qps = self.offered_qps()  # before the worker starts: a failing sensor spawns none
        with ctx.lock:
            ctx.state.retune_seq += 1
            rid = f"r{ctx.state.retune_seq:06d}"
        opt = self._start_optimizer(
            self.optimizers.create, ctx.space, ctx.policy(), tuning, rid, tuning.seed + ctx.state.retune_seq
        )
        self._live_opt = opt
        seeded = self.history.seed(opt, rid, qps)  # before begin_retune: history is not this retune's
        if supports(opt, "begin_retune"):
            ctx.timed(opt.begin_retune, qps)
        text = ctx.timed(opt.to_json)
        with ctx.lock:
            ctx.state.current_retune = {
                "id": rid,
                "reason": reason,
                "started": time.time(),
                "signature": self._signature(),
                "optimizer": text,
                "qps": qps,
                "history_trials": seeded,
            }
            ctx.progress.history_trials = seeded
            ctx.save()
        return opt

    def _retune_with(self, reason: str) -> Any:
        opt: Any = None
        if self.ctx.state.current_retune is not None:
            opt, afresh = self._resume()
            reason = afresh or reason
        if opt is None:
            opt = self._create(reason)
        else:
            with self.ctx.lock:
                self.ctx.progress.history_trials = int(self._current_retune().get("history_trials", 0))
        self._live_opt = opt
        rid = self._current_retune()["id"]
        self.ctx.metrics.retunes.labels(reason=reason).inc()
        self.ctx.count(f"retunes:{reason}")
        self.ctx.set_loop_state("retuning")
        log.info("retune %s (%s): up to %d trials", rid, reason, self.ctx.config.tuning.trials)
        if self._run_trials(opt, rid):
            self.decide(opt, rid, reason)
        return opt

    def _run_trials(self, opt: Any, rid: str) -> bool:
        """Trials until the budget or the stopping rule (True: decide now); False when stopping, or when the
        retune was dropped (policy or bounds changed)."""
        ctx, tuning = self.ctx, self.ctx.config.tuning
        while True:
            done = len(retune_trials(opt))
            with ctx.lock:
                ctx.progress.done, ctx.progress.planned = done, tuning.trials
            if done >= tuning.trials:
                return True
            if done >= tuning.min_trials and tuning.stop_ei_pct > 0 and supports(opt, "should_stop"):
                stop, why = ctx.timed(opt.should_stop)
                if stop:
                    log.info("retune %s stops after %d trials: %s", rid, done, why)
                    with ctx.lock:
                        self._current_retune()["stopped"] = why
                    return True
            ctx.beat()
            if ctx.stop.is_set():
                return False
            ctx.apply_reload()
            if ctx.requests.restart_retune:
                log.info("retune %s dropped: policy or bounds changed", rid)
                self.history.append(rid)  # its measured trials are still worth remembering
                self._forget_retune()
                return False
            if not self._trial(opt, rid):
                return False  # stopping: the trial in flight is abandoned (never reported)

    def _start_optimizer(self, start: Callable[..., Any], *args: Any) -> Any:
        """`start(*args)` (create or load: spawning the worker and importing Ax take seconds) on its own thread;
        meanwhile the loop measures windows and the guardrail acts on them (`Guardrail.guard_window`), so a breach during
        the start is reverted within one window. Waits up to `WORKER_WAIT_S` first, so a fast start measures no
        extra window. An optimiser that arrives after the loop gave up on it (stop, permanent fault) is closed."""
        box: dict[str, Any] = {}
        done, lock = threading.Event(), threading.Lock()

        def run() -> None:
            try:
                value = self.ctx.timed(start, *args)
            except BaseException as exc:  # noqa: BLE001 - handed to the loop
                box["error"] = exc
            else:
                with lock:
                    box["value"] = value
                    if box.get("abandoned"):
                        close(box.pop("value"))
            finally:
                done.set()

        threading.Thread(target=run, name="tuner-optimizer-start", daemon=True).start()
        try:
            if not done.wait(min(WORKER_WAIT_S, max(self.ctx.config.tuning.window_s, 0.01))):
                while not done.is_set():  # back to back: each window is as long as a holding window
                    self.ctx.beat()
                    if self.ctx.stop.is_set():
                        raise TunerError("stopping while the optimiser worker starts")
                    self.guardrail.guard_window()
        except BaseException:
            with lock:
                box["abandoned"] = True
                late = box.pop("value", None)
            close(late)
            raise
        if "error" in box:
            raise box["error"]
        return box["value"]

    def trial_window_policy(self) -> Any:
        """The adaptive trial window (`tuner.optimize.windowing.WindowPolicy`): grown until the percentile's CI is within
        ±`window_ci_pct` %, at most `window_s`, ended after `window_min_s` once the estimate is above the
        limit the optimiser's final choice applies (as `tuner replay` does: such a point is never chosen), and
        after any chunk whose CI is wholly above the SLA (the guard)."""
        from tuner.optimize.settings import TunerSettings, met_limit_us
        from tuner.optimize.windowing import WindowPolicy

        pol = self.ctx.policy()
        # the optimiser worker builds its TunerSettings with the default sla_check / sla_margin_pct
        return WindowPolicy.from_settings(
            self.ctx.config.tuning,
            pol.percentile,
            stop_above_us=met_limit_us(pol.sla_us, TunerSettings()),
            abort_above_us=pol.sla_us if self.ctx.config.tuning.window_guard else None,
        )

    def _settle(self) -> tuple[Measurement | None, Measurement | None]:
        """The settle after a knob change, (settle, window): `tuner.optimize.windowing.guarded_settle` with the
        adaptive trial window's guard when `tuning.settle_guard` is on (as `tuner replay` does)."""
        from tuner.optimize.windowing import guarded_settle, settle_guard_policy

        t = self.ctx.config.tuning
        guard = settle_guard_policy(t, self.trial_window_policy())  # None unless the window is adaptive and guarded
        return guarded_settle(lambda s: self.ctx.measure(s)[0], t.settle_s, guard)

    def _measure_trial(self) -> tuple[Measurement, float]:
        """A trial's window: `window_s` long, or with `tuning.window_mode = "adaptive"` the window of
        `trial_window_policy` (`tuner.optimize.windowing.measure_window`)."""
        t = self.ctx.config.tuning
        if t.window_mode != "adaptive":
            return self.ctx.measure()
        from tuner.optimize.windowing import measure_window

        policy = self.trial_window_policy()
        t0 = time.monotonic()
        m = measure_window(self.ctx.live_host, policy)
        self.ctx.wait(m.seconds - (time.monotonic() - t0), interruptible=False)
        return self.ctx.measured(m)

    def _trial(self, opt: Any, rid: str) -> bool:
        t0 = time.monotonic()
        index, point = self.ctx.timed(opt.suggest)  # a dead worker raises TunerError -> `retune` retries
        settle = None
        try:
            point = self.ctx.apply(point)
            # measured: its energy counts against the exploration; its second half may end the trial (the guard)
            settle, early = self._settle()
            if self.ctx.stop.is_set():
                self.ctx.metrics.trials.labels(status="abandoned").inc()
                return False
            m, when = (early, time.time()) if early is not None else self._measure_trial()
        except Exception as exc:
            if self.ctx.stop.is_set() or is_permanent(exc):  # a stop, or a host that cannot do it: abandoned
                self.ctx.metrics.trials.labels(status="abandoned").inc()
                if is_permanent(exc) and not self.ctx.stop.is_set():
                    raise  # not the point's fault: never reported as a failed trial
                return False
            text = str(exc) if isinstance(exc, TunerError) else f"{type(exc).__name__}: {exc}"
            log.warning(
                "trial %s/%d at %s failed: %s", rid, index, point, text, exc_info=not isinstance(exc, TunerError)
            )
            rec = self.ctx.timed(opt.fail, index, text, settle)
            self._record_trial(opt, rid, rec, None, time.time(), "failed")
            return True
        if self.ctx.stop.is_set():
            self.ctx.metrics.trials.labels(status="abandoned").inc()
            return False
        rec = self.ctx.timed(opt.complete, index, m, m.offered_qps, settle)
        self._record_trial(opt, rid, rec, m, when, "completed")
        self.ctx.metrics.trial_seconds.observe(time.monotonic() - t0)
        return True

    def _record_trial(self, opt: Any, rid: str, rec: Any, m: Measurement | None, when: float, status: str) -> None:
        status = rec.status or status  # the optimiser may fail a window it cannot model
        qps = float(rec.qps) if rec.qps is not None and math.isfinite(rec.qps) else 0.0
        row = {
            "retune_id": rid,
            "index": int(rec.index),
            "point": rec.point,
            "qps": qps,
            "status": status,
            "measurement": measurement_dict(m, when) if m else None,
            "reward": None if rec.reward is None else float(rec.reward),
            "error": rec.error,
            "time": when,
            "objective": dict(self.ctx.policy().__dict__),
            "host": self.history.host_label(),
        }
        text = self.ctx.timed(opt.to_json)
        with self.ctx.lock:
            self.ctx.state.trials.append(row)
            self._current_retune()["optimizer"] = text
            self.ctx.state.counters["trials"] = int(self.ctx.state.counters.get("trials", 0)) + 1
            self.ctx.state.counters[f"trials:{status}"] = int(self.ctx.state.counters.get(f"trials:{status}", 0)) + 1
            self.ctx.save()  # trial and experiment in one atomic write
        self.ctx.metrics.trials.labels(status=status).inc()
        log.info("trial %s/%d %s: %s", rid, row["index"], status, describe(row, self.ctx.policy().percentile))

    def _load_moved(self, mdict: dict[str, Any] | None, qps_values: list[float]) -> tuple[float, float] | None:
        """(load the chosen point was measured at, load of the retune's last trial) when the load rose above the
        first by more than the load band (`tuning.load_change_pct`); None when it stayed in the band, fell, or either
        is unknown. A fall keeps the decision: the percentile rises with load, so a point that met the SLA at a
        higher load vouches for a lower one (the holding windows' band check then holds a cheaper point or
        retunes)."""
        if not mdict or not qps_values:
            return None
        at, now = float(mdict.get("offered_qps") or 0.0), float(qps_values[-1])
        return (at, now) if _load_moved_from(at, now, self.ctx.config.tuning.load_change_pct / 100) else None

    def decide(self, opt: Any, rid: str, reason: str) -> None:
        try:
            d = self.ctx.timed(opt.best)
            point, met, detail = d.point, bool(d.met_sla), str(d.reason)
            mdict = measurement_dict(d.measurement, time.time()) if d.measurement else None
        except Exception as exc:  # noqa: BLE001 - e.g. every trial failed
            point, met, detail, mdict = (
                safe_corner(self.ctx.knob_space),
                False,
                f"no decision ({exc}); safe corner",
                None,
            )
        qps_values = [t.qps for t in retune_trials(opt) if t.status == "completed"]
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
            point, met, tuned = safe_corner(self.ctx.knob_space), False, now
            detail = f"load moved during the retune ({at:.0f} -> {now:.0f} QPS): safe corner, retuning"
        point = self.ctx.apply(point)
        pol = self.ctx.policy()
        cur = self.ctx.state.current_retune or {}
        decision: dict[str, Any] = {
            "retune_id": rid,
            "reason": reason,
            "point": point,
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
        self.history.append(rid)
        text = self.ctx.timed(opt.to_json)
        with self.ctx.lock:
            self.ctx.store.save_experiment(self.ctx.state, rid, text)
            self.ctx.state.current_retune = None
            self.ctx.state.held = decision
            self.ctx.state.tuned_qps = tuned
            self.ctx.state.last_retune_time = decision["time"]
            self.ctx.state.decisions.append(decision)
            self.ctx.requests.load = moved is not None
            self.ctx.save()
        self.ctx.metrics.last_retune.set(decision["time"])
        log.info("decision %s (%s): %s, met SLA: %s, tuned for %.0f QPS -- %s", rid, reason, point, met, tuned, detail)
        self.ctx.feed.publish(decision)
        self.models.build(rid, opt, tuned, pol.percentile)


def _load_moved_from(at: float, now: float, band: float) -> bool:
    return at > 0 and now > 0 and now - at > band * now
