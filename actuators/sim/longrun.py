"""The long-run cells behind `SimHost.expected()`: one common-random-numbers run per (ITR anchor, load) served
at the frequencies asked, and a refinement run for a cell whose p99 is still noisy (see `SimHost.expected`).

The first run's draws do not depend on the frequency (`actuators.sim.arrivals`): a caller that will ask for
the same anchor and load at other frequencies in later calls (a search) passes a `draws` memo to keep them,
so those calls only serve them (`SimHost.expected_draws_kept`); a `refined` memo does the same for the
refinement runs, whose draws depend on the request count too.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np

from actuators.host import PERCENTILES
from actuators.sim.arrivals import Arrivals, draw_arrivals
from actuators.sim.cells import Cell
from actuators.sim.model import SimResult, package_power_w, serve
from actuators.sim.params import SimParams
from core.cache import BoundedCache, tuple_bytes
from core.stats import percentiles_inplace

CHAINS = 4  # independent cores simulated per run
EXPECTED_REQUESTS = 40_000  # first sample behind expected() per (ITR anchor, load) (common random numbers)
EXPECTED_REFINED = 240_000  # at most this many requests behind an expected() cell whose p99 is still noisy
REFINE_REL_SE = 0.02  # ... i.e. whose batch-means standard error of p99 after the first sample exceeds 2 % of it
REFINE_ABS_SE_US = 5.0  # ... and 5 µs
REFINE_TARGET_REL_SE = 0.01  # such a cell gets requests for an SE of 1 % (SE ~ 1/sqrt(n)), up to the cap
REFINE_TARGET_ABS_SE_US = 4.0  # ... or 4 µs
REFINE_MAX_US = 1000.0  # ... and whose p99 is below this (2x the loosest SLA of fig. 7.6; cost bound)
SE_BLOCKS = 10  # batch-means blocks (consecutive interrupt periods) for that standard error
EXPECTED_SEED = 20230501
#: Bound of a search's memo of first-run draws (`SimHost.expected_draws_kept`): ~2.5-6.5 MiB each at 40,000
#: requests, so every anchor of a load fits (at 32 MiB the worst 99 % < 200 µs searches drew 7-12 of them twice,
#: evicted before the search came back).
DRAWS_MEMO_BYTES = 128 * 2**20
#: Bound of a search's memo of refinement-run draws (~20-35 MiB each near saturation): a refinement run's draws
#: depend on its request count, which is the same (`EXPECTED_REFINED` less the first run) for every frequency
#: of an anchor whose p99 is far from its SE target, so the search's refinement of that anchor at another
#: frequency only serves them.  With these bounds the oracle's search peaks at ~570 MB RSS (~355 MB at 32 / 96
#: MiB) and repeats almost no draws: ~5 % less CPU in its worst windows (docs/replay.md, "Oracle").
REFINED_MEMO_BYTES = 256 * 2**20

Draws = BoundedCache[tuple[Any, ...], Arrivals]  # (params, ITR anchor, per-core rate) -> a first run's draws


def draws_memo(max_bytes: int = DRAWS_MEMO_BYTES, name: str = "sim.draws") -> Draws:
    """An empty memo of a run's draws, bounded by bytes (LRU)."""
    return BoundedCache(max_bytes, sizeof=lambda key, value: tuple_bytes(key) + value.nbytes, name=name)


@dataclass(frozen=True)
class FirstRun:
    """The first run of some cells: the run, its (F,) power, (F, P) percentiles, p99 SE, and which are noisy."""

    sim: SimResult
    power: np.ndarray  # (F,)
    quant: np.ndarray  # (F, P)
    se: np.ndarray  # (F,) p99 batch-means SE
    noisy: np.ndarray  # (F,) refined before it is a cell


def _blocks(sim: SimResult) -> list[np.ndarray]:
    """The latencies split into `SE_BLOCKS` blocks of consecutive interrupt periods (all simulated cores), each
    in request order (as a stable sort by block would give): the requests' periods rise within each simulated
    core's run, so a block is one slice of each run."""
    blocks = sim.period * SE_BLOCKS // max(sim.periods, 1)
    cuts = [0, *(np.flatnonzero(blocks[1:] < blocks[:-1]) + 1).tolist(), blocks.size]
    edges = [lo + np.searchsorted(blocks[lo:hi], np.arange(SE_BLOCKS + 1)) for lo, hi in zip(cuts[:-1], cuts[1:])]
    lat = sim.latency_us
    parts = (np.concatenate([lat[:, e[b] : e[b + 1]] for e in edges], axis=1) for b in range(SE_BLOCKS))
    return [s for s in parts if s.shape[1] > 0]


