"""Test doubles for the daemon tests: a host that persists its knobs (and originals) to a file, a light
optimiser with the `tuner.optimize.optimizer.Optimizer` contract, and a runner that starts `tuner daemon` with them.

`make_file_host(knob_file=...)` behaves like the real host across processes: before the first write it saves
the originals to the file; `restore()` (in any later process) puts them back, so the tests can check what a
SIGTERM or a SIGKILL + restart left on the "hardware".
"""

from __future__ import annotations

import fcntl
import json
import os
import random
import subprocess
import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from actuators.abilities import Interruptible
from actuators.host import KnobSpace, Measurement, OperatingPoint
from tests.fakes import FakeHost
from tuner.daemon.state import StateStore, plain_state
from tuner.optimize.decision import Decision
from tuner.optimize.records import Prediction, TrialRecord
from tuner.optimize.settings import Objective, TunerSettings

ORIGINAL = {"itr": "adaptive", "dvfs": "schedutil"}


class FileHost(FakeHost):
    """`FakeHost` whose knob state lives in a JSON file: {"itr", "dvfs", "originals", "restores", "writes"}."""

    def __init__(self, knob_file: str, qps: float = 100_000.0, qps_file: str | None = None, **kw: Any) -> None:
        super().__init__(qps=qps, **kw)
        self.name = "file"
        self.path = Path(knob_file)
        self.qps_file = Path(qps_file) if qps_file else None
        with self._locked():
            if not self.path.exists():
                self._write(
                    {"itr": ORIGINAL["itr"], "dvfs": ORIGINAL["dvfs"], "originals": None, "restores": 0, "writes": 0}
                )

    def _read(self) -> dict:
        return json.loads(self.path.read_text())

    def _write(self, data: dict) -> None:
        # a temp name of this process and thread: two daemons sharing the file (a test of the refusal of a
        # second daemon) must not write the same temp file, which left it renamed away or holding two objects
        tmp = self.path.with_name(f"{self.path.name}.{os.getpid()}.{threading.get_ident()}.tmp")
        tmp.write_text(json.dumps(data))
        os.replace(tmp, self.path)

    @contextmanager
    def _locked(self) -> Iterator[None]:
        """Read-modify-write under an exclusive flock, so concurrent writers never lose an update."""
        with open(self.path.with_name(self.path.name + ".lock"), "a") as f:
            fcntl.flock(f, fcntl.LOCK_EX)
            yield

    def _set(self, key: str, value: Any) -> None:
        with self._locked():
            data = self._read()
            if data["originals"] is None:
                data["originals"] = {"itr": data["itr"], "dvfs": data["dvfs"]}
            data[key] = value
            data["writes"] += 1
            self._write(data)

    def set_itr(self, itr_us: int) -> None:
        super().set_itr(itr_us)
        self._set("itr", itr_us)

    def set_dvfs(self, ghz: float) -> None:
        super().set_dvfs(ghz)
        self._set("dvfs", ghz)

    def restore(self) -> None:
        super().restore()
        with self._locked():
            data = self._read()
            if data["originals"] is not None:
                data.update(data["originals"])
                data["originals"] = None
            data["restores"] += 1
            self._write(data)

    def measure(self, seconds: float) -> Measurement:
        if self.qps_file is not None and self.qps_file.exists():
            self._qps = float(self.qps_file.read_text())
        return super().measure(seconds)


class BlockingHost(FakeHost, Interruptible):
    """From its `block_from`-th measurement on, `measure` blocks (like a real window) until `interrupt()`."""

    def __init__(self, block_from: int = 3, **kw: Any) -> None:
        import threading

        super().__init__(**kw)
        self.block_from = block_from
        self._interrupt = threading.Event()
        self.blocking = threading.Event()
        self.interrupts = 0

    def interrupt(self) -> None:
        self.interrupts += 1
        self._interrupt.set()

    def measure(self, seconds: float) -> Measurement:
        from core.errors import HostError

        if self.measure_count + 1 >= self.block_from:
            self.blocking.set()
            if self._interrupt.wait(60):
                self._interrupt.clear()
                raise HostError("measurement interrupted")
        return super().measure(seconds)


