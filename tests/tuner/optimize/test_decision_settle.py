"""The final choice and readings over the SLA: a trial whose settle read over the SLA is never the point held,
whatever its window read (near the cliff a point's seconds differ by more than their CIs say), nor is a point
another trial of the same retune read over the SLA at."""

from __future__ import annotations

from actuators.host import OperatingPoint
from tests.optimize_fakes import OBJ, SMALL, meas
from tuner.optimize.decision import best_decision, settle_within
from tuner.optimize.records import TrialRecord
from tuner.optimize.settings import TunerSettings


def _trial(index: int, itr: int, p99: float, power: float, settle_p99: float | None) -> TrialRecord:
    m = meas(p99, power)
    settle = None if settle_p99 is None else meas(settle_p99, power, seconds=1.0)
    return TrialRecord(index, OperatingPoint(itr, 1.2), 1e5, "completed", m, m.power_w, None, settle=settle)


def test_a_trial_whose_settle_read_over_the_sla_is_not_held() -> None:
    cheap = _trial(0, 114, 400.0, 50.0, settle_p99=710.0)  # its window within the limit, its settle far over
    dear = _trial(1, 290, 420.0, 55.0, settle_p99=430.0)
    assert not settle_within(cheap, OBJ) and settle_within(dear, OBJ)
    d = best_decision([cheap, dear], OBJ, TunerSettings(), SMALL)
    assert d.point == dear.point and d.met_sla and "(1 of 2 trials did)" in d.reason
    # without the settle reading over the SLA the cheaper point is held, as before
    ok = _trial(0, 114, 400.0, 50.0, settle_p99=480.0)
    assert best_decision([ok, dear], OBJ, TunerSettings(), SMALL).point == ok.point
    # a trial without a settle (settle_s 0, or from history) is judged by its window alone
    bare = _trial(0, 114, 400.0, 50.0, settle_p99=None)
    assert settle_within(bare, OBJ) and best_decision([bare, dear], OBJ, TunerSettings(), SMALL).point == bare.point


def test_with_every_settle_over_the_sla_the_safest_point_is_applied_not_called_met() -> None:
    a = _trial(0, 114, 400.0, 50.0, settle_p99=600.0)
    b = _trial(1, 290, 450.0, 55.0, settle_p99=650.0)
    d = best_decision([a, b], OBJ, TunerSettings(), SMALL)
    assert not d.met_sla and d.point == a.point  # the lowest window percentile, and not reported as meeting the SLA


def test_a_point_another_trial_of_the_retune_read_over_the_sla_at_is_not_held() -> None:
    under = _trial(0, 114, 490.0, 50.0, settle_p99=None)  # within the SLA by its estimate only
    over = _trial(1, 114, 504.0, 50.5, settle_p99=None)  # the same point again, over the SLA
    dear = _trial(2, 290, 480.0, 55.0, settle_p99=None)
    d = best_decision([under, over, dear], OBJ, TunerSettings(), SMALL)
    assert d.point == dear.point and d.met_sla and "(1 of 3 trials did)" in d.reason
    # either reading alone decides as before: the cheap point held while nothing over the SLA was read there
    assert best_decision([under, dear], OBJ, TunerSettings(), SMALL).point == under.point
    # with only that point measured, nothing met the SLA: the safest reading is applied, not called met
    alone = best_decision([under, over], OBJ, TunerSettings(), SMALL)
    assert not alone.met_sla and alone.point == under.point
