"""Drift: the faster-host CUSUM (`tuner.optimize.drift`) and the optimiser retiring the trials before a run of
trials faster than its model predicts (`TunerSettings.drift_h`)."""

from __future__ import annotations

import pytest

from actuators.host import OperatingPoint
from tests.optimize_fakes import OBJ, SMALL, ctx, meas
from tuner.optimize.drift import Cusum, alarmed, cusum_step
from tuner.optimize.optimizer import Optimizer
from tuner.optimize.records import Pending, TrialRecord

P = OperatingPoint(50, 2.0)
Q = OperatingPoint(98, 2.0)


def _run(zs: list[float], start: int = 0) -> Cusum:
    state = Cusum()
    for k, z in enumerate(zs):
        state = cusum_step(state, start + k, z)
    return state


def test_trials_faster_than_predicted_add_up_from_the_first_of_their_run():
    state = _run([0.5, -3.0, -4.0, -2.5], start=10)
    assert state.total == pytest.approx(2.0 + 3.0 + 1.5) and state.start == 11
    assert alarmed(state, 6.0) and not alarmed(state, 7.0) and not alarmed(state, 0.0)


def test_within_the_allowance_or_slower_the_sum_returns_to_zero():
    assert _run([-3.0, 2.5]) == Cusum()  # 2 - 2.5 + ... <= 0: the run ended
    assert _run([-0.9, -0.5, 3.0]) == Cusum()
    assert _run([-3.0, -0.5, -3.0]).start == 0  # a trial within the allowance keeps the run going
    assert _run([5.0, 8.0]) == Cusum()  # slower than predicted never counts


def _run_at(opt: Optimizer, point: OperatingPoint, p99: float, qps: float) -> TrialRecord:
    """Hand out a trial at `point` as the safety filter's substitutions do, and report `p99` at `qps`."""
    load = opt.settings.load_of(qps)
    cell = opt.model.cell_of(point)
    index = opt.book.hand_out(Pending(opt.model.grid_point(cell), 0.0, opt.model.attach(cell, load), load))
    return opt.complete(index, meas(p99, 30, qps=qps), qps)


def _faster_run(opt: Optimizer, n: int) -> list[TrialRecord]:
    """`n` trials alternating between P and Q, each measured at half the p99 the model predicts there."""
    predicted = {p: pred.latency_us for p, pred in zip((P, Q), opt.predict([P, Q], 100_000), strict=True)}
    return [_run_at(opt, (P, Q)[k % 2], predicted[(P, Q)[k % 2]] / 2, 100_000) for k in range(n)]


def _fed(drift_h: float) -> Optimizer:
    """A contextual optimiser with 8 trials of a host at p99 400-520 µs (the model fitted on them)."""
    opt = Optimizer(SMALL, OBJ, ctx(drift_h=drift_h))
    opt.begin_retune(100_000)
    for k in range(8):
        _run_at(opt, OperatingPoint(2 + 48 * k, (1.2, 2.9)[k % 2]), 400 + 15 * k, 100_000)
    opt.note_held_window(P, meas(900, 30, qps=100_000))
    opt.model.grid_model(opt.book.load, refit=True)  # the model a next suggestion would fit
    return opt


def test_a_host_faster_than_its_model_retires_the_trials_before_the_run():
    opt = _fed(4.0)
    recs = _faster_run(opt, 3)
    assert opt.book.retired_through == 7, [r.note for r in recs]
    assert sum("faster than the model predicts since trial 8" in r.note for r in recs) == 1
    assert len(opt.model.observed()) == 3 and sorted(opt.book.ax_of) == [8, 9, 10]
    assert [r.index for r in opt.retune_trials()] == [8, 9, 10] and len(opt.trials()) == 11  # records kept
    assert opt.book.held_broke == [] and opt.book.drift == Cusum()
    back = Optimizer.from_json(opt.to_json())
    assert back.book.retired_through == 7 and back.book.ax_of == opt.book.ax_of


def test_the_cusum_is_kept_in_the_state():
    opt = _fed(4.0)
    opt.book.drift = Cusum(3.5, 8)
    assert Optimizer.from_json(opt.to_json()).book.drift == Cusum(3.5, 8)


def test_off_retires_nothing_and_keeps_no_sum():
    opt = _fed(0.0)
    recs = _faster_run(opt, 3)
    assert opt.book.retired_through == -1 and not any("retired" in r.note for r in recs)
    assert len(opt.model.observed()) == 11 and len(opt.book.held_broke) == 1 and opt.book.drift == Cusum()
