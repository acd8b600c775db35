"""Benchmark the contextual optimiser's compute time per suggestion vs the number of trials in its model; JSON.

For each N in --trials-in-model: a context-mode `Optimizer` over the full ixgbe space (ITR 2..1022 at the
`tuner replay` default tuner's 16 µs grid, 18 frequencies, load in [0, 1]) is seeded with N completed trials
(`add_history`) of the fake analytic host (tests/fakes.py) at random points and loads, then runs
`--suggestions` suggestions at one load (each completed with the host's measurement), with and without the
safety filter and the stopping rule's model evaluation, and with the hyperparameters re-optimised every trial
(`refit_every=1`, Ax's own behaviour) or every 5th (the default tuner's). Reports the median/max
`TrialRecord.compute_s` (Ax's gen + our grid predictions + the stopping rule), wall and process CPU
(user+sys), and the median time of `should_stop()`.

In the same run, `ax_defaults`: a plain Ax `Client` with the same parameters (ITR index, ordered DVFS choice,
load), objective and outcome constraint and Ax's default generation strategy, attached the same N trials,
timed over `get_next_trials` (load pinned) + `complete_trial` per suggestion. `ratio_to_ax_defaults` divides
the tuner's median by it. Targets: median <= 0.1 s per suggestion at 100 trials in the model and <= 0.2 x Ax's
defaults. On a shared machine compare CPU seconds: wall time there includes waiting for a core.

    .venv/bin/python bench/suggest.py [--trials-in-model 100] [--suggestions 6] [--seed 0]
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


def run(n: int, suggestions: int, seed: int, safe: bool, refit_every: int = 5) -> dict:
    from tests.fakes import FakeHost
    from tuner.optimize.optimizer import Optimizer
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
        itr_resolution_us=16,
        safe_sd_scale=2.0,
        refit_every=refit_every,
    )
    host = FakeHost(qps=120_000)
    opt = Optimizer(host.knobs(), Objective("constrained", 99, 500), settings, name="bench")
    t0 = time.perf_counter()
    used = opt.add_history(_history(n, seed, max_qps))
    attach_s = time.perf_counter() - t0
    opt.begin_retune(host.offered_qps())
    stop_s = []
    cpu = []
    for _ in range(suggestions):
        c0 = time.process_time()
        idx, point = opt.suggest()
        c1 = time.process_time()
        run_trial_rest(host, opt, settings, idx, point)
        c2 = time.process_time()
        if safe:
            t = time.perf_counter()
            opt.should_stop()
            stop_s.append(time.perf_counter() - t)
        cpu.append(c1 - c0 + time.process_time() - c2)
    cs = [r.compute_s for r in opt.retune_trials()]
    return {
        "trials_in_model": used,
        "safe_and_stop": safe,
        "refit_every": refit_every,
        "suggestions": len(cs),
        "median_suggest_s": statistics.median(cs),
        "median_suggest_cpu_s": statistics.median(cpu),
        "first_suggest_s": cs[0],
        "max_suggest_s": max(cs),
        "median_should_stop_s": statistics.median(stop_s) if stop_s else None,
        "add_history_s": attach_s,
        "substituted": sum(1 for r in opt.retune_trials() if "instead" in r.note),
    }


def run_trial_rest(host, opt, settings, idx: int, point) -> None:
    """Apply and measure a suggested point and report it (what `run_trial` does after `suggest`)."""
    from actuators.host import apply_point

    apply_point(host, point)
    opt.complete(idx, host.measure(settings.window_s), host.offered_qps())


def ax_defaults(n: int, suggestions: int, seed: int) -> dict:
    """A plain Ax `Client` (default generation strategy) with the tuner's parameters and constraint, N trials."""
    from ax import ChoiceParameterConfig, Client, RangeParameterConfig

    from actuators.host import apply_point
    from tests.fakes import FakeHost
    from tuner.optimize.axsetup import no_warnings, quiet_ax
    from tuner.optimize.model import ExperimentModel
    from tuner.optimize.settings import Objective, TunerSettings

    quiet_ax()
    settings = TunerSettings(context=True, itr_resolution_us=16, seed=seed, history_max_trials=n + suggestions)
    host = FakeHost(qps=120_000)
    shape = ExperimentModel(host.knobs(), Objective("constrained", 99, 500), settings)  # metrics and grid
    client = Client(random_seed=seed)
    with no_warnings():
        client.configure_experiment(
            parameters=[
                RangeParameterConfig(name="itr_index", bounds=(0, len(shape._itr) - 1), parameter_type="int"),
                ChoiceParameterConfig(
                    name="dvfs_ghz", values=list(host.knobs().dvfs_ghz), parameter_type="float", is_ordered=True
                ),
                RangeParameterConfig(name="load", bounds=(0.0, 1.0), parameter_type="float"),
            ],
            name="ax-defaults",
        )
        client.configure_optimization(objective="-power", outcome_constraints=[shape._scale.constraint()])
        for r in _history(n, seed, 1e6):
            i = client.attach_trial(parameters=shape._to_params(r.point, settings.load_of(r.qps)))
            client.complete_trial(trial_index=i, raw_data=shape.metrics(r.measurement))
    load = settings.load_of(host.offered_qps())
    wall, cpu = [], []
    for _ in range(suggestions):
        t0, c0 = time.perf_counter(), time.process_time()
        with no_warnings(settings.torch_threads):
            ((i, params),) = client.get_next_trials(max_trials=1, fixed_parameters={"load": load}).items()
        wall.append(time.perf_counter() - t0)
        cpu.append(time.process_time() - c0)
        apply_point(host, shape._to_point(params))
        m = host.measure(settings.window_s)
        with no_warnings():
            client.complete_trial(trial_index=i, raw_data=shape.metrics(m))
    return {
        "trials_in_model": n,
        "suggestions": suggestions,
        "median_suggest_s": statistics.median(wall),
        "median_suggest_cpu_s": statistics.median(cpu),
        "max_suggest_s": max(wall),
    }


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--trials-in-model", default="100")
    ap.add_argument("--suggestions", type=int, default=6)
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()
    import os

    rows = []
    for n in (int(x) for x in args.trials_in_model.split(",")):
        ax = ax_defaults(n, args.suggestions, args.seed)
        print(json.dumps({"ax_defaults": ax}), file=sys.stderr)
        for safe, refit in ((True, 5), (True, 1), (False, 5)):
            row = run(n, args.suggestions, args.seed, safe, refit)
            row["ax_defaults"] = ax
            row["ratio_to_ax_defaults"] = row["median_suggest_s"] / ax["median_suggest_s"]
            row["cpu_ratio_to_ax_defaults"] = row["median_suggest_cpu_s"] / ax["median_suggest_cpu_s"]
            rows.append(row)
            print(json.dumps(row), file=sys.stderr)
    out = {
        "bench": "suggest",
        "targets": {"median_suggest_s_at_100": 0.1, "ratio_to_ax_defaults": 0.2},
        "machine": {"cpus": os.cpu_count(), "loadavg_1m": os.getloadavg()[0]},
        "rows": rows,
    }
    print(json.dumps(out, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
