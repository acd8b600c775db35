"""Benchmark the contextual optimiser's compute time per suggestion vs the number of trials in its model; JSON.

For each N in --trials-in-model: a context-mode `Optimizer` over the full ixgbe space (ITR 2..1022 at the
default 8 µs grid, 18 frequencies, load in [0, 1]) is seeded with N completed trials (`add_history`) of the
fake analytic host (tests/fakes.py) at random points and loads, then runs `--suggestions` suggestions at one
load (each completed with the host's measurement), with and without the safety filter and the stopping rule's
model evaluation. Reports the median/max `TrialRecord.compute_s` (Ax's gen + our grid predictions) and the
median time of `should_stop()`. Target: median <= 0.5 s per suggestion at history_max_trials (small next to a trial's 1 s settle).

    .venv/bin/python bench/suggest.py [--trials-in-model 50,200,400] [--suggestions 5] [--seed 0]
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))


def _history(n: int, seed: int, max_qps: float) -> list:
    from actuators.host import OperatingPoint, apply_point
    from tests.fakes import DVFS_GHZ, FakeHost
    from tuner.optimize.records import TrialRecord

    rng = random.Random(seed)
    host = FakeHost(qps=100_000)
    space = host.knobs()
    out = []
    for i in range(n):
        qps = rng.uniform(0.05, 0.2) * max_qps
        host.set_offered_qps(qps)
        p = OperatingPoint(rng.choice(space.itr_us), rng.choice(DVFS_GHZ))
        apply_point(host, p)
        out.append(TrialRecord(i, p, qps, "completed", host.measure(20.0), None, None))
    return out


def run(n: int, suggestions: int, seed: int, safe: bool) -> dict:
    from tests.fakes import FakeHost
    from tuner.optimize.optimizer import Optimizer
    from tuner.optimize.retune import run_trial
    from tuner.optimize.settings import Objective, TunerSettings

    max_qps = 1e6
    settings = TunerSettings(
        trials=suggestions,
        sobol_trials=8,
        settle_s=0.0,
        window_s=20.0,
        seed=seed,
        context=True,
        context_max_qps=max_qps,
        history_max_trials=max(n, 1) + suggestions,
        stop_ei_pct=1.0 if safe else 0.0,
        safe_delta=0.05 if safe else 0.0,
        min_trials=1,
    )
    host = FakeHost(qps=120_000)
    opt = Optimizer(host.knobs(), Objective("constrained", 99, 500), settings, name="bench")
    t0 = time.perf_counter()
    used = opt.add_history(_history(n, seed, max_qps))
    attach_s = time.perf_counter() - t0
    opt.begin_retune(host.offered_qps())
    stop_s = []
    for _ in range(suggestions):
        run_trial(host, opt, settings)
        if safe:
            t = time.perf_counter()
            opt.should_stop()
            stop_s.append(time.perf_counter() - t)
    cs = [r.compute_s for r in opt.retune_trials()]
    return {
        "trials_in_model": used,
        "safe_and_stop": safe,
        "suggestions": len(cs),
        "median_suggest_s": statistics.median(cs),
        "first_suggest_s": cs[0],
        "max_suggest_s": max(cs),
        "median_should_stop_s": statistics.median(stop_s) if stop_s else None,
        "add_history_s": attach_s,
        "substituted": sum(1 for r in opt.retune_trials() if "instead" in r.note),
    }


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--trials-in-model", default="50,200,400")
    ap.add_argument("--suggestions", type=int, default=5)
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()
    rows = []
    for n in (int(x) for x in args.trials_in_model.split(",")):
        for safe in (False, True):
            rows.append(run(n, args.suggestions, args.seed, safe))
            print(json.dumps(rows[-1]), file=sys.stderr)
    print(json.dumps({"bench": "suggest", "target_median_s": 0.5, "rows": rows}, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
