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
the control loop and by gRPC threads: every use holds the store's own lock.
"""

from __future__ import annotations

import logging
import threading
from typing import Any

from core.errors import TunerError
from tuner.daemon.context import LoopContext
from tuner.daemon.optimizer_calls import supports

log = logging.getLogger("tuner.daemon.loop")  # one logger for the whole control loop (operators filter on it)


class TrialHistory:
    """Warm start from, and appends to, the trial store (see the module docstring); opened at first use."""

    def __init__(self, ctx: LoopContext) -> None:
        self.ctx = ctx
        self._store: Any = None
        self._guard = threading.Lock()  # every use of the store (the control loop's and the gRPC threads')
        self._hw: Any = None
        self._hw_known = False

    def fleet_view(self, sla_us: Any = 0.0, percentile: Any = 0.0, band_pct: Any = 0.0, hw_class: str = "") -> Any:
        """The best known point per hardware class and load band from this daemon's trial store
        (`tuner.store.fleet.FleetReport`); 0 = the policy's SLA / percentile and 10 % bands. `InputError` for
        a bad query, `TunerError` when the store cannot be read."""
        from tuner.store.fleet import DEFAULT_BAND_PCT, check_class, check_query, fleet_report

        pol = self.ctx.policy()
        sla = sla_us or pol.sla_us
        pct = percentile or pol.percentile
        band = band_pct or DEFAULT_BAND_PCT
        check_query(pct, sla, band, names=("percentile", "sla_us", "band_pct"))
        check_class(hw_class, "hw_class")
        with self._guard:
            return fleet_report(
                self._open(), percentile=float(pct), sla_us=float(sla), band_pct=float(band), hw_class=hw_class
            )

    def host_label(self) -> str:
        from tuner.store.history import host_label

        return host_label(str(getattr(self.ctx.host, "name", None) or self.ctx.config.host.spec))

    def hardware_class(self) -> Any:
        """The host's `HardwareClass` (found once), or None when it cannot tell."""
        if not self._hw_known:
            from actuators.hwclass import host_class

            try:
                self._hw = host_class(self.ctx.host)
            except Exception as exc:  # noqa: BLE001 - no class is a cold-by-class start, never a dead daemon
                log.warning("hardware class unavailable (%s): warm start from this host's own trials", exc)
                self._hw = None
            self._hw_known = True
            if self._hw is not None:
                log.info("hardware class %s: %s", self._hw.id, self._hw.label)
        return self._hw

    def _open(self) -> Any:
        """The trial store (opened once; an old history.jsonl imported into it first)."""
        if self._store is None:
            from tuner.store.open import import_legacy, open_store

            store = open_store(self.ctx.config.history.url, self.ctx.config.state_dir)
            import_legacy(store, self.ctx.config.history_path)
            self._store = store
        return self._store

    def close(self) -> None:
        with self._guard:
            if self._store is not None:
                self._store.close()
                self._store = None

    def seed(self, opt: Any, rid: str, qps: float) -> int:
        """Warm start: give a new retune's optimiser the stored trials it can use; returns how many it used.

        The newest `history.keep_trials` (in context mode at most `tuning.history_max_trials`) of this host's
        own trials and as many of its class's. In context mode every one informs the model (load is an input);
        otherwise only trials within the load band around `qps` (`tuning.load_change_pct`) do, as a model
        without the load as input would mix up loads.
        """
        if not self.ctx.config.warm_start:
            return 0
        if not supports(opt, "add_history"):
            log.warning("retune %s: the optimiser has no add_history; starting cold", rid)
            return 0
        from tuner.store.warm import class_history

        hw = self.hardware_class()
        limit = self.ctx.config.history.keep_trials
        if self.ctx.config.tuning.context:
            limit = min(limit, self.ctx.config.tuning.history_max_trials)
        try:
            with self._guard:
                store = self._open()
                got = class_history(
                    store,
                    self.host_label(),
                    hw.id if hw is not None else "",
                    limit=limit,
                    space=self.ctx.space,
                    hw=hw.to_dict() if hw is not None else None,
                )
        except TunerError as exc:
            log.warning("retune %s: history store unreadable (%s); starting cold", rid, exc)
            return 0
        if self.ctx.metrics and hw is not None:
            self.ctx.metrics.set_class_drift(hw.id, got.drift.drifting, got.drift.t, got.own, got.from_class)
        usable = got.entries
        if not self.ctx.config.tuning.context:
            band = self.ctx.config.tuning.load_change_pct / 100
            usable = [e for e in usable if abs(e.record.qps - qps) <= band * qps]
        if not usable:
            log.info("retune %s: no usable history trial in %s; starting cold", rid, store.location)
            return 0
        from dataclasses import replace

        records = [replace(e.record, index=i) for i, e in enumerate(usable)]
        used = int(self.ctx.timed(opt.add_history, records))
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

    def append(self, rid: str) -> None:
        """Add the completed trials of retune `rid` to the trial store (errors are logged, not fatal)."""
        from actuators.host import Measurement as _M
        from tuner.optimize.records import TrialRecord
        from tuner.store.history import HistoryEntry, as_objective

        hw = self.hardware_class()
        entries = []
        with self.ctx.lock:
            rows = [
                t
                for t in self.ctx.state.trials
                if t.get("retune_id") == rid and t.get("status") == "completed" and t.get("measurement")
            ]
        for t in rows:
            try:
                m = _M.from_dict(t["measurement"])
                obj = as_objective(t.get("objective") or dict(self.ctx.policy().__dict__))
                rec = TrialRecord(
                    int(t["index"]),
                    t["point"],
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
                    rec, t.get("host") or self.host_label(), float(t["time"]), obj, hw.id if hw is not None else ""
                )
            )
        if not entries:
            return
        try:
            with self._guard:
                store = self._open()
                if hw is not None:
                    store.set_host(self.host_label(), hw.id, hw.to_dict())
                added, _ = store.add(entries)
        except TunerError as exc:
            log.warning("history store not updated: %s", exc)
            return
        log.info("history: %d trial(s) of %s added to %s", added, rid, store.location)


__all__ = ["TrialHistory"]
