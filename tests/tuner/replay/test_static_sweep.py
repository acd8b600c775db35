"""The static sweep: range parsing, Pareto front, SLA optimum (hand-checked) and the sweep loop."""

from __future__ import annotations

import json
import math

import pytest

from actuators.host import PERCENTILES, KnobSpace, OperatingPoint
from core.errors import HostError, KnobRangeError, TunerError
from tests.fakes import DVFS_GHZ, FakeHost
from tuner.replay.static_sweep import (
    SweepConfig,
    SweepPoint,
    best_under_sla,
    pareto_front,
    parse_dvfs_spec,
    parse_itr_spec,
    parse_percentile,
    percentile_key,
    run_sweep,
    summarize_best,
    sweep_pareto,
)

KNOBS = KnobSpace.ixgbe(DVFS_GHZ)


# --------------------------------------------------------------------------- range parsing


def test_itr_full_ixgbe_range_and_coarse_step():
    full = parse_itr_spec("2:1022:2", KNOBS)
    assert len(full) == 511 and full[0] == 2 and full[-1] == 1022
    coarse = parse_itr_spec("2:1022:20", KNOBS)
    assert len(coarse) == 52 and coarse[:3] == (2, 22, 42) and coarse[-1] == 1022


@pytest.mark.parametrize(
    "spec,expected",
    [
        ("100:105:2", (100, 102, 104)),  # HI off the grid: stop below it
        ("10:16", (10, 12, 14, 16)),  # LO:HI -> the host's own values in range
        ("9:15", (10, 12, 14)),
        ("300", (300,)),
        (" 300, 2 ", (300, 2)),  # list order kept
        ("ALL", tuple(range(2, 1023, 2))),
    ],
)
def test_itr_forms(spec, expected):
    assert parse_itr_spec(spec, KNOBS) == expected


@pytest.mark.parametrize(
    "spec,exc,fragment",
    [
        ("", TunerError, "expected 'all'"),
        ("2:1022:0", TunerError, "STEP must be a positive integer"),
        ("2:1022:-2", TunerError, "STEP must be a positive integer"),
        ("100:2:2", TunerError, "LO 100 is greater than HI 2"),
        ("2:4:6:8", TunerError, "expected LO:HI or LO:HI:STEP"),
        ("a:b", TunerError, "'a' is not an integer"),
        ("1.5", TunerError, "'1.5' is not an integer"),
        ("2:1022:2.5", TunerError, "'2.5' is not an integer"),
        ("300,300", TunerError, "listed twice"),
        ("3", KnobRangeError, "ITR 3 µs is not supported"),  # odd: ixgbe steps of 2
        ("0:10:2", KnobRangeError, "ITR 0 µs is not supported"),
        ("1000:1100:10", KnobRangeError, "ITR 1030 µs"),  # runs past 1022 -> refused, not clipped
        ("2000:3000", KnobRangeError, "supports no ITR in 2000..3000"),
    ],
)
def test_itr_bad_specs_are_one_line_errors(spec, exc, fragment):
    with pytest.raises(exc) as info:
        parse_itr_spec(spec, KNOBS)
    msg = str(info.value)
    assert fragment in msg and "\n" not in msg and msg.startswith("--itr")


def test_dvfs_decimal_range_is_exact():
    got = parse_dvfs_spec("1.2:2.9:0.1", KNOBS)
    assert got == DVFS_GHZ and len(got) == 18  # float accumulation would lose 2.9 or duplicate a value
    assert parse_dvfs_spec("1.2:2.0:0.4", KNOBS) == (1.2, 1.6, 2.0)
    assert parse_dvfs_spec("1.2:1.5", KNOBS) == (1.2, 1.3, 1.4, 1.5)
    assert parse_dvfs_spec("all", KNOBS) == DVFS_GHZ
    assert parse_dvfs_spec("2.9,1.2", KNOBS) == (2.9, 1.2)
    # values come back as the host's own floats, not the parsed ones
    assert parse_dvfs_spec("1.30", KNOBS)[0] is KNOBS.dvfs_ghz[1]


