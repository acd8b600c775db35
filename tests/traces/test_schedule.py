"""Per-second series, binning, per-bin statistics and scaling into a load schedule; the bundled sample."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

from core.errors import InputError, TunerError
from traces.schedule import Schedule, Window, load_schedule, repeat_days, sample_trace_path, scale_factor
from traces.series import bin_series, trace_stats


def trace(tmp_path, counts, name="t.csv", origin=1000, ops=("get",)):
    """A trace with counts[i] requests in second origin+i; op and sizes cycle so their stats are known."""
    lines = []
    n = 0
    for sec, c in enumerate(counts):
        for _ in range(c):
            lines.append(
                b"%d,key%d,%d,%d,1,%s,0" % (origin + sec, n, 10 + n % 3, 100 * (n % 4), ops[n % len(ops)].encode())
            )
            n += 1
    path = tmp_path / name
    path.write_bytes(b"\n".join(lines) + b"\n")
    return path


def test_per_second_series_and_bins(tmp_path):
    counts = [3, 0, 1, 4, 2, 2, 0, 5, 1, 1]  # 10 s, bins of 4 s -> [8, 9, 2 (partial, 2 s)]
    st = trace_stats(trace(tmp_path, counts, ops=("get", "set")), bin_s=4)
    assert st.origin == 1000 and st.seconds == 10
    assert st.per_second.tolist() == counts
    assert [b.requests for b in st.bins] == [8, 9, 2]
    assert [b.seconds for b in st.bins] == [4, 4, 2]
    assert [b.qps for b in st.bins] == [2.0, 2.25, 1.0]
    assert len(st.full_bins) == 2
    assert st.bins[0].ops == {"get": 4, "set": 4}
    assert st.bins[0].op_mix == {"get": 0.5, "set": 0.5}
    # rows 0..7 in bin 0: key sizes 10,11,12,10,11,12,10,11 ; value sizes 0,100,200,300,0,100,200,300
    assert st.bins[0].key_size.mean == pytest.approx(87 / 8) and st.bins[0].key_size.min == 10
    assert st.bins[0].key_size.max == 12
    assert st.bins[0].value_size.mean == pytest.approx(150.0) and st.bins[0].value_size.max == 300


def test_late_rows_at_the_start_count_in_second_zero(tmp_path):
    path = tmp_path / "t.csv"
    path.write_bytes(b"100,k,1,2,3,get,0\n98,k,1,2,3,get,0\n101,k,1,2,3,get,0\n")
    st = trace_stats(path, bin_s=1)
    assert st.per_second.tolist() == [2, 1]


def test_max_seconds_stops_early(tmp_path):
    st = trace_stats(trace(tmp_path, [1] * 50), bin_s=10, max_seconds=20)
    assert st.seconds == 20 and st.rows == 20 and [b.requests for b in st.bins] == [10, 10]
    assert st.truncated_at_s == 20


def test_bin_series_math():
    s = np.arange(10)
    assert bin_series(s, 4).tolist() == [1.5, 5.5]
    assert bin_series(s, 4, partial=True).tolist() == [1.5, 5.5, 8.5]


def test_bin_must_be_whole_seconds(tmp_path):
    with pytest.raises(InputError, match="whole number of seconds"):
        trace_stats(trace(tmp_path, [1, 1]), bin_s=0.5)


def test_schedule_full_windows_and_peak_scaling(tmp_path):
    counts = [1] * 4 + [3] * 4 + [2] * 4 + [5]  # 13 s, bins of 4 s: 1, 3, 2 QPS, tail dropped
    path = trace(tmp_path, counts)
    sch = load_schedule(path, bin_s=4, peak_qps=600.0)
    assert isinstance(sch, Schedule) and sch.source == str(path)
    assert sch.raw_peak_qps == 3.0 and sch.scale == pytest.approx(200.0)
    assert sch.windows == (
        Window(0, 0.0, 4.0, pytest.approx(200.0)),
        Window(1, 4.0, 4.0, pytest.approx(600.0)),
        Window(2, 8.0, 4.0, pytest.approx(400.0)),
    )
    assert sch.peak_qps == pytest.approx(600.0)


def test_schedule_scale_factor_and_default(tmp_path):
    path = trace(tmp_path, [1] * 4 + [3] * 4)
    assert [w.qps for w in load_schedule(path, bin_s=4, scale=10).windows] == [10.0, 30.0]
    sch = load_schedule(path, bin_s=4)
    assert sch.scale == 1.0 and [w.qps for w in sch.windows] == [1.0, 3.0]


def test_schedule_hours_limits_windows(tmp_path):
    path = trace(tmp_path, [1] * 7200 + [2] * 3600 + [5] * 3600)
    sch = load_schedule(path, hours=3)
    assert len(sch.windows) == 3 and sch.raw_peak_qps == 2.0
    with pytest.raises(InputError, match="fewer than the 5 that 5 h needs"):
        load_schedule(path, hours=5)


def test_schedule_shorter_than_one_window(tmp_path):
    path = trace(tmp_path, [1] * 100)
    with pytest.raises(InputError, match=r"t\.csv: trace covers 100 s, shorter than one 3600 s window"):
        load_schedule(path)


def test_scaling_arguments_refused():
    with pytest.raises(TunerError, match="not both"):
        scale_factor(1.0, peak_qps=5, scale=2)
    with pytest.raises(TunerError, match="> 0"):
        scale_factor(1.0, peak_qps=-5)
    with pytest.raises(TunerError, match="> 0"):
        scale_factor(1.0, scale=0)
    with pytest.raises(TunerError, match="finite"):
        scale_factor(1.0, peak_qps=float("inf"))
    with pytest.raises(TunerError, match="finite"):
        load_schedule("unread.csv", hours=float("inf"))


def test_bundled_sample_schedule():
    path = sample_trace_path()
    assert path.is_file() and path.stat().st_size < 3_500_000
    sch = load_schedule(path, peak_qps=600_000)
    assert len(sch.windows) == 24
    assert all(w.seconds == 3600 for w in sch.windows)
    assert [w.start_s for w in sch.windows] == [3600.0 * i for i in range(24)]
    qps = np.array([w.qps for w in sch.windows])
    assert qps.max() == pytest.approx(600_000)
    ratio = qps.max() / qps.min()
    assert 1.8 <= ratio <= 4.0, ratio  # diurnal swing of web cache traffic
    assert 2 <= int(qps.argmin()) <= 6  # trough in the early morning
    assert 14 <= int(qps.argmax()) <= 21  # peak in the afternoon / evening
    assert 2.0 <= sch.raw_peak_qps <= 20.0  # a low-rate sample, scaled by the replay


def test_start_offset_selects_a_later_slice(tmp_path):
    counts = [1] * 10 + [2] * 10 + [3] * 10
    path = trace(tmp_path, counts)
    st = trace_stats(path, bin_s=10, start_s=10)
    assert st.start_s == 10 and st.per_second.tolist() == [2] * 10 + [3] * 10
    assert [b.requests for b in st.bins] == [20, 30]
    assert st.lines == 60 and st.rows == 50
    sch = load_schedule(path, bin_s=10, start_s=10, hours=10 / 3600, scale=2)
    assert [(w.index, w.start_s, w.qps) for w in sch.windows] == [(0, 0.0, 4.0)]
    with pytest.raises(InputError, match="no requests 40 s or more after the first row"):
        trace_stats(path, bin_s=10, start_s=40)


def test_trace_in_several_files(tmp_path):
    a = trace(tmp_path, [1] * 10, name="a.csv", origin=0)
    b = trace(tmp_path, [2] * 10, name="b.csv", origin=10)
    sch = load_schedule([a, b], bin_s=10)
    assert [w.qps for w in sch.windows] == [1.0, 2.0] and sch.source == f"{a} + {b}"


def _day(qps=(100.0, 300.0, 600.0, 200.0), bin_s=10.0):
    ws = tuple(Window(i, i * bin_s, bin_s, q) for i, q in enumerate(qps))
    return Schedule(windows=ws, source="t.csv", scale=2.0, raw_peak_qps=300.0)


def test_repeat_days_layout_and_day_zero_unchanged():
    one = _day()
    three = repeat_days(one, 3, noise=0.05, seed=1)
    assert three.days == 3 and len(three.windows) == 12
    assert [w.index for w in three.windows] == list(range(12))
    assert [w.day for w in three.windows] == [0] * 4 + [1] * 4 + [2] * 4
    assert [w.start_s for w in three.windows] == [10.0 * i for i in range(12)]
    assert three.windows[:4] == one.windows  # day 0 is the schedule itself
    assert repeat_days(one, 1) == replace(one, days=1)
    assert (three.source, three.scale, three.raw_peak_qps) == ("t.csv", 2.0, 300.0)
    # later days differ from day 0 and from each other, by a few per cent, and never exceed the peak
    d1 = [w.qps for w in three.windows[4:8]]
    d2 = [w.qps for w in three.windows[8:]]
    assert d1 != d2 and d1 != [w.qps for w in one.windows]
    for w in three.windows[4:]:
        base = one.windows[w.index % 4].qps
        assert 0.75 * base < w.qps <= min(base * 1.3, 600.0)


def test_repeat_days_is_seeded_and_prefix_stable():
    one = _day()
    assert repeat_days(one, 3, seed=7) == repeat_days(one, 3, seed=7)
    assert repeat_days(one, 3, seed=7) != repeat_days(one, 3, seed=8)
    assert repeat_days(one, 3, seed=7).windows[:8] == repeat_days(one, 2, seed=7).windows
    flat = repeat_days(one, 4, noise=0.0)
    assert [w.qps for w in flat.windows] == [w.qps for w in one.windows] * 4


def test_repeat_days_noise_statistics():
    """Unclipped factors are lognormal with mean 1 and CV ~ noise."""
    one = _day(qps=(100.0,) * 200 + (1e9,))  # a huge peak so nothing is clipped
    many = repeat_days(one, 21, noise=0.05, seed=3)
    f = np.array([w.qps / 100.0 for w in many.windows if w.day > 0 and w.qps < 1e8])
    assert f.size == 4000
    assert f.mean() == pytest.approx(1.0, abs=0.004)
    assert np.log(f).std() == pytest.approx(0.05, rel=0.05)
    assert f.std() / f.mean() == pytest.approx(0.05, rel=0.06)


def test_repeat_days_clips_to_max_qps():
    one = _day()
    many = repeat_days(one, 30, noise=0.2, seed=0)
    assert max(w.qps for w in many.windows) == pytest.approx(600.0)
    capped = repeat_days(one, 5, noise=0.2, seed=0, max_qps=250.0)
    assert all(w.qps <= 250.0 for w in capped.windows if w.day > 0)


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"days": 0}, "days must be an integer >= 1"),
        ({"days": 1.5}, "days must be an integer >= 1"),
        ({"days": 2, "noise": -0.1}, r"day noise must be a fraction in \[0, 1\]"),
        ({"days": 2, "noise": float("nan")}, "day noise"),
        ({"days": 2, "max_qps": 0.0}, "max_qps must be finite and > 0"),
    ],
)
def test_repeat_days_bad_arguments(kwargs, message):
    with pytest.raises(TunerError, match=message):
        repeat_days(_day(), **kwargs)


def test_repeat_days_refuses_a_multi_day_schedule():
    with pytest.raises(TunerError, match="already spans 2 days"):
        repeat_days(repeat_days(_day(), 2), 2)
