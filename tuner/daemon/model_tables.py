"""The prediction tables of finished retunes (`ModelTables`): each retune's model over the knob grid (for
`GetOperatingPoint` and the model hold) and the newest model over a grid of loads (for `GetPowerCurve`),
computed once in the loop thread so an RPC never runs the model, and kept on disk beside the experiment."""

from __future__ import annotations

import logging
import math
from typing import Any

from actuators.host import OperatingPoint
from tuner.daemon.context import LoopContext
from tuner.daemon.optimizer_calls import supports
from tuner.daemon.plain import ModelTable
from tuner.daemon.powercurve import LoadTable, reduce_table, table_dict

log = logging.getLogger("tuner.daemon.loop")

#: ITR values sampled for the model's prediction table (all DVFS steps are used).
MODEL_ITR_SAMPLES = 48
#: One-sided 95 % z: a model point is recommended only if mean + Z * sem <= SLA.
MODEL_Z = 1.645
#: How many finished retunes keep a prediction table in memory.
MODEL_TABLES = 8


class ModelTables:
    """The newest `MODEL_TABLES` knob-grid tables by retune, and the newest multi-load table."""

    def __init__(self, ctx: LoopContext) -> None:
        self.ctx = ctx
        self._tables: dict[str, ModelTable] = {}
        self._load_table: LoadTable | None = None

    def tables(self) -> list[ModelTable]:
        """The knob-grid tables, oldest retune first."""
        with self.ctx.lock:
            return list(self._tables.values())

    def load_table(self) -> LoadTable | None:
        with self.ctx.lock:
            return self._load_table

    def put(self, table: ModelTable) -> None:
        """Keep `table` (the oldest beyond `MODEL_TABLES` are dropped)."""
        with self.ctx.lock:
            self._tables[table.retune_id] = table
            for old in list(self._tables)[:-MODEL_TABLES]:
                del self._tables[old]

    def prepare(self) -> None:
        """Load the tables of the last retunes and the newest multi-load table (plain JSON: no optimiser)."""
        ctx = self.ctx
        for rid in reversed(ctx.state.experiments):
            data = ctx.store.load_load_table(rid)
            if not data:
                continue
            try:
                loads = reduce_table(rid, float(data["percentile"]), data, z=MODEL_Z)
            except (KeyError, TypeError, ValueError) as exc:
                log.warning("ignoring the multi-load table of %s: %s", rid, exc)
                continue
            with ctx.lock:
                self._load_table = loads
            break
        for rid in list(ctx.state.experiments)[-MODEL_TABLES:]:
            data = ctx.store.load_table(rid)
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
            self.put(table)

    def _grid(self) -> list[OperatingPoint]:
        """The knob grid the table predicts over: `MODEL_ITR_SAMPLES` ITRs x every DVFS step, and every point a
        completed trial measured (only those can be held from the model: `Guardrail.model_hold`)."""
        space = self.ctx.knob_space
        step = max(1, len(space.itr_us) // MODEL_ITR_SAMPLES)
        itrs = sorted(set(space.itr_us[::step]) | {space.itr_us[-1]})
        points = [OperatingPoint(i, f) for i in itrs for f in space.dvfs_ghz]
        with self.ctx.lock:
            tried = {t["point"] for t in self.ctx.state.trials if t.get("status") == "completed" and t.get("point")}
        known = set(points)
        for p in sorted(tried, key=lambda p: (p.itr_us, p.dvfs_ghz)):
            if p not in known and p.itr_us in space.itr_us and p.dvfs_ghz in space.dvfs_ghz:
                points.append(p)
                known.add(p)
        return points

    def build(self, rid: str, opt: Any, tuned_qps: float, pct: float) -> None:
        """Predict over the grid once (in the loop thread) so `GetOperatingPoint` never runs the model."""
        points = self._grid()
        try:
            preds = self.ctx.timed(opt.predict, points)
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
        self.ctx.store.save_table(
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
        self.put(table)
        self._build_load_table(rid, opt, pct)

    def _build_load_table(self, rid: str, opt: Any, pct: float) -> None:
        """The newest model over a grid of loads (context mode), reduced to the points that can be best and kept
        (in memory and on disk) for this retune only; an optimiser without `predict_loads` has none."""
        if not supports(opt, "predict_loads"):
            return
        try:
            data = self.ctx.timed(opt.predict_loads)
            table = reduce_table(rid, pct, data, z=MODEL_Z) if data else None
        except Exception as exc:  # noqa: BLE001 - the power curve is a read-out: a retune never fails over it
            log.warning("no multi-load table for %s: %s", rid, exc)
            return
        if table is None:
            log.info("no multi-load table for %s (no fitted model, or not in context mode)", rid)
            return
        self.ctx.store.save_load_table(rid, table_dict(table))
        with self.ctx.lock:
            self._load_table = table
        log.info(
            "multi-load table of %s: %d loads x %d of %d points kept, %.2f s CPU in the worker",
            rid,
            len(table.loads_qps),
            len(table.points),
            len(data["points"]),
            float(data.get("cpu_s", math.nan)),
        )
