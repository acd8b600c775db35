"""Cost of a warm start from history; prints JSON.

Measures, on the simulated host, `--trials` history trials spread over four loads (100-400 kQPS, random
points on the lower 600 µs of ITR), what a daemon retune pays when it is seeded from them:
  * writing and reading them as `tuner.trial/v1` JSON lines (`tuner.store.history`), file size;
  * `Optimizer(...)` creation, `add_history`, the first `suggest()` after `begin_retune` (a GP fit on the
    history), and `to_json` (the daemon saves the optimiser after every trial) with its size.

    .venv/bin/python bench/history.py [--trials 400] [--no-context]
"""

from __future__ import annotations

import argparse
import json
import random
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--trials", type=int, default=400)
    ap.add_argument("--no-context", action="store_true", help="non-contextual model (all trials at one load)")
    args = ap.parse_args()

    from actuators.host import OperatingPoint
    from actuators.sim.host import make_sim_host
    from tuner.optimize.optimizer import Optimizer
    from tuner.optimize.presets import cold_settings
    from tuner.optimize.records import TrialRecord
    from tuner.optimize.settings import Objective
    from tuner.store.history import read_trials, write_trials

    context = not args.no_context
    host = make_sim_host(seed=1, cores=4, qps=100_000)  # the sim host itself: its load is set per trial
    space = host.knobs()
    rng = random.Random(0)
    recs = []
    loads = [100e3, 200e3, 300e3, 400e3] if context else [200e3]
    for i in range(args.trials):
        qps = rng.choice(loads)
        host.set_offered_qps(qps)
        point = OperatingPoint(rng.choice([v for v in space.itr_us if v <= 600]), rng.choice(space.dvfs_ghz))
        host.set_itr(point.itr_us)
        host.set_dvfs(point.dvfs_ghz)
        m = host.measure(1.0)
        recs.append(TrialRecord(i, point, qps, "completed", m, m.power_w, None))
    out: dict = {"trials": args.trials, "context": context}
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "h.jsonl"
        t0 = time.perf_counter()
        write_trials(path, recs, host="bench/sim", objective=Objective(), times=list(range(len(recs))))
        t1 = time.perf_counter()
        back = read_trials(path, space)
        t2 = time.perf_counter()
        out.update(write_s=round(t1 - t0, 4), read_s=round(t2 - t1, 4), file_bytes=path.stat().st_size)
    t0 = time.perf_counter()
    opt = Optimizer(space, Objective(sla_us=500.0), cold_settings(trials=5, sobol_trials=2, context=context), "b")
    t1 = time.perf_counter()
    used = opt.add_history(back)
    t2 = time.perf_counter()
    opt.begin_retune(200e3)
    opt.suggest()
    t3 = time.perf_counter()
    text = opt.to_json()
    t4 = time.perf_counter()
    out.update(
        create_s=round(t1 - t0, 2),
        add_history_s=round(t2 - t1, 2),
        history_used=used,
        first_suggest_s=round(t3 - t2, 2),
        to_json_s=round(t4 - t3, 2),
        to_json_bytes=len(text),
    )
    print(json.dumps(out))
    return 0


if __name__ == "__main__":
    sys.exit(main())
