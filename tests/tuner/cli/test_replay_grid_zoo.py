"""`tuner replay-grid --plant NAME` and a trace `NAME:START:HOURS:EVERY:day:DAY`: the zoo's plants and days on the
grid."""

from __future__ import annotations

import argparse

import pytest

from core.errors import TunerError
from tuner.cli import replay_grid as cli
from tuner.replay.grid import check


def _args(*argv: str) -> argparse.Namespace:
    p = argparse.ArgumentParser()
    cli.add_arguments(p)
    return p.parse_args(list(argv))


def test_plant_and_day_reach_every_run():
    specs = cli.specs_from(_args("--plant", "silo", "--traces", "a:0:2:1:day:two-peaks", "--variants", "warm"))
    assert {s.plant for s in specs} == {"silo"}
    assert {(s.trace.day, s.trace.path) for s in specs} == {("two-peaks", "")}
    check(specs)


def test_an_unknown_plant_is_refused_before_any_run():
    with pytest.raises(TunerError, match="plant 'nope'"):
        cli.specs_from(_args("--plant", "nope"))
