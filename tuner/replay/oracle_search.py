"""The oracle's search over a host's model cells: as few `host.expected()` cells as the knobs' shape allows.

`search_best` returns the points it evaluated; `tuner.replay.oracle.oracle_point` picks the lowest-power one
that meets the SLA, exactly as the exhaustive grid does. The shape it relies on (checked on every window of
`bench/oracle.py` against the exhaustive grid, and in tests/tuner/replay/test_oracle.py):

* the model is computed at anchor ITRs and interpolated linearly between them (`host.expected_itr_anchors()`;
  a host without it has every ITR as an anchor), so within an anchor interval latency and power are linear
  and the interval's best point is at one end of its feasible part: evaluating both anchors settles it;
* at the same ITR a faster core has a lower percentile and a higher power (common random numbers make this
  hold cell by cell), so the largest anchor meeting the SLA never falls as the frequency rises, and the
  power at a fixed anchor bounds every higher frequency's power there from below;
* at a fixed frequency the power falls with ITR above its lowest values (the busy-polling hump) to within
  the model's Monte-Carlo noise (`NOISE_PCT`), so a frequency's points at or below an anchor that fails the
  SLA cost at least that anchor's power, less the noise; below the hump the power is at least the lowest
  ITR's, less the noise;
* the percentile rises with ITR above its minimum; where it is within `CLOSE` of the SLA its noise can put
  a passing anchor above a failing one, so the search looks further until it is clearly above.

The search walks down the frequencies (fast ones first: their cells are cheap) to the slowest one that has a
passing anchor, each boundary searched below the previous one; then back up from there with a power bound: a
frequency whose first failing anchor above its boundary costs more than the best point found (less the noise)
is done, and the walk stops at the first frequency whose top-anchor power is above it. On the simulated host
~40-80 of the model's 972 cells per window (docs/replay.md, "Oracle").
"""

from __future__ import annotations

import bisect
import math
from collections.abc import Callable, Sequence
from typing import Protocol

from actuators.abilities import ExpectedAnchors, ExpectedModel
from actuators.host import Host, OperatingPoint

#: Power noise allowance (%): a bound from an anchor's power is trusted only this far below it (the model's
#: power is monotone in ITR only to within its Monte-Carlo noise, measured up to ~0.6 % near saturation).
NOISE_PCT = 0.75
#: An anchor whose percentile is within this factor above the SLA is not conclusive: the next anchors up
#: are evaluated until one is above SLA x CLOSE (noise near saturation leaves passing islands).
CLOSE = 1.1
#: The latency minimum is taken as passed when a step down raises the percentile by this share.
RISE = 0.1
#: For a percentile above `RESCAN_ABOVE_PCT`, the fastest frequency found to fail everywhere is scanned anchor
#: by anchor when one of its anchors came within `RESCAN` of the SLA (`_close_calls`): p99.9 near saturation is
#: too noisy for one latency minimum (its first-run estimate is up to 2x the refined one, p99's 1.5x). At p99
#: and below every window of `bench/oracle.py --check` (96 per SLA) equals the exhaustive search without it,
#: and there the scan would cost ~0.3 s per window at a 200 µs SLA.
RESCAN = 1.05
RESCAN_ABOVE_PCT = 99.0

Seen = dict[tuple[int, float], tuple[float, float]]  # (ITR index, GHz) -> (percentile µs, power W)


class OracleHost(Host, ExpectedModel, Protocol):
    """What the oracle searches: a `Host` (its knobs) with the `ExpectedModel` ability."""


class CellGrid:
    """The (anchor, frequency) cells of one load, evaluated on demand through `host.expected()`."""

    def __init__(self, host: OracleHost, percentile: float, qps: float) -> None:
        knobs = host.knobs()
        self.host, self.pct, self.qps = host, percentile, qps
        self.itrs: tuple[int, ...] = tuple(knobs.itr_us)
        self.freqs: tuple[float, ...] = tuple(knobs.dvfs_ghz)
        pos = {v: i for i, v in enumerate(self.itrs)}
        if isinstance(host, ExpectedAnchors):
            idx = sorted({pos[a] for a in host.expected_itr_anchors() if a in pos} | {0, len(self.itrs) - 1})
        else:
            idx = list(range(len(self.itrs)))
        self.anchors: list[int] = idx  # ITR indices of the anchors
        self.seen: Seen = {}

    def evaluate(self, pts: Sequence[tuple[int, float]]) -> None:
        """Evaluate (ITR index, GHz) points not seen yet, in one `expected()` call."""
        todo = list(dict.fromkeys(p for p in pts if p not in self.seen))
        if not todo:
            return
        got = self.host.expected([OperatingPoint(self.itrs[i], f) for i, f in todo], self.qps)
        for key, e in zip(todo, got, strict=True):
            self.seen[key] = (e.latency_us[self.pct], e.power_w)

    def cell(self, k: int, f: float) -> tuple[float, float]:
        """(percentile, power) at anchor `k` and frequency `f`."""
        key = (self.anchors[k], f)
        if key not in self.seen:
            self.evaluate([key])
        return self.seen[key]

    def lat(self, k: int, f: float) -> float:
        return self.cell(k, f)[0]

    def pw(self, k: int, f: float) -> float:
        return self.cell(k, f)[1]

    def column(self, k: int, freqs: Sequence[float]) -> None:
        """Anchor `k` at several frequencies: one simulated run serves them all."""
        self.evaluate([(self.anchors[k], f) for f in freqs])

    def interval(self, k: int, f: float) -> None:
        """Every ITR of the anchor interval [k, k + 1] at `f` (both anchors, then interpolation: no new cell)."""
        top = min(k + 1, len(self.anchors) - 1)
        self.cell(k, f)
        self.cell(top, f)
        self.evaluate([(i, f) for i in range(self.anchors[k], self.anchors[top] + 1)])


