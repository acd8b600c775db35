"""The zoo's table (`tuner.replay.zoo.ZOO`): two disjoint halves covering every plant and day, the bundled plant
and day in the tuning half."""

from __future__ import annotations

import pytest

from actuators.sim.plants import PLANTS
from core.errors import TunerError
from traces.days import DAYS
from traces.schedule import load_schedule, sample_trace_path
from tuner.replay import zoo


def test_the_halves_are_disjoint_in_plants_and_days():
    assert not set(zoo.plants(zoo.TUNING)) & set(zoo.plants(zoo.TEST))
    assert not set(zoo.days(zoo.TUNING)) & set(zoo.days(zoo.TEST))


def test_the_halves_cover_every_plant_and_day_and_every_member_is_in_one():
    assert set(zoo.plants(zoo.TUNING)) | set(zoo.plants(zoo.TEST)) == set(PLANTS)
    assert set(zoo.days(zoo.TUNING)) | set(zoo.days(zoo.TEST)) == {"sample", *DAYS}
    assert len(zoo.members(zoo.TUNING)) + len(zoo.members(zoo.TEST)) == len(zoo.ZOO)
    assert len({m.name for m in zoo.ZOO}) == len(zoo.ZOO)


def test_the_bundled_plant_and_day_are_tuning():
    assert zoo.member("bundled") == zoo.Member("bundled", "bundled", "sample", zoo.TUNING)


def test_unknown_names_are_one_line():
    with pytest.raises(TunerError, match="zoo member 'x': expected one of bundled"):
        zoo.member("x")
    with pytest.raises(TunerError, match="zoo half 'x'"):
        zoo.members("x")


def test_the_sample_day_is_the_bundled_trace():
    a = zoo.day_schedule("sample", hours=3)
    b = load_schedule(sample_trace_path(), hours=3, peak_qps=600_000.0)
    assert [w.qps for w in a.windows] == [w.qps for w in b.windows]
    assert len(zoo.day_schedule("no-return", hours=3).windows) == 3
