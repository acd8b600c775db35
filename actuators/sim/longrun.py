"""The long-run cells behind `SimHost.expected()`: one common-random-numbers run per (ITR anchor, load) served
at the frequencies asked, and a refinement run for a cell whose p99 is still noisy (see `SimHost.expected`).

The first run's draws do not depend on the frequency (`actuators.sim.arrivals`): they are kept in the
`ExpectedCache` so a later call for the same anchor and load at other frequencies only serves them.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from actuators.host import PERCENTILES
from actuators.sim.arrivals import draw_arrivals
from actuators.sim.cells import Cell, ExpectedCache
from actuators.sim.model import SimResult, package_power_w, serve, simulate
from actuators.sim.params import SimParams

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


@dataclass(frozen=True)
class FirstRun:
    """The first run of some cells: the run, its (F,) power, (F, P) percentiles, p99 SE, and which are noisy."""

    sim: SimResult
    power: np.ndarray  # (F,)
    quant: np.ndarray  # (F, P)
    se: np.ndarray  # (F,) p99 batch-means SE
    noisy: np.ndarray  # (F,) refined before it is a cell


def _blocks(sim: SimResult) -> list[np.ndarray]:
    """The latencies split into `SE_BLOCKS` blocks of consecutive interrupt periods (all simulated cores)."""
    blocks = sim.period * SE_BLOCKS // max(sim.periods, 1)
    order = np.argsort(blocks, kind="stable")
    bounds = np.searchsorted(blocks[order], np.arange(1, SE_BLOCKS))
    return [s for s in np.split(sim.latency_us[:, order], bounds, axis=1) if s.shape[1] > 0]


def _p99_se(sim: SimResult) -> np.ndarray:
    """(F,) batch-means standard error of each row's p99: blocks of consecutive interrupt periods (all
    simulated cores), so the queueing autocorrelation within a block is honoured."""
    parts = _blocks(sim)
    if len(parts) < 2:
        return np.full(sim.latency_us.shape[0], np.inf)
    per_block = np.stack([np.percentile(s, 99.0, axis=1, method="lower") for s in parts], axis=1)
    se: np.ndarray = per_block.std(axis=1, ddof=1) / math.sqrt(len(parts))
    return se


def first_run(p: SimParams, cores: int, cache: ExpectedCache, itr: int, qps: float, freqs: np.ndarray) -> FirstRun:
    """The first `EXPECTED_REQUESTS` run of cells (itr, qps, f) for `freqs`, and which of them are noisy."""
    lam = qps / cores / 1e6
    # the run's draws do not depend on f: kept for this (anchor, load)'s other frequencies (same values)
    arrivals = cache.arrivals.get(
        (p, itr, lam),
        lambda: draw_arrivals(p, lam, itr, EXPECTED_REQUESTS, CHAINS, np.random.default_rng(EXPECTED_SEED)),
    )
    sim = serve(p, arrivals, freqs, cores)
    power = package_power_w(p, sim, cores, qps)
    quant = np.percentile(sim.latency_us, PERCENTILES, axis=1).T  # (F, P)
    p99 = quant[:, list(PERCENTILES).index(99.0)]
    se = _p99_se(sim)
    noisy = (p99 < REFINE_MAX_US) & (se > np.maximum(REFINE_REL_SE * p99, REFINE_ABS_SE_US))
    return FirstRun(sim, power, quant, se, noisy)


def compute_cells(
    p: SimParams, cores: int, cache: ExpectedCache, itr: int, qps: float, freqs: np.ndarray
) -> list[Cell]:
    """Simulate the cells (itr, qps, f) for `freqs` (see `SimHost.expected`)."""
    lam = qps / cores / 1e6
    run = first_run(p, cores, cache, itr, qps, freqs)
    sim, power, quant, se, noisy = run.sim, run.power.copy(), run.quant, run.se.copy(), run.noisy
    p99 = quant[:, list(PERCENTILES).index(99.0)]
    lats = [sim.latency_us[j] for j in range(freqs.size)]
    n1 = sim.latency_us.shape[1]
    for j in np.flatnonzero(noisy).tolist():
        # one more independent run at this frequency only, sized so the pooled SE reaches the target
        # (SE ~ 1/sqrt(n)), at most EXPECTED_REFINED requests in all
        target = max(REFINE_TARGET_REL_SE * p99[j], REFINE_TARGET_ABS_SE_US)
        n_total = min(EXPECTED_REFINED, int(n1 * (se[j] / target) ** 2))
        more = simulate(
            p,
            lam,
            itr,
            freqs[j : j + 1],
            max(n_total - n1, n1),
            CHAINS,
            np.random.default_rng([EXPECTED_SEED, 1]),
            cores,
        )
        n2 = more.latency_us.shape[1]
        lats[j] = np.concatenate((lats[j], more.latency_us[0]))
        power[j] = (n1 * power[j] + n2 * float(package_power_w(p, more, cores, qps)[0])) / (n1 + n2)
        # pooled SE: the larger run's batch-means SE scaled to the pooled count
        se[j] = float(_p99_se(more)[0]) * math.sqrt(n2 / (n1 + n2))
    for j in np.flatnonzero(noisy).tolist():
        quant[j] = np.percentile(lats[j], PERCENTILES)
    return [(quant[j], float(power[j]), float(se[j])) for j in range(freqs.size)]
