"""The contextual model's table over a grid of loads (`Optimizer.predict_loads`), on the simulated host with Ax:
its shape, agreement with Ax's own prediction, and sanity -- the best point's power rises with the load across
the measured loads, and the latency uncertainty grows away from them."""

from __future__ import annotations

import math

import pytest

pytest.importorskip("actuators.sim.host")

from actuators.host import OperatingPoint
from actuators.sim.host import SimHost
from tuner.daemon.powercurve import load_curve, reduce_table
from tuner.optimize.loadtable import LOAD_TABLE_LOADS, table_loads
from tuner.optimize.optimizer import Optimizer
from tuner.optimize.presets import cold_settings
from tuner.optimize.retune import run_retune
from tuner.optimize.settings import Objective

LOADS = (200_000.0, 400_000.0)
SLA = 500.0


@pytest.fixture(scope="module")
def fitted():
    s = cold_settings(
        trials=5, sobol_trials=3, settle_s=0.0, window_s=0.5, seed=0, context=True, context_max_qps=1e6,
        itr_resolution_us=16, safe_delta=0.0, stop_ei_pct=0.0,
    )  # fmt: skip
    host = SimHost(seed=1, cores=16, qps=LOADS[0])
    opt = Optimizer(host.knobs(), Objective("constrained", 99.0, SLA), s)
    for q in LOADS:
        host.set_offered_qps(q)
        run_retune(host, opt, s)
    return opt, opt.predict_loads()


def test_shape_loads_and_measured_range(fitted):
    opt, t = fitted
    assert t["loads_qps"] == table_loads(1e6) and len(t["loads_qps"]) == LOAD_TABLE_LOADS
    assert t["loads_qps"][:3] == [0.0, 50_000.0, 100_000.0] and t["loads_qps"][-1] == 1e6
    n = len(opt.model.grid())
    assert len(t["points"]) == n == 64 * 18  # every ITR candidate (16 µs apart) x every frequency
    for f in ("latency_us", "latency_sem", "power_w", "power_sem"):
        assert len(t[f]) == LOAD_TABLE_LOADS and all(len(row) == n for row in t[f])
        assert all(math.isfinite(v) for row in t[f] for v in row)
    lo, hi = t["measured_qps"]
    assert lo == pytest.approx(LOADS[0], rel=0.02) and hi == pytest.approx(LOADS[-1], rel=0.02)
    assert t["cpu_s"] > 0


def test_grid_loads_agree_with_ax_own_prediction(fitted):
    opt, t = fitted
    k = t["loads_qps"].index(300_000.0)
    idx = [0, 17, 500, 1151]
    ax = opt.predict([OperatingPoint(*t["points"][i]) for i in idx], 300_000.0)  # Client.predict, point by point
    for j, i in enumerate(idx):
        assert t["latency_us"][k][i] == pytest.approx(ax[j].latency_us, rel=1e-6)
        assert t["latency_sem"][k][i] == pytest.approx(ax[j].latency_sem, rel=1e-4)
        assert t["power_w"][k][i] == pytest.approx(ax[j].power_w, rel=1e-6)
        assert t["power_sem"][k][i] == pytest.approx(ax[j].power_sem, rel=1e-4)


def test_best_power_rises_with_load_and_uncertainty_grows_outside_the_measured_loads(fitted):
    opt, t = fitted
    table = reduce_table("r", 99.0, t)
    inside = [q for q in t["loads_qps"] if LOADS[0] <= q <= LOADS[-1]]  # 200k, 250k, ..., 400k (grid loads)
    curve = load_curve(table, inside, SLA)
    assert all(c.meets_sla and not c.extrapolated for c in curve)
    power = [c.power_w for c in curve]
    assert power[-1] > power[0] * 1.05  # the sim host draws more at 400k than at 200k under the same SLA
    assert all(b >= a * 0.98 for a, b in zip(power, power[1:]))  # monotone up to 2 % model noise

    # the latency's relative standard error at the points the trials measured (median over them), by load
    cells = {(p.itr_us, p.dvfs_ghz) for p in (opt.model.grid_point(opt.model.cell_of(r.point)) for r in opt.trials())}
    idx = [i for i, p in enumerate(t["points"]) if tuple(p) in cells]

    def rel_sem(q: float) -> float:
        k = t["loads_qps"].index(q)
        vals = sorted(t["latency_sem"][k][i] / t["latency_us"][k][i] for i in idx)
        return vals[len(vals) // 2]

    measured = max(rel_sem(LOADS[0]), rel_sem(LOADS[1]))
    assert rel_sem(0.0) > 3 * measured and rel_sem(1e6) > 3 * measured  # far outside: several times larger
    assert rel_sem(100_000.0) > rel_sem(LOADS[0]) and rel_sem(600_000.0) > rel_sem(LOADS[1])  # and growing
    assert rel_sem(300_000.0) < min(rel_sem(0.0), rel_sem(1e6))  # between two measured loads: in between
