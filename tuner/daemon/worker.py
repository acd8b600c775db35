"""Run the Ax optimiser in a child process for the length of one retune.

Importing Ax/PyTorch alone costs ~400 MB RSS and seconds of CPU; the daemon holds a point for an hour between
retunes and must stay small (target: <= 400 MB, <= 1 % of a core). So each retune gets a worker process
(spawned, never forked: the daemon has gRPC threads) that owns the `tuner.optimize.optimizer.Optimizer`; the daemon talks
to it through `OptimizerProxy`, which has the same methods and returns plain records. When the retune ends the
worker exits and its memory goes back to the OS. The daemon itself never imports Ax. A stop request kills a
worker stuck in a model fit, so SIGTERM is prompt.

The learning methods (`add_history`, `begin_retune`, `retune_trials`, `should_stop`) and the multi-load
table (`predict_loads`) are proxied when the
optimiser has them (`OptimizerProxy.supports`), and the `TuningConfig` fields of `tuner.config.SETTINGS_FIELDS`
become `TunerSettings` fields of the same names.
"""

from __future__ import annotations

import multiprocessing
import os
import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from actuators.abilities import Closable, Interruptible
from actuators.host import KnobSpace, Measurement, OperatingPoint
from core.errors import TunerError
from core.lifeline import PARENT_GONE, Lifeline, follow_parent, send_to_parent, spawned_from_main_thread

#: Longest a single optimiser call may take before the worker is considered hung.
CALL_TIMEOUT_S = 900.0
#: Niceness increment and BLAS/PyTorch threads of the worker, so model fits do not compete with the server.
WORKER_NICE = 10
WORKER_THREADS = 2


@dataclass(frozen=True)
class Record:
    """A trial as the worker reports it (the measurement stays with the daemon)."""

    index: int
    point: OperatingPoint
    qps: float
    status: str
    reward: float | None
    error: str | None
    measurement: Measurement | None = None


@dataclass(frozen=True)
class Choice:
    point: OperatingPoint
    measurement: Measurement | None
    met_sla: bool
    reason: str


@dataclass(frozen=True)
class Forecast:
    latency_us: float
    latency_sem: float
    power_w: float
    power_sem: float
    from_measured: bool


class WorkerError(TunerError):
    """The optimiser worker failed or died."""


# ------------------------------------------------------------------------------------------------ child side


def _rec(r: Any) -> tuple:
    """A trial record as plain data for the pipe (the point stays an `OperatingPoint`)."""
    return (
        int(r.index),
        OperatingPoint(int(r.point.itr_us), float(r.point.dvfs_ghz)),
        float(r.qps) if r.qps is not None else float("nan"),
        str(r.status),
        None if r.reward is None else float(r.reward),
        r.error,
    )


#: Optimiser methods for learning across retunes the daemon uses when the optimiser has them (`OptimizerProxy.supports`).
OPTIONAL_METHODS = ("add_history", "begin_retune", "retune_trials", "should_stop", "predict_loads")


def _capabilities(opt: Any) -> list[str]:
    return [name for name in OPTIONAL_METHODS if callable(getattr(opt, name, None))]


def _extra_settings(settings_cls: Any, tuning: dict[str, Any]) -> dict[str, Any]:
    """The learning `TunerSettings` fields present in `tuning`; one the optimiser lacks is an error only if it is
    set to something other than its (off) default."""
    from tuner.config import SETTINGS_FIELDS, TuningConfig

    known = set(getattr(settings_cls, "__dataclass_fields__", {}))
    out: dict[str, Any] = {}
    for name in SETTINGS_FIELDS:
        if name not in tuning:
            continue
        if name in known:
            out[name] = tuning[name]
        elif tuning[name] != getattr(TuningConfig, name):
            raise RuntimeError(f"this optimiser does not support tuning.{name} (= {tuning[name]!r})")
    return out


def _best(opt: Any) -> tuple:
    d = opt.best()
    return OperatingPoint(int(d.point.itr_us), float(d.point.dvfs_ghz)), d.measurement, bool(d.met_sla), str(d.reason)


def _predict(opt: Any, points: list[OperatingPoint]) -> list[tuple]:
    return [
        (float(p.latency_us), float(p.latency_sem), float(p.power_w), float(p.power_sem), bool(p.from_measured))
        for p in opt.predict(points)
    ]


def _suggest(opt: Any) -> tuple[int, OperatingPoint]:
    index, p = opt.suggest()
    return int(index), OperatingPoint(int(p.itr_us), float(p.dvfs_ghz))


def _begin_retune(opt: Any, qps: float) -> None:
    opt.begin_retune(qps)


def _should_stop(opt: Any) -> tuple[bool, str]:
    stop, why = opt.should_stop()
    return bool(stop), str(why)


