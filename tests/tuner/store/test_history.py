"""The `tuner.trial/v1` trials file: round trips, one-line FILE:LINE errors for every kind of bad line, the store."""

from __future__ import annotations

import json
import math

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from actuators.host import KnobSpace, OperatingPoint
from core.errors import InputError
from tests.fakes import FakeHost
from tuner.optimize.records import TrialRecord
from tuner.optimize.settings import Objective
from tuner.store.history import (
    SCHEMA,
    HistoryEntry,
    HistoryStore,
    dedupe,
    entries_from_records,
    in_space,
    read_entries,
    read_trials,
    write_trials,
)

OBJ = Objective(reward="constrained", percentile=99.0, sla_us=500.0)


def _records(n: int = 5, qps: float = 200_000.0, failed_at: int | None = None) -> list[TrialRecord]:
    host = FakeHost(qps=qps)
    space = host.knobs()
    out = []
    for i in range(n):
        point = OperatingPoint(space.itr_us[(i * 37) % len(space.itr_us)], space.dvfs_ghz[(i * 5) % 18])
        host.set_itr(point.itr_us)
        host.set_dvfs(point.dvfs_ghz)
        m = host.measure(2.0 + i)
        if i == failed_at:
            out.append(TrialRecord(i, point, qps, "failed", None, None, "HostError: boom"))
        else:
            out.append(TrialRecord(i, point, qps, "completed", m, m.power_w, None, settle=m, compute_s=0.3))
    return out


def _line(**over) -> dict:
    rec = _records(1)[0]
    d = json.loads(HistoryEntry(rec, "h/fake", 1.7e9, OBJ).to_line())
    d.update(over)
    return d


def _write_lines(path, lines) -> None:
    path.write_text("".join((l if isinstance(l, str) else json.dumps(l)) + "\n" for l in lines))


def test_round_trip_keeps_every_completed_trial_and_drops_failed(tmp_path):
    recs = _records(6, failed_at=2)
    path = tmp_path / "t.jsonl"
    times = [1.7e9 + 20 * i for i in range(len(recs))]
    assert write_trials(path, recs, host="h1/fake", objective=OBJ, times=times) == 5
    back = read_trials(path, space=FakeHost().knobs())
    done = [r for r in recs if r.status == "completed"]
    assert len(back) == len(done)
    for i, (a, b) in enumerate(zip(done, back)):
        assert b.index == i and b.status == "completed" and b.error is None
        assert (b.point, b.qps, b.measurement) == (a.point, a.qps, a.measurement)  # exact, floats included
        assert b.reward == pytest.approx(a.measurement.power_w)  # scored under its objective
    entries = read_entries(path)
    assert [e.time for e in entries] == [t for t, r in zip(times, recs) if r.status == "completed"]
    assert {e.host for e in entries} == {"h1/fake"} and {e.objective for e in entries} == {OBJ}
    # writing what was read gives the same file, byte for byte
    again = tmp_path / "again.jsonl"
    write_trials(
        again,
        back,
        host="h1/fake",
        objective={"reward": "constrained", "percentile": 99, "sla_us": 500},
        times=[e.time for e in entries],
    )
    assert again.read_bytes() == path.read_bytes()
    first = json.loads(path.read_text().splitlines()[0])
    assert first["schema"] == SCHEMA and set(first) == {
        "schema",
        "host",
        "time",
        "objective",
        "point",
        "qps",
        "measurement",
    }


def test_empty_and_blank_lines(tmp_path):
    path = tmp_path / "t.jsonl"
    assert write_trials(path, [], host="h", objective=OBJ) == 0
    assert path.read_text() == "" and read_trials(path) == []
    _write_lines(path, ["", _line(), "   ", _line(time=1.8e9)])
    assert [r.index for r in read_trials(path)] == [0, 1]


