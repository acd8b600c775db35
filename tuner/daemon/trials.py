"""Driving a retune from the control loop: create (or resume) the optimiser, warm start it from the history
store, run trials (apply, settle, measure a fixed or adaptive window, report; every trial saved with the
experiment in one atomic write before the next), stop on the budget or the stopping rule, decide, apply,
and append the retune's trials to the history store."""

from __future__ import annotations

import logging
import math
import time
from dataclasses import replace
from typing import Any

from actuators.host import Measurement
from core.errors import TunerError
from tuner.daemon.guardrail import Guardrail
from tuner.daemon.plain import describe, measurement_dict, point_list, point_of, safe_corner

log = logging.getLogger("tuner.daemon.loop")  # one logger for the whole control loop (operators filter on it)


class RetuneDriver(Guardrail):
    """Retunes over the holding and read sides of the daemon (see the module docstring)."""

    def _signature(self) -> dict[str, Any]:
        return {
            "policy": dict(self.policy().__dict__),
            "itr": [self.knob_space.itr_us[0], self.knob_space.itr_us[-1]],
            "dvfs": [self.knob_space.dvfs_ghz[0], self.knob_space.dvfs_ghz[-1]],
        }

    def _retune(self, reason: str) -> None:
        opt: Any = None
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
            qps = float(self.live_host.offered_qps())
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
        usable = in_space(entries, self.knob_space)
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
                    point_of(t["point"]),
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
            self._current_retune()["optimizer"] = text
            self.state.counters["trials"] = int(self.state.counters.get("trials", 0)) + 1
            self.state.counters[f"trials:{status}"] = int(self.state.counters.get(f"trials:{status}", 0)) + 1
            self._save()  # trial and experiment in one atomic write
        self.metrics.trials.labels(status=status).inc()
        log.info("trial %s/%d %s: %s", rid, row["index"], status, describe(row, self.policy().percentile))

    def _decide(self, opt: Any, rid: str, reason: str) -> None:
        try:
            d = self._timed(opt.best)
            point, met, detail = d.point, bool(d.met_sla), str(d.reason)
            mdict = measurement_dict(d.measurement, time.time()) if d.measurement else None
        except Exception as exc:  # noqa: BLE001 - e.g. every trial failed
            point, met, detail, mdict = safe_corner(self.knob_space), False, f"no decision ({exc}); safe corner", None
        point = self._apply(point)
        qps_values = [t.qps for t in _retune_trials(opt) if t.status == "completed"]
        tuned = sum(qps_values) / len(qps_values) if qps_values else 0.0
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
            self._load_trigger = False
            self._save()
        self.metrics.last_retune.set(decision["time"])
        log.info("decision %s (%s): %s, met SLA: %s, tuned for %.0f QPS -- %s", rid, reason, point, met, tuned, detail)
        self._publish(decision)
        self._model_table(rid, opt, tuned, pol.percentile)


def _supports(opt: Any, name: str) -> bool:
    """Whether optimiser `opt` (in process, or a worker proxy) has the optional method `name`."""
    check = getattr(opt, "supports", None)
    return bool(check(name)) if callable(check) else callable(getattr(opt, name, None))


def _retune_trials(opt: Any) -> list[Any]:
    """The current retune's trials (history attached by warm start excluded)."""
    return opt.retune_trials() if _supports(opt, "retune_trials") else opt.trials()
