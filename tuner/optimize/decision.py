"""What a retune settles on: the best MEASURED point of it that met the SLA (`best_decision`), never a
modelled one; and whether a new load needs a retune at all (`hold_or_retune`: inside the loads measured, a
confident model's point is held without trials), the one rule the replay's contextual tuner and the daemon's
load-shift check share."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, replace

from actuators.host import KnobSpace, Measurement, OperatingPoint
from tuner.optimize.records import STATUS_COMPLETED, STATUS_FAILED, TrialRecord
from tuner.optimize.settings import Objective, TunerSettings, final_limit_us, pct_text


@dataclass(frozen=True)
class Decision:
    """The point a retune settles on, its measured window, whether that met the SLA, and why it was chosen."""

    point: OperatingPoint
    measurement: Measurement | None
    met_sla: bool
    reason: str
    # held from the model without a trial (`hold_or_retune`): `met_sla` is then the model's confident prediction,
    # not a measurement
    held: bool = False
    # met the SLA by the point estimate only (no trial passed the final choice's CI rule): the stopping rule and
    # the expected improvement do not count it as an incumbent, so the retune goes on looking for a sure point
    by_estimate: bool = False


def best_decision(
    retune_trials: Sequence[TrialRecord], objective: Objective, settings: TunerSettings, space: KnobSpace
) -> Decision:
    """The best MEASURED point of `retune_trials` (the current retune's) that met the SLA (lowest reward); if none did, the
    safest measured point.

    A trial whose settle read over the SLA (`settle_within`) never counts as meeting it, nor does one at a point
    another trial of the retune read over the SLA at. With `sla_check="ci"`
    (default) a trial meets the SLA when the upper end of its percentile's 95 % CI does; if no trial does but some
    have their point estimate within the SLA, the best of those is taken (and the reason says so). "Safest" =
    lowest measured percentile (ties: lower power). With no completed trial at all, the host's safe corner (lowest
    ITR, highest frequency) is returned, `measurement=None`.
    """
    done = [r for r in retune_trials if r.status == STATUS_COMPLETED and r.measurement is not None]
    obj = objective
    pct = obj.percentile
    label = f"{pct_text(pct)} <= {obj.sla_us:g} µs"
    # a trial whose settle read over the SLA is not held, whatever its window read: near the cliff a point's
    # seconds differ by more than their CIs say (bundled day, seed 5: a settle at 710 µs, its window under 475 µs,
    # the hour held there at 503 µs)
    # nor a point another trial of this retune read over the SLA at: two readings of one point that disagree
    # across the SLA say it sits at the SLA (cliff plant, 99.9:500, expand_ei_pct 1: 490 then 504 µs, held: 509 µs)
    over = {r.point for r in done if not obj.met(r.measurement)}  # type: ignore[arg-type]
    met = [
        r
        for r in done
        if r.point not in over and obj.met(r.measurement) and settle_within(r, obj)  # type: ignore[arg-type]
    ]
    strict = replace(obj, sla_us=final_limit_us(objective.sla_us, settings))  # used only with sla_check="ci"
    margin = f" less {settings.final_margin_pct:g} %" if settings.final_margin_pct else ""
    widen = 1.0 + settings.final_margin_ci
    ci = f"{widen:g} x its 95 % CI half-width" if settings.final_margin_ci else "its 95 % CI"
    sure = [r for r in met if strict.met_confidently(r.measurement, widen)]  # type: ignore[arg-type]
    pool, how = (sure, f"with {ci}{margin}") if settings.sla_check == "ci" and sure else (met, "")
    if settings.sla_check == "ci" and not sure and met:
        rule = "CI" if widen == 1.0 else f"estimate + {widen:g} x its 95 % CI half-width"
        how = f"by its estimate only: no trial's {rule} was within the SLA{margin}"
    if pool:
        r = min(pool, key=lambda r: (r.reward, r.measurement.percentile(pct), r.index))  # type: ignore[union-attr]
        m = r.measurement
        assert m is not None
        return Decision(
            r.point,
            m,
            True,
            f"best measured point meeting {label}{' ' + how if how else ''} "
            f"({len(pool)} of {len(done)} trials did): "
            f"{pct_text(pct)} {m.percentile(pct):.0f} µs, {m.power_w:.1f} W",
            by_estimate=settings.sla_check == "ci" and not sure,
        )
    if done:
        r = min(done, key=lambda r: (r.measurement.percentile(pct), r.measurement.power_w, r.index))  # type: ignore[union-attr]
        m = r.measurement
        assert m is not None
        return Decision(
            r.point,
            m,
            False,
            f"no measured point met {label} in {len(done)} trial(s); applying the safest measured "
            f"point ({pct_text(pct)} {m.percentile(pct):.0f} µs)",
        )
    safe = OperatingPoint(space.itr_us[0], space.dvfs_ghz[-1])
    n_failed = sum(1 for r in retune_trials if r.status == STATUS_FAILED)
    return Decision(safe, None, False, f"no trial completed ({n_failed} failed); applying the safe corner {safe}")


def settle_within(r: TrialRecord, objective: Objective) -> bool:
    """Whether trial `r`'s settle (its seconds right after the knob change, measured) read within the SLA by its
    estimate; True without a settle or a reading of the percentile."""
    m = r.settle
    if m is None or objective.percentile not in m.latency_us:
        return True
    return not math.isfinite(m.percentile(objective.percentile)) or objective.met(m)


def exploration_settings(settings: TunerSettings) -> TunerSettings:
    """`settings` with the final choice's rule set to the one exploration aims within (the CI as measured, within
    the SLA less `sla_margin_pct`): the incumbent the stopping rule and the expected improvement improve on. A
    final choice that holds points closer to the SLA (`final_margin_pct`, `final_margin_ci`) would otherwise give
    them a cheaper incumbent and send exploration further toward the latency cliff, where the model is
    overconfident (bench/replay.py: 2.7-4.2 % of trial time above the SLA instead of ~0.6 %)."""
    return replace(settings, final_margin_pct=settings.sla_margin_pct, final_margin_ci=0.0)


# ------------------------------------------------------------------------------------------ hold or retune
#: `hold_or_retune`: a load within this share above the highest (below the lowest) load measured within the limit
#: still counts as inside the measured range (the offered load of one setting wobbles by about this much).
HOLD_LOAD_TOL = 0.02
#: ... and some load measured within the limit must lie within this share of the new load: a wide gap between two
#: measured loads is not "measured" (the model interpolates across it, but nothing vouches for it).
HOLD_NEAR = 0.10


@dataclass(frozen=True)
class HoldCandidate:
    """A point the model predicts at the new load: its latency percentile (µs), P(percentile over the limit `best`
    applies) and power (W), as the caller's model computes them."""

    point: OperatingPoint
    latency_us: float
    p_over: float
    power_w: float