@pytest.mark.parametrize(
    "line, message",
    [
        ("{not json", "3: expected one JSON object per line (Expecting property name"),
        ("[1, 2]", "3: expected a JSON object (one trial), got list"),
        ({"schema": "tuner.trial/v2"}, "3: schema: expected 'tuner.trial/v1', got 'tuner.trial/v2'"),
        ("no-schema", "3: schema: expected 'tuner.trial/v1', got nothing (missing)"),
        ({"host": ""}, "3: host: expected a non-empty string, got ''"),
        ({"time": "yesterday"}, "3: time: expected a finite number >= 0, got 'yesterday'"),
        ({"qps": -1}, "3: qps: expected a finite number >= 0, got -1"),
        ({"objective": {"reward": "money", "percentile": 99, "sla_us": 500}}, "3: objective: unknown reward 'money'"),
        ({"objective": {"reward": "constrained"}}, "3: objective: expected an object with reward, percentile, sla_us"),
        ({"point": [250, 1.6]}, "3: point: expected an object"),
        ({"point": {"itr_us": 250.5, "dvfs_ghz": 1.6}}, "3: point.itr_us: expected an integer >= 0 (µs), got 250.5"),
        ({"point": {"itr_us": 250}}, "3: point.dvfs_ghz: expected a number, got nothing (missing)"),
        ("no-measurement", "3: measurement: expected an object (Measurement.to_dict()), got nothing (missing)"),
        ({"measurement": {"seconds": 0}}, "3: measurement.seconds: expected a finite number > 0, got 0"),
    ],
)
def test_bad_line_is_one_line_error_with_file_and_line(tmp_path, line, message):
    if line == "no-schema":
        line = {k: v for k, v in _line().items() if k != "schema"}
    elif line == "no-measurement":
        line = {k: v for k, v in _line().items() if k != "measurement"}
    elif isinstance(line, dict):
        line = _line(**line)
    path = tmp_path / "t.jsonl"
    _write_lines(path, [_line(), "", line, _line()])
    with pytest.raises(InputError) as e:
        read_trials(path)
    text = str(e.value)
    assert "\n" not in text and text.startswith(f"{path}:{message}"), text


def test_measurement_fields_are_checked(tmp_path):
    path = tmp_path / "t.jsonl"
    good = _line()
    cases = {
        "latency_us": ({**good["measurement"], "latency_us": {"99": float("inf")}}, "expected a JSON object"),
        "nan": (
            {**good["measurement"], "latency_us": {**good["measurement"]["latency_us"], "99": -3}},
            "measurement.latency_us.99: expected a finite latency > 0 µs, got -3.0",
        ),
        "pct": (
            {**good["measurement"], "latency_us": {"50": 10.0, "99": 20.0, "42": 5.0}},
            "measurement.latency_us: expected percentiles among 50, 90, 95, 99, 99.9, got 42",
        ),
        "missing pct": (
            {**good["measurement"], "latency_us": {"50": 10.0}, "latency_ci_us": {}},
            "measurement.latency_us: expected the objective's percentile 99",
        ),
        "ci": (
            {**good["measurement"], "latency_ci_us": {"99": [5, 1]}},
            "measurement.latency_ci_us.99: expected finite [low, high] with low <= high",
        ),
        "no requests": (
            {k: v for k, v in good["measurement"].items() if k != "requests"},
            "measurement: expected Measurement.to_dict() fields (missing 'requests')",
        ),
        "other point": (
            {**good["measurement"], "point": {"itr_us": 2, "dvfs_ghz": 2.9}},
            "measurement.point: expected the trial's point",
        ),
    }
    for name, (m, message) in cases.items():
        text = json.dumps({**good, "measurement": m}).replace("Infinity", "1e999")
        path.write_text(text + "\n")
        if name == "latency_us":  # 1e999 parses as inf in Python's json: caught as a non-finite latency
            message = "measurement.latency_us.99: expected a finite latency > 0 µs, got inf"
        with pytest.raises(InputError) as e:
            read_trials(path)
        assert str(e.value) == f"{path}:1: {message}" or str(e.value).startswith(f"{path}:1: {message}"), (
            name,
            str(e.value),
        )


