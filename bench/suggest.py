"""Benchmark the contextual optimiser's compute time per suggestion at N trials in its model, against a plain Ax
`Client` in the same run; JSON.

For each seed and each N in --trials-in-model: a context-mode `Optimizer` with the `tuner replay` default
tuner's settings (preset "warm": 16 µs ITR grid x 18 frequencies, load in [0, 1], safe exploration, the
stopping rule, the allowed point of largest constrained EI, the GP's hyperparameters re-optimised by Ax's own
fit every trial) is seeded
with N completed trials (`add_history`) of the fake analytic host (tests/fakes.py) at random points and loads,
then runs `--suggestions` suggestions at one load, each completed with the host's measurement, each followed
by `should_stop()` as `run_retune` does. Reports the median/max CPU and wall seconds per suggestion
(`suggest()` + `should_stop()`: Ax refit, grid predictions, safety filter, acquisition) and how often the
hyperparameters were re-optimised; the same for the other `VARIANTS`: the default before (Ax's whole-grid
proposal, then the safety filter), preset "warm-grid" (Ax's qLogNEI over the allowed points only,
hyperparameters every 5th trial or on a surprise), the constrained EI with hyperparameters every 5th trial
(the floor through Ax with hyperparameters kept between re-optimisations) and with them re-optimised on every
trial by at most 3 L-BFGS iterations warm-started from the last fit (`hyper_iters`; Ax's own fit once per retune
load, so once here).

In the same run, `ax_defaults`: a plain Ax `Client` with the same parameters (ITR index, ordered DVFS choice,
load), objective and outcome constraint and Ax's default generation strategy, attached the same N trials,
timed over `get_next_trials` (load pinned) per suggestion (each then completed). `summary` gives per seed the
tuner's median, Ax defaults' median and their ratio. Targets: median <= 0.1 s per suggestion at 100 trials in
the model and <= 0.2 x Ax's defaults. On a shared machine compare CPU seconds: wall time there includes
waiting for a core.

    .venv/bin/python bench/suggest.py [--trials-in-model 100] [--suggestions 8] [--seeds 0,1]
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import sys
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))


#: What runs next to Ax's defaults: the `tuner replay` default (preset "warm" as it stands), Ax's own generation
#: vetted by the safety filter (the default before the constrained-EI path), and preset "warm-grid".
VARIANTS: tuple[tuple[str, dict], ...] = (
    ("tuner", {}),
    ("warm-ax-generation", {"acquisition": "ax", "refit_every": 1}),
    ("warm-grid", {"acquisition": "grid", "refit_every": 5}),
    ("cei-hyperparameters-every-5th", {"acquisition": "cei", "refit_every": 5}),
    ("cei-hyper-iters-3", {"acquisition": "cei", "hyper_iters": 3}),
)


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


def run(n: int, suggestions: int, seed: int, **over: Any) -> dict:
    """The tuner's settings (preset "warm", with `over`) at `n` trials in the model: CPU and wall per suggestion."""
    from tests.fakes import FakeHost
    from tuner.optimize import experiment as model_mod
    from tuner.optimize.optimizer import Optimizer
    from tuner.optimize.settings import Objective
    from tuner.replay.run import preset_settings

    max_qps = 1e6
    settings = preset_settings(
        "warm",
        trials=suggestions,
        settle_s=0.0,
        window_s=20.0,
        window_mode="fixed",
        seed=seed,
        context_max_qps=max_qps,
        history_max_trials=max(n, 1) + suggestions,
        min_trials=1,  # the stopping rule evaluates its EI from the first trial (its answer is not acted on here)
        **over,
    )
    host = FakeHost(qps=120_000)
    opt = Optimizer(host.knobs(), Objective("constrained", 99, 500), settings, name="bench")
    t0 = time.perf_counter()
    used = opt.add_history(_history(n, seed, max_qps))
    attach_s = time.perf_counter() - t0
    opt.begin_retune(host.offered_qps())
    hyper = [0]
    real_refit = model_mod.refit

    def counted(*a, **k):
        how = real_refit(*a, **k)
        hyper[0] += how in ("cold", "warm")
        return how

    model_mod.refit = counted
    wall, cpu = [], []
    try:
        for _ in range(suggestions):
            w0, c0 = time.perf_counter(), time.process_time()
            idx, point = opt.suggest()
            w1, c1 = time.perf_counter(), time.process_time()
            run_trial_rest(host, opt, settings, idx, point)
            w2, c2 = time.perf_counter(), time.process_time()
            opt.should_stop()
            wall.append(w1 - w0 + time.perf_counter() - w2)
            cpu.append(c1 - c0 + time.process_time() - c2)
    finally:
        model_mod.refit = real_refit
    return {
        "trials_in_model": used,
        "settings": {
            k: getattr(settings, k) for k in ("acquisition", "refit_every", "hyper_iters", "safe_delta", "stop_ei_pct")
        },
        "suggestions": len(cpu),
        "median_suggest_cpu_s": statistics.median(cpu),
        "median_suggest_s": statistics.median(wall),
        "mean_suggest_cpu_s": statistics.fmean(cpu),
        "first_suggest_cpu_s": cpu[0],
        "max_suggest_cpu_s": max(cpu),
        "hyperparameter_fits": hyper[0],
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
    from tuner.optimize.experiment import ExperimentModel
    from tuner.optimize.presets import cold_settings
    from tuner.optimize.settings import Objective

    quiet_ax()
    settings = cold_settings(context=True, itr_resolution_us=16, seed=seed, history_max_trials=n + suggestions)
    host = FakeHost(qps=120_000)
    shape = ExperimentModel(host.knobs(), Objective("constrained", 99, 500), settings)  # metrics and grid
    client = Client(random_seed=seed)
    with no_warnings():
        client.configure_experiment(
            parameters=[
                RangeParameterConfig(name="itr_index", bounds=(0, len(shape.itr) - 1), parameter_type="int"),
                ChoiceParameterConfig(
                    name="dvfs_ghz", values=list(host.knobs().dvfs_ghz), parameter_type="float", is_ordered=True
                ),
                RangeParameterConfig(name="load", bounds=(0.0, 1.0), parameter_type="float"),
            ],
            name="ax-defaults",
        )
        client.configure_optimization(objective="-power", outcome_constraints=[shape.scale.constraint()])
        for r in _history(n, seed, 1e6):
            i = client.attach_trial(parameters=shape.to_params(r.point, settings.load_of(r.qps)))
            client.complete_trial(trial_index=i, raw_data=shape.metrics(r.measurement))
    load = settings.load_of(host.offered_qps())
    wall, cpu = [], []
    for _ in range(suggestions):
        t0, c0 = time.perf_counter(), time.process_time()
        with no_warnings(settings.torch_threads):
            ((i, params),) = client.get_next_trials(max_trials=1, fixed_parameters={"load": load}).items()
        wall.append(time.perf_counter() - t0)
        cpu.append(time.process_time() - c0)
        apply_point(host, shape.to_point(params))
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
    ap.add_argument("--suggestions", type=int, default=8)
    ap.add_argument("--seeds", default="0,1")
    args = ap.parse_args()
    import os

    rows, summary = [], []
    for seed in (int(x) for x in args.seeds.split(",")):
        for n in (int(x) for x in args.trials_in_model.split(",")):
            ax = ax_defaults(n, args.suggestions, seed)
            print(json.dumps({"seed": seed, "ax_defaults": ax}), file=sys.stderr)
            for name, over in VARIANTS:
                row = {"variant": name, "seed": seed, **run(n, args.suggestions, seed, **over)}
                row["ratio_to_ax_defaults"] = row["median_suggest_s"] / ax["median_suggest_s"]
                row["cpu_ratio_to_ax_defaults"] = row["median_suggest_cpu_s"] / ax["median_suggest_cpu_s"]
                rows.append(row)
                print(json.dumps(row), file=sys.stderr)
                summary.append(
                    {
                        "variant": name,
                        "seed": seed,
                        "trials_in_model": n,
                        "tuner_median_cpu_s": round(row["median_suggest_cpu_s"], 4),
                        "ax_defaults_median_cpu_s": round(ax["median_suggest_cpu_s"], 4),
                        "cpu_ratio": round(row["cpu_ratio_to_ax_defaults"], 3),
                        "tuner_median_wall_s": round(row["median_suggest_s"], 4),
                        "ax_defaults_median_wall_s": round(ax["median_suggest_s"], 4),
                        "wall_ratio": round(row["ratio_to_ax_defaults"], 3),
                        "hyperparameter_fits": row["hyperparameter_fits"],
                    }
                )
    out = {
        "bench": "suggest",
        "targets": {"median_suggest_s_at_100": 0.1, "ratio_to_ax_defaults": 0.2},
        "machine": {"cpus": os.cpu_count(), "loadavg_1m": os.getloadavg()[0]},
        "summary": summary,
        "rows": rows,
    }
    print(json.dumps(out, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