@dataclass(frozen=True)
class HoldVerdict:
    """`hold_or_retune`'s answer: hold `point` (no trial) or retune, and why."""

    hold: bool
    point: OperatingPoint | None
    reason: str
    candidate: HoldCandidate | None = None


def hold_or_retune(
    qps: float,
    measured: Sequence[tuple[float, OperatingPoint]],
    candidates: Sequence[HoldCandidate],
    *,
    max_p: float,
    load_tol: float = HOLD_LOAD_TOL,
    near: float = HOLD_NEAR,
) -> HoldVerdict:
    """Whether a new load `qps` can be served from the model without trials (pure; the replay's contextual tuner and
    the daemon's load-shift check both decide with it).

    `measured`: (load, point) of every measurement within the limit. Hold when all of: `max_p` > 0 (0 turns holding
    off); `qps` lies inside the loads measured (no higher than the highest by more than `load_tol`, no lower than the
    lowest by more than `load_tol`), with one of them within `near` of `qps`; and a candidate that was itself
    measured within the limit at this load or above (less `load_tol`: the percentile rises with load, so such a
    point vouches for this load) has P(over the limit) at most `max_p`. The point held is the lowest predicted power
    among those. Anything else -- nothing measured, a load above (a new peak) or below the measured range or in a
    gap of it, no model, no such point, a model not confident enough -- retunes, with the reason. (Holding any point
    the model deemed safe, measured or not, broke a 200 µs SLA in 3 of 288 five-minute windows: the model put 157 µs
    where 214 µs was measured.)
    """
    if not max_p > 0:
        return HoldVerdict(False, None, "holding from the model is off")
    loads = _loads([q for q, _ in measured])
    outside = outside_measured(qps, loads, load_tol=load_tol, near=near)
    if outside is not None:
        return HoldVerdict(False, None, outside)
    lo, hi = loads[0], loads[-1]
    nearest = min(loads, key=lambda q: abs(q - qps))
    if not candidates:
        return HoldVerdict(False, None, f"no model prediction at {qps:.0f} QPS")
    vouched = {p for q, p in measured if q >= qps * (1 - load_tol)}
    candidates = [c for c in candidates if c.point in vouched]
    if not candidates:
        return HoldVerdict(
            False, None, f"no point the model predicts was measured within the limit at {qps:.0f} QPS or above"
        )
    sure = [c for c in candidates if math.isfinite(c.p_over) and c.p_over <= max_p and math.isfinite(c.power_w)]
    if not sure:
        p = min((c.p_over for c in candidates if math.isfinite(c.p_over)), default=math.nan)
        return HoldVerdict(
            False, None, f"model not confident at {qps:.0f} QPS: lowest P(over the limit) {p:.3f} > {max_p:g}"
        )
    c = min(sure, key=lambda c: (c.power_w, c.p_over, -c.point.itr_us, c.point.dvfs_ghz))
    return HoldVerdict(
        True,
        c.point,
        f"held from the model, no trial: load {qps:.0f} QPS inside the measured {lo:.0f}-{hi:.0f} "
        f"(nearest {nearest:.0f}); {c.point} predicted {c.latency_us:.0f} µs, P(over the limit) {c.p_over:.3f} "
        f"<= {max_p:g}, {c.power_w:.1f} W",
        c,
    )