#: The operations on a created (or loaded) optimiser: name -> fn(optimiser, args) -> plain data for the pipe.
OPERATIONS: dict[str, Callable[[Any, tuple], Any]] = {
    "add_history": lambda opt, a: int(opt.add_history(a[0])),
    "begin_retune": lambda opt, a: _begin_retune(opt, float(a[0])),
    "retune_trials": lambda opt, a: [_rec(r) for r in opt.retune_trials()],
    "should_stop": lambda opt, a: _should_stop(opt),
    "suggest": lambda opt, a: _suggest(opt),
    "complete": lambda opt, a: _rec(opt.complete(a[0], a[1], a[2], settle=a[3])),
    "fail": lambda opt, a: _rec(opt.fail(a[0], a[1], settle=a[2])),
    "trials": lambda opt, a: [_rec(r) for r in opt.trials()],
    "best": lambda opt, a: _best(opt),
    "predict": lambda opt, a: _predict(opt, a[0]),
    "predict_loads": lambda opt, a: opt.predict_loads(),  # plain data (lists) or None
    "to_json": lambda opt, a: opt.to_json(),
}


def _create(mod: Any, args: tuple) -> Any:
    """The optimiser module's `Optimizer` for (space, policy dict, tuning dict, name, seed)."""
    space, policy, tuning, name, seed = args
    objective = mod.Objective(reward=policy["reward"], percentile=policy["percentile"], sla_us=policy["sla_us"])
    settings = mod.TunerSettings(
        trials=tuning["trials"],
        sobol_trials=min(tuning["sobol_trials"], tuning["trials"]),
        settle_s=tuning["settle_s"],
        window_s=tuning["window_s"],
        seed=seed,
        **_extra_settings(mod.TunerSettings, tuning),
    )
    return mod.Optimizer(space, objective, settings, name=name)


def _child_setup(module: str) -> tuple[Any, str | None]:
    """Lower the child's priority and threads (before the optimiser imports torch), then import `module`:
    (module, None), or (None, why not) -- reported on the first call instead of a dead pipe."""
    import importlib
    import os

    try:
        os.nice(WORKER_NICE)  # the tuned server keeps priority over model fits
    except OSError:
        pass
    for var in ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS"):
        os.environ.setdefault(var, str(WORKER_THREADS))
    try:
        return importlib.import_module(module), None
    except Exception as exc:  # noqa: BLE001 - reported on the first call
        return None, f"cannot import the optimiser {module!r}: {type(exc).__name__}: {exc}"


def _serve(conn: Any, module: str, lifeline: Lifeline | None = None) -> None:
    """The worker's loop: answer the daemon's calls until "close". It ends quietly when the daemon is gone: its
    `lifeline` closes (`core.lifeline`), or the pipe is found closed (EOF, a broken pipe, a reset)."""
    if lifeline is not None:
        follow_parent(lifeline)
    mod, broken = _child_setup(module)
    opt: Any = None  # the optimiser module's Optimizer, created or loaded by name
    while True:
        try:
            op, args = conn.recv()
        except PARENT_GONE:
            return
        if op == "close":
            send_to_parent(conn, ("ok", None))
            return
        try:
            if broken:
                raise RuntimeError(broken)
            if op in ("create", "load"):
                opt = _create(mod, args) if op == "create" else mod.Optimizer.from_json(args[0])
                result: Any = _capabilities(opt)
            elif op in OPERATIONS:
                result = OPERATIONS[op](opt, args)
            else:
                raise ValueError(f"unknown operation {op!r}")
            reply: tuple[str, Any] = ("ok", result)
        except Exception as exc:  # noqa: BLE001 - reported to the daemon, which decides
            reply = ("err", f"{type(exc).__name__}: {exc}")
        if not send_to_parent(conn, reply):
            return


def _serve_following(conn: Any, module: str, line: Lifeline, watched: Any) -> None:  # pragma: no cover - child
    """The worker process's entry: `_serve` with the lifeline's read end as the child received it (its fd
    number there, not the parent's)."""
    _serve(conn, module, Lifeline(line.parent_pid, watched.fileno(), line.pdeathsig))


# ------------------------------------------------------------------------------------------------ parent side


