"""The daemon's trial store: warm start a retune from this host's trials plus its hardware class's, and append
each retune's completed trials.

The store (`tuner.store.open.open_store`) is `<state.dir>/trials.sqlite`, or a fleet's PostgreSQL
(`[history] url`); an older daemon's `history.jsonl` is imported into it once at the first use. The host's
class comes from the host itself (`hardware_class()`, optional: without it the host has no class and
warm-starts from its own trials). Before each warm start the drift test compares this host's trials with
its class's (`tuner.store.warm.class_history`): a drifting host is flagged (`tuner_class_drift`), seeded from
its own trials only, and its trials are left out of its class for the other hosts. Trials without a class
(imported by hand from `tuner.trial/v1` files) count as this host's own, as `tuner trials import` promises.
`fleet_view` answers the gRPC `GetFleetView` from the same store (`tuner.store.fleet`). The store is used by
the control loop and by gRPC threads: every use holds `_store_guard()`.
"""

from __future__ import annotations

import logging
import math
import threading
from typing import Any

from core.errors import TunerError
from tuner.daemon.guardrail import Guardrail
from tuner.daemon.plain import point_of

log = logging.getLogger("tuner.daemon.loop")  # one logger for the whole control loop (operators filter on it)


class HistoryLayer(Guardrail):
    """Warm start and history appends over the holding side of the daemon (see the module docstring)."""

    _trial_store: Any = None
    _store_mutex: threading.Lock | None = None
    _hw: Any = None
    _hw_known = False

    def _store_guard(self) -> threading.Lock:
        """The lock every use of the trial store holds (the control loop's and the gRPC threads')."""
        with self._lock:
            if self._store_mutex is None:
                self._store_mutex = threading.Lock()
            return self._store_mutex

    def fleet_view(self, sla_us: Any = 0.0, percentile: Any = 0.0, band_pct: Any = 0.0, hw_class: str = "") -> Any:
        """The best known point per hardware class and load band from this daemon's trial store
        (`tuner.store.fleet.FleetReport`); 0 = the policy's SLA / percentile and 10 % bands. `InputError` for
        a bad query, `TunerError` when the store cannot be read."""
        from tuner.store.fleet import DEFAULT_BAND_PCT, check_query, fleet_report

        pol = self.policy()
        sla = sla_us or pol.sla_us
        pct = percentile or pol.percentile
        band = band_pct or DEFAULT_BAND_PCT
        check_query(pct, sla, band, names=("percentile", "sla_us", "band_pct"))
        with self._store_guard():
            return fleet_report(
                self._history_store(), percentile=float(pct), sla_us=float(sla), band_pct=float(band), hw_class=hw_class
            )

    def _host_label(self) -> str:
        from tuner.store.history import host_label

        return host_label(str(getattr(self.host, "name", None) or self.config.host.spec))

    def _hardware_class(self) -> Any:
        """The host's `HardwareClass` (found once), or None when it cannot tell."""
        if not self._hw_known:
            from actuators.hwclass import host_class

            try:
                self._hw = host_class(self.host)
            except Exception as exc:  # noqa: BLE001 - no class is a cold-by-class start, never a dead daemon
                log.warning("hardware class unavailable (%s): warm start from this host's own trials", exc)
                self._hw = None
            self._hw_known = True
            if self._hw is not None:
                log.info("hardware class %s: %s", self._hw.id, self._hw.label)
        return self._hw

    def _history_store(self) -> Any:
        """The trial store (opened once; an old history.jsonl imported into it first)."""
        if self._trial_store is None:
            from tuner.store.open import import_legacy, open_store

            store = open_store(self.config.history.url, self.config.state_dir)
            import_legacy(store, self.config.history_path)
            self._trial_store = store
        return self._trial_store

    def _close_history_store(self) -> None:
        with self._store_guard():
            if self._trial_store is not None:
                self._trial_store.close()
                self._trial_store = None

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

        The newest `history.keep_trials` (in context mode at most `tuning.history_max_trials`) of this host's
        own trials and as many of its class's. In context mode every one informs the model (load is an input);
        otherwise only trials within the load band around `qps` (`tuning.load_change_pct`) do, as a model
        without the load as input would mix up loads.
        """
        if not self.config.warm_start:
            return 0
        if not _supports(opt, "add_history"):
            log.warning("retune %s: the optimiser has no add_history; starting cold", rid)
            return 0
        from tuner.store.warm import class_history

        hw = self._hardware_class()
        limit = self.config.history.keep_trials
        if self.config.tuning.context:
            limit = min(limit, self.config.tuning.history_max_trials)
        try:
            with self._store_guard():
                store = self._history_store()
                got = class_history(
                    store,
                    self._host_label(),
                    hw.id if hw is not None else "",
                    limit=limit,
                    space=self.space,
                    hw=hw.to_dict() if hw is not None else None,
                )
        except TunerError as exc:
            log.warning("retune %s: history store unreadable (%s); starting cold", rid, exc)
            return 0
        if self.metrics and hw is not None:
            self.metrics.set_class_drift(hw.id, got.drift.drifting, got.drift.t, got.own, got.from_class)
        usable = got.entries
        if not self.config.tuning.context:
            band = self.config.tuning.load_change_pct / 100
            usable = [e for e in usable if abs(e.record.qps - qps) <= band * qps]
        if not usable:
            log.info("retune %s: no usable history trial in %s; starting cold", rid, store.location)
            return 0
        from dataclasses import replace

        records = [replace(e.record, index=i) for i, e in enumerate(usable)]
        used = int(self._timed(opt.add_history, records))
        log.info(
            "retune %s: warm start from %d history trial(s) (%d offered: %d own, %d of its class; %s)",
            rid,
            used,
            len(records),
            got.own,
            got.from_class,
            store.location,
        )
        return used

    def _append_history(self, rid: str) -> None:
        """Add the completed trials of retune `rid` to the trial store (errors are logged, not fatal)."""
        from actuators.host import Measurement as _M
        from tuner.optimize.records import TrialRecord
        from tuner.store.history import HistoryEntry, as_objective

        hw = self._hardware_class()
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
            entries.append(
                HistoryEntry(
                    rec, t.get("host") or self._host_label(), float(t["time"]), obj, hw.id if hw is not None else ""
                )
            )
        if not entries:
            return
        try:
            with self._store_guard():
                store = self._history_store()
                if hw is not None:
                    store.set_host(self._host_label(), hw.id, hw.to_dict())
                added, _ = store.add(entries)
        except TunerError as exc:
            log.warning("history store not updated: %s", exc)
            return
        log.info("history: %d trial(s) of %s added to %s", added, rid, store.location)


def _supports(opt: Any, name: str) -> bool:
    """Whether optimiser `opt` (in process, or a worker proxy) has the optional method `name`."""
    check = getattr(opt, "supports", None)
    return bool(check(name)) if callable(check) else callable(getattr(opt, name, None))


__all__ = ["HistoryLayer"]
