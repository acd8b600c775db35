"""The zoo on the replay grid (`tuner.replay.zoo_cells`): a member's runs carry its plant and day, and a cell's
statistics and targets come out of its runs."""

from __future__ import annotations

import pytest

from core.errors import TunerError
from tuner.replay import zoo
from tuner.replay.zoo_cells import cell, cells, member_specs, member_trace, pooled


def test_a_members_runs_carry_its_plant_its_day_and_its_plants_peak():
    silo = zoo.member("silo-flat-high")
    specs = member_specs([silo], [0, 1], [(99.0, 500.0), (99.0, 200.0)], [("warm", "warm", {})], hours=2)
    assert len(specs) == 4
    assert {s.plant for s in specs} == {"silo"}
    assert {(s.trace.day, s.trace.peak_qps, s.trace.hours) for s in specs} == {("flat-high", 200_000.0, 2.0)}


def test_the_bundled_day_is_the_trace_file_and_a_multi_day_member_spans_its_days():
    assert member_trace(zoo.member("bundled")).day == ""
    assert member_trace(zoo.member("cliff-noisy-3")).hours == 72.0
    assert member_trace(zoo.member("cliff-noisy-3"), hours=100).hours == 72.0


def _run(seed: int, ratio: float, above: float = 0.0, violating: int = 0, later_trials: int | None = None) -> dict:
    windows = [{"trials": 6, "day": 0}] + ([{"trials": later_trials, "day": 1}] if later_trials is not None else [])
    return {
        "trace": "m",
        "plant": "p",
        "percentile": 99.0,
        "sla_us": 500.0,
        "variant": "warm",
        "seed": seed,
        "windows": {"tuner": windows},
        "summary": {
            "ratio_to_oracle": ratio,
            "trials_per_retune": 3.0,
            "explore_above_sla_pct": above,
            "sla_violating_windows_significant": violating,
        },
    }


def test_a_cell_meets_its_targets_or_says_which_it_missed():
    good = cell([_run(0, 1.01), _run(1, 1.015), _run(2, 1.03, later_trials=2)])
    assert good["ratio_to_oracle"] == {"median": 1.015, "worst": 1.03}
    assert all(good["met"].values())
    bad = cell([_run(0, 1.03, above=1.5), _run(1, 1.05, violating=1, later_trials=4)])
    assert bad["met"] == {
        "ratio_median": False,
        "ratio_worst": False,
        "no_violating_windows": False,
        "above_sla_every_run": False,
        "trials_after_day1": False,
    }
    assert bad["trials_per_retune_after_day1"]["worst"] == 4.0


def test_cells_group_by_member_and_sla_and_pool_over_members():
    runs = [_run(0, 1.01), _run(1, 1.02), {**_run(0, 1.05), "trace": "n"}]
    got = cells(runs)
    assert [c["member"] for c in got] == ["m", "n"]
    p = pooled(got)
    assert p["ratio_to_oracle"]["median"] == pytest.approx(1.02) and p["ratio_to_oracle"]["worst"] == 1.05
    assert p["all_targets_met"] is False


def test_days_takes_the_same_hours_of_each_of_a_members_days():
    from tuner.replay.grid import trace_windows

    trace = member_trace(zoo.member("cliff-noisy-3"), hours=2, start_hour=5, days=3)
    assert [(w.day, w.index) for w in trace_windows(trace)] == [(0, 5), (0, 6), (1, 29), (1, 30), (2, 53), (2, 54)]
    assert member_trace(zoo.member("bundled"), hours=1, days=3).days == 1  # a one-day member: its one day
    with pytest.raises(TunerError, match="--days 0"):
        member_trace(zoo.member("bundled"), days=0)


def test_a_cell_without_a_later_day_says_why_and_never_counts_it_as_zero():
    only_first = cell([_run(0, 1.01)])["trials_per_retune_after_day1"]
    assert only_first["worst"] is None and "--days" in only_first["reason"]
    measured = cell([_run(0, 1.01, later_trials=0)])["trials_per_retune_after_day1"]
    assert measured == {"median": 0.0, "worst": 0.0, "reason": None}
