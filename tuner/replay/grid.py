"""Replays at scale: seeds x SLAs x traces x tuner variants, run serially or as Ray tasks, gathered in one report.

A `RunSpec` names one replay of the simulated host completely (trace window selection, seed, SLA, tuner
preset and overrides), so it runs the same anywhere: in this process (`engine="serial"`), or as a Ray task on
the local Ray (`local_ray`: `num_cpus`, no dashboard, every server on 127.0.0.1 only) or on a cluster (`address`).
The oracle's points depend on the trace and the SLA only, so they are computed once per (trace, SLA) -- as
Ray tasks too -- and handed to every run that needs them.

Results equal the serial run's, run for run: everything a run depends on is in its spec; the simulated
host draws from generators seeded by the spec; the optimiser is seeded by it; PyTorch runs on one intra-op
thread during the run in every engine (a different thread count may sum in a different order); and the
simulator's shared memo of long-run cells (`actuators.sim.host`) holds values computed from fixed seeds,
so a warm cache in one process and a cold one in a Ray worker give the same numbers (the test compares them).
"""

from __future__ import annotations

import math
import os
import statistics
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from core.errors import TunerError
from core.stats import describe

ENGINES = ("auto", "serial", "ray")
#: Per-run metrics aggregated over seeds (keys of `tuner.replay.summary.policy_summary`).
METRICS = (
    "saved_vs_linux_default_pct",
    "ratio_to_oracle",
    "sla_violating_windows",
    "sla_violating_windows_significant",
    "explore_above_sla_pct",
    "explore_above_sla_pct_of_time",
    "trials_per_retune",
    "energy_j",
)


@dataclass(frozen=True)
class TraceSpec:
    """Which windows of which trace: `path` "" is the bundled sample day; hours from `start_hour`, every N-th.
    `day`: a day of the zoo (`tuner.replay.zoo.day_schedule`, e.g. "two-peaks") instead of a trace file.
    `days`: 0 takes the hours from the schedule's start; N > 0 takes them within each of its first N days (a
    multi-day schedule's later days with the same hours of the day)."""

    name: str = "sample"
    path: str = ""
    start_hour: int = 0
    hours: float = 24.0
    every: int = 1
    peak_qps: float = 600_000.0
    day: str = ""
    days: int = 0


@dataclass(frozen=True)
class RunSpec:
    """One replay: the simulated host of `seed` (plant `plant`, `actuators.sim.plants`) under the tuner variant,
    linux-default and the oracle."""

    trace: TraceSpec
    seed: int
    percentile: float
    sla_us: float
    variant: str = "warm"
    preset: str = "warm"
    overrides: tuple[tuple[str, Any], ...] = ()
    reward: str = "constrained"
    trials: int = 30
    policies: tuple[str, ...] = ("tuner", "linux-default", "oracle")
    plant: str = "bundled"

    def key(self) -> dict[str, Any]:
        return {
            "trace": self.trace.name,
            "plant": self.plant,
            "seed": self.seed,
            "percentile": self.percentile,
            "sla_us": self.sla_us,
            "variant": self.variant,
        }


@dataclass
class GridReport:
    """Every run's result in spec order, the aggregate over seeds per (trace, SLA, variant), and timings."""

    engine: str
    runs: list[dict[str, Any]]
    aggregate: list[dict[str, Any]] = field(default_factory=list)
    wall_s: float = 0.0
    oracle_s: float = 0.0

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


def grid(
    traces: Sequence[TraceSpec],
    seeds: Sequence[int],
    slas: Sequence[tuple[float, float]],
    variants: Sequence[tuple[str, str, dict[str, Any]]],
    *,
    reward: str = "constrained",
    trials: int = 30,
    policies: Sequence[str] = ("tuner", "linux-default", "oracle"),
    plant: str = "bundled",
) -> list[RunSpec]:
    """The cross product; `variants` are (name, preset, TunerSettings overrides); `slas` (percentile, µs)."""
    over_t = tuple(policies)
    return [
        RunSpec(t, s, float(p), float(u), name, preset, tuple(sorted(over.items())), reward, trials, over_t, plant)
        for t in traces
        for p, u in slas
        for name, preset, over in variants
        for s in seeds
    ]


# ------------------------------------------------------------------------------------------ one run (pure)


@contextmanager
def _one_torch_thread() -> Iterator[None]:
    """PyTorch on one intra-op thread meanwhile (restored after): sums in the same order in every engine."""
    try:
        import torch
    except ImportError:  # pragma: no cover - torch is a dependency
        yield
        return
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.set_num_threads(before)