def make_file_host(knob_file: str, qps: float = 100_000.0, qps_file: str | None = None) -> FileHost:
    return FileHost(knob_file, qps=qps, qps_file=qps_file)


# ------------------------------------------------------------------------------------------------ optimiser


class FakeOptimizer:
    """Random search with the `Optimizer` contract (suggest/complete/fail/best/predict/to_json/from_json)."""

    def __init__(self, space: KnobSpace, sla_us: float, percentile: float, trials: int, seed: int, name: str) -> None:
        self.space, self.sla_us, self.percentile, self.n, self.seed, self.name = (
            space,
            sla_us,
            percentile,
            trials,
            seed,
            name,
        )
        self._rows: list[dict] = []  # completed/failed, JSON-able
        self._next = 0
        self.history: list[float] = []  # loads of the history trials given to `add_history`
        self.begun_qps: float | None = None
        self.stop_after = 0  # `should_stop` says stop once this many trials are done (0: never)

    def add_history(self, records: list[TrialRecord]) -> int:
        """Like the real optimiser: completed, measured trials on this knob space are used."""
        used = [
            r
            for r in records
            if r.status == "completed" and r.measurement is not None and r.point.itr_us in self.space.itr_us
        ]
        self.history += [float(r.qps) for r in used]
        return len(used)

    def begin_retune(self, qps: float) -> None:
        self.begun_qps = float(qps)

    def should_stop(self) -> tuple[bool, str]:
        n = len(self._rows)
        return (bool(self.stop_after) and n >= self.stop_after), f"fake rule after {self.stop_after} trials"

    def suggest(self) -> tuple[int, OperatingPoint]:
        rng = random.Random(self.seed * 1000 + self._next)
        idx = self._next
        self._next += 1
        return idx, OperatingPoint(rng.choice(self.space.itr_us), rng.choice(self.space.dvfs_ghz))

    def complete(self, index: int, m: Measurement, qps: float, settle: Any = None) -> TrialRecord:
        lat = m.latency_us[self.percentile]
        reward = -m.energy_j - (m.energy_j * (lat - self.sla_us) / self.sla_us if lat > self.sla_us else 0.0)
        row = {
            "index": index,
            "point": [m.point.itr_us, m.point.dvfs_ghz],
            "qps": qps,
            "status": "completed",
            "lat": lat,
            "power": m.power_w,
            "reward": reward,
            "error": None,
        }
        self._rows.append(row)
        return self._record(row, m)

    def fail(self, index: int, reason: str, settle: Any = None) -> TrialRecord:
        row = {
            "index": index,
            "point": [self.space.itr_us[0], self.space.dvfs_ghz[-1]],
            "qps": 0.0,
            "status": "failed",
            "lat": None,
            "power": None,
            "reward": None,
            "error": reason,
        }
        self._rows.append(row)
        return self._record(row, None)

    def _record(self, row: dict, m: Measurement | None) -> TrialRecord:
        return TrialRecord(
            row["index"], OperatingPoint(*row["point"]), row["qps"], row["status"], m, row["reward"], row["error"]
        )

    def trials(self) -> list[TrialRecord]:
        return [self._record(r, None) for r in self._rows]

    def best(self) -> Decision:
        ok = [r for r in self._rows if r["status"] == "completed" and r["lat"] <= self.sla_us]
        if not ok:
            return Decision(
                OperatingPoint(self.space.itr_us[0], self.space.dvfs_ghz[-1]), None, False, "no trial met the SLA"
            )
        r = min(ok, key=lambda r: r["power"])
        return Decision(OperatingPoint(*r["point"]), None, True, f"lowest power meeting the SLA: trial {r['index']}")

    def predict(self, points: list[OperatingPoint]) -> list[Prediction]:
        done = [r for r in self._rows if r["status"] == "completed"]
        if not done:
            raise ValueError("no data")
        out = []
        for p in points:  # measured: as measured; elsewhere an optimistic guess (half the nearest latency)
            r = min(done, key=lambda r: abs(r["point"][0] - p.itr_us) / 100 + abs(r["point"][1] - p.dvfs_ghz))
            if r["point"] == [p.itr_us, p.dvfs_ghz]:
                out.append(Prediction(r["lat"], r["lat"] * 0.01, r["power"], 0.1, True))
            else:
                out.append(Prediction(r["lat"] * 0.5, r["lat"] * 0.05, r["power"] * 1.1, 1.0, False))
        return out

    def predict_loads(self) -> dict | None:
        """A made-up model at loads 0, 100k, ..., 1M (`tuner.optimize.loadtable.predict_loads`'s format): p99
        (50 + ITR/4) / (1 - load / (2e5 x GHz)) µs (1e6 µs at or past that capacity), power 20 + 10 x GHz x
        (1 + load / 1e5) W; the latency's standard error 2 % plus 10 % per 100k QPS away from the loads measured
        (its trials' and the history's); power's 1 W."""
        seen = [r["qps"] for r in self._rows if r["status"] == "completed"] + list(self.history)
        if not seen:
            return None
        lo, hi = min(seen), max(seen)
        loads = [1e5 * k for k in range(11)]
        itrs = sorted(set(self.space.itr_us[:: max(1, len(self.space.itr_us) // 8)]))
        points = [[i, f] for i in itrs for f in self.space.dvfs_ghz]
        lat = [[(50 + i / 4) / (1 - q / (2e5 * f)) if q < 2e5 * f else 1e6 for i, f in points] for q in loads]
        far = [max(lo - q, q - hi, 0.0) / 1e5 for q in loads]
        return {
            "loads_qps": loads,
            "points": points,
            "latency_us": lat,
            "latency_sem": [[v * (0.02 + 0.1 * d) for v in row] for row, d in zip(lat, far)],
            "power_w": [[20 + 10 * f * (1 + q / 1e5) for _, f in points] for q in loads],
            "power_sem": [[1.0] * len(points) for _ in loads],
            "measured_qps": [lo, hi],
            "cpu_s": 0.0,
        }

    def to_json(self) -> str:
        return json.dumps(
            {
                "space": [list(self.space.itr_us), list(self.space.dvfs_ghz)],
                "sla": self.sla_us,
                "pct": self.percentile,
                "n": self.n,
                "seed": self.seed,
                "name": self.name,
                "rows": self._rows,
                "next": self._next,
                "history": self.history,
                "begun_qps": self.begun_qps,
                "stop_after": self.stop_after,
                "omp_threads": os.environ.get("OMP_NUM_THREADS"),
            }
        )  # where it ran

    @classmethod
    def from_json(cls, text: str) -> FakeOptimizer:
        d = json.loads(text)
        o = cls(KnobSpace(tuple(d["space"][0]), tuple(d["space"][1])), d["sla"], d["pct"], d["n"], d["seed"], d["name"])
        o._rows = d["rows"]
        o._next = max([r["index"] + 1 for r in o._rows], default=0)
        o.history, o.begun_qps, o.stop_after = d.get("history", []), d.get("begun_qps"), d.get("stop_after", 0)
        return o


class Optimizer(FakeOptimizer):
    """`FakeOptimizer` behind the exact constructor of `tuner.optimize.optimizer.Optimizer`, for the worker process
    (`ProcessOptimizers(module="tests.daemon_fakes")`). `TUNER_FAKE_SUGGEST_S` makes suggest slow."""

    def __init__(self, space: KnobSpace, objective: Objective, settings: TunerSettings, name: str = "tuner"):
        super().__init__(space, objective.sla_us, objective.percentile, settings.trials, settings.seed, name)

    def suggest(self) -> tuple[int, OperatingPoint]:
        import time

        time.sleep(float(os.environ.get("TUNER_FAKE_SUGGEST_S", "0")))
        return super().suggest()

    @classmethod
    def from_json(cls, text: str) -> Optimizer:
        base = FakeOptimizer.from_json(text)
        o = cls.__new__(cls)
        o.__dict__.update(base.__dict__)
        return o


class FakeOptimizers:
    """The daemon's optimiser factory interface, building `FakeOptimizer`s."""

    def __init__(self, stop_after: int = 0) -> None:
        self.created = 0
        self.loaded = 0
        self.stop_after = stop_after
        self.made: list[FakeOptimizer] = []

    def create(self, space: KnobSpace, policy: Any, tuning: Any, name: str, seed: int) -> FakeOptimizer:
        self.created += 1
        opt = FakeOptimizer(space, policy.sla_us, policy.percentile, tuning.trials, seed, name)
        opt.stop_after = self.stop_after
        self.made.append(opt)
        return opt

    def load(self, text: str) -> FakeOptimizer:
        self.loaded += 1
        return FakeOptimizer.from_json(text)


def main(argv: list[str]) -> int:
    """`python -m tests.daemon_fakes CONFIG`: `tuner daemon` with the light optimiser (fast, no Ax)."""
    from tuner.cli import daemon as cmd
    from tuner.daemon.worker import ProcessOptimizers

    # exactly the production path (a worker process per retune), with the light optimiser inside it
    return cmd.serve(argv[0], optimizers=ProcessOptimizers(module="tests.daemon_fakes"))


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))


# ------------------------------------------------------------------------------------------------ helpers

#: [tuning] lines of the dissertation's cold tuner (the daemon's defaults are the warm preset).
COLD_TUNING = 'context = false\nstop_ei_pct = 0\nsafe_delta = 0\nwindow_mode = "fixed"'


def merge_tuning(base: str, overrides: str) -> str:
    """`key = value` lines of `base` with those of `overrides` replacing them key by key (TOML refuses a key
    given twice)."""
    lines: dict[str, str] = {}
    for text in (base, overrides):
        for line in text.splitlines():
            if line.strip():
                lines[line.split("=", 1)[0].strip()] = line.strip()
    return "\n".join(lines.values())


def write_config(
    tmp: Path,
    *,
    host: str = "tests.daemon_fakes:make_file_host",
    options: dict | None = None,
    extra: str = "",
    trials: int = 4,
    sobol: int = 2,
    window_s: float = 0.05,
    listen: str | None = None,
    metrics: str = "127.0.0.1:0",
    sla_us: float = 500.0,
    period_s: float = 3600.0,
    load_change_pct: float = 20.0,
    tuning: str = "",
) -> Path:
    """A daemon config under `tmp` (state in tmp/state, socket in tmp/t.sock); returns its path.

    The [tuning] table is the cold tuner (fixed windows, no context/stop rule/safety; the daemon's own defaults
    are the warm preset), so tests of the daemon's mechanics count trials and windows exactly; `tuning` lines
    (`key = value`) override it key by key -- tests of the learning features (context, stopping rule, safety, adaptive windows) turn them on that way.
    """
    tuning = merge_tuning(COLD_TUNING + "\nsettle_s = 0", tuning)  # no settle unless a test asks for one
    opts = {"knob_file": str(tmp / "knobs.json")} if options is None else options
    opt_lines = "\n".join(f"{k} = {json.dumps(v)}" for k, v in opts.items())
    text = f"""
[host]
spec = "{host}"
[host.options]
{opt_lines}
[policy]
sla_us = {sla_us}
percentile = 99
[tuning]
trials = {trials}
sobol_trials = {sobol}
window_s = {window_s}
retune_period_s = {period_s}
load_change_pct = {load_change_pct}
guardrail_margin_pct = 10
{tuning}
[state]
dir = "state"
[grpc]
listen = "{listen or "unix://" + str(tmp / "t.sock")}"
[metrics]
listen = "{metrics}"
{extra}
"""
    path = tmp / "tuner.toml"
    path.write_text(text)
    return path


def start_daemon(cfg: Path, cwd: Path, stdout: Any, env: dict[str, str] | None = None) -> subprocess.Popen:
    """`tuner daemon`'s entry point (`serve`) on `cfg` in a child process, with the light optimiser in its worker
    (no Ax: fast); `env` adds to this process's environment, stderr goes with stdout."""
    repo = Path(__file__).resolve().parents[1]
    full_env = {**os.environ, "PYTHONPATH": str(repo), **(env or {})}
    text = stdout == subprocess.PIPE
    return subprocess.Popen(
        [sys.executable, "-m", "tests.daemon_fakes", str(cfg)],
        cwd=cwd,
        env=full_env,
        stdout=stdout,
        stderr=subprocess.STDOUT,
        text=text,
    )


def wait_for(pred: Any, timeout: float = 10.0, interval: float = 0.01) -> Any:
    """Poll `pred()` until truthy (returned) or raise AssertionError after `timeout` seconds."""
    import time

    deadline = time.monotonic() + timeout
    while True:
        value = pred()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"condition not met within {timeout} s")
        time.sleep(interval)


class Running:
    """An in-process daemon on a thread (context manager); `.daemon`, `.host`, `.thread`."""

    def __init__(self, config_path: Path, host: Any = None, serve: bool = True, optimizers: Any = None) -> None:
        import threading

        from tuner.config import load_config
        from tuner.daemon.loop import Daemon

        self.optimizers = optimizers or FakeOptimizers()
        self.daemon = Daemon(load_config(config_path), host=host, optimizers=self.optimizers, serve=serve)
        self.daemon.start()
        self.host = self.daemon.host
        self.result: list[int] = []
        self.thread = threading.Thread(target=lambda: self.result.append(self.daemon.run()), daemon=True)
        self.thread.start()

    def stop(self) -> int:
        self.daemon.request_stop()
        self.thread.join(10)
        assert not self.thread.is_alive(), "daemon did not stop"
        return self.result[0]

    def __enter__(self) -> Running:
        return self

    def __exit__(self, *exc: Any) -> None:
        if self.thread.is_alive():
            self.stop()


def read_state(tmp: Path) -> dict:
    """The daemon's saved state under `tmp/state` as a restart would load it (state.json with the committed
    rows of its journals), as plain JSON types (points as [itr_us, dvfs_ghz]); {} while there is none."""
    if not (tmp / "state" / "state.json").exists():
        return {}
    return plain_state(StateStore(tmp / "state").load())


def read_knobs(tmp: Path) -> dict:
    """What a `FileHost` wrote to `tmp/knobs.json`."""
    return json.loads((tmp / "knobs.json").read_text())


def registry_samples(registry) -> dict:
    """Every sample of a prometheus-client registry, keyed by (name, sorted labels)."""
    from prometheus_client import generate_latest
    from prometheus_client.parser import text_string_to_metric_families

    text = generate_latest(registry).decode()
    return {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for fam in text_string_to_metric_families(text)
        for s in fam.samples
    }


def loop_context(tmp: Path, host: Any = None, **config: Any) -> Any:
    """A `LoopContext` alone (no `Daemon`): the config of `write_config(tmp, **config)`, its state directory
    created and locked, `host` (a `FakeHost` by default) with its knob space read; release with
    `ctx.store.release()`."""
    from tuner.config import load_config
    from tuner.daemon.context import LoopContext
    from tuner.daemon.metrics import DaemonMetrics
    from tuner.daemon.plain import bounded_space

    cfg = load_config(write_config(tmp, **config))
    ctx = LoopContext(cfg, DaemonMetrics.create("test", cfg.host.spec), host=host or FakeHost())
    ctx.store.ensure()
    ctx.space = bounded_space(ctx.live_host.knobs(), cfg.knobs)
    return ctx
