"""The fitted contextual model's predictions over a grid of loads: for every knob grid cell, at each of
`LOAD_TABLE_LOADS` loads, the percentile latency and power with their standard errors (what a scheduler's
power curve is read from, `tuner.daemon.powercurve`).

Loads are linear from 0 to `context_max_qps` (every `context_max_qps / 20`: 0, 50k, ..., 1M at the default):
the model's `load` input is qps / `context_max_qps` and its kernel is stationary in it, so an even grid samples
its predictions evenly against its own length-scale; a geometric grid would crowd the low loads, where a
memcached host is far from saturation, and leave wide gaps at the top, where latency bends. Including 0 lets
every load in [0, `context_max_qps`] be interpolated between two grid loads. One batch through
`surrogate.GridPredictor` (marginal posteriors), never Ax per point.
"""

from __future__ import annotations

import math
import time
from collections.abc import Collection
from typing import Any

from tuner.optimize.axsetup import no_warnings
from tuner.optimize.experiment import ExperimentModel
from tuner.optimize.surrogate import GridPredictor, botorch_adapter

#: Loads of the table (linear, 0 .. `context_max_qps`).
LOAD_TABLE_LOADS = 21


def table_loads(max_qps: float, n: int = LOAD_TABLE_LOADS) -> list[float]:
    """`n` loads (requests/s) evenly from 0 to `max_qps`."""
    return [max_qps * k / (n - 1) for k in range(n)]


def predict_loads(
    model: ExperimentModel, borrowed: Collection[int] = (), n: int = LOAD_TABLE_LOADS
) -> dict[str, Any] | None:
    """The table of a contextual `model` as plain data, or None without a fitted GP (Sobol phase) or outside
    context mode (`borrowed`: Ax trials of other hosts, left out of `measured_qps`):

    `loads_qps` (n), `points` ([itr_us, dvfs_ghz] per grid cell), `latency_us`, `latency_sem`, `power_w`,
    `power_sem` (n rows of one value per point, the objective's percentile in µs and W), `measured_qps`
    ([lowest, highest] load of this host's own completed trials in the model; borrowed trials of other hosts
    left out) and `cpu_s` (this call's CPU time)."""
    s = model.settings
    if not s.context or n < 2:
        return None
    t0 = time.process_time()
    loads = table_loads(s.context_max_qps, n)
    observed = model.observed()
    if len(observed) < model.init_budget():
        return None
    with no_warnings(s.torch_threads):
        model.fit_model()
        adapter = botorch_adapter(model.client._generation_strategy)
        if adapter is None:
            return None
        cells = model.grid()
        params = [model.cell_params(c, s.load_of(q)) for q in loads for c in cells]
        preds = GridPredictor().predict(adapter, params, marginal=True)  # its own cache: the model's stays small
    scale = model.scale
    if scale.metric not in preds or "power" not in preds:
        return None
    mu, sd = preds[scale.metric]
    pw, pw_sd = preds["power"]
    k = len(cells)
    rows: dict[str, list[list[float]]] = {"latency_us": [], "latency_sem": [], "power_w": [], "power_sem": []}
    for i in range(n):
        lat = [scale.latency_mean_sd(float(mu[j]), float(sd[j])) for j in range(i * k, (i + 1) * k)]
        rows["latency_us"].append([v for v, _ in lat])
        rows["latency_sem"].append([e for _, e in lat])
        rows["power_w"].append([float(v) for v in pw[i * k : (i + 1) * k]])
        rows["power_sem"].append([float(v) if math.isfinite(v) else 0.0 for v in pw_sd[i * k : (i + 1) * k]])
    exp = model.client._experiment
    own = [
        float(exp.trials[t].arm.parameters.get("load", math.nan)) * s.context_max_qps
        for t in observed
        if t not in borrowed
    ]
    own = [q for q in own if math.isfinite(q)]
    points = [model.grid_point(c) for c in cells]
    return {
        "loads_qps": loads,
        "points": [[int(p.itr_us), float(p.dvfs_ghz)] for p in points],
        **rows,
        "measured_qps": [min(own), max(own)] if own else None,
        "cpu_s": time.process_time() - t0,
    }


__all__ = ["LOAD_TABLE_LOADS", "predict_loads", "table_loads"]