@pytest.mark.parametrize(
    "spec,exc,fragment",
    [
        ("", TunerError, "expected 'all'"),
        ("1.25", KnobRangeError, "not available"),
        ("1.2:2.9:0", TunerError, "STEP must be positive"),
        ("1.2:2.9:-0.1", TunerError, "STEP must be positive"),
        ("2.9:1.2:0.1", TunerError, "greater than HI"),
        ("nan", TunerError, "not a finite number"),
        ("inf,1.2", TunerError, "not a finite number"),
        ("fast", TunerError, "not a number"),
        ("1.2,1.20", TunerError, "listed twice"),
        ("1.0:1.1", KnobRangeError, "no frequency in"),
        ("1.2:3.0:0.1", KnobRangeError, "DVFS 3.0 GHz is not available"),
    ],
)
def test_dvfs_bad_specs_are_one_line_errors(spec, exc, fragment):
    with pytest.raises(exc) as info:
        parse_dvfs_spec(spec, KNOBS)
    msg = str(info.value)
    assert fragment in msg and "\n" not in msg and msg.startswith("--dvfs")


def test_percentile_parsing_and_keys():
    assert parse_percentile("99") == 99.0 and parse_percentile("99.9") == 99.9
    assert [percentile_key(p) for p in PERCENTILES] == ["p50_us", "p90_us", "p95_us", "p99_us", "p999_us"]
    for bad in ("98", "x", "", "nan"):
        with pytest.raises(TunerError, match="expected one of 50, 90, 95, 99, 99.9"):
            parse_percentile(bad)


# --------------------------------------------------------------------------- pure analysis


def test_pareto_front_hand_checked():
    pts = [(1, 10), (2, 5), (3, 5), (2, 8), (4, 1), (4, 1), (5, 2), (math.inf, 0), (6, math.nan), (0.5, 12)]
    # (3,5) and (2,8) are dominated by (2,5); (5,2) by (4,1); the duplicate (4,1) is kept (neither
    # dominates the other); non-finite objectives are left out; result ordered by the first objective.
    assert pareto_front(pts, lambda p: p) == [(0.5, 12), (1, 10), (2, 5), (4, 1), (4, 1)]
    assert pareto_front([], lambda p: p) == []
    assert pareto_front([(3, 3)], lambda p: p) == [(3, 3)]
    # same first objective: only the lowest second survives
    assert pareto_front([(1, 3), (1, 2), (1, 4)], lambda p: p) == [(1, 2)]


def _pt(itr, ghz, p99, energy, qps=100.0, achieved=100.0, p50=None, ci=None):
    lat = {p: p99 for p in PERCENTILES}
    if p50 is not None:
        lat[50.0] = p50
    return SweepPoint(
        itr,
        ghz,
        qps,
        achieved,
        lat,
        {99.0: ci or (p99 * 0.9, p99 * 1.1)},
        energy,
        energy / 20,
        20.0,
        int(achieved * 20),
    )


def test_best_under_sla_hand_checked():
    a = _pt(100, 2.9, p99=200, energy=1500)
    b = _pt(300, 1.3, p99=480, energy=1100)  # the answer at SLA 500
    c = _pt(400, 1.2, p99=650, energy=900)  # cheaper but over the SLA
    d = _pt(450, 1.2, p99=300, energy=800, achieved=50.0)  # cheapest, "meets" SLA, but drops half the load
    e = _pt(350, 1.3, p99=499, energy=1100)  # ties b on energy with higher latency
    pts = [a, b, c, d, e]
    assert best_under_sla(pts, 500, 99) is b
    assert best_under_sla(pts, 700, 99) is c
    assert best_under_sla(pts, 250, 99) is a
    assert best_under_sla(pts, 100, 99) is None
    assert best_under_sla(pts, 500, 99, min_load_ratio=0.5) is d  # if dropping half is acceptable
    # the percentile matters: at p50 the cheap point c is fine
    c50 = _pt(400, 1.2, p99=650, energy=900, p50=120)
    assert best_under_sla([a, b, c50], 500, 50) is c50
    # the Pareto front over points that keep up: d excluded; b beats e; c is the low-energy end
    assert sweep_pareto(pts, 99) == [a, b, c]