def trace_windows(trace: TraceSpec) -> list[Any]:
    """The replay windows `trace` selects (hours, every N-th, days), in order; a one-line error if none."""
    from traces.schedule import load_schedule, sample_trace_path
    from tuner.replay.run import ReplayWindow
    from tuner.replay.zoo import day_schedule

    hours = None if trace.days else trace.start_hour + trace.hours
    if trace.day:
        sched = day_schedule(trace.day, peak_qps=trace.peak_qps, hours=hours)
    else:
        sched = load_schedule(trace.path or sample_trace_path(), peak_qps=trace.peak_qps, hours=hours)
    part = slice(trace.start_hour, trace.start_hour + math.ceil(trace.hours))
    if trace.days:
        by_day: dict[int, list[Any]] = {}
        for w in sched.windows:
            by_day.setdefault(w.day, []).append(w)
        sel = [w for d in sorted(by_day)[: trace.days] for w in by_day[d][part][:: trace.every]]
    else:
        sel = list(sched.windows[part][:: trace.every])
    if not sel:
        raise TunerError(f"trace {trace.name!r}: no window in hours {trace.start_hour}..+{trace.hours:g}")
    return [ReplayWindow(w.index, w.start_s, w.seconds, w.qps, w.day) for w in sel]


def oracle_key(qps: float, percentile: float, sla_us: float) -> tuple[float, float, float]:
    """The key of the oracle's point in a replay's memo (`replay(oracle_memo=...)`)."""
    return (round(qps, 6), percentile, sla_us)


@dataclass(frozen=True)
class OracleCost:
    """What the oracle's point at one load cost: wall and process-CPU seconds, grid points it evaluated."""

    qps: float
    wall_s: float
    cpu_s: float
    points: int


def oracle_memo_for(
    loads: Sequence[float], percentile: float, sla_us: float, *, cold: bool = False, plant: str = "bundled"
) -> tuple[dict[tuple, Any], list[OracleCost]]:
    """The oracle's point at each distinct load (seed-independent: the host's model) and what each cost.

    `cold`: each load on a fresh host, i.e. an empty model-cell cache, so its cost is what one replay window
    pays when nothing else asked for those cells (benchmarks); otherwise one host serves every load."""
    from tuner.hosts import make_host
    from tuner.optimize.optimizer import Objective
    from tuner.replay.oracle import oracle_answer

    obj = Objective("constrained", percentile, sla_us)
    host = make_host("sim", seed=0, plant=plant)
    memo: dict[tuple, Any] = {}
    costs: list[OracleCost] = []
    for q in dict.fromkeys(loads):
        if cold:
            host = make_host("sim", seed=0, plant=plant)
        t0, c0 = time.perf_counter(), time.process_time()
        answer = oracle_answer(host, obj, q)
        costs.append(OracleCost(q, time.perf_counter() - t0, time.process_time() - c0, answer.points))
        memo[oracle_key(q, percentile, sla_us)] = (answer.point, answer.how)
    return memo, costs


def oracle_memo(trace: TraceSpec, percentile: float, sla_us: float, plant: str = "bundled") -> dict[tuple, Any] | None:
    """The oracle's point for each window of `trace` at this SLA on `plant` (seed-independent: the host's model);
    None for a plant that drifts (its model depends on the hour: each replay's oracle asks at its windows)."""
    from actuators.sim.plants import plant as plant_named

    if plant_named(plant).drift:
        return None
    return oracle_memo_for([w.qps for w in trace_windows(trace)], percentile, sla_us, plant=plant)[0]


def run_one(spec: RunSpec, memo: dict[tuple, Any] | None = None) -> dict[str, Any]:
    """Replay `spec`; a JSON-able record: the spec's key, every window's energy and point per policy, the
    tuner's summary (each metric None when the spec's policies leave the tuner out), and the wall time (the one
    field that differs between engines)."""
    from tuner.hosts import make_host
    from tuner.optimize.optimizer import Objective, TunerSettings
    from tuner.replay.run import preset_settings, replay
    from tuner.replay.summary import policy_summary

    t0 = time.perf_counter()
    with _one_torch_thread():
        settings = preset_settings(
            spec.preset, TunerSettings(seed=spec.seed), trials=spec.trials, **dict(spec.overrides)
        )
        res = replay(
            lambda: make_host("sim", seed=spec.seed, plant=spec.plant),
            trace_windows(spec.trace),
            Objective(spec.reward, spec.percentile, spec.sla_us),
            settings,
            policies=spec.policies,
            host_label="sim",
            oracle_memo=memo,
        )
    tuner = res.policies.get("tuner")
    summary = policy_summary(res, "tuner") if tuner is not None else {}  # a grid of baselines only: no summary
    return {
        **spec.key(),
        "windows": {
            policy: [
                {
                    "qps": w.qps,
                    "energy_j": w.energy_j,
                    "point": [w.point.itr_us, w.point.dvfs_ghz] if w.point is not None else None,
                    "trials": w.trials,
                    "met_sla": w.met_sla,
                    "day": w.day,
                }
                for w in pr.windows
            ]
            for policy, pr in res.policies.items()
        },
        "trial_points": [[t.point.itr_us, t.point.dvfs_ghz] for t in tuner.trials] if tuner is not None else [],
        "summary": {k: summary.get(k) for k in METRICS},
        "wall_s": time.perf_counter() - t0,
    }