def held_over(
    point: OperatingPoint, qps: float, broke: Sequence[tuple[OperatingPoint, float]], load_tol: float
) -> bool:
    """Whether a window held at `point`'s ITR, at its frequency or a higher one, broke the SLA (`broke`: point,
    load) at a load at most `qps` x (1 + `load_tol`): a slower core or a higher load can only do worse (pure;
    the replay's optimiser and the daemon's load-shift check both leave such points out of a hold)."""
    top = qps * (1 + load_tol)
    return any(p.itr_us == point.itr_us and p.dvfs_ghz >= point.dvfs_ghz - 5e-4 and q <= top for p, q in broke)


def _loads(measured_loads: Sequence[float]) -> list[float]:
    return sorted(q for q in measured_loads if math.isfinite(q) and q > 0)


def outside_measured(
    qps: float, measured_loads: Sequence[float], *, load_tol: float = HOLD_LOAD_TOL, near: float = HOLD_NEAR
) -> str | None:
    """Why `qps` is not inside the loads measured within the limit (`hold_or_retune`'s load test), None if it is
    (pure; callers check it before asking a model about the load)."""
    if not (math.isfinite(qps) and qps > 0):
        return f"offered load {qps!r} unknown"
    loads = _loads(measured_loads)
    if not loads:
        return "no load measured within the limit yet"
    lo, hi = loads[0], loads[-1]
    if qps > hi * (1 + load_tol):
        return f"load {qps:.0f} QPS above the highest measured within the limit ({hi:.0f})"
    if qps < lo * (1 - load_tol):
        return f"load {qps:.0f} QPS below the lowest measured within the limit ({lo:.0f})"
    nearest = min(loads, key=lambda q: abs(q - qps))
    if abs(nearest - qps) > near * qps:
        return f"no load within {near * 100:g} % of {qps:.0f} QPS measured within the limit (nearest {nearest:.0f})"
    return None
