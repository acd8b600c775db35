"""What the daemon reports to RPC threads (`GetStatus`, `ListTrials`, `GetOperatingPoint`, `GetPowerCurve`):
a typed snapshot (`DaemonStatus`) taken under the lock, the kept trials, and answers from the measured windows
and the prediction tables of finished retunes (`ModelTables`: an RPC never runs the model)."""

from __future__ import annotations

import math
import time
from dataclasses import dataclass
from typing import Any

from actuators.host import OperatingPoint
from core.errors import InputError
from tuner.config import PolicyConfig
from tuner.daemon.baseline import Savings
from tuner.daemon.context import LoopContext
from tuner.daemon.host_warnings import HostWarnings
from tuner.daemon.model_tables import MODEL_Z, ModelTables
from tuner.daemon.observer import Observer
from tuner.daemon.plain import VERSION, ModelTable, latency_at, latency_sem_at, mean_sem, safe_corner, validate_policy
from tuner.daemon.powercurve import Curve, LoadTable, curve_loads, load_curve, power_curve


@dataclass(frozen=True)
class DaemonStatus:
    """One consistent snapshot of the daemon (`GetStatus`, `tuner ctl status`). Fields named as in the
    `tuner.v1.Status` message are copied to it by name (`tuner.daemon.service.status_msg`)."""

    state: str
    point: OperatingPoint | None
    offered_qps: float
    last_measurement: dict[str, Any] | None
    policy: PolicyConfig
    tuned_qps: float
    band_low_qps: float
    band_high_qps: float
    retune_id: str
    retune_trials_done: int
    retune_trials_planned: int
    retune_history_trials: int
    last_retune_time: float
    next_retune_time: float
    trials_total: int
    guardrail_reverts_total: int
    sla_violations_total: int
    sla_violations_steady_total: int
    host: str
    version: str
    uptime_s: float
    mode: str
    warnings: tuple[str, ...]
    savings: Savings | None
    baseline: tuple[dict[str, Any], ...]


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


