"""Holding a decided point: measure a window at a time, count SLA violations, revert to the most recent
point measured within the SLA at this load or above (or the safe corner) when a window breaks SLA +
`guardrail_margin_pct`, and when the load leaves the band it was tuned for, either hold the recent model's
point for the new load without trials or ask for a retune -- `tuner.optimize.decision.hold_or_retune`, the rule
the replay's contextual tuner applies (`Guardrail.model_hold`).

A revert only ever moves to a point at least as safe as the one it leaves (`tuner.daemon.safer_points`: lower or
equal ITR and higher or equal frequency, and not the same point); below `tuning.idle_qps` the daemon holds the
idle point (lowest ITR, lowest frequency) and starts no retune until the load comes back."""

from __future__ import annotations

import logging
import math
import time
from typing import Any

from actuators.host import Measurement, OperatingPoint
from core.errors import TunerError, is_permanent
from tuner.config import PolicyConfig
from tuner.daemon.context import LoopContext
from tuner.daemon.model_tables import ModelTables
from tuner.daemon.observer import Observer
from tuner.daemon.plain import latency_at, measurement_dict, safe_corner
from tuner.daemon.safer_points import at_least_as_safe, idle_point
from tuner.optimize.decision import HoldCandidate, HoldVerdict, held_over
from tuner.optimize.safe_evidence import SAFE_LOAD_TOL

log = logging.getLogger("tuner.daemon.loop")  # one logger for the whole control loop (operators filter on it)

#: Holding windows in a row over the SLA (each within the guardrail's margin), at the held point with the load in
#: its band, that count as a breach: one such window is noise as often as not; three are the point failing there.
SUSTAINED_WINDOWS = 3