def test_summarize_best_met_and_not_met():
    good = _pt(300, 1.3, p99=480, energy=1000, ci=(470, 510))
    worst = _pt(2, 2.9, p99=60, energy=2000)
    s = summarize_best([good, worst], 500, 99)
    assert s["met"] is True and s["best"]["itr_us"] == 300 and s["points_meeting_sla"] == 2
    assert s["sla_met_at_ci_upper_bound"] is False  # 510 > 500: the point estimate may be lucky
    assert s["energy_saved_vs_worst_point"] == pytest.approx(0.5)
    none = summarize_best([good, worst], 50, 99)
    assert none["met"] is False and "best" not in none
    assert "no measured point met p99 <= 50 µs" in none["message"]
    assert none["lowest_latency"]["itr_us"] == 2


def test_record_round_trip_with_unmeasured_latency():
    p = _pt(10, 1.5, p99=math.inf, energy=10)
    d = p.to_json()
    assert d["p99_us"] is None and d["p99_ci_us"][1] is None
    text = json.dumps(d, allow_nan=False)  # strict JSON: no NaN/Infinity tokens
    back = SweepPoint.from_json(json.loads(text))
    assert back.latency(99) == math.inf and back.itr_us == 10 and back.dvfs_ghz == 1.5
    assert SweepPoint.from_json(_pt(10, 1.5, 300, 10).to_json()) == _pt(10, 1.5, 300, 10)
    with pytest.raises(TypeError):
        SweepPoint.from_json({**d, "itr_us": 10.5})


# --------------------------------------------------------------------------- the loop


def test_run_sweep_sets_settles_measures_in_order():
    host = FakeHost()
    records = []
    pts = [OperatingPoint(100, 1.2), OperatingPoint(200, 1.2), OperatingPoint(100, 2.9)]
    out = run_sweep(host, pts, SweepConfig(seconds=5, settle=0.5), records.append)
    assert out == records and [(r.itr_us, r.dvfs_ghz) for r in out] == [(100, 1.2), (200, 1.2), (100, 2.9)]
    assert host.calls[:4] == [("set_itr", 100), ("set_dvfs", 1.2), ("measure", 0.5), ("measure", 5)]
    assert len(host.calls) == 12 and host.restore_count == 0  # restoring is the caller's job
    lat, _, _ = host.model(200, 1.2, 100_000)
    assert out[1].latency(99) == pytest.approx(lat[99.0]) and out[1].seconds == 5


def test_run_sweep_refuses_whole_grid_before_setting_anything():
    host = FakeHost()
    with pytest.raises(KnobRangeError):
        run_sweep(host, [OperatingPoint(100, 1.2), OperatingPoint(101, 1.2)], SweepConfig(), lambda r: None)
    assert host.calls == []


def test_run_sweep_detects_host_that_did_not_apply_the_point():
    class Liar(FakeHost):
        def set_dvfs(self, ghz):
            super().set_dvfs(1.2)

    with pytest.raises(HostError, match="measured at ITR 100 µs @ 1.2 GHz after being set to ITR 100 µs @ 2.9"):
        run_sweep(Liar(), [OperatingPoint(100, 2.9)], SweepConfig(settle=0), lambda r: None)


def test_sweep_config_validation():
    for kw in ({"seconds": 0}, {"seconds": math.nan}, {"settle": -1}, {"seconds": math.inf}):
        with pytest.raises(TunerError):
            SweepConfig(**kw)


# --------------------------------------------------------------------------- the real simulator


def test_run_sweep_on_simulated_host_then_restore():
    sim = pytest.importorskip("actuators.sim.host")
    host = sim.make_sim_host(seed=1, qps=100_000)
    out = run_sweep(host, [OperatingPoint(200, 1.5)], SweepConfig(seconds=1, settle=0), lambda r: None)
    assert host.point() == OperatingPoint(200, 1.5) and out[0].itr_us == 200
    host.restore()
    assert host.point() is None
