"""The descending trial before a retune stops (`descend_pct`): when the point the retune would hold costs more than
that % above the model's power, at this load, of a point measured within the limit at a load up to 10 % below and
more than one frequency step lower, the stopping rule asks for the cell halfway between them instead of ending the
retune -- the failure it prevents is a retune at a load a few % above the last that the safety gate keeps at a high
frequency, held there for hours. A held point DESCEND_FAR_GHZ or more above the cheaper point in frequency is
descended from whatever the power ratio."""

from __future__ import annotations

import pytest

from actuators.host import OperatingPoint
from tests.optimize_fakes import meas, seeded
from tuner.optimize import stopping
from tuner.optimize.records import Pending

#: The seeded history reaches 160 kQPS; the retunes here run above it, so only their own trials are near.
QPS = 200_000.0


def _trial_at(opt, point: OperatingPoint, p99: float, power: float, qps: float) -> None:
    """One completed trial of the current retune at `point` (handed out by `suggest` like the stopping rule's own)."""
    opt.stopping.refine = Pending(point, 0.0, -1, opt.book.load, None, "placed by the test")
    i, got = opt.suggest()
    assert got == point
    opt.complete(i, meas(p99, power, qps=qps), qps)


def _held_high_after(cheap_qps: float, held: OperatingPoint = OperatingPoint(66, 2.9), **kw):
    """An optimiser that measured 98 µs @ 2.0 GHz within the limit at `cheap_qps`, then, in a retune at QPS, `held`
    at 41.8 W (the fake host's numbers at both); the stopping rule alone would stop after each trial."""
    opt, _ = seeded(stop_ei_pct=99.0, min_trials=1, trials=8, **{"descend_pct": 5.0, **kw})
    opt.begin_retune(cheap_qps)
    _trial_at(opt, OperatingPoint(98, 2.0), 305.0, 23.5, cheap_qps)
    opt.begin_retune(QPS)
    _trial_at(opt, held, 180.0, 41.8, QPS)
    return opt


def test_a_held_point_far_above_a_cheaper_one_measured_at_a_slightly_lower_load_is_descended_toward() -> None:
    opt = _held_high_after(185_000.0)
    stop, why = opt.should_stop()
    assert not stop and "descending step" in why, why
    i, p = opt.suggest()
    assert p == OperatingPoint(82, 2.4)  # halfway in frequency (2.0 .. 2.9 GHz) and in ITR (66 .. 98 µs)
    assert opt.stopping.refine is None  # handed out, once
    opt.complete(i, meas(240.0, 33.0, qps=QPS), QPS)
    last = opt.retune_trials()[-1]
    assert last.note.startswith("descending step") and "ITR 98 µs @ 2.0 GHz" in last.note
    assert last.p_violation is not None and last.p_violation <= 0.5
    assert opt.best().point == p  # cheaper and within the limit: the retune now holds it


def test_no_descending_step_from_a_load_more_than_ten_percent_below_or_when_switched_off() -> None:
    opt = _held_high_after(170_000.0)  # 0.85 x this load: it vouches for nothing here
    stop, why = opt.should_stop()
    assert stop and "descending" not in why, why
    opt = _held_high_after(185_000.0, descend_pct=0.0)
    stop, why = opt.should_stop()
    assert stop and "descending" not in why, why


def test_no_descending_step_within_one_frequency_step_of_the_cheaper_point() -> None:
    opt = _held_high_after(185_000.0, held=OperatingPoint(66, 2.4))  # 2.0 GHz is one step below
    stop, why = opt.should_stop()
    assert stop and "descending" not in why, why


def test_a_held_point_far_above_in_frequency_is_descended_from_whatever_the_power_ratio() -> None:
    opt = _held_high_after(185_000.0, descend_pct=90.0)  # 41.8 W is under 1.9 x the model's power at 98 µs @ 2.0 GHz
    stop, why = opt.should_stop()
    assert not stop and "descending step" in why, why  # 2.9 GHz is 0.9 GHz above 2.0 GHz


def test_no_descending_step_by_frequency_alone_when_the_gap_is_under_the_threshold(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(stopping, "DESCEND_FAR_GHZ", 1.0)  # 0.9 GHz apart: not far, and the power ratio is under 90 %
    opt = _held_high_after(185_000.0, descend_pct=90.0)
    stop, why = opt.should_stop()
    assert stop and "descending" not in why, why
