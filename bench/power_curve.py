"""Cost and accuracy of the power curve over a range of loads; prints JSON.

1. A contextual optimiser (Ax, the daemon's tuning defaults) tunes the simulated host at `--loads` (one retune
   each, `--trials` trials), then the retune-end table (`Optimizer.predict_loads`: every grid point at 21 loads)
   is built `--repeat` times: CPU seconds of each (the first refits nothing: the retune's last fit is current),
   and the daemon's reduction to the frontier points (`tuner.daemon.powercurve.reduce_table`): CPU, points kept,
   JSON bytes on disk, bytes in memory.
2. Interpolation: at loads halfway between grid loads inside the measured loads, the interpolated best point's
   latency and power against the model's own prediction at that load (GridPredictor at exactly that load).
3. The RPC: `GetPowerCurve` with 20 and 200 loads over a real gRPC channel (loopback TCP) to a server whose
   `power_curve` is the daemon's own (`tuner.daemon.status_reader.curve_answer`) over that table: wall ms per call (median of
   `--calls`) and the server process's CPU per call.

    nice -n 10 .venv/bin/python bench/power_curve.py
    nice -n 10 .venv/bin/python bench/power_curve.py --loads 150000,300000,450000 --sla 200
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from pathlib import Path
from typing import Any, cast

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from actuators.sim.host import SimHost
from tuner.config import SETTINGS_FIELDS, GrpcConfig, PolicyConfig, TuningConfig
from tuner.daemon.model_tables import MODEL_Z
from tuner.daemon.powercurve import load_curve, reduce_table, table_dict
from tuner.daemon.status_reader import curve_answer
from tuner.optimize.optimizer import Optimizer
from tuner.optimize.retune import run_retune
from tuner.optimize.settings import Objective, TunerSettings


def _commit() -> str:
    import subprocess

    tree = Path(__file__).resolve().parents[1]
    return subprocess.run(
        ["git", "-C", str(tree), "rev-parse", "--short", "HEAD"], capture_output=True, text=True
    ).stdout.strip()


def _interp_error(opt: Optimizer, raw: dict[str, Any], table: Any, sla: float) -> dict[str, Any]:
    from tuner.optimize.axsetup import no_warnings
    from tuner.optimize.surrogate import GridPredictor, botorch_adapter

    lo, hi = raw["measured_qps"]
    grid = raw["loads_qps"]
    mids = [(a + b) / 2 for a, b in zip(grid, grid[1:]) if lo <= a and b <= hi]
    adapter = botorch_adapter(opt.model.client._generation_strategy)
    scale = opt.model.scale
    lat_err, pw_err, over = [], [], 0
    for q in mids:
        c = load_curve(table, [q], sla, z=MODEL_Z)[0]
        if c.point is None:
            continue
        with no_warnings(opt.settings.torch_threads):
            preds = GridPredictor().predict(adapter, [opt.model.to_params(c.point, opt.settings.load_of(q))])
        lat, _ = scale.latency_mean_sd(float(preds[scale.metric][0][0]), float(preds[scale.metric][1][0]))
        pw = float(preds["power"][0][0])
        lat_err.append((c.latency_us - lat) / lat)
        pw_err.append((c.power_w - pw) / pw)
        over += c.latency_us >= lat
    return {
        "loads": mids,
        "latency_rel_err": [round(v, 5) for v in lat_err],
        "power_rel_err": [round(v, 5) for v in pw_err],
        "latency_rel_err_max": max(map(abs, lat_err), default=None),
        "latency_overstated": f"{over}/{len(lat_err)}",
        "power_rel_err_max": max(map(abs, pw_err), default=None),
    }


class _Reads:
    """What `GetPowerCurve` reads of a daemon: its policy and the newest multi-load table."""

    def __init__(self, table: Any, sla: float) -> None:
        self._load_table = table
        self._sla = sla

    def power_curve(
        self, sla_us: Any = 0.0, percentile: Any = 0.0, qps_min: Any = 0.0, qps_max: Any = 0.0, points: Any = 0
    ) -> Any:
        policy = PolicyConfig(sla_us=sla_us or self._sla, percentile=percentile or self._load_table.percentile)
        return curve_answer(policy, [], self._load_table, qps_min, qps_max, points)


def _rpc(table: Any, sla: float, calls: int) -> dict[str, Any]:
    import grpc

    from tuner.daemon.service import DaemonApi, GrpcServer, protos

    # only GetPowerCurve is called: the one read `_Reads` answers
    server = GrpcServer(cast(DaemonApi, _Reads(table, sla)), GrpcConfig(listen="127.0.0.1:0"))
    address = server.start()
    pb, services = protos()
    out: dict[str, Any] = {}
    try:
        with grpc.insecure_channel(address) as ch:
            stub = services.TunerStub(ch)
            for n in (20, 200):
                req = pb.GetPowerCurveRequest(qps_min=table.loads_qps[1], qps_max=table.loads_qps[-1], points=n)
                first = stub.GetPowerCurve(req, timeout=10)  # warm
                assert len(first.points) == n, first.note
                walls = []
                c0 = time.process_time()  # this process holds client and server: an upper bound of the server's
                for _ in range(calls):
                    t0 = time.perf_counter()
                    stub.GetPowerCurve(req, timeout=10)
                    walls.append(time.perf_counter() - t0)
                out[f"points_{n}"] = {
                    "wall_ms_median": round(1e3 * statistics.median(walls), 2),
                    "cpu_ms_per_call_client_and_server": round(1e3 * (time.process_time() - c0) / calls, 2),
                }
    finally:
        server.stop()
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--loads", default="200000,300000,420000", help="retune loads, QPS, comma-separated")
    ap.add_argument("--trials", type=int, default=10)
    ap.add_argument("--sla", type=float, default=500.0)
    ap.add_argument("--percentile", type=float, default=99.0)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--calls", type=int, default=50)
    a = ap.parse_args()
    tc = TuningConfig()
    extra = {k: getattr(tc, k) for k in SETTINGS_FIELDS if k in TunerSettings.__dataclass_fields__}
    s = TunerSettings(trials=a.trials, sobol_trials=4, settle_s=0.0, window_s=2.0, seed=a.seed, **extra)
    host = SimHost(seed=a.seed, cores=16, qps=300_000.0)
    opt = Optimizer(host.knobs(), Objective("constrained", a.percentile, a.sla), s)
    t0 = time.process_time()
    for q in (float(v) for v in a.loads.split(",")):
        host.set_offered_qps(q)
        run_retune(host, opt, s)
    tune_cpu = time.process_time() - t0
    builds = []
    raw: dict[str, Any] = {}
    for _ in range(a.repeat):
        raw = opt.predict_loads() or {}
        builds.append(raw["cpu_s"])
    import pickle
    import tracemalloc

    n_points = len(raw["points"])
    tracemalloc.start()
    raw = pickle.loads(pickle.dumps(raw))  # as the daemon receives it from the worker's pipe
    received, _ = tracemalloc.get_traced_memory()
    t0 = time.process_time()
    table = reduce_table("r", a.percentile, raw, z=MODEL_Z)
    reduce_cpu = time.process_time() - t0
    _, peak = tracemalloc.get_traced_memory()
    full = raw
    raw = {k: full[k] for k in ("loads_qps", "measured_qps")}
    del full
    kept, _ = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    report = {
        "commit": _commit(),
        "load_average": os.getloadavg(),
        "retunes": a.loads,
        "trials": len(opt.trials()),
        "tuning_cpu_s": round(tune_cpu, 2),
        "table": {
            "loads": len(raw["loads_qps"]),
            "grid_points": n_points,
            "predict_loads_cpu_s": [round(v, 3) for v in builds],
            "reduce_cpu_s": round(reduce_cpu, 3),
            "points_kept": len(table.points),
            "json_bytes": len(json.dumps(table_dict(table))),
            "memory_bytes_received": received,
            "memory_bytes_peak_while_reducing": peak,
            "memory_bytes_kept": kept,
            "measured_qps": raw["measured_qps"],
        },
        "interpolation": _interp_error(opt, raw, table, a.sla),
        "rpc": _rpc(table, a.sla, a.calls),
    }
    print(json.dumps(report, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
