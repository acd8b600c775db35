"""Shared builders of the optimiser's tests (tests/tuner/optimize/): a small knob space and objective, made-up
measurements, fake-host trial histories, contextual settings and a seeded safe optimiser."""

from __future__ import annotations

from typing import Any

import numpy as np

from actuators.host import PERCENTILES, KnobSpace, Measurement, OperatingPoint, apply_point
from tests.fakes import FakeHost
from tuner.optimize.optimizer import Optimizer
from tuner.optimize.presets import cold_settings
from tuner.optimize.records import TrialRecord
from tuner.optimize.settings import Objective, TunerSettings

SMALL = KnobSpace(tuple(range(2, 403, 16)), (1.2, 1.6, 2.0, 2.4, 2.9))  # 26 ITR x 5 DVFS
OBJ = Objective("constrained", 99, 500)
MAXQ = 1e6

#: Every setting the optimiser members' tests depend on, spelled out (the dataclass's defaults are not what they test)
MEMBER_SETTINGS: dict[str, Any] = {
    "trials": 8,
    "sobol_trials": 4,
    "seed": 3,
    "itr_resolution_us": 8,
    "itr_resolution_sla_pct": 0.0,
    "context": False,
    "history_max_trials": 100,
    "stop_ei_pct": 0.0,
    "safe_delta": 0.0,
    "safe_radius": 0.2,
    "safe_model_error": 0.0,
    "safe_sd_scale": 1.0,
    "refit_every": 1,
    "hyper_iters": 0,
    "peak_step": False,
    "acquisition": "ax",
    "refine_step": False,
    "estimate_guard": False,
}


def meas(p99: float, power: float, qps: float = 1e5, seconds: float = 5.0) -> Measurement:
    lat = {p: p99 * p / 99.0 for p in PERCENTILES}
    return Measurement(
        seconds=seconds,
        offered_qps=qps,
        achieved_qps=qps,
        requests=int(qps * seconds),
        latency_us=lat,
        latency_ci_us={p: (v * 0.98, v * 1.02) for p, v in lat.items()},
        energy_j=power * seconds,
        point=None,
    )


def history(n: int, seed: int = 0, qps_range: tuple[float, float] = (80_000, 160_000)) -> list[TrialRecord]:
    """`n` completed trials of the fake host at random points of SMALL and random loads."""
    rng = np.random.default_rng(seed)
    host = FakeHost(knobs=SMALL)
    out = []
    for i in range(n):
        qps = float(rng.uniform(*qps_range))
        host.set_offered_qps(qps)
        p = OperatingPoint(int(rng.choice(SMALL.itr_us)), float(rng.choice(SMALL.dvfs_ghz)))
        apply_point(host, p)
        out.append(TrialRecord(i, p, qps, "completed", host.measure(5.0), None, None))
    return out


def ctx(**kw) -> TunerSettings:
    base = dict(trials=6, sobol_trials=4, settle_s=0.0, window_s=5.0, seed=3, context=True, context_max_qps=MAXQ)
    base.update(kw)
    return cold_settings(**base)


def seeded(**kw) -> tuple[Optimizer, TunerSettings]:
    """A safe contextual optimiser (16 µs grid) seeded with 30 fake-host trials at 80-160 kQPS; `kw` overrides."""
    s = ctx(**{"trials": 8, "safe_delta": 0.05, "itr_resolution_us": 16, **kw})
    opt = Optimizer(SMALL, OBJ, s)
    assert opt.add_history(history(30, qps_range=(80_000, 160_000))) == 30
    return opt, s


def retune_to_stop(opt: Optimizer, s: TunerSettings, qps: float) -> list[str]:
    """Run one retune of `opt` at `qps` on a fake host (seed 1) until its stopping rule stops it; every reason it gave."""
    from tuner.optimize.retune import run_trial

    host = FakeHost(knobs=SMALL, seed=1)
    host.set_offered_qps(qps)
    opt.begin_retune(qps)
    reasons = []
    while True:
        stop, why = opt.should_stop()
        reasons.append(why)
        if stop:
            return reasons
        run_trial(host, opt, s)