def search_best(grid: CellGrid, sla: float) -> bool:
    """Evaluate every point that can be the lowest-power one meeting `sla` into `grid.seen`.

    False if no point meets the SLA (then the caller falls back to the lowest latency, see `lowest_latency`)."""
    freqs, last = grid.freqs, len(grid.anchors) - 1
    slack = 1.0 - NOISE_PCT / 100.0
    best = [math.inf]

    def offer(k: int, f: float) -> None:
        """Anchor interval [k, k + 1] at f holds a passing anchor: all its points are candidates."""
        grid.interval(k, f)
        for i in range(grid.anchors[k], grid.anchors[min(k + 1, last)] + 1):
            lat, pw = grid.seen[(i, f)]
            if lat <= sla:
                best[0] = min(best[0], pw)

    # The top anchor over every frequency in one run: the high end's power bound per frequency.
    grid.column(last, freqs)
    # The fastest frequency first: no slower one passes above its largest passing anchor.
    top = _largest_meeting(lambda k: grid.lat(k, freqs[-1]), sla, last, first_step=0)
    if top is None:
        return False
    # Down to the slowest frequency that passes: a slower frequency's passing anchors lie at or below a faster
    # one's largest, and none passes below the first frequency where none does (cheap cells: far from
    # saturation the boundary moves by about one anchor per step).
    tops: dict[float, int] = {freqs[-1]: top}
    hi = len(freqs) - 1  # freqs[hi] passes
    while hi > 0:
        t = _step_down(grid, sla, freqs[hi - 1], tops[freqs[hi]])
        if t is None:
            break
        tops[freqs[hi - 1]] = t
        hi -= 1
    # From the slowest passing frequency up: each frequency's largest passing anchor is at or above the
    # previous one's. A frequency is done once a failing anchor's power (less the noise) is above the best:
    # nothing at or below it there can win.
    floor = tops[freqs[hi]]
    for fi in range(hi, len(freqs)):
        f = freqs[fi]
        if grid.pw(last, f) * slack >= best[0]:
            break  # its power is at least the top anchor's, rising with frequency: no faster one wins either
        t = max(floor, tops.get(f, floor))
        while t < last and grid.lat(t + 1, f) <= sla:
            t += 1
        floor = tops[f] = t
        if t < last and grid.pw(t + 1, f) * slack >= best[0]:
            continue
        # a candidate: noise near saturation can leave a passing anchor above a failing one
        t = _look_up(grid, t, f, sla)
        # the largest passing anchor's interval, and those below it while their power (less the noise) could
        # still beat the best
        offer(t, f)
        k = t
        while k > 0 and grid.pw(k - 1, f) * slack < best[0]:
            k -= 1
            offer(k, f)
            if grid.lat(k, f) > sla * CLOSE:
                break  # clearly below the passing range (noise can leave passing islands): the low end's
    _low_end(grid, sla, best, hi, offer, tops)
    if hi > 0 and grid.pct > RESCAN_ABOVE_PCT:
        _close_calls(grid, sla, freqs[hi - 1], offer)
    return True


def _close_calls(grid: CellGrid, sla: float, f: float, offer: Callable[[int, float], None]) -> None:
    """The fastest frequency found to fail everywhere: if one of its anchors came within `RESCAN` of the SLA,
    every anchor up to its highest evaluated one is evaluated, and any that passes offered.

    Its boundary search assumes one latency minimum; a noisy percentile (p99.9 near saturation moves by
    ~10 % from one anchor to the next) can leave passing anchors between failing ones there. Only adds cells:
    an answer the search already had right stays right."""
    seen = [k for k in range(len(grid.anchors)) if (grid.anchors[k], f) in grid.seen]
    if not seen or min(grid.lat(k, f) for k in seen) > sla * RESCAN:
        return
    for k in range(max(seen) + 1):
        if grid.lat(k, f) <= sla:
            offer(k, f)
            if k > 0:
                offer(k - 1, f)