class OptimizerProxy(Closable):
    """`tuner.optimize.optimizer.Optimizer`'s methods, executed in a worker process."""

    def __init__(self, ctx: Any, module: str) -> None:
        self._conn, child = ctx.Pipe()
        # the child watches `watched` and ends when our end, `self._lifeline`, closes (we never write to it)
        watched, self._lifeline = ctx.Pipe(duplex=False)
        line = Lifeline(os.getpid(), -1, spawned_from_main_thread())  # the child's fd number is `watched`'s there
        self._proc = ctx.Process(
            target=_serve_following, args=(child, module, line, watched), name="tuner-optimizer", daemon=True
        )
        self._proc.start()
        child.close()
        watched.close()
        self._lock = threading.Lock()
        self._capabilities: frozenset[str] = frozenset()

    @property
    def pid(self) -> int | None:
        return self._proc.pid

    def _call(self, op: str, *args: Any) -> Any:
        with self._lock:
            try:
                self._conn.send((op, args))
                if not self._conn.poll(CALL_TIMEOUT_S):
                    self.kill()
                    raise WorkerError(f"optimiser worker: {op} took longer than {CALL_TIMEOUT_S:.0f} s")
                status, value = self._conn.recv()
            except (EOFError, OSError, BrokenPipeError):
                raise WorkerError(f"optimiser worker exited during {op} (exit code {self._proc.exitcode})") from None
        if status != "ok":
            raise WorkerError(f"optimiser: {op}: {value}")
        return value

    def supports(self, name: str) -> bool:
        """Whether the optimiser in the worker has the optional method `name` (`OPTIONAL_METHODS`)."""
        return name in self._capabilities

    def add_history(self, records: list[Any]) -> int:
        """Attach completed past trials (`tuner.optimize.records.TrialRecord`s); returns how many the model used."""
        return int(self._call("add_history", list(records)))

    def begin_retune(self, qps: float) -> None:
        self._call("begin_retune", float(qps))

    def retune_trials(self) -> list[Record]:
        return [_record(r, None) for r in self._call("retune_trials")]

    def should_stop(self) -> tuple[bool, str]:
        stop, why = self._call("should_stop")
        return bool(stop), str(why)

    def suggest(self) -> tuple[int, OperatingPoint]:
        index, p = self._call("suggest")
        return index, p

    def complete(self, index: int, measurement: Measurement, qps: float, settle: Measurement | None = None) -> Record:
        return _record(self._call("complete", index, measurement, qps, settle), measurement)

    def fail(self, index: int, reason: str, settle: Measurement | None = None) -> Record:
        return _record(self._call("fail", index, reason, settle), None)

    def trials(self) -> list[Record]:
        return [_record(r, None) for r in self._call("trials")]

    def best(self) -> Choice:
        p, m, met, reason = self._call("best")
        return Choice(p, m, met, reason)

    def predict(self, points: list[OperatingPoint]) -> list[Forecast]:
        return [Forecast(*row) for row in self._call("predict", list(points))]

    def predict_loads(self) -> dict[str, Any] | None:
        """The model's table over a grid of loads (`tuner.optimize.loadtable.predict_loads`), None without one."""
        return self._call("predict_loads")

    def to_json(self) -> str:
        return self._call("to_json")

    def close(self) -> None:
        """End the worker (its memory goes back to the OS)."""
        if self._proc.is_alive():
            try:
                with self._lock:
                    self._conn.send(("close", ()))
                    self._conn.poll(5.0)
            except (OSError, BrokenPipeError):
                pass
            self._proc.join(5.0)
        self.kill()

    def kill(self) -> None:
        if self._proc.is_alive():
            self._proc.kill()
            self._proc.join(5.0)
        self._conn.close()
        self._lifeline.close()


def _record(row: tuple, m: Measurement | None) -> Record:
    index, p, qps, status, reward, error = row
    return Record(index, p, qps, status, reward, error, m)


class ProcessOptimizers(Interruptible):
    """The daemon's optimiser factory: one worker process per retune (`create`/`load`), killable on stop."""

    def __init__(self, module: str = "tuner.optimize.optimizer") -> None:
        """`module` provides `Optimizer`, `Objective`, `TunerSettings` (the contract of `tuner.optimize.optimizer`)."""
        self.module = module
        self._ctx = multiprocessing.get_context("spawn")
        self._live: list[OptimizerProxy] = []
        self._lock = threading.Lock()

    def _new(self) -> OptimizerProxy:
        proxy = OptimizerProxy(self._ctx, self.module)
        with self._lock:
            self._live = [p for p in self._live if p._proc.is_alive()] + [proxy]
        return proxy

    def create(self, space: KnobSpace, policy: Any, tuning: Any, name: str, seed: int) -> OptimizerProxy:
        proxy = self._new()
        try:
            caps = proxy._call("create", space, dict(policy.__dict__), dict(tuning.__dict__), name, seed)
            proxy._capabilities = frozenset(caps or ())
        except BaseException:
            proxy.kill()
            raise
        return proxy

    def load(self, text: str) -> OptimizerProxy:
        proxy = self._new()
        try:
            caps = proxy._call("load", text)
            proxy._capabilities = frozenset(caps or ())
        except BaseException:
            proxy.kill()
            raise
        return proxy

    def live_pids(self) -> list[int]:
        with self._lock:
            return [pid for p in self._live if p._proc.is_alive() and (pid := p._proc.pid) is not None]

    def interrupt(self) -> None:
        """Kill every live worker (a stop must not wait for a model fit)."""
        with self._lock:
            live, self._live = self._live, []
        for proxy in live:
            if proxy._proc.is_alive():
                proxy._proc.kill()
                proxy._proc.join(5.0)