def test_point_outside_the_hosts_knob_space_is_refused_with_its_line(tmp_path):
    path = tmp_path / "t.jsonl"
    _write_lines(
        path,
        [_line(), _line(point={"itr_us": 3, "dvfs_ghz": 1.6}, measurement={**_line()["measurement"], "point": None})],
    )
    assert len(read_trials(path)) == 2  # no space given: not checked
    with pytest.raises(
        InputError,
        match=rf"^{path}:2: point: outside this host's knob space: ITR 3 µs is not "
        r"supported: expected an integer in 2\.\.1022 in steps of 2$",
    ):
        read_trials(path, space=FakeHost().knobs())
    narrow = KnobSpace(tuple(range(2, 1023, 2)), (2.0, 2.9))  # line 1 runs at 1.2 GHz
    with pytest.raises(InputError, match=rf"^{path}:1: point: outside .*DVFS .* GHz is not available"):
        read_trials(path, space=narrow)


def test_not_utf8_and_unreadable(tmp_path):
    path = tmp_path / "t.jsonl"
    path.write_bytes(json.dumps(_line()).encode() + b"\n\xff\xfe\n")
    with pytest.raises(InputError, match=rf"^{path}:2: expected UTF-8 text$"):
        read_trials(path)
    with pytest.raises(InputError, match="cannot read trials"):
        read_trials(tmp_path / "absent.jsonl")


_JSONISH = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=8),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=6), inner, max_size=3),
    max_leaves=8,
)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    field=st.sampled_from(["schema", "host", "time", "objective", "point", "qps", "measurement"]),
    value=_JSONISH,
    drop=st.booleans(),
)
def test_fuzz_any_field_value_is_accepted_or_one_line_error(tmp_path, field, value, drop):
    line = _line()
    if drop:
        del line[field]
    else:
        line[field] = value
    path = tmp_path / "fuzz.jsonl"
    path.write_text(json.dumps(line) + "\n")
    try:
        recs = read_trials(path, space=FakeHost().knobs())
    except InputError as exc:
        assert "\n" not in str(exc) and str(exc).startswith(f"{path}:1: ")
    else:
        assert len(recs) == 1 and recs[0].measurement is not None and math.isfinite(recs[0].qps)


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(blob=st.binary(max_size=200))
def test_fuzz_random_bytes_never_traceback(tmp_path, blob):
    path = tmp_path / "bytes.jsonl"
    path.write_bytes(blob)
    try:
        read_trials(path)
    except InputError as exc:
        assert "\n" not in str(exc) and str(exc).startswith(f"{path}:")


def test_store_adds_skips_duplicates_and_keeps_the_newest(tmp_path):
    recs = _records(6)
    entries = entries_from_records(recs, host="a", objective=OBJ, times=[100.0 + i for i in range(6)])
    store = HistoryStore(tmp_path / "state" / "history.jsonl", keep=4)
    assert store.read() == []
    assert store.add(entries[:3]) == (3, 0)
    assert store.add(entries[1:]) == (3, 2)  # 1 and 2 were already there
    kept = store.read()
    assert [e.time for e in kept] == [102.0, 103.0, 104.0, 105.0]  # newest 4 by time
    assert sorted(p.name for p in (tmp_path / "state").iterdir()) == ["history.jsonl"]  # no lock/tmp files left
    assert dedupe(kept + kept[::-1]) == kept


def test_concurrent_writers_lose_nothing(tmp_path):
    import threading

    recs = _records(8)
    store = HistoryStore(tmp_path / "history.jsonl")
    chunks = [
        entries_from_records(recs[i::4], host=f"w{i}", objective=OBJ, times=[float(i + 4 * k) for k in range(2)])
        for i in range(4)
    ]
    threads = [threading.Thread(target=store.add, args=(c,)) for c in chunks]
    for t in threads:
        t.start()
    for t in threads:
        t.join(10)
    assert sorted(e.time for e in store.read()) == [float(i) for i in range(8)]


def test_in_space_drops_points_the_bounds_exclude():
    recs = _records(4)
    entries = entries_from_records(recs, host="a", objective=OBJ, times=[1.0, 2.0, 3.0, 4.0])
    space = FakeHost().knobs()
    only = KnobSpace(space.itr_us, (recs[1].point.dvfs_ghz,))
    assert [e.record.point for e in in_space(entries, only)] == [recs[1].point]
    assert len(in_space(entries, space)) == 4