def _step_down(grid: CellGrid, sla: float, f: float, above: int) -> int | None:
    """The largest passing anchor at `f`, or None if none passes, given `above`: the largest passing anchor at
    the next faster frequency (no anchor above it passes at `f` either).

    Steps down from `above` towards where the line through the last two anchors meets the SLA (at most twice
    the last step: 1, 2, 4, ...) while the latency falls, and bisects once a step passes. If the latency rises
    again by `RISE` (the minimum was passed) or the lowest anchor is reached first, a ternary search over the
    bracket looks for any passing anchor."""
    lat: Callable[[int], float] = lambda k: grid.lat(k, f)
    if lat(above) <= sla:
        return above
    itr = [grid.itrs[i] for i in grid.anchors]
    bad, j, step = above, max(above - 1, 0), 1
    while True:
        if lat(j) <= sla:
            return _bisect_up(lat, sla, j, bad)
        if j == 0 or lat(j) > lat(bad) * (1 + RISE):
            break
        # the next step: where the line through the last two anchors meets the SLA (the percentile is nearly
        # linear in ITR above its minimum), at most twice the last step
        step *= 2
        nxt = max(j - step, 0)
        slope = (lat(bad) - lat(j)) / (itr[bad] - itr[j])
        if slope > 0:
            cross = itr[j] - (lat(j) - sla) / slope
            nxt = max(nxt, min(bisect.bisect_right(itr, cross) - 1, j - 1))
        bad, j = j, nxt
    good = _ternary_meeting(lat, sla, j, above)
    if good is None:
        return None
    failing = (k for k in range(good + 1, above + 1) if (grid.anchors[k], f) in grid.seen and lat(k) > sla)
    return _bisect_up(lat, sla, good, min(failing, default=above))


def _bisect_up(lat: Callable[[int], float], sla: float, good: int, bad: int) -> int:
    """The boundary between a passing index `good` and a failing one `bad` above it (bisection)."""
    while bad - good > 1:
        mid = (good + bad) // 2
        good, bad = (mid, bad) if lat(mid) <= sla else (good, mid)
    return good


def _look_up(grid: CellGrid, t: int, f: float, sla: float) -> int:
    """From a passing anchor `t` whose next one fails: the largest passing anchor up to the first one clearly
    (x CLOSE) above the SLA -- noise near saturation can leave a passing anchor above a failing one."""
    last = len(grid.anchors) - 1
    k = t + 1
    while k <= last:
        lat = grid.lat(k, f)
        if lat <= sla:
            t = k
        elif lat > sla * CLOSE:
            break
        k += 1
    return t


def _low_end(
    grid: CellGrid,
    sla: float,
    best: list[float],
    start: int,
    offer: Callable[[int, float], None],
    tops: dict[float, int],
) -> None:
    """The lowest ITRs: power rises with ITR there before it falls, so a frequency's smallest passing ITR can
    beat its largest. The lowest ITR's power rises with frequency: from the slowest passing frequency up,
    once it is above the best (less the noise), no frequency's low end can win. Below the latency's minimum
    the percentile falls with ITR, so the smallest passing anchor is bisected; then every anchor from there up
    while its power (less the noise) could beat the best."""
    slack = 1.0 - NOISE_PCT / 100.0
    last = len(grid.anchors) - 1
    for f in grid.freqs[start:]:
        if grid.pw(0, f) * slack >= best[0]:
            return
        bad, good = 0, None
        if grid.lat(0, f) <= sla:
            good = 0
        else:
            hi = next((k for k in range(last + 1) if (grid.anchors[k], f) in grid.seen and grid.lat(k, f) <= sla), None)
            if hi is None:
                continue
            good = hi
            while good - bad > 1:
                mid = (good + bad) // 2
                bad, good = (bad, mid) if grid.lat(mid, f) <= sla else (mid, good)
            offer(bad, f)
        k = good
        while k < tops.get(f, last):
            if grid.lat(k, f) <= sla or grid.lat(k + 1, f) <= sla:
                offer(k, f)
            k += 1
            if grid.pw(k, f) * slack >= best[0]:
                break


def lowest_latency(grid: CellGrid) -> None:
    """No point meets the SLA: the percentile falls with frequency at every ITR, so its minimum is at the
    fastest frequency; every anchor there is evaluated (fast cells), and the column at its minimum."""
    f = grid.freqs[-1]
    for k in range(len(grid.anchors)):
        grid.cell(k, f)
    k = min(range(len(grid.anchors)), key=lambda j: grid.lat(j, f))
    grid.column(k, grid.freqs)
    for j in (k - 1, k):
        if j >= 0:
            grid.interval(j, f)


def _largest_meeting(latency: Callable[[int], float], limit: float, top: int, *, first_step: int) -> int | None:
    """The largest index <= `top` with `latency(i) <= limit`, for a `latency` with one minimum over the index.

    Gallops down from `top` (steps `first_step`, doubling; 0 = bisect the range at once) while the latency
    falls; once a step meets the limit, bisects up to the boundary. If the latency rises again by more than
    `RISE` (the minimum was passed) or index 0 is reached first, a ternary search over the bracket of the
    minimum looks for any index that meets the limit. None if none does.
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
        elif latency(j) > latency(bad) * (1 + RISE) or j == 0:
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
