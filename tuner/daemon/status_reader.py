"""What the daemon reports to RPC threads (`GetStatus`, `ListTrials`, `WatchDecisions`, `GetOperatingPoint`):
snapshots taken under the lock, and the prediction tables of finished retunes, computed once in the loop
thread so an RPC never runs the model."""

from __future__ import annotations

import logging
import math
import queue
import time
from dataclasses import dataclass
from typing import Any

from actuators.host import OperatingPoint
from core.errors import InputError
from tuner.daemon.observe import Observing
from tuner.daemon.plain import VERSION, ModelTable, latency_at, latency_sem_at, mean_sem, safe_corner, validate_policy
from tuner.daemon.powercurve import Curve, curve_loads, load_curve, power_curve, reduce_table, table_dict

log = logging.getLogger("tuner.daemon.loop")  # one logger for the whole control loop (operators filter on it)

#: ITR values sampled for the model's prediction table (all DVFS steps are used).
MODEL_ITR_SAMPLES = 48
#: One-sided 95 % z: a model point is recommended only if mean + Z * sem <= SLA.
MODEL_Z = 1.645
#: How many finished retunes keep a prediction table in memory.
MODEL_TABLES = 8


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


class DaemonReads(Observing):
    """The read side of the daemon and its prediction tables (see the module docstring)."""

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
                "sla_violations_steady_total": max(
                    0, int(s.counters.get("sla_violations", 0)) - int(s.counters.get("sla_violations:shifted", 0))
                ),
                "host": getattr(self.host, "name", self.config.host.spec),
                "version": VERSION,
                "uptime_s": time.time() - self._started_at,
                "mode": self.mode_label,
                "warnings": [w for lines in self._warnings.values() for w in lines],
                "savings": self.savings,
                "baseline": self.baseline_rows(),
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

    def power_curve(
        self, sla_us: Any = 0.0, percentile: Any = 0.0, qps_min: Any = 0.0, qps_max: Any = 0.0, points: Any = 0
    ) -> Curve:
        """The best point's predicted power and latency by load (`tuner.daemon.powercurve`); 0 = the policy's SLA
        / percentile. `qps_min`, `qps_max`, `points` all 0: at each load a recent retune's model knows; any set:
        at `points` loads from `qps_min` to `qps_max` from the newest multi-load table (0 = its loads).
        `InputError` if a field is bad."""
        pol = self.policy()
        policy = validate_policy(
            pol.sla_us if not sla_us else sla_us, pol.percentile if not percentile else percentile, pol.reward
        )
        sla, pct = policy.sla_us, policy.percentile
        with self._lock:
            tables = list(self._models.values())
            table = self._load_table
        if not (qps_min or qps_max or points):
            curve, note = power_curve(tables, sla, pct)
            return Curve(sla, pct, curve, note)
        loads = curve_loads(qps_min, qps_max, points, table)
        if table is None:
            note = "no multi-load model yet (it needs tuning.context and a finished retune with a fitted model)"
            return Curve(sla, pct, [], note)
        if abs(table.percentile - pct) > 1e-9:
            return Curve(
                sla, pct, [], f"model {table.retune_id} predicts p{table.percentile:g} only", table.measured_qps
            )
        note = "" if table.measured_qps else "no load of this host measured in the model: every load extrapolated"
        return Curve(sla, pct, load_curve(table, loads, sla, z=MODEL_Z), note, table.measured_qps)

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
            lats = [v for md in mds if (v := latency_at(md, pct)) is not None]
            if len(lats) < len(mds) or any(md.get("power_w") is None for md in mds):
                continue  # no power measured (no RAPL): nothing to recommend it by
            lat, lat_sem = mean_sem(lats, [latency_sem_at(md, pct) for md in mds])
            pw, pw_sem = mean_sem([md["power_w"] for md in mds], None)
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

    def _prepare_models(self) -> None:
        """Load the prediction tables of the last retunes and the newest multi-load table (plain JSON: no
        optimiser needed)."""
        for rid in reversed(self.state.experiments):
            data = self.store.load_load_table(rid)
            if not data:
                continue
            try:
                loads = reduce_table(rid, float(data["percentile"]), data, z=MODEL_Z)
            except (KeyError, TypeError, ValueError) as exc:
                log.warning("ignoring the multi-load table of %s: %s", rid, exc)
                continue
            with self._lock:
                self._load_table = loads
            break
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
        space = self.knob_space
        step = max(1, len(space.itr_us) // MODEL_ITR_SAMPLES)
        itrs = sorted(set(space.itr_us[::step]) | {space.itr_us[-1]})
        points = [OperatingPoint(i, f) for i in itrs for f in space.dvfs_ghz]
        # and every point a completed trial measured: only those can be held from the model (`_model_hold`)
        with self._lock:
            tried = {tuple(t["point"]) for t in self.state.trials if t.get("status") == "completed" and t.get("point")}
        known = set(points)
        for itr, ghz in sorted(tried):
            p = OperatingPoint(int(itr), float(ghz))
            if p not in known and int(itr) in space.itr_us and float(ghz) in space.dvfs_ghz:
                points.append(p)
                known.add(p)
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
        self._load_model_table(rid, opt, pct)

    def _load_model_table(self, rid: str, opt: Any, pct: float) -> None:
        """The newest model over a grid of loads (context mode), reduced to the points that can be best and kept
        (in memory and on disk) for this retune only; an optimiser without `predict_loads` has none."""
        check = getattr(opt, "supports", None)  # a worker proxy says; an in-process optimiser has it or not
        if not (check("predict_loads") if callable(check) else callable(getattr(opt, "predict_loads", None))):
            return
        try:
            data = self._timed(opt.predict_loads)
            table = reduce_table(rid, pct, data, z=MODEL_Z) if data else None
        except Exception as exc:  # noqa: BLE001 - the power curve is a read-out: a retune never fails over it
            log.warning("no multi-load table for %s: %s", rid, exc)
            return
        if table is None:
            log.info("no multi-load table for %s (no fitted model, or not in context mode)", rid)
            return
        self.store.save_load_table(rid, table_dict(table))
        with self._lock:
            self._load_table = table
        log.info(
            "multi-load table of %s: %d loads x %d of %d points kept, %.2f s CPU in the worker",
            rid,
            len(table.loads_qps),
            len(table.points),
            len(data["points"]),
            float(data.get("cpu_s", math.nan)),
        )
