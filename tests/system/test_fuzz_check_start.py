"""`tuner daemon --check` is the daemon's start-up check: over mutants of the example config on the simulated
host, every one --check accepts starts (in process, as `tuner daemon` starts it) and answers GetStatus, and every
one it refuses the start-up refuses with status 78 and lines --check printed. A larger run: `bench/fuzz.py
--targets start`."""

from __future__ import annotations

import tempfile
from collections import Counter
from pathlib import Path

from hypothesis import HealthCheck, given, settings

from tests.fuzzkit import MUTATIONS, check_then_start, mutate, start_base

OUTCOMES: Counter = Counter()


def test_the_base_starts():
    with tempfile.TemporaryDirectory() as tmp:
        assert check_then_start(Path(tmp), start_base(Path(tmp))) == ("accepted-and-started", [])


@settings(max_examples=40, deadline=None, database=None, suppress_health_check=list(HealthCheck))
@given(mutations=MUTATIONS)
def test_what_check_accepts_starts_and_what_it_refuses_the_start_up_refuses(mutations):
    with tempfile.TemporaryDirectory() as tmp:
        outcome, bad = check_then_start(Path(tmp), mutate(start_base(Path(tmp)), mutations))
    OUTCOMES[outcome] += 1
    assert not bad, bad