def check(specs: Sequence[RunSpec]) -> None:
    """Refuse a bad grid here, in one line, before any run starts (not as a remote task's traceback)."""
    from actuators.sim.plants import plant
    from tuner.optimize.optimizer import TunerSettings
    from tuner.replay.run import POLICIES, preset_settings

    for trace in {s.trace for s in specs}:
        trace_windows(trace)
    for s in specs:
        plant(s.plant)
        preset_settings(s.preset, TunerSettings(seed=s.seed), trials=s.trials, **dict(s.overrides))
        unknown = [p for p in s.policies if p not in POLICIES]
        if unknown:
            raise TunerError(f"policies {', '.join(unknown)}: expected some of {', '.join(POLICIES)}")


def _memo_key(s: RunSpec) -> tuple[TraceSpec, float, float, str]:
    """The oracle memo a run shares: the same windows, SLA and plant."""
    return (s.trace, s.percentile, s.sla_us, s.plant)


def deterministic_part(run: dict[str, Any]) -> dict[str, Any]:
    """A run's record without its timings: what must be equal between engines."""
    return {k: v for k, v in run.items() if k != "wall_s"}


# ------------------------------------------------------------------------------------------------ engines


def ray_available() -> bool:
    try:
        import ray  # noqa: F401
    except ImportError:
        return False
    return True


def run_grid(
    specs: Sequence[RunSpec],
    *,
    engine: str = "auto",
    address: str | None = None,
    num_cpus: int = 2,
) -> GridReport:
    """Run every spec and aggregate. `engine`: "serial" (this process), "ray" (Ray tasks: the cluster at
    `address`, else a loopback-only local Ray of `num_cpus` CPUs, `local_ray`) or "auto" (Ray if installed)."""
    if engine not in ENGINES:
        raise TunerError(f"--engine {engine!r}: expected one of {', '.join(ENGINES)}")
    if engine == "auto":
        engine = "ray" if ray_available() else "serial"
    if engine == "ray" and not ray_available():
        raise TunerError("--engine ray: Ray is not installed (pip install 'tuner[ray]'), or use --engine serial")
    if not specs:
        raise TunerError("nothing to replay: the grid is empty")
    t0 = time.perf_counter()
    check(specs)
    sla_keys = sorted({_memo_key(s) for s in specs if "oracle" in s.policies}, key=repr)
    if engine == "serial":
        t_or = time.perf_counter()
        memos = {k: oracle_memo(*k) for k in sla_keys}
        oracle_s = time.perf_counter() - t_or
        runs = [run_one(s, memos.get(_memo_key(s))) for s in specs]
    else:
        runs, oracle_s = _run_ray(specs, sla_keys, address, num_cpus)
    report = GridReport(engine, runs, aggregate(runs), time.perf_counter() - t0, oracle_s)
    return report


#: Ray's switch for its single-machine mode (the default on macOS and Windows): read at `import ray` into
#: `ray._private.ray_constants.ENABLE_RAY_CLUSTER`, and by the processes a local Ray starts.
RAY_CLUSTER_ENV = "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER"


