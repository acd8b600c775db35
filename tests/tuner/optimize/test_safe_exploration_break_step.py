"""`break_step` and `monotone_safe`: a first trial over the SLA at a new peak moves the search one frequency step
up at its ITR; a point measured within the limit passes the gate at its ITR at higher frequencies."""

from __future__ import annotations

import numpy as np

from actuators.host import OperatingPoint
from tests.optimize_fakes import OBJ, SMALL, ctx, meas
from tuner.optimize.optimizer import Optimizer
from tuner.optimize.records import Pending

LOW_Q = 100_000.0


def _measured(**kw) -> Optimizer:
    opt = Optimizer(SMALL, OBJ, ctx(trials=20, sobol_trials=4, safe_delta=0.05, peak_step=True, **kw))
    opt.begin_retune(LOW_Q)
    plan = {
        OperatingPoint(306, 1.6): (420.0, 40.0),
        OperatingPoint(306, 2.0): (380.0, 48.0),
        OperatingPoint(146, 2.4): (250.0, 60.0),
        OperatingPoint(2, 2.9): (120.0, 90.0),
        OperatingPoint(386, 1.2): (900.0, 35.0),  # over the SLA
    }
    for point, (p99, watts) in plan.items():
        _complete(opt, point, p99, watts, LOW_Q)
    return opt


def _complete(opt: Optimizer, point: OperatingPoint, p99: float, watts: float, qps: float) -> None:
    i = opt.book.next_index
    opt.book.next_index += 1
    opt.book.pending[i] = Pending(point, 0.0, opt.model.attach(opt.model.cell_of(point), opt.book.load), opt.book.load)
    opt.complete(i, meas(p99, watts, qps=qps), qps)


def test_a_first_trial_over_the_sla_at_a_new_peak_steps_one_frequency_up_at_its_itr() -> None:
    opt = _measured(break_step=True)
    q = 1.3 * LOW_Q
    opt.begin_retune(q)
    _complete(opt, OperatingPoint(306, 1.6), 520.0, 45.0, q)  # the new peak's first trial: over the SLA
    i, p = opt.suggest()
    note = opt.book.pending[i].note
    assert note.startswith("one step up from ITR 306 µs @ 1.6 GHz"), note
    assert p == OperatingPoint(306, 2.0)  # the next frequency at the same ITR (the model's P there <= 0.5)
    assert opt.book.pending[i].p_violation <= 0.5
    opt.complete(i, meas(510.0, 48.0, qps=q), q)  # over the SLA again: on up, one more step
    i, p = opt.suggest()
    assert p == OperatingPoint(306, 2.4), opt.book.pending[i].note


def test_without_break_step_the_filter_chooses_as_before() -> None:
    opt = _measured()
    q = 1.3 * LOW_Q
    opt.begin_retune(q)
    _complete(opt, OperatingPoint(306, 1.6), 520.0, 45.0, q)
    i, _ = opt.suggest()
    assert not opt.book.pending[i].note.startswith("one step up")


def test_the_step_does_not_apply_once_a_trial_of_the_retune_met_the_limit() -> None:
    opt = _measured(break_step=True)
    q = 1.3 * LOW_Q
    opt.begin_retune(q)
    _complete(opt, OperatingPoint(146, 2.4), 300.0, 62.0, q)  # within the limit
    _complete(opt, OperatingPoint(306, 1.6), 700.0, 45.0, q)  # then over the SLA
    assert opt.safety.break_step(opt.safety.evidence()) is None
    opt.begin_retune(q)  # a new retune; its only trial was within the SLA
    _complete(opt, OperatingPoint(306, 2.0), 450.0, 48.0, q)
    assert opt.safety.break_step(opt.safety.evidence()) is None


def test_a_point_measured_within_the_limit_passes_the_gate_at_higher_frequencies_with_monotone_safe() -> None:
    opt = _measured(monotone_safe=True)
    opt.begin_retune(LOW_Q)
    cells = [opt.model.cell_of(OperatingPoint(306, f)) for f in SMALL.dvfs_ghz]
    grid = opt.model.grid_model(opt.book.load, refit=True, cells=cells)
    assert grid is not None
    grid["unsafe"] = np.ones(len(cells), dtype=bool)  # a model that doubts every cell
    ok = opt.safety.passes(grid, opt.safety.evidence()).tolist()
    assert ok == [False, True, True, True, True]  # 1.6 GHz was measured within the limit: it and above pass
    opt.begin_retune(1.2 * LOW_Q)  # a higher load than the measurement: nothing is proven
    assert not opt.safety.passes(grid, opt.safety.evidence()).any()
    off = _measured()
    off.begin_retune(LOW_Q)
    assert not off.safety.passes(grid, off.safety.evidence()).any()  # off by default: the model's verdict alone
