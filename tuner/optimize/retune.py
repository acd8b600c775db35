"""Driving a retune on a host: `run_trial` (suggest, apply, settle, measure a window, report) and
`run_retune` (trials until the budget or the stopping rule, then apply the best measured point; or, with
`hold_max_p`, no trial at all when the load is inside what the model has measured and it is confident there:
`Optimizer.hold_verdict`)."""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import replace

from actuators.host import Host, Measurement, OperatingPoint, apply_point
from core.errors import HostError, TunerError
from tuner.optimize.decision import Decision
from tuner.optimize.optimizer import Optimizer
from tuner.optimize.records import TrialRecord
from tuner.optimize.settings import TunerSettings


def run_trial(host: Host, optimizer: Optimizer, settings: TunerSettings) -> TrialRecord:
    """Suggest a point, apply it, settle (measured), measure a window and report; host errors -> failed trial.

    The window is `settings.window_s` long, or with `window_mode="adaptive"` sized by
    `tuner.optimize.windowing.measure_window`: grown until the percentile's CI is narrow enough (at most `window_s`),
    or ended after `window_min_s` once the estimate is above the limit `best` applies -- such a point can
    never be chosen (its CI's upper end would have to be within the limit), and measuring it longer only
    keeps users over or near the SLA -- or, the guard, after any chunk whose pooled CI is wholly above the SLA.
    """
    from tuner.optimize.windowing import WindowPolicy, guarded_settle, measure_window, settle_guard_policy

    measure: Callable[[], Measurement] = lambda: host.measure(settings.window_s)
    guard = None
    if settings.window_mode == "adaptive":
        policy = WindowPolicy.from_settings(
            settings,
            optimizer.objective.percentile,
            stop_above_us=optimizer.model.met_limit_us(),
            abort_above_us=optimizer.objective.sla_us if settings.window_guard else None,
        )
        measure = lambda: measure_window(host, policy)
        guard = settle_guard_policy(settings, policy)
    index, point = optimizer.suggest()
    settle: Measurement | None = None
    qps = math.nan
    try:
        qps = float(host.offered_qps())
        apply_point(host, point)
        settle, early = guarded_settle(host.measure, settings.settle_s, guard)
        m = early if early is not None else measure()
    except Exception as exc:  # noqa: BLE001 - any host failure fails this trial, not the run
        return optimizer.fail(index, f"{type(exc).__name__}: {exc}", settle=settle, qps=qps)
    return optimizer.complete(index, m, qps, settle=settle)


def run_retune(
    host: Host,
    optimizer: Optimizer,
    settings: TunerSettings,
    *,
    on_trial: Callable[[TrialRecord], None] | None = None,
    should_stop: Callable[[], bool] | None = None,
) -> Decision:
    """Start a retune at the host's offered load (`optimizer.begin_retune`), run up to `settings.trials`
    trials of it -- fewer if `should_stop()` or the optimiser's own stopping rule (`Optimizer.should_stop`)
    says so -- then apply `optimizer.best()`.

    With `settings.context` and `hold_max_p` > 0, first `optimizer.hold_verdict(qps)`: if the load is inside the
    loads measured within the limit and the model is confident of a point there, that point is applied and
    returned (`Decision.held`, no trial, no measurement); otherwise the trials run and the decision's reason
    starts with why the model could not hold.

    Each trial: apply point -> settle for `settle_s` (measured, so its energy is counted; with `settle_guard` its
    second half ends the trial if clearly over the SLA, `windowing.guarded_settle`) -> measure `window_s` ->
    report. A host exception marks that trial failed in Ax and the retune goes on. The decision is applied at the
    end; if applying it fails, `HostError` is raised.
    """
    try:
        qps = float(host.offered_qps())
    except Exception as exc:  # noqa: BLE001
        if settings.context:
            raise HostError(f"could not read the offered load: {type(exc).__name__}: {exc}") from None
        qps = math.nan
    optimizer.begin_retune(qps)
    if settings.context and settings.hold_max_p > 0:
        verdict = optimizer.hold_verdict(qps)
        if verdict.hold and verdict.point is not None:
            _apply(host, verdict.point)
            return Decision(verdict.point, None, True, verdict.reason, held=True)
        hold_note = f"retuned: {verdict.reason}; "
    else:
        hold_note = ""
    for _ in range(settings.trials):
        if should_stop is not None and should_stop():
            break
        if optimizer.should_stop()[0]:
            break
        rec = run_trial(host, optimizer, settings)
        if on_trial is not None:
            on_trial(rec)
    decision = optimizer.best()
    _apply(host, decision.point)
    return replace(decision, reason=hold_note + decision.reason) if hold_note else decision


def _apply(host: Host, point: OperatingPoint) -> None:
    try:
        apply_point(host, point)
    except TunerError:
        raise
    except Exception as exc:  # noqa: BLE001
        raise HostError(f"could not apply the chosen point {point}: {type(exc).__name__}: {exc}") from None
