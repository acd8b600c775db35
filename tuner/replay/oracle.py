"""The oracle: the best static operating point for one window's load, from the host's noise-free model.

`oracle_point` asks `host.expected(points, qps)` (the simulated host has it) for as few cells as the knobs' shape
allows: within a frequency p99 rises and power falls with ITR, so each frequency's best point is the largest ITR
that meets the SLA (galloping then bisection, from the highest frequency down), plus the checks the model's
Monte-Carlo noise and the non-monotone low-ITR power need (docs/replay.md, "Oracle"). `exhaustive=True` evaluates
the full grid; the tests and `bench/replay.py --check-oracle` show both give the same point.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable, Sequence
from typing import Any

from actuators.host import OperatingPoint
from tuner.optimize.settings import Objective

#: The oracle's local scan: candidates within this % of the best power, and how many ITR values next to each.
ORACLE_NEAR_PCT = 0.5
ORACLE_SCAN = 24
#: The ITR search takes the latency's minimum as passed only once a step down raises it by this share (its
#: Monte-Carlo noise near saturation is a few %: a smaller rise is no evidence of the minimum).
ORACLE_RISE = 0.1
#: ... and a frequency where the search found no ITR meeting the SLA, but some value within this factor of it,
#: is scanned every ORACLE_SCAN // 3 ITR values for feasible islands that noise near saturation leaves.
ORACLE_ISLAND = 1.5


def oracle_point(
    host: Any, objective: Objective, qps: float, *, exhaustive: bool = False
) -> tuple[OperatingPoint, str]:
    """The lowest-power point whose expected percentile meets the SLA at `qps` (host.expected, noise-free).

    `exhaustive=True` evaluates every (ITR, frequency) of the host. Otherwise it uses the knobs' structure: at a
    fixed frequency power falls with ITR and the percentile has one minimum (interrupt overhead at the lowest
    ITRs, batching delay above), so each frequency's best point is the largest ITR that meets the SLA; and a
    faster core never has a higher percentile at the same ITR, so that boundary never rises as the frequency
    falls. From the highest frequency down, `_largest_meeting` searches below the previous boundary, and the
    search ends at the first frequency where no ITR meets the SLA (no lower one has any). Power is not
    monotone at the lowest ITRs (it rises with ITR first), so a feasible range's smallest ITR is a candidate
    too wherever the power at the lowest ITR is below the best found (usually at no frequency; then one cell
    settles it). The answer is the lowest-power candidate -- the exhaustive answer whenever those shapes hold
    (`bench/replay.py --check-oracle` compares the two on every window); on the simulated host ~60-110 model
    cells instead of ~970. If no point meets the SLA: the lowest expected latency over the full grid.
    """
    knobs = host.knobs()
    pct = objective.percentile
    itrs, freqs = knobs.itr_us, knobs.dvfs_ghz
    seen: dict[tuple[int, float], tuple[float, float]] = {}  # (itr, ghz) -> (percentile µs, power W)

    def evaluate(points: Sequence[OperatingPoint]) -> None:
        todo = [p for p in points if (p.itr_us, p.dvfs_ghz) not in seen]
        for p, e in zip(todo, host.expected(todo, qps) if todo else ()):
            seen[(p.itr_us, p.dvfs_ghz)] = (e.latency_us[pct], e.power_w)

    def grid() -> str:
        return f"{len(seen)} of {len(itrs) * len(freqs)} points"

    def feasible() -> list[tuple[float, int, float]]:
        return sorted((pw, i, f) for (i, f), (lat, pw) in seen.items() if lat <= objective.sla_us)

    def latency(i: int, f: float) -> float:
        evaluate([OperatingPoint(itrs[i], f)])
        return seen[(itrs[i], f)][0]

    def power(i: int, f: float) -> float:
        evaluate([OperatingPoint(itrs[i], f)])
        return seen[(itrs[i], f)][1]

    if not exhaustive:
        sla = objective.sla_us
        tops: dict[float, int] = {}  # frequency -> its largest ITR index meeting the SLA
        top: int | None = len(itrs) - 1  # no ITR index above this meets the SLA at the current frequency
        for f in reversed(freqs):
            above = top
            assert above is not None
            top = _largest_meeting(functools.partial(latency, f=f), sla, above, first_step=1 if f != freqs[-1] else 0)
            close = min(lat for (i, g), (lat, _) in seen.items() if g == f) <= sla * ORACLE_ISLAND
            if top is None and close:
                # near saturation the model's noise can leave feasible islands the search stepped over: scan
                stride = ORACLE_SCAN // 3
                hit = next((i for i in range(above, -1, -stride) if latency(i, f) <= sla), None)
                if hit is not None:
                    top = max(i for i in range(hit, min(hit + stride, above + 1)) if latency(i, f) <= sla)
            if top is None:
                break
            tops[f] = top
        # The lowest ITRs: power rises with ITR there (the busy-polling hump) before it falls, so a feasible
        # range's low end can beat its high end. Power at the lowest ITR rises with frequency, so from the slowest
        # feasible frequency up, once it is above the best found (by more than the model's noise, ORACLE_NEAR_PCT:
        # the first few ITR values are within it) no frequency's low end can win.
        best = min((power(t, f) for f, t in tops.items()), default=math.inf)
        lows: dict[float, int] = {}  # frequency -> its smallest ITR index meeting the SLA, where searched
        for f in sorted(tops):
            if power(0, f) * (1 - ORACLE_NEAR_PCT / 100) >= best:
                break
            # the smallest index meeting the SLA: below the latency's minimum it falls with ITR, so bisect
            bad, good = 0, tops[f] if latency(0, f) > sla else 0
            while good - bad > 1:
                mid = (good + bad) // 2
                bad, good = (bad, mid) if latency(mid, f) <= sla else (mid, good)
            best = min(best, power(good, f))
            lows[f] = good
        # The model's power is smooth only to its Monte-Carlo noise (~0.05 %): every candidate within
        # ORACLE_NEAR_PCT of the best also has its ORACLE_SCAN nearest feasible ITRs inside its range evaluated.
        # Latency is noisy too: ORACLE_SCAN // 3 values beyond each bisected end are evaluated as well.
        near = best * (1 + ORACLE_NEAR_PCT / 100)
        for f, hi in tops.items():
            if power(hi, f) <= near:
                for i in range(hi - 1, max(hi - ORACLE_SCAN, lows.get(f, 0)) - 1, -1):
                    if latency(i, f) > sla:
                        break
                for i in range(hi + 1, min(hi + ORACLE_SCAN // 3, len(itrs) - 1) + 1):
                    latency(i, f)
            lo = lows.get(f)
            if lo is not None and power(lo, f) <= near:
                for i in (*range(lo + 1, min(lo + ORACLE_SCAN, hi)), *range(lo - 1, lo - ORACLE_SCAN // 3 - 1, -1)):
                    if i >= 0:
                        latency(i, f)
        feas = feasible()
        if feas:
            _, i, f = feas[0]
            return OperatingPoint(i, f), f"largest feasible ITR per frequency over {grid()}"
    evaluate([OperatingPoint(i, f) for i in itrs for f in freqs])
    how = f"exhaustive over {grid()}"
    feas = feasible()
    if feas:
        _, i, f = feas[0]
        return OperatingPoint(i, f), how
    _, _, i, f = min((lat, pw, i, f) for (i, f), (lat, pw) in seen.items())
    return OperatingPoint(i, f), f"no point meets the SLA ({how}); lowest expected latency"


def _largest_meeting(latency: Callable[[int], float], limit: float, top: int, *, first_step: int) -> int | None:
    """The largest index <= `top` with `latency(i) <= limit`, for a `latency` with one minimum over the index.

    Gallops down from `top` (steps `first_step`, doubling; 0 = bisect the range at once) while the latency
    falls; once a step meets the limit, bisects up to the boundary. If the latency rises again by more than
    `ORACLE_RISE` (the minimum was passed) or index 0 is reached first, a ternary search over the bracket of
    the minimum looks for any index that meets the limit. None if none does.
    """
    if latency(top) <= limit:
        return top
    above, bad = top, top  # `bad` fails; `above` is the failing index evaluated before it (the bracket's top)
    step = first_step or max(top // 2, 1)
    good: int | None = None
    while good is None:
        j = max(bad - step, 0)
        if latency(j) <= limit:
            good = j
        elif latency(j) > latency(bad) * (1 + ORACLE_RISE) or j == 0:
            good = _ternary_meeting(latency, limit, j, above)
            if good is None:
                return None
            bad = min((i for i in (bad, above) if i > good), default=above)
        else:
            above, bad, step = bad, j, step * 2
    while bad - good > 1:
        mid = (good + bad) // 2
        good, bad = (mid, bad) if latency(mid) <= limit else (good, mid)
    return good


def _ternary_meeting(latency: Callable[[int], float], limit: float, lo: int, hi: int) -> int | None:
    """Some index in [lo, hi] meeting `limit` if the (single-minimum) latency's minimum there does, else None."""
    while hi - lo > 2:
        m1, m2 = lo + (hi - lo) // 3, hi - (hi - lo) // 3
        for m in (m1, m2):
            if latency(m) <= limit:
                return m
        if latency(m1) < latency(m2):
            hi = m2
        elif latency(m1) > latency(m2):
            lo = m1
        else:
            lo, hi = m1, m2
    return next((i for i in range(lo, hi + 1) if latency(i) <= limit), None)
