"""The zoo's days (`traces.days`): deterministic, scaled to the peak, and each of the shape it states."""

from __future__ import annotations

import numpy as np
import pytest

from core.errors import TunerError
from traces.days import DAYS, SPIKES, day_schedule


def _qps(name: str, **kw) -> np.ndarray:
    return np.array([w.qps for w in day_schedule(name, **kw).windows])


@pytest.mark.parametrize("name", list(DAYS))
def test_each_day_is_deterministic_and_peaks_at_the_peak(name):
    a = _qps(name)
    assert np.array_equal(a, _qps(name))
    assert a.max() == pytest.approx(600_000.0)
    assert len(a) == 24 * DAYS[name].days
    assert _qps(name, peak_qps=200_000.0).max() == pytest.approx(200_000.0)


def test_two_peaks_has_two_peaks_with_a_trough_between():
    q = _qps("two-peaks")
    peaks = [i for i in range(1, 23) if q[i] > q[i - 1] and q[i] >= q[i + 1] and q[i] > 0.8 * q.max()]
    assert len(peaks) == 2
    trough = q[peaks[0] : peaks[1]].min()
    assert trough < 0.6 * min(q[peaks[0]], q[peaks[1]])


def test_flat_high_stays_within_80_to_100_percent():
    q = _qps("flat-high")
    assert q.min() >= 0.8 * q.max()


def test_spiky_has_its_spikes_well_above_both_neighbours():
    q = _qps("spiky")
    for at, _ in SPIKES:
        i = int(at)
        assert q[i] > 1.3 * max(q[i - 1], q[(i + 1) % 24])


def test_noisy_3_is_three_days_each_window_marked_and_the_days_differ():
    s = day_schedule("noisy-3")
    assert [w.day for w in s.windows] == [d for d in range(3) for _ in range(24)]
    q = np.array([w.qps for w in s.windows]).reshape(3, 24)
    assert np.abs(q[1] / q[0] - 1).max() > 0.05


def test_no_return_never_returns_to_an_earlier_level():
    q = _qps("no-return")
    assert np.all(np.diff(q) >= 0) and q[-1] >= 2 * q[0]


def test_five_minute_bins_average_to_the_hourly_ones():
    fine = _qps("two-peaks", bin_s=300, hours=2)
    hourly = _qps("two-peaks", hours=2)
    assert len(fine) == 24
    # each is scaled so its own busiest bin is the peak: the same rate up to one factor
    ratio = fine.reshape(2, 12).mean(axis=1) / hourly
    assert ratio[0] == pytest.approx(ratio[1]) and ratio[0] < 1.0


def test_bad_arguments_are_one_line():
    with pytest.raises(TunerError, match="day 'nope': expected sample or one of two-peaks"):
        day_schedule("nope")
    with pytest.raises(TunerError, match="bin 7 s: expected a whole divisor"):
        day_schedule("spiky", bin_s=7)
    with pytest.raises(TunerError, match=r"hours 30: expected \(0, 24\]"):
        day_schedule("spiky", hours=30)
