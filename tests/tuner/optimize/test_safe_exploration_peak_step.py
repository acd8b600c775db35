"""A load above every load measured within the limit: with `peak_step` the tuner starts from the best point
measured at the highest load and moves it toward safety (frequency first, then ITR), not from the safe corner."""

from __future__ import annotations

from actuators.host import OperatingPoint
from tests.optimize_fakes import OBJ, SMALL, ctx, meas
from tuner.optimize.optimizer import Optimizer
from tuner.optimize.records import Pending

LOW_Q = 100_000.0


def _measured_at_low_load(peak_step: bool, **kw: object) -> Optimizer:
    """A contextual optimiser whose trials all ran at LOW_Q: ITR 306 at 1.6 GHz met the SLA at the lowest power;
    `kw` overrides its settings."""
    opt = Optimizer(SMALL, OBJ, ctx(trials=20, sobol_trials=4, safe_delta=0.05, peak_step=peak_step, **kw))
    opt.begin_retune(LOW_Q)
    plan = {
        OperatingPoint(306, 1.6): (420.0, 40.0),
        OperatingPoint(306, 2.0): (380.0, 48.0),
        OperatingPoint(146, 2.4): (250.0, 60.0),
        OperatingPoint(2, 2.9): (120.0, 90.0),
        OperatingPoint(386, 1.2): (900.0, 35.0),  # over the SLA
    }
    for point, (p99, watts) in plan.items():
        i = opt.book.next_index
        opt.book.next_index += 1
        opt.book.pending[i] = Pending(
            point, 0.0, opt.model.attach(opt.model.cell_of(point), opt.book.load), opt.book.load
        )
        opt.complete(i, meas(p99, watts, qps=LOW_Q), LOW_Q)
    return opt


def test_new_peak_load_steps_from_the_best_point_at_the_highest_load_frequency_first() -> None:
    opt = _measured_at_low_load(peak_step=True)
    opt.begin_retune(1.3 * LOW_Q)  # 30 % above anything measured: no evidence vouches for this load
    i, p = opt.suggest()
    note = opt.book.pending[i].note
    assert "stepped from ITR 306 µs @ 1.6 GHz" in note, note
    # frequency raised at least in proportion to the load (1.6 x 1.3 = 2.08 -> 2.4 GHz), ITR kept or shortened
    assert p.dvfs_ghz >= 2.4 and p.itr_us <= 306
    assert p != OperatingPoint(SMALL.itr_us[0], SMALL.dvfs_ghz[-1])  # not the safe corner


def test_without_peak_step_a_new_peak_walks_the_safe_line() -> None:
    opt = _measured_at_low_load(peak_step=False)
    opt.begin_retune(1.3 * LOW_Q)
    i, _ = opt.suggest()
    assert "stepping out from the safe corner" in opt.book.pending[i].note


def test_a_load_inside_the_measured_range_is_not_a_new_peak() -> None:
    opt = _measured_at_low_load(peak_step=True)
    opt.begin_retune(0.9 * LOW_Q)
    assert opt.safety.peak_step("x") is None


def test_the_step_goes_past_a_point_this_retune_read_over_the_limit() -> None:
    opt = _measured_at_low_load(peak_step=True)
    opt.begin_retune(1.3 * LOW_Q)
    first = opt.safety.peak_step("x")
    assert first is not None
    again = opt.safety.peak_step("x")
    assert again is not None and again.point == first.point  # nothing measured at this load yet: the same step
    i = opt.book.next_index
    opt.book.next_index += 1
    opt.book.pending[i] = first
    opt.complete(i, meas(490.0, 70.0, qps=1.3 * LOW_Q), 1.3 * LOW_Q)  # within the SLA, over the limit (475 µs)
    after = opt.safety.peak_step("x")
    assert after is not None
    path = [opt.model.cell_of(p) for p in (first.point, after.point)]
    # further along the path toward safety: a higher frequency at that ITR, or a shorter ITR at the highest one
    assert path[1] != path[0] and (path[1][1] > path[0][1] or path[1][0] < path[0][0]), (first.point, after.point)