@contextmanager
def local_ray(num_cpus: int = 2, env_vars: dict[str, str] | None = None) -> Iterator[None]:
    """A Ray of `num_cpus` CPUs on this host, reachable on loopback only; shut down (and the process
    environment restored) on exit.

    `ray.init(_node_ip_address="127.0.0.1")` alone is not enough: Ray 2.x on Linux resolves a loopback node
    address back to the host's routable one (`services.resolve_ip_for_localhost`), and its GCS, raylet and
    workers then listen on all interfaces (`::`), its runtime-env agent on the host's address. In Ray's
    single-machine mode (`RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER=0`, what it does on macOS and Windows) the node
    address stays 127.0.0.1 and every one of its servers binds to it (tests/tuner/replay/test_grid.py checks the
    listening sockets). The mode is set for this process (Ray's constant) and for the processes `ray.init`
    starts (the environment, inherited by the workers the raylet starts later), then put back. Usage
    statistics are off (they would go over the network); no dashboard."""
    import ray
    from ray._private import ray_constants

    saved_env = {k: os.environ.get(k) for k in (RAY_CLUSTER_ENV, "RAY_USAGE_STATS_ENABLED")}
    saved_const = ray_constants.ENABLE_RAY_CLUSTER
    os.environ[RAY_CLUSTER_ENV] = "0"
    os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
    ray_constants.ENABLE_RAY_CLUSTER = False
    try:
        ray.init(
            num_cpus=num_cpus,
            include_dashboard=False,
            _node_ip_address="127.0.0.1",
            runtime_env={"env_vars": env_vars or {}},
            log_to_driver=False,
            configure_logging=False,
        )
        yield
    finally:
        try:
            if ray.is_initialized():
                ray.shutdown()
        finally:
            ray_constants.ENABLE_RAY_CLUSTER = saved_const
            for k, v in saved_env.items():
                if v is None:
                    os.environ.pop(k, None)
                else:
                    os.environ[k] = v


def worker_env() -> dict[str, str]:
    """The Ray workers import this package from where this process found it (a source checkout, or installed)."""
    root = str(Path(__file__).resolve().parents[2])
    return {"PYTHONPATH": os.pathsep.join(p for p in (root, os.environ.get("PYTHONPATH", "")) if p)}


def _run_ray(
    specs: Sequence[RunSpec], sla_keys: list[tuple], address: str | None, num_cpus: int
) -> tuple[list[dict[str, Any]], float]:
    """On the Ray this process is already connected to, else on the cluster at `address`, else on a
    `local_ray` started for this grid and shut down after."""
    import ray

    if ray.is_initialized():
        return _ray_tasks(specs, sla_keys)
    if address:
        ray.init(address=address, runtime_env={"env_vars": worker_env()}, log_to_driver=False)
        try:
            return _ray_tasks(specs, sla_keys)
        finally:
            ray.shutdown()
    with local_ray(num_cpus, worker_env()):
        return _ray_tasks(specs, sla_keys)


def _ray_tasks(specs: Sequence[RunSpec], sla_keys: list[tuple]) -> tuple[list[dict[str, Any]], float]:
    import ray

    oracle_task = ray.remote(num_cpus=1)(oracle_memo)
    run_task = ray.remote(num_cpus=1)(run_one)
    t_or = time.perf_counter()
    memo_refs = {k: oracle_task.remote(*k) for k in sla_keys}
    if memo_refs:
        ray.wait(list(memo_refs.values()), num_returns=len(memo_refs))
    oracle_s = time.perf_counter() - t_or
    refs = [run_task.remote(s, memo_refs.get(_memo_key(s))) for s in specs]
    return list(ray.get(refs)), oracle_s


# ---------------------------------------------------------------------------------------------- aggregate


def mean_ci(values: Sequence[float | None], confidence: float = 0.95) -> dict[str, float | None] | None:
    """Mean and Student-t confidence interval over `values` (None values dropped); n = 1 has no interval."""
    described = describe(values)
    if described is None:
        return None
    out: dict[str, float | None] = {**described, "ci_low": None, "ci_high": None}  # JSON null: one seed, no interval
    vals = [float(v) for v in values if v is not None]
    if len(vals) >= 2:
        from scipy.stats import t

        m = described["mean"]
        half = float(t.ppf(0.5 + confidence / 2, len(vals) - 1)) * statistics.stdev(vals) / math.sqrt(len(vals))
        out["ci_low"], out["ci_high"] = m - half, m + half
    return out


def aggregate(runs: Sequence[dict[str, Any]], confidence: float = 0.95) -> list[dict[str, Any]]:
    """Per (trace, SLA, variant), over seeds: each metric's mean with its `confidence` interval."""
    groups: dict[tuple, list[dict[str, Any]]] = {}
    for r in runs:
        groups.setdefault(
            (r["trace"], r.get("plant", "bundled"), r["percentile"], r["sla_us"], r["variant"]), []
        ).append(r)
    return [
        {
            "trace": trace,
            "plant": plant,
            "percentile": pct,
            "sla_us": sla,
            "variant": variant,
            "seeds": [r["seed"] for r in rows],
            "confidence": confidence,
            **{k: mean_ci([r["summary"][k] for r in rows], confidence) for k in METRICS},
        }
        for (trace, plant, pct, sla, variant), rows in groups.items()
    ]
