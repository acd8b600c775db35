"""`TrialBook` alone: trial numbers handed out in order, pending trials taken once, the current retune's trials."""

from __future__ import annotations

import pytest

from actuators.host import OperatingPoint
from core.errors import TunerError
from tuner.optimize.records import STATUS_COMPLETED, STATUS_FAILED, Pending, TrialRecord
from tuner.optimize.trial_book import TrialBook

P = OperatingPoint(2, 2.9)


def _record(index: int, status: str = STATUS_COMPLETED) -> TrialRecord:
    return TrialRecord(index, P, 1e5, status, None, None, None)


def test_hand_out_numbers_trials_in_order_and_keeps_safe_line_positions() -> None:
    book = TrialBook()
    assert book.hand_out(Pending(P, 0.0, 7, None)) == 0
    assert book.hand_out(Pending(P, 0.0, 8, None, line_t=0.25)) == 1
    assert book.next_index == 2 and set(book.pending) == {0, 1} and book.line_t == {1: 0.25}


def test_a_pending_trial_is_taken_once_and_never_after_it_was_reported() -> None:
    book = TrialBook()
    i = book.hand_out(Pending(P, 0.0, 0, None))
    assert book.take_pending(i).ax_index == 0
    with pytest.raises(TunerError, match="never suggested"):
        book.take_pending(i)
    book.records[i] = _record(i)
    with pytest.raises(TunerError, match="already reported"):
        book.take_pending(i)


def test_retune_trials_start_at_the_retune() -> None:
    book = TrialBook(records={k: _record(k, STATUS_FAILED if k == 3 else STATUS_COMPLETED) for k in (2, 0, 3, 1)})
    assert [r.index for r in book.trials()] == [0, 1, 2, 3]
    assert [r.index for r in book.retune_trials()] == [0, 1, 2, 3]  # no retune begun: all of them
    book.retune_start = 2
    assert [r.index for r in book.retune_trials()] == [2, 3]
    assert [r.index for r in book.completed_this_retune()] == [2]


def test_a_rebuilt_experiment_moves_the_ax_indices_and_drops_the_ones_it_left_out() -> None:
    book = TrialBook(ax_of={0: 3, 1: 5, 2: 6}, borrowed={1, 2})
    book.remap_ax({2: 0, 5: 1, 6: 2})
    assert book.ax_of == {1: 1, 2: 2} and book.borrowed == {0}


def test_live_trials_and_the_retune_leave_out_retired_ones() -> None:
    book = TrialBook(records={k: _record(k) for k in range(5)}, retune_start=1, retired_through=2)
    assert [r.index for r in book.live()] == [3, 4]
    assert [r.index for r in book.retune_trials()] == [3, 4] and len(book.trials()) == 5
