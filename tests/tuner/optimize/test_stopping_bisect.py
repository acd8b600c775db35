"""The bisecting trial before a retune stops: after a trial over the SLA at a lower frequency than the point the
retune would hold, and more than one frequency step between them, the stopping rule asks for the frequency halfway
between (at the held point's ITR) instead of ending the retune -- the failure it prevents is a first trial over
the SLA at a new peak load that sends the retune far up in frequency, where it stops and holds for hours."""

from __future__ import annotations

from actuators.host import OperatingPoint
from tests.optimize_fakes import meas, seeded
from tuner.optimize.records import Pending

QPS = 120_000.0


def _trial_at(opt, point: OperatingPoint, p99: float, power: float) -> None:
    """One completed trial of this retune at `point` (handed out by `suggest` like the stopping rule's own)."""
    opt.stopping.refine = Pending(point, 0.0, -1, opt.book.load, None, "placed by the test")
    i, got = opt.suggest()
    assert got == point
    opt.complete(i, meas(p99, power, qps=QPS), QPS)


def _opt():
    # stop_ei_pct 99: the expected improvement alone would end the retune after every trial
    opt, _ = seeded(stop_ei_pct=99.0, min_trials=1, trials=8)
    opt.begin_retune(QPS)
    return opt


def test_a_trial_over_the_sla_far_below_the_held_frequency_is_bisected_until_one_step_apart() -> None:
    opt = _opt()
    _trial_at(opt, OperatingPoint(98, 1.2), 520.0, 20.0)  # over the SLA
    _trial_at(opt, OperatingPoint(66, 2.9), 300.0, 40.0)  # held: 4 frequency steps above the failure
    stop, why = opt.should_stop()
    assert not stop and "bisecting step" in why, why
    i, p = opt.suggest()
    assert p == OperatingPoint(82, 2.0)  # halfway in frequency (index 2 of 1.2..2.9) and in ITR (66..98)
    opt.complete(i, meas(420.0, 30.0, qps=QPS), QPS)
    assert opt.retune_trials()[-1].note.startswith("bisecting step")
    assert opt.retune_trials()[-1].p_violation <= 0.5
    held = opt.best().point
    assert held == p
    stop, why = opt.should_stop()
    assert not stop and "bisecting step" in why, why  # 1.2 -> 2.0 GHz is still two steps
    i, p = opt.suggest()
    assert p == OperatingPoint(82, 1.6)
    opt.complete(i, meas(510.0, 25.0, qps=QPS), QPS)  # over the SLA too: now one step apart
    stop, why = opt.should_stop()
    assert stop and "bisecting" not in why, why
    assert opt.best().point == held
    assert len(opt.retune_trials()) == 4


def test_no_bisecting_without_a_trial_over_the_sla_below_or_with_one_step_between() -> None:
    opt = _opt()
    _trial_at(opt, OperatingPoint(98, 1.2), 480.0, 20.0)  # over the final limit (475 µs) but within the SLA
    _trial_at(opt, OperatingPoint(66, 2.9), 300.0, 40.0)
    stop, why = opt.should_stop()
    assert stop and "bisecting" not in why, why
    opt = _opt()
    _trial_at(opt, OperatingPoint(98, 2.4), 520.0, 30.0)  # over the SLA, one frequency step below
    _trial_at(opt, OperatingPoint(66, 2.9), 300.0, 40.0)
    stop, why = opt.should_stop()
    assert stop and "bisecting" not in why, why


def test_the_bisecting_trial_stays_within_the_trial_budget() -> None:
    opt, _ = seeded(stop_ei_pct=99.0, min_trials=1, trials=2)
    opt.begin_retune(QPS)
    _trial_at(opt, OperatingPoint(98, 1.2), 520.0, 20.0)
    _trial_at(opt, OperatingPoint(66, 2.9), 300.0, 40.0)
    stop, why = opt.should_stop()
    assert stop and "budget" in why, why