class Guardrail:
    """Holding a decided point, window by window (see the module docstring). The windows at the tuned point go
    to `observer` (savings); the model hold reads `models`."""

    def __init__(self, ctx: LoopContext, observer: Observer, models: ModelTables) -> None:
        self.ctx = ctx
        self.observer = observer
        self.models = models
        #: Holding windows in a row over the SLA at the held point, the load in its band.
        self.over_streak = 0

    def _measure_or_wait(self, what: str, *, interruptible: bool) -> tuple[Measurement, float] | None:
        """A window, or None after a transient failure (logged, then a window's wait); a permanent one raises."""
        ctx = self.ctx
        try:
            return ctx.measure()
        except Exception as exc:
            if ctx.stop.is_set():
                return None
            if is_permanent(exc):
                raise  # retrying cannot help: the loop stops tuning (Daemon._degrade)
            log.warning("measurement failed %s: %s", what, exc, exc_info=not isinstance(exc, TunerError))
            ctx.wait(ctx.config.tuning.window_s, interruptible=interruptible)
            return None

    def hold_window(self) -> None:
        """One holding window: kept, the guardrail acts on it, and the load decides between holding on, the idle
        point, a point from the model, or a retune (`Requests.load`)."""
        ctx = self.ctx
        ctx.set_loop_state("holding")
        got = self._measure_or_wait("while holding", interruptible=True)
        if got is None:
            return
        m, when = got
        self.note_window(m, when)
        idle = m.offered_qps < ctx.config.tuning.idle_qps
        held_reason = (ctx.state.held or {}).get("reason")
        held_idle = held_reason == "idle"
        reverted = self.check_sla(m, when)
        if reverted:
            pass  # the revert decided this window
        elif idle and held_reason not in ("idle", "guardrail"):  # a revert is kept: it is safer than idle
            self.hold_idle(m.offered_qps, "load fell below tuning.idle_qps")
        elif m.point is not None and m.point == ctx.current_point and not held_idle:
            self.observer.record_tuned(m)  # a window at the tuned point: counts toward the measured savings
        if held_idle and not idle:
            log.info("load %.0f QPS is back above idle (%g QPS): retuning", m.offered_qps, ctx.config.tuning.idle_qps)
            with ctx.lock:
                ctx.requests.load = True
        elif not idle and self.outside_band(m.offered_qps):
            self._left_band(m.offered_qps, held_reason)
        else:
            with ctx.lock:
                ctx.state.counters.setdefault("windows", 0)
                ctx.state.counters["windows"] += 1

    def _left_band(self, qps: float, held_reason: str | None) -> None:
        """The load left the band the held point was tuned for: hold the model's point for it, or retune."""
        tuned = self.ctx.state.tuned_qps
        band = self.ctx.config.tuning.load_change_pct / 100
        verdict = self.model_hold(qps)
        if verdict.hold and verdict.point is not None and held_reason != "guardrail":
            log.info("load %.0f QPS left the band %.0f ± %g%%: %s", qps, tuned, band * 100, verdict.reason)
            self.hold(self.ctx.apply(verdict.point), "model", verdict.reason, qps, tuned=True)
        else:
            log.info("load %.0f QPS left the band %.0f ± %g%%: retuning (%s)", qps, tuned, band * 100, verdict.reason)
            with self.ctx.lock:
                self.ctx.requests.load = True

    def check_sla(self, m: Measurement, when: float) -> bool:
        """Count an SLA violation; revert (`revert`) when the window broke SLA + margin, or when
        `SUSTAINED_WINDOWS` windows in a row at the held point, the load in its band, broke the SLA. True if it
        reverted."""
        ctx = self.ctx
        pol = ctx.policy()
        lat = m.latency_us.get(pol.percentile)
        steady_over = False
        if lat is not None and lat > pol.sla_us:
            load = "shifted" if self.outside_band(m.offered_qps) else "steady"
            ctx.metrics.violations.labels(load=load).inc()
            ctx.count("sla_violations")
            if load == "shifted":
                ctx.count("sla_violations:shifted")
            steady_over = load == "steady" and m.point is not None and m.point == ctx.current_point
        self.over_streak = self.over_streak + 1 if steady_over else 0
        if lat is not None and lat > pol.sla_us * (1 + ctx.config.tuning.guardrail_margin_pct / 100):
            self.over_streak = 0
            self.revert(m, when, lat, pol)
            return True
        if lat is not None and self.over_streak >= SUSTAINED_WINDOWS:
            self.over_streak = 0
            self.revert(m, when, lat, pol, streak=SUSTAINED_WINDOWS)
            return True
        return False

    def outside_band(self, qps: float) -> bool:
        """Whether load `qps` lies outside the band the held point was tuned for (`tuning.load_change_pct` around
        `tuned_qps`): a window that breaks the SLA there is a load shift the point was not chosen for (the daemon
        holds another point or retunes next), not a steady-state violation."""
        tuned = self.ctx.state.tuned_qps
        return tuned > 0 and abs(qps - tuned) > self.ctx.config.tuning.load_change_pct / 100 * tuned

    def guard_window(self) -> None:
        """One window while the loop waits for something else (an optimiser worker starting): measured, kept,
        and the guardrail acts on it; no idle hold and no retune trigger (a retune is already starting)."""
        got = self._measure_or_wait("while the optimiser starts", interruptible=False)  # a window, not a busy loop
        if got is not None:
            self.note_window(*got)
            self.check_sla(*got)

    def model_hold(self, qps: float) -> HoldVerdict:
        """`hold_or_retune` at `qps` with `tuning.hold_max_p` (contextual tuning only): the completed trials measured
        within the limit the optimiser's `best` applies (load, point), and as candidates the prediction table
        (`ModelTables`) of the newest retune tuned at a load no lower than `qps` (less `HOLD_LOAD_TOL`; the
        percentile rises with load, so its prediction is not optimistic) and within `HOLD_NEAR` of it, P(over the
        limit) from its mean and SEM x `safe_sd_scale` (normal). The newest, not the nearest in load: its model saw
        every trial before it, so it knows the points later retunes found at this load (the nearest could be a
        first retune's table that never saw them: a soak held 95.5 W at 590 kQPS where a later retune had measured a
        point at 79.9 W)."""
        from tuner.optimize.decision import HOLD_LOAD_TOL, HOLD_NEAR, hold_or_retune, outside_measured
        from tuner.optimize.settings import TunerSettings, met_limit_us

        t = self.ctx.config.tuning
        if not t.context or t.hold_max_p <= 0:
            return hold_or_retune(qps, (), (), max_p=0.0)
        pol = self.ctx.policy()
        limit = met_limit_us(pol.sla_us, TunerSettings())  # the worker's settings: default sla_check / margin
        with self.ctx.lock:
            rows = [r for r in self.ctx.state.trials if r.get("status") == "completed" and r.get("measurement")]
        measured = []
        for r in rows:
            md = r["measurement"]
            lat = latency_at(md, pol.percentile)
            if lat is not None and lat <= limit and r.get("point") is not None:
                measured.append((float(md.get("offered_qps") or 0.0), r["point"]))
        if outside_measured(qps, [q for q, _ in measured]) is not None:
            return hold_or_retune(qps, measured, (), max_p=t.hold_max_p)
        usable = [
            m
            for m in self.models.tables()
            if abs(m.percentile - pol.percentile) <= 1e-9
            and m.tuned_qps >= qps * (1 - HOLD_LOAD_TOL)
            and abs(m.tuned_qps - qps) <= HOLD_NEAR * qps
        ]
        candidates = []
        if usable:
            table = usable[-1]  # tables are kept in retune order
            broke = self.held_over_sla(pol)
            candidates = [
                c
                for c in table_candidates(table, limit, t.safe_sd_scale)
                if not held_over(c.point, qps, broke, SAFE_LOAD_TOL)
            ]
        return hold_or_retune(qps, measured, candidates, max_p=t.hold_max_p)

    def held_over_sla(self, pol: PolicyConfig) -> list[tuple[OperatingPoint, float]]:
        """(point, load) of the kept holding windows whose percentile's whole 95 % CI was over the SLA: a
        window is a measurement too, and one over the SLA outweighs the trial that vouched for its point."""
        with self.ctx.lock:
            windows = list(self.ctx.state.windows)
        out = []
        for w in windows:
            md = w.get("measurement") or {}
            ci = (md.get("latency_ci_us") or {}).get(f"{pol.percentile:g}")
            lat = latency_at(md, pol.percentile)
            p = w.get("point")
            if p is not None and lat is not None and min(lat, ci[0] if ci else lat) > pol.sla_us:
                out.append((p, float(w.get("qps") or 0.0)))
        return out

    def note_window(self, m: Measurement, when: float) -> None:
        """Keep a holding window (met the SLA or not) for `GetOperatingPoint` and the guardrail."""
        if m.point is None:
            return
        with self.ctx.lock:
            self.ctx.state.windows.append(
                {"point": m.point, "qps": m.offered_qps, "measurement": measurement_dict(m, when), "time": when}
            )
            if len(self.ctx.state.windows) % 20 == 0:
                self.ctx.save()

    def hold_idle(self, qps: float, why: str) -> None:
        """Hold the idle point (a decision of reason "idle"): no retune while the load is near zero."""
        point = self.ctx.apply(idle_point(self.ctx.knob_space))
        detail = f"{why} ({qps:.0f} < {self.ctx.config.tuning.idle_qps:g} QPS): holding {point}, no retune"
        log.info("idle: %s", detail)
        self.hold(point, "idle", detail, qps, tuned=False)

    def hold(self, point: OperatingPoint, reason: str, detail: str, qps: float, *, tuned: bool) -> None:
        """Hold the applied `point` without a trial (a decision of `reason`): recorded, saved and published;
        `tuned` re-centres the load band on `qps` and counts a model hold."""
        ctx = self.ctx
        decision: dict[str, Any] = {
            "retune_id": "",
            "reason": reason,
            "point": point,
            "met_sla": True,
            "detail": detail,
            "qps": qps,
            "time": time.time(),
            "measurement": None,
        }
        with ctx.lock:
            ctx.state.held = decision
            ctx.state.decisions.append(decision)
            if tuned:
                ctx.state.tuned_qps = qps
                ctx.state.counters["model_holds"] = int(ctx.state.counters.get("model_holds", 0)) + 1
            ctx.requests.load = False
            ctx.save()
        ctx.feed.publish(decision)

    def fallback_point(self, qps: float, exclude: OperatingPoint | None) -> tuple[OperatingPoint, str]:
        """The most recent point measured meeting the SLA at a load >= `qps` (−5 %) that is strictly safer than
        `exclude` (`tuner.daemon.safer_points`), else the safe corner."""
        ctx = self.ctx
        pol = ctx.policy()
        with ctx.lock:
            seen = [
                {
                    "point": t["point"],
                    "qps": t["measurement"]["offered_qps"],
                    "measurement": t["measurement"],
                    "time": t["time"],
                }
                for t in ctx.state.trials
                if t.get("status") == "completed" and t.get("measurement")
            ] + list(ctx.state.windows)
        goods = sorted(seen, key=lambda g: g["time"])
        for g in reversed(goods):
            p = g["point"]
            lat = latency_at(g.get("measurement") or {}, pol.percentile)
            if p is None or p == exclude or lat is None or lat > pol.sla_us or g["qps"] < 0.95 * qps:
                continue
            if exclude is not None and not at_least_as_safe(p, exclude):
                continue  # never revert to a point less safe than (or incomparable with) the one we leave
            try:
                return ctx.knob_space.check(p), f"met the SLA at {g['qps']:.0f} QPS ({lat:.0f} µs)"
            except TunerError:
                continue
        return safe_corner(ctx.knob_space), "safe corner (minimum ITR, maximum frequency)"

    def revert(self, m: Measurement, when: float, lat: float, pol: PolicyConfig, streak: int = 0) -> None:
        """Revert to `fallback_point`; `streak` > 0: the breach was that many windows in a row over the SLA
        (within the margin), not one window over SLA + margin."""
        ctx = self.ctx
        point, why = self.fallback_point(m.offered_qps, ctx.current_point)
        if point == ctx.current_point:
            log.warning(
                "guardrail: p%g %.0f µs > SLA %.0f µs but already at %s", pol.percentile, lat, pol.sla_us, point
            )
            return
        try:
            point = ctx.apply(point)
        except TunerError as exc:
            if is_permanent(exc):
                raise
            log.warning("guardrail: cannot revert to %s (%s); trying again after the next window", point, exc)
            return  # a transient fault (EBUSY ...) must not end the loop; the breach persists, so does the revert
        breach = (
            f"p{pol.percentile:g} over SLA {pol.sla_us:.0f} µs in {streak} windows in a row (last {lat:.0f} µs)"
            if streak
            else f"p{pol.percentile:g} {lat:.0f} µs > SLA {pol.sla_us:.0f} µs + "
            f"{ctx.config.tuning.guardrail_margin_pct:g}%"
        )
        decision: dict[str, Any] = {
            "retune_id": (ctx.state.held or {}).get("retune_id", ""),
            "reason": "guardrail",
            "point": point,
            "met_sla": False,
            "detail": f"{breach} at {m.offered_qps:.0f} QPS; reverted to {point}: {why}",
            "qps": m.offered_qps,
            "time": time.time(),
            "measurement": measurement_dict(m, when),
        }
        with ctx.lock:
            ctx.state.held = {**decision, "met_sla": True}
            ctx.state.decisions.append(decision)
            ctx.state.counters["guardrail_reverts"] = int(ctx.state.counters.get("guardrail_reverts", 0)) + 1
            ctx.save()
        ctx.metrics.reverts.inc()
        log.warning("guardrail: %s", decision["detail"])
        ctx.feed.publish(decision)


def table_candidates(table: Any, limit_us: float, sd_scale: float = 1.0) -> list[HoldCandidate]:
    """A prediction table's points as `hold_or_retune` candidates: P(percentile over `limit_us`) from the table's
    mean and SEM times `sd_scale` (the safety filter's `safe_sd_scale`) as a normal (a step where the SEM is 0);
    points with a non-finite prediction are left out."""
    out = []
    for p, lat, sem, pw in zip(table.points, table.latency_us, table.latency_sem, table.power_w):
        if not (math.isfinite(lat) and math.isfinite(pw)):
            continue
        sd = sem * sd_scale
        if math.isfinite(sd) and sd > 0:
            p_over = 0.5 * math.erfc((limit_us - lat) / (sd * math.sqrt(2.0)))
        else:
            p_over = 0.0 if lat <= limit_us else 1.0
        out.append(HoldCandidate(p, lat, p_over, pw))
    return out
