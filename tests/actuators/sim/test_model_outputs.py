"""The simulator's outputs are pinned bit for bit: speed work on `simulate` and `SimHost.expected()` must not
move a single model value (the replay's energies, the oracle and every calibrated test rest on them).

tests/data/sim_outputs.json was computed with the simulator as it was before its speed work (one `simulate`
function, every draw and sum in the same order): a SHA-256 of every output array of `simulate` over a grid
of loads, ITRs, frequency subsets and parameter variants (burst arrivals, no TX interrupts), and the exact
`expected()` values of cells near and far from saturation (the noisy ones go through the refinement run),
asked for in the same call (a cell's time totals are pairwise sums whose order follows how many frequencies
were simulated together, so the last bit of its power can depend on that: the pin is for the same call).
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

from actuators.host import OperatingPoint
from actuators.sim.arrivals import draw_arrivals
from actuators.sim.host import EXPECTED_SEED, SimHost
from actuators.sim.model import package_power_w, serve, simulate
from actuators.sim.params import SimParams

PINNED = json.loads((Path(__file__).resolve().parents[2] / "data" / "sim_outputs.json").read_text())
FREQS = np.round(np.arange(1.2, 2.95, 0.1), 1)
VARIANTS = {
    "default": SimParams(),
    "burst": replace(SimParams(), burst_mean=2.0),
    "notx": replace(SimParams(), tx_irq=False),
}


def _digest(*arrays: object) -> str:
    h = hashlib.sha256()
    for a in arrays:
        arr = np.ascontiguousarray(np.asarray(a))
        h.update(str(arr.dtype).encode())
        h.update(str(arr.shape).encode())
        h.update(arr.tobytes())
    return h.hexdigest()[:16]


def _run_digest(sim, p: SimParams, qps: float) -> str:
    pw = package_power_w(p, sim, 16, qps)
    return _digest(
        sim.f,
        sim.latency_us,
        sim.busy,
        sim.residency,
        sim.interrupts_per_us,
        sim.served,
        np.float64(sim.requests_per_us),
        sim.period,
        np.int64(sim.periods),
        pw,
    )


@pytest.mark.parametrize("variant", sorted(VARIANTS))
def test_simulate_outputs_are_unchanged_bit_for_bit(variant: str) -> None:
    p = VARIANTS[variant]
    got, want = {}, {}
    for qps in (1.0, 50e3, 217e3, 400e3, 600e3, 700e3):
        for itr in (2, 16, 100, 360, 1022):
            for fs in (FREQS, FREQS[[3]], FREQS[[0, 17]]):
                key = f"{variant}|{qps:g}|{itr}|{len(fs)}"
                sim = simulate(p, qps / 16 / 1e6, itr, fs, 4000, 4, np.random.default_rng(EXPECTED_SEED), 16)
                got[key], want[key] = _run_digest(sim, p, qps), PINNED["simulate_sha256_16"][key]
    assert got == want


def test_arrivals_served_per_frequency_equal_one_run_over_all() -> None:
    """Draws kept and served at one frequency at a time give what a run at that frequency gives, and each
    frequency's latencies of the joint run (per-request values are elementwise, so exact in any batch; time
    totals are pairwise sums whose order follows the batch's shape, so those are compared for the same one)."""
    p = SimParams()
    lam = 560e3 / 16 / 1e6
    joint = simulate(p, lam, 60, FREQS, 4000, 4, np.random.default_rng(5), 16)
    arrivals = draw_arrivals(p, lam, 60, 4000, 4, np.random.default_rng(5))
    for j in (0, 9, 17):
        one = serve(p, arrivals, FREQS[j : j + 1], 16)
        alone = simulate(p, lam, 60, FREQS[j : j + 1], 4000, 4, np.random.default_rng(5), 16)
        assert _run_digest(one, p, 560e3) == _run_digest(alone, p, 560e3)
        assert np.array_equal(one.latency_us[0], joint.latency_us[j])
        assert one.busy[0] == pytest.approx(joint.busy[j], rel=1e-12)
    assert not arrivals.coin.flags.writeable  # shared by every frequency served from them


def test_expected_cells_are_unchanged_bit_for_bit() -> None:
    host = SimHost(seed=0)
    for qps, rows in PINNED["expected_cells"].items():
        pts = [OperatingPoint(int(itr), float(ghz)) for itr, ghz, *_ in rows]
        for row, e in zip(rows, host.expected(pts, float(qps)), strict=True):
            _, _, power, se, lat = row
            assert (e.power_w, e.p99_se_us) == (power, se), row[:2]
            assert sorted(e.latency_us.items()) == [tuple(x) for x in lat], row[:2]


@pytest.mark.parametrize(
    "itr,ghz,qps,memo",
    [
        pytest.param(60, (1.8, 1.9, 2.0), 560_000.0, 0, id="first-run-draws"),
        # near saturation the lowest ITR is refined at each frequency from the same request count
        pytest.param(2, (1.4, 1.5, 1.6), 456_464.0, 1, id="refinement-draws"),
    ],
)
def test_a_search_keeps_draws_only_while_it_runs_and_they_change_no_value(
    itr: int, ghz: tuple[float, ...], qps: float, memo: int
) -> None:
    """Inside `expected_draws_kept` the same anchor at other frequencies only serves the first one's kept draws
    (first runs, or refinement runs): the cells equal those of a host without the memo bit for bit, and the memo
    is gone after the block."""
    pts = [OperatingPoint(itr, f) for f in ghz]
    plain = [SimHost(seed=0).expected([pt], qps)[0] for pt in pts]
    host = SimHost(seed=0)
    with host.expected_draws_kept():
        kept = [host.expected([pt], qps)[0] for pt in pts]
        assert host._draws is not None
        stats = host._draws[memo].stats()
        assert stats.hits == 2 and stats.misses == 1
    assert host._draws is None
    for a, b in zip(plain, kept, strict=True):
        assert (a.power_w, a.p99_se_us, a.latency_us) == (b.power_w, b.p99_se_us, b.latency_us)
