"""The zoo: plants (`actuators.sim.plants`) and days (`traces.days`) paired into members, split into halves.

Defaults are chosen on the tuning half only; the test half is for reporting (bench/generalisation.py). The
halves are disjoint in plants and in days: no plant or day of the test half appears in the tuning half. The
bundled plant and the bundled day are in the tuning half. `ZOO` is the one table that says which member is in
which half (docs/benchmarks.md, "The zoo", shows it).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from core.errors import TunerError
from traces.schedule import Schedule

TUNING = "tuning"
TEST = "test"
HALVES = (TUNING, TEST)


@dataclass(frozen=True)
class Member:
    """A plant and a day replayed together, and the half it belongs to."""

    name: str
    plant: str
    day: str
    half: str


ZOO: tuple[Member, ...] = (
    Member("bundled", "bundled", "sample", TUNING),
    Member("e5-2650-two-peaks", "e5-2650", "two-peaks", TUNING),
    Member("ebbrt-sample", "ebbrt", "sample", TUNING),
    Member("cliff-noisy-3", "cliff-x1.5", "noisy-3", TUNING),
    Member("release-two-peaks", "release", "two-peaks", TUNING),
    Member("lognormal-noisy-3", "lognormal", "noisy-3", TUNING),
    Member("steal-sample", "steal", "sample", TUNING),
    Member("silo-flat-high", "silo", "flat-high", TEST),
    Member("cores-32-spiky", "cores-32", "spiky", TEST),
    Member("tail-heavy-no-return", "tail-heavy", "no-return", TEST),
    Member("flat-voltage-flat-high", "flat-voltage", "flat-high", TEST),
    Member("drift-spiky", "drift", "spiky", TEST),
)


def member(name: str) -> Member:
    """The member `name`; a one-line error naming the known ones."""
    for m in ZOO:
        if m.name == name:
            return m
    raise TunerError(f"zoo member {name!r}: expected one of {', '.join(m.name for m in ZOO)}")


def members(half: str | None = None) -> tuple[Member, ...]:
    """The members of `half` (all of them when None)."""
    if half is not None and half not in HALVES:
        raise TunerError(f"zoo half {half!r}: expected {' or '.join(HALVES)}")
    return tuple(m for m in ZOO if half is None or m.half == half)


def plants(half: str) -> tuple[str, ...]:
    """The plants of `half`, in table order."""
    return tuple(dict.fromkeys(m.plant for m in members(half)))


def days(half: str) -> tuple[str, ...]:
    """The days of `half`, in table order."""
    return tuple(dict.fromkeys(m.day for m in members(half)))


def day_schedule(
    name: str, *, bin_s: float = 3600.0, hours: float | None = None, peak_qps: float = 600_000.0
) -> Schedule:
    """Day `name` as a load schedule: `sample` is the bundled trace file, the others `traces.days`."""
    from traces.days import SAMPLE
    from traces.days import day_schedule as synthesised
    from traces.schedule import load_schedule, sample_trace_path

    if name == SAMPLE:
        return load_schedule(Path(sample_trace_path()), bin_s=bin_s, hours=hours, peak_qps=peak_qps)
    return synthesised(name, bin_s=bin_s, hours=hours, peak_qps=peak_qps)


def day_names() -> tuple[str, ...]:
    """Every day `day_schedule` knows: the bundled sample first."""
    from traces.days import DAYS, SAMPLE

    return (SAMPLE, *DAYS)
