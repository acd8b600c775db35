"""The oracle: the best static operating point for one window's load, from the host's noise-free model.

`oracle_point` asks `host.expected(points, qps)` (the simulated host has it) for as few model cells as the knobs'
shape allows (`tuner.replay.oracle_search`: from the slowest frequency that meets the SLA up, each frequency's
largest passing ITR, stopping a frequency as soon as a power bound shows it cannot win; docs/replay.md,
"Oracle"). `exhaustive=True` evaluates the full grid; tests/tuner/replay/test_oracle.py and `bench/oracle.py` show
both give the same point.
"""

from __future__ import annotations

from contextlib import nullcontext
from dataclasses import dataclass

from actuators.abilities import ExpectedDrawsKept, ExpectedModel
from actuators.host import Host, OperatingPoint
from core.errors import TunerError
from core.memory import heap_held
from tuner.optimize.settings import Objective
from tuner.replay.oracle_search import CellGrid, lowest_latency, search_best


@dataclass(frozen=True)
class OracleAnswer:
    """The oracle's point at one load, how it was found, and how many of the grid's `total` points it evaluated."""

    point: OperatingPoint
    how: str
    points: int
    total: int


def oracle_point(
    host: Host, objective: Objective, qps: float, *, exhaustive: bool = False
) -> tuple[OperatingPoint, str]:
    """`oracle_answer`'s point and how it was found (what a replay's oracle window records)."""
    answer = oracle_answer(host, objective, qps, exhaustive=exhaustive)
    return answer.point, answer.how


def oracle_answer(host: Host, objective: Objective, qps: float, *, exhaustive: bool = False) -> OracleAnswer:
    """The lowest-power point whose expected percentile meets the SLA at `qps` (host.expected, noise-free).

    `exhaustive=True` evaluates every (ITR, frequency) of the host. Otherwise `search_best` evaluates only the
    points that can win given the knobs' shape (see `tuner.replay.oracle_search`) -- the exhaustive answer
    whenever that shape holds, on the simulated host ~15-40 model cells instead of 972. Ties go to the lower
    ITR, then the lower frequency, as in the exhaustive search. If no point meets the SLA: the lowest expected
    latency (then lower power, ITR, frequency) over the grid.
    """
    if not isinstance(host, ExpectedModel):
        raise TunerError(f"oracle: host {host.name!r} has no noise-free model (the ExpectedModel ability, expected())")
    grid = CellGrid(host, objective.percentile, qps)
    total = len(grid.itrs) * len(grid.freqs)
    # the search asks for one anchor at several frequencies in separate calls: a host that can keep the
    # frequency-independent half of a cell's run for that (the simulated host) does so for this search only
    # and the simulator's arrays of a few MB each are served from a heap that keeps its pages (core.memory)
    keep = host.expected_draws_kept() if isinstance(host, ExpectedDrawsKept) and not exhaustive else nullcontext()
    with heap_held(), keep:
        if exhaustive:
            grid.evaluate([(i, f) for i in range(len(grid.itrs)) for f in grid.freqs])
            how = f"exhaustive over {len(grid.seen)} of {total} points"
        elif search_best(grid, objective.sla_us):
            how = f"largest feasible ITR per frequency over {len(grid.seen)} of {total} points"
        else:
            lowest_latency(grid)
            how = f"lowest latency at the fastest frequency over {len(grid.seen)} of {total} points"
    feas = sorted((pw, i, f) for (i, f), (lat, pw) in grid.seen.items() if lat <= objective.sla_us)
    if feas:
        _, i, f = feas[0]
        return OracleAnswer(OperatingPoint(grid.itrs[i], f), how, len(grid.seen), total)
    _, _, i, f = min((lat, pw, i, f) for (i, f), (lat, pw) in grid.seen.items())
    how = f"no point meets the SLA ({how}); lowest expected latency"
    return OracleAnswer(OperatingPoint(grid.itrs[i], f), how, len(grid.seen), total)
