"""The cheapest point the orderings prove within the limit (its ITR measured within it at this frequency or a lower
one, at this load or above): a retune's first trial (`first_proven`), and, with nothing the gate allows near evidence,
the safety filter's choice before walking out from the safe corner."""

from __future__ import annotations

import pytest

from actuators.host import OperatingPoint
from tests.optimize_fakes import meas
from tests.tuner.optimize.test_safe_exploration_peak_step import LOW_Q, _measured_at_low_load
from tuner.optimize.optimizer import Optimizer
from tuner.optimize.safe_evidence import EvidenceRules
from tuner.optimize.safe_exploration import PROOF_FAILED

#: Measured within the limit at LOW_Q (`_measured_at_low_load`): ITR -> the lowest frequency it met the limit at.
MET = {306: 1.6, 146: 2.4, 2: 2.9}


def test_a_proven_point_is_its_itr_at_a_frequency_measured_within_the_limit_or_higher() -> None:
    opt = _measured_at_low_load(peak_step=True)
    opt.begin_retune(0.9 * LOW_Q)
    opt.model.fit_model()  # as the filter's caller has done
    step = opt.safety._proven("x", opt.safety.rules.evidence())
    assert step is not None and "orderings prove" in step.note
    p = step.point
    assert p.itr_us in MET and p.dvfs_ghz >= MET[p.itr_us] - 1e-9, p
    # the cheapest of them by the model's power: the frequency its ITR was measured within the limit at
    assert p.dvfs_ghz == MET[p.itr_us], p
    # nothing vouches for a load above every one measured
    opt.begin_retune(1.3 * LOW_Q)
    assert opt.safety._proven("x", opt.safety.rules.evidence()) is None


def test_the_filter_tries_a_proven_point_before_the_safe_corner(monkeypatch: pytest.MonkeyPatch) -> None:
    opt = _measured_at_low_load(peak_step=True)
    opt.begin_retune(0.9 * LOW_Q)
    monkeypatch.setattr(EvidenceRules, "near_cells", lambda self, evidence: [])  # the gate allows nothing
    i, p = opt.suggest()
    note = opt.book.pending[i].note
    assert "orderings prove" in note and "safe corner" not in note, note
    assert p.itr_us in MET and p.dvfs_ghz >= MET[p.itr_us] - 1e-9


def test_a_retunes_first_trial_is_the_cheapest_proven_point_and_its_second_is_the_filters_choice() -> None:
    opt = _measured_at_low_load(peak_step=True, first_proven=True)
    opt.begin_retune(0.9 * LOW_Q)
    i, p = opt.suggest()
    note = opt.book.pending[i].note
    assert note.startswith("the retune's first trial: the cheapest point the orderings prove"), note
    assert p == OperatingPoint(306, 1.6)  # measured within the limit at a higher load, at the lowest power
    opt.complete(i, meas(400.0, 38.0, qps=0.9 * LOW_Q), 0.9 * LOW_Q)
    i, _ = opt.suggest()
    assert "first trial" not in opt.book.pending[i].note


def test_without_first_proven_the_first_trial_is_the_filters_choice() -> None:
    opt = _measured_at_low_load(peak_step=True, first_proven=False)
    opt.begin_retune(0.9 * LOW_Q)
    i, _ = opt.suggest()
    assert "first trial" not in opt.book.pending[i].note and "orderings prove" not in opt.book.pending[i].note


def _first_trial_read(p99: float, **kw: object) -> tuple[Optimizer, int]:
    """The first trial of a retune at 0.9 x LOW_Q (the proven ITR 306 @ 1.6 GHz) reported at `p99`."""
    opt = _measured_at_low_load(peak_step=True, first_proven=True, **kw)
    opt.begin_retune(0.9 * LOW_Q)
    i, p = opt.suggest()
    assert opt.book.pending[i].proven and p == OperatingPoint(306, 1.6)
    opt.complete(i, meas(p99, 40.0, qps=0.9 * LOW_Q), 0.9 * LOW_Q)
    return opt, i


def test_a_proven_point_over_the_sla_stops_the_readings_before_it_proving_points() -> None:
    opt, i = _first_trial_read(560.0, proof_reset=True)
    assert opt.book.proof_from == i and PROOF_FAILED in opt.book.records[i].note
    assert Optimizer.from_json(opt.to_json()).book.proof_from == i
    # the next retune: the readings that proved 306 @ 1.6 GHz (and 146 @ 2.4, 2 @ 2.9) prove nothing now
    opt.begin_retune(0.9 * LOW_Q)
    opt.model.fit_model()
    assert opt.safety._proven("x", opt.safety.rules.evidence()) is None
    j, _ = opt.suggest()
    assert "orderings prove" not in opt.book.pending[j].note
    # a reading after it proves again
    opt.complete(j, meas(300.0, 70.0, qps=0.9 * LOW_Q), 0.9 * LOW_Q)
    opt.begin_retune(0.9 * LOW_Q)
    assert opt.safety._proven("x", opt.safety.rules.evidence()) is not None


def test_off_or_within_the_sla_every_reading_still_proves() -> None:
    for p99, reset in ((560.0, False), (490.0, True)):  # 490 µs: over the limit (475), within the SLA
        opt, i = _first_trial_read(p99, proof_reset=reset)
        assert opt.book.proof_from == 0 and PROOF_FAILED not in opt.book.records[i].note
        opt.begin_retune(0.9 * LOW_Q)
        opt.model.fit_model()
        assert opt.safety._proven("x", opt.safety.rules.evidence()) is not None


def test_a_pending_proven_trial_keeps_its_mark_in_the_state() -> None:
    opt = _measured_at_low_load(peak_step=True, first_proven=True, proof_reset=True)
    opt.begin_retune(0.9 * LOW_Q)
    i, _ = opt.suggest()
    assert Optimizer.from_json(opt.to_json()).book.pending[i].proven