class StatusReader:
    """The read side of the daemon (see the module docstring); safe to call from any thread."""

    def __init__(self, ctx: LoopContext, observer: Observer, warnings: HostWarnings, models: ModelTables) -> None:
        self.ctx = ctx
        self.observer = observer
        self.warnings = warnings
        self.models = models
        self.started_at = time.time()

    def status(self) -> DaemonStatus:
        ctx = self.ctx
        with ctx.lock:
            s = ctx.state
            held = s.held or {}
            band = ctx.config.tuning.load_change_pct / 100
            cur = s.current_retune or {}
            violations = int(s.counters.get("sla_violations", 0))
            return DaemonStatus(
                state=ctx.loop_state,
                point=ctx.current_point,
                offered_qps=(ctx.last_measurement or {}).get("offered_qps", 0.0),
                last_measurement=ctx.last_measurement,
                policy=ctx.policy(),
                tuned_qps=s.tuned_qps,
                band_low_qps=s.tuned_qps * (1 - band) if s.tuned_qps else 0.0,
                band_high_qps=s.tuned_qps * (1 + band) if s.tuned_qps else 0.0,
                retune_id=cur.get("id") or held.get("retune_id", ""),
                retune_trials_done=ctx.progress.done,
                retune_trials_planned=ctx.progress.planned,
                retune_history_trials=ctx.progress.history_trials,
                last_retune_time=s.last_retune_time,
                next_retune_time=s.last_retune_time + ctx.config.tuning.retune_period_s if s.last_retune_time else 0.0,
                trials_total=int(s.counters.get("trials", 0)),
                guardrail_reverts_total=int(s.counters.get("guardrail_reverts", 0)),
                sla_violations_total=violations,
                sla_violations_steady_total=max(0, violations - int(s.counters.get("sla_violations:shifted", 0))),
                host=str(getattr(ctx.host, "name", ctx.config.host.spec)),
                version=VERSION,
                uptime_s=time.time() - self.started_at,
                mode=ctx.mode,
                warnings=tuple(self.warnings.lines()),
                savings=self.observer.savings,
                baseline=tuple(self.observer.baseline_rows()),
            )

    def trials(self, limit: int = 0, retune_id: str = "") -> list[dict[str, Any]]:
        with self.ctx.lock:
            rows = [t for t in self.ctx.state.trials if not retune_id or t.get("retune_id") == retune_id]
            return [dict(t) for t in (rows[-limit:] if limit else rows)]

    def latest_decision(self) -> dict[str, Any] | None:
        with self.ctx.lock:
            return self.ctx.state.decisions[-1] if self.ctx.state.decisions else None

    def _query_policy(self, sla_us: Any, percentile: Any) -> PolicyConfig:
        """The policy's SLA and percentile unless given (0 = the policy's); `InputError` if a field is bad."""
        pol = self.ctx.policy()
        return validate_policy(
            pol.sla_us if not sla_us else sla_us, pol.percentile if not percentile else percentile, pol.reward
        )

    def power_curve(
        self, sla_us: Any = 0.0, percentile: Any = 0.0, qps_min: Any = 0.0, qps_max: Any = 0.0, points: Any = 0
    ) -> Curve:
        """`curve_answer` from this daemon's policy and prediction tables."""
        policy = self._query_policy(sla_us, percentile)
        return curve_answer(policy, self.models.tables(), self.models.load_table(), qps_min, qps_max, points)

    def operating_point(self, qps: Any, sla_us: Any = 0.0, percentile: Any = 0.0) -> PointAnswer:
        """Best known point for load `qps` under `sla_us` at `percentile` (0 = policy's): measured within the
        load band, else a recent model's, else the safe corner; `InputError` if a field is bad."""
        if isinstance(qps, bool) or not isinstance(qps, (int, float)) or not math.isfinite(qps) or not 0 < qps <= 1e10:
            raise InputError(f"qps: expected a finite load in (0, 1e10] requests/s, got {qps!r}")
        policy = self._query_policy(sla_us, percentile)
        sla, pct = policy.sla_us, policy.percentile
        best = self._measured_answer(qps, sla, pct)
        if best is not None:
            return best
        answer, note = self._model_answer(qps, sla, pct)
        if answer is not None:
            return answer
        space = self.ctx.space
        corner = safe_corner(space) if space else OperatingPoint(0, 0.0)
        note += "; returning the safe corner (minimum ITR, maximum frequency)"
        return PointAnswer(corner, 0.0, 0.0, 0.0, 0.0, False, False, 0.0, "safe corner", note)

    def _measured_answer(self, qps: float, sla: float, pct: float) -> PointAnswer | None:
        """The lowest-power point whose windows within the load band (trials and holding, met or not) meet the
        SLA by the one-sided 95 % rule; None when none does."""
        band = self.ctx.config.tuning.load_change_pct / 100
        with self.ctx.lock:
            trials = [t for t in self.ctx.state.trials if t.get("measurement") and t.get("status") == "completed"]
            goods = list(self.ctx.state.windows)
        groups: dict[OperatingPoint, list[dict]] = {}
        for row in trials + goods:
            md = row.get("measurement")
            if md and row.get("point") is not None and abs(md["offered_qps"] - qps) <= band * qps:
                groups.setdefault(row["point"], []).append(md)
        best: PointAnswer | None = None
        for point, mds in groups.items():
            lats = [v for md in mds if (v := latency_at(md, pct)) is not None]
            if len(lats) < len(mds) or any(md.get("power_w") is None for md in mds):
                continue  # no power measured (no RAPL): nothing to recommend it by
            lat, lat_sem = mean_sem(lats, [latency_sem_at(md, pct) for md in mds])
            pw, pw_sem = mean_sem([md["power_w"] for md in mds], None)
            if lat + MODEL_Z * lat_sem > sla:  # same one-sided 95 % rule as for the model
                continue
            if best is None or pw < best.power_w:
                note = (
                    ""
                    if len(mds) > 1
                    else "one window: latency uncertainty from its order-statistic CI; power uncertainty needs "
                    ">= 2 windows (reported as 0)"
                )
                tuned = sum(md["offered_qps"] for md in mds) / len(mds)
                best = PointAnswer(
                    point, lat, lat_sem, pw, pw_sem, True, True, tuned, f"{len(mds)} measured window(s)", note
                )
        return best

    def _model_answer(self, qps: float, sla: float, pct: float) -> tuple[PointAnswer | None, str]:
        """The model of the retune tuned nearest to `qps` (only at the percentile it was trained on): its
        lowest-power point whose upper 95 % bound meets the SLA; (None, why not) when there is none."""
        band = self.ctx.config.tuning.load_change_pct / 100
        models = self.models.tables()
        near = sorted((m for m in models if abs(m.tuned_qps - qps) <= band * qps), key=lambda m: abs(m.tuned_qps - qps))
        note = "no measured point meets the SLA within the load band"
        for m in near:
            if abs(m.percentile - pct) > 1e-9:
                note += f"; model {m.retune_id} predicts p{m.percentile:g} only"
                continue
            idx = [i for i in range(len(m.points)) if m.latency_us[i] + MODEL_Z * m.latency_sem[i] <= sla]
            if idx:
                i = min(idx, key=lambda j: m.power_w[j])
                source = f"model of retune {m.retune_id}"
                return (
                    PointAnswer(
                        m.points[i],
                        m.latency_us[i],
                        m.latency_sem[i],
                        m.power_w[i],
                        m.power_sem[i],
                        False,
                        True,
                        m.tuned_qps,
                        source,
                        "predicted; upper 95% bound meets the SLA",
                    ),
                    note,
                )
        return None, note


def curve_answer(
    policy: PolicyConfig,
    tables: list[ModelTable],
    table: LoadTable | None,
    qps_min: Any = 0.0,
    qps_max: Any = 0.0,
    points: Any = 0,
) -> Curve:
    """The best point's predicted power and latency by load under `policy`'s SLA and percentile
    (`tuner.daemon.powercurve`). `qps_min`, `qps_max`, `points` all 0: at each load of the knob-grid `tables`;
    any set: at `points` loads from `qps_min` to `qps_max` from the multi-load `table` (0 = its loads).
    `InputError` if a field is bad."""
    sla, pct = policy.sla_us, policy.percentile
    if not (qps_min or qps_max or points):
        curve, note = power_curve(tables, sla, pct)
        return Curve(sla, pct, curve, note)
    loads = curve_loads(qps_min, qps_max, points, table)
    if table is None:
        note = "no multi-load model yet (it needs tuning.context and a finished retune with a fitted model)"
        return Curve(sla, pct, [], note)
    if abs(table.percentile - pct) > 1e-9:
        return Curve(sla, pct, [], f"model {table.retune_id} predicts p{table.percentile:g} only", table.measured_qps)
    note = "" if table.measured_qps else "no load of this host measured in the model: every load extrapolated"
    return Curve(sla, pct, load_curve(table, loads, sla, z=MODEL_Z), note, table.measured_qps)