def _p99_se(sim: SimResult) -> np.ndarray:
    """(F,) batch-means standard error of each row's p99: blocks of consecutive interrupt periods (all
    simulated cores), so the queueing autocorrelation within a block is honoured."""
    parts = _blocks(sim)
    if len(parts) < 2:
        return np.full(sim.latency_us.shape[0], np.inf)
    # np.percentile(s, 99.0, axis=1, method="lower") per block: the order statistic floor((n - 1) * 0.99)
    kth = [int(math.floor((s.shape[1] - 1) * (99.0 / 100.0))) for s in parts]
    for s, k in zip(parts, kth, strict=True):
        s.partition(k, axis=1)  # in place: each block is a fresh array (`_blocks` concatenates)
    per_block = np.stack([s[:, k] for s, k in zip(parts, kth, strict=True)], axis=1)
    se: np.ndarray = per_block.std(axis=1, ddof=1) / math.sqrt(len(parts))
    return se


def first_run(
    p: SimParams, cores: int, itr: int, qps: float, freqs: np.ndarray, draws: Draws | None = None
) -> FirstRun:
    """The first `EXPECTED_REQUESTS` run of cells (itr, qps, f) for `freqs`, and which of them are noisy."""
    lam = qps / cores / 1e6

    def draw() -> Arrivals:
        return draw_arrivals(p, lam, itr, EXPECTED_REQUESTS, CHAINS, np.random.default_rng(EXPECTED_SEED))

    # the run's draws do not depend on f: with a memo, kept for this (anchor, load)'s other frequencies
    arrivals = draw() if draws is None else draws.get((p, itr, lam), draw)
    sim = serve(p, arrivals, freqs, cores)
    power = package_power_w(p, sim, cores, qps)
    # np.percentile(sim.latency_us, PERCENTILES, axis=1).T, bit for bit, on a copy of each row (the latencies
    # keep their order for the batch-means SE and the refinement)
    quant = np.stack([percentiles_inplace(row.copy(), PERCENTILES) for row in sim.latency_us])  # (F, P)
    p99 = quant[:, list(PERCENTILES).index(99.0)]
    se = _p99_se(sim)
    noisy = (p99 < REFINE_MAX_US) & (se > np.maximum(REFINE_REL_SE * p99, REFINE_ABS_SE_US))
    return FirstRun(sim, power, quant, se, noisy)


def compute_cells(
    p: SimParams,
    cores: int,
    itr: int,
    qps: float,
    freqs: np.ndarray,
    draws: Draws | None = None,
    refined: Draws | None = None,
) -> list[Cell]:
    """Simulate the cells (itr, qps, f) for `freqs` (see `SimHost.expected`); `draws` / `refined` keep the
    first runs' / refinement runs' draws for later calls (the values are the same either way)."""
    lam = qps / cores / 1e6
    run = first_run(p, cores, itr, qps, freqs, draws)
    sim, power, quant, se, noisy = run.sim, run.power.copy(), run.quant, run.se.copy(), run.noisy
    p99 = quant[:, list(PERCENTILES).index(99.0)]
    lats = [sim.latency_us[j] for j in range(freqs.size)]
    n1 = sim.latency_us.shape[1]
    for j in np.flatnonzero(noisy).tolist():
        # one more independent run at this frequency only, sized so the pooled SE reaches the target
        # (SE ~ 1/sqrt(n)), at most EXPECTED_REFINED requests in all
        target = max(REFINE_TARGET_REL_SE * p99[j], REFINE_TARGET_ABS_SE_US)
        n_total = min(EXPECTED_REFINED, int(n1 * (se[j] / target) ** 2))
        n_more = max(n_total - n1, n1)

        def draw_more(n_more: int = n_more) -> Arrivals:
            return draw_arrivals(p, lam, itr, n_more, CHAINS, np.random.default_rng([EXPECTED_SEED, 1]))

        # simulate(...) of these draws, bit for bit; with a memo the same anchor's refinement at another
        # frequency with the same request count only serves them
        more_draws = draw_more() if refined is None else refined.get((p, itr, lam, n_more), draw_more)
        more = serve(p, more_draws, freqs[j : j + 1], cores)
        n2 = more.latency_us.shape[1]
        lats[j] = np.concatenate((lats[j], more.latency_us[0]))
        power[j] = (n1 * power[j] + n2 * float(package_power_w(p, more, cores, qps)[0])) / (n1 + n2)
        # pooled SE: the larger run's batch-means SE scaled to the pooled count
        se[j] = float(_p99_se(more)[0]) * math.sqrt(n2 / (n1 + n2))
    for j in np.flatnonzero(noisy).tolist():
        quant[j] = percentiles_inplace(lats[j], PERCENTILES)  # lats[j] is the pooled copy: reordered, not needed after
    return [(quant[j], float(power[j]), float(se[j])) for j in range(freqs.size)]
