"""`break_step`: a first trial over the SLA at a new peak moves the search one frequency step up at its ITR."""

from __future__ import annotations

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
    assert opt.safety.break_step(opt.safety.rules.evidence()) is None
    opt.begin_retune(q)  # a new retune; its only trial was within the SLA
    _complete(opt, OperatingPoint(306, 2.0), 450.0, 48.0, q)
    assert opt.safety.break_step(opt.safety.rules.evidence()) is None


def test_peak_first_takes_the_new_peak_step_even_where_lower_loads_vouch_for_points() -> None:
    q = 1.05 * LOW_Q  # within SAFE_LOAD_TOL of the measured load: the evidence rule vouches, the orderings do not
    opt = _measured(peak_first=True)
    opt.begin_retune(q)
    i, p = opt.suggest()
    assert "the retune's first trial at a load above every one measured" in opt.book.pending[i].note
    assert "stepped from ITR 306 µs @ 1.6 GHz" in opt.book.pending[i].note
    assert p.itr_us <= 306 and p.dvfs_ghz >= 2.0  # 1.6 GHz x 1.05 rounded up to the grid's next frequency
    opt.complete(i, meas(400.0, 50.0, qps=q), q)
    i, _ = opt.suggest()  # the retune's later trials choose as before
    assert "the retune's first trial" not in opt.book.pending[i].note
    opt.begin_retune(1.06 * LOW_Q)  # under 2 % above the highest load measured within the limit: counts as it
    i, _ = opt.suggest()
    assert "stepped from" not in opt.book.pending[i].note
    assert opt.safety.peak_step("x", 0.02) is None and opt.safety.peak_step("x") is not None
