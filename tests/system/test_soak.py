"""Short soaks (about a minute each; the long ones are bench/soak_replay.py and bench/soak_daemon.py).

* replay: an hour in 5-minute windows, every policy, with the simulator's long-run cache squeezed to a few
  cells so it evicts constantly -- no exception, no failed window, the cache really evicted;
* daemon: the daemon on the simulated host whose load swings every few seconds, with one optimiser worker
  process per retune (the light test optimiser in it: bench/soak_daemon.py soaks the Ax one) -- every
  retune ends, no traceback, the daemon's RSS, open fds and threads stay flat across the later retunes.
"""

from __future__ import annotations

import collections
import gc
import importlib.util
import json
import os
import random
import re
import signal
import subprocess
import sys
import time
import tracemalloc
from pathlib import Path
from typing import Any

import psutil
import pytest

from actuators.sim.cells import ExpectedCache

REPO = Path(__file__).resolve().parents[2]
TINY_CELL_BYTES = 20 * 550  # about 20 cells: a window's oracle grid alone needs hundreds


def tiny_cache_sim(cache: Any = None, **options: Any) -> Any:
    """The `sim` host with a long-run cache of ~20 cells (hosts after the first share the first's)."""
    from tuner.hosts import make_sim

    return make_sim(cache=cache or ExpectedCache(cell_bytes=TINY_CELL_BYTES, default_bytes=2000), **options)


def test_replay_in_fine_windows_survives_a_cache_that_evicts_constantly(tmp_path):
    from tuner.cli.app import main

    out = tmp_path / "out"
    argv = ["replay", "--host", "tests.system.test_soak:tiny_cache_sim", "--hours", "1", "--bin", "300", "--quiet"]
    # the per-window oracle too (fine windows default to the hourly one): its grids stress the cache most
    argv += ["--policies", "tuner,linux-default,static-performance,oracle"]
    assert main([*argv, "--trials", "4", "--out", str(out)]) == 0
    summary = json.loads((out / "summary.json").read_text())
    assert summary["windows"] == 12
    policies = set(summary["policies"])  # the oracle of 5-minute windows is the hourly one by default
    assert {"tuner", "linux-default", "static-performance"} <= policies and policies & {"oracle", "oracle-hourly"}
    for name, pol in summary["policies"].items():
        assert pol["available"] and pol["failed_windows"] == 0, name
        assert pol["energy_j"] > 0, name


def _config(tmp: Path) -> Path:
    text = f"""[host]
spec = "sim"
[host.options]
seed = 1
cores = 4
[host.options.load_schedule]
shape = "steps"
levels = [40000, 160000]
step_s = 8
[policy]
sla_us = 700.0
[tuning]
trials = 3
sobol_trials = 3
window_s = 0.1
settle_s = 0
window_mode = "fixed"
context = false
stop_ei_pct = 0
safe_delta = 0
[state]
dir = "{tmp / "state"}"
[grpc]
listen = "unix://{tmp / "t.sock"}"
[metrics]
listen = ""
"""
    path = tmp / "tuner.toml"
    path.write_text(text)
    return path


def _workers(ps: psutil.Process) -> list[psutil.Process]:
    out = []
    for c in ps.children(recursive=True):
        try:
            if "resource_tracker" not in " ".join(c.cmdline()):
                out.append(c)
        except psutil.Error:
            pass
    return out


def test_daemon_on_a_moving_load_retunes_repeatedly_without_growing(tmp_path):
    log_path = tmp_path / "daemon.log"
    cmd = [sys.executable, "-m", "tests.daemon_fakes", str(_config(tmp_path))]
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    with open(log_path, "w") as log:
        proc = subprocess.Popen(cmd, cwd=REPO, env=env, stdout=log, stderr=subprocess.STDOUT)
    ps = psutil.Process(proc.pid)
    after: list[tuple[int, int, int, int]] = []  # (rss, fds, threads, workers) once each decision is logged
    try:
        deadline = time.monotonic() + 120
        seen = 0
        while len(after) < 5:
            assert proc.poll() is None, log_path.read_text()[-3000:]
            assert time.monotonic() < deadline, "fewer than 5 retunes in 120 s:\n" + log_path.read_text()[-3000:]
            decisions = log_path.read_text().count("decision ")
            if decisions > seen:
                seen = decisions
                # the worker exits once the decision is made: wait for it (bounded), then sample the daemon
                t_end = time.monotonic() + 30
                while _workers(ps) and time.monotonic() < t_end and "retune" not in _last_line(log_path):
                    time.sleep(0.1)
                after.append((ps.memory_info().rss, ps.num_fds(), ps.num_threads(), len(_workers(ps))))
            time.sleep(0.1)
    finally:
        proc.send_signal(signal.SIGTERM)
        rc = proc.wait(60)
    text = log_path.read_text()
    assert rc == 0, text[-3000:]
    assert "Traceback" not in text
    started = re.findall(r"retune (\S+) \([^)]*\): up to", text)
    ended = set(re.findall(r"decision (\S+) \(", text))
    assert len(started) >= 5
    assert [r for r in started[:-1] if r not in ended] == []  # all but one in flight at SIGTERM ended
    assert "left the band" in text  # retunes were started by the load moving
    rss = [a[0] for a in after]
    fds = [a[1] for a in after]
    threads = [a[2] for a in after]
    # the first retunes warm the daemon up (imports, gRPC, caches); after that nothing accumulates
    assert max(rss[1:]) - rss[1] < 8 * 2**20, [r / 2**20 for r in rss]
    assert max(fds[1:]) - min(fds[1:]) <= 2, fds
    assert max(threads[1:]) - min(threads[1:]) <= 2, threads


def _last_line(path: Path) -> str:
    lines = path.read_text().splitlines()
    return lines[-1] if lines else ""


def test_daemon_python_heap_is_bounded_over_repeated_retunes(tmp_path):
    """Everything the daemon keeps per retune is bounded: with the kept trials, decisions, holding windows and
    model tables capped low, the traced Python heap (less what the byte-bounded CI-rank memo holds) and the live
    objects of each type stop growing once the caps are reached -- across 20 retunes in alternating load
    bands, each followed by a WatchDecisions stream opened and dropped and a status read.  In a fresh
    interpreter, so that nothing but the daemon allocates (other tests' leftovers, pytest's log capture)."""
    code = f"from tests.system.test_soak import heap_probe; heap_probe({str(tmp_path)!r})"
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    done = subprocess.run([sys.executable, "-c", code], cwd=REPO, env=env, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    result = json.loads(done.stdout.splitlines()[-1])
    sizes, grew = result["sizes"], result["grew"]
    # the first retunes fill the caps and warm up (imports, gRPC); from then on nothing accumulates
    assert sizes[-1] - sizes[6] < 32 * 1024, [round((s - sizes[0]) / 1024) for s in sizes]
    # 13 retunes apart: a type gaining 4 objects per retune fails; the slack is for what is in flight (an indented
    # JSON file being encoded holds ~22 closure cells) and the gRPC pool's idle threads, added up to its bound
    assert not {t: n for t, n in grew.items() if n > 50}, grew


def heap_probe(tmp: str, retunes: int = 20) -> None:
    """The daemon in this process under `tracemalloc` (see the test above); prints {"sizes", "grew"} as JSON."""
    import grpc

    from actuators.latency.dist import RANKS_CACHE
    from tests.daemon_fakes import FakeOptimizers, Running, wait_for, write_config
    from tuner.daemon import model_tables, state
    from tuner.daemon.service import protos

    state.KEEP_TRIALS, state.KEEP_DECISIONS, state.KEEP_WINDOWS, model_tables.MODEL_TABLES = 6, 3, 4, 2
    cfg = write_config(
        Path(tmp), host="tests.fakes:make_fake_host", options={"seed": 1}, trials=3, sobol=3, window_s=0.02
    )
    pb, services = protos()
    sizes: list[int] = []
    types: list[Path] = []  # the live-type counts go to files: held in the heap, they would be measured too
    tracemalloc.start()
    with Running(cfg, optimizers=FakeOptimizers()) as run, grpc.insecure_channel(run.daemon.grpc_address) as ch:
        stub = services.TunerStub(ch)
        seen = 0
        for k in range(retunes):
            seen = wait_for(lambda seen=seen: _held_seq(run.daemon) > seen and _held_seq(run.daemon), timeout=120)
            stream = stub.WatchDecisions(pb.WatchDecisionsRequest())
            assert next(stream).retune_id == run.daemon.state.held["retune_id"]
            stream.cancel()
            assert stub.GetStatus(pb.GetStatusRequest()).retune_id
            run.optimizers.made.clear()  # the test doubles' own records of what they built and were asked
            run.host.calls.clear()
            gc.collect()
            # the loop thread keeps measuring meanwhile: the least of a few readings is the heap at rest
            sizes.append(min(_traced_after(0.01) for _ in range(20)) - RANKS_CACHE.stats().bytes)
            if k in (6, retunes - 1):
                types.append(Path(tmp) / f"types-{k}.json")
                types[-1].write_text(json.dumps(_live_types()))
            run.host.set_offered_qps(100_000 if k % 2 else 150_000)  # the load leaves the band: a retune
        wait_for(lambda: not len(run.daemon.ctx.feed), timeout=10)  # every dropped stream unsubscribed
    first, last = (collections.Counter(json.loads(p.read_text())) for p in types)
    grew = {t: n - first[t] for t, n in last.items() if n > first[t]}
    print(json.dumps({"sizes": sizes, "grew": grew}))


def _held_seq(daemon: Any) -> int:
    """The sequence number of the retune whose decision is held (0 before the first)."""
    held = daemon.state.held or {}
    return int(str(held.get("retune_id", "r0"))[1:] or 0)


def _live_types(readings: int = 5) -> collections.Counter:
    """Live objects by type name, the least count of a few readings: an object the loop thread has in
    flight (a state file being encoded) is not one the daemon keeps."""
    counts = []
    for _ in range(readings):
        time.sleep(0.01)  # spacing between readings, not synchronisation
        counts.append(collections.Counter(type(o).__name__ for o in gc.get_objects()))
    return collections.Counter({t: min(c[t] for c in counts) for t in counts[0]})


def _traced_after(seconds: float) -> int:
    time.sleep(seconds)  # spacing between readings, not synchronisation
    return tracemalloc.get_traced_memory()[0]


def _soak_bench() -> Any:
    """bench/soak_daemon.py as a module (its slope and cycle analysis are pure functions)."""
    spec = importlib.util.spec_from_file_location("soak_daemon_bench", REPO / "bench" / "soak_daemon.py")
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    sys.modules.setdefault(spec.name, mod)  # dataclasses look their module up there
    spec.loader.exec_module(sys.modules[spec.name])
    return sys.modules[spec.name]


def _sawtooth_run(mb_per_h: float, hours: float = 2.0, cycle_s: float = 300.0) -> tuple[list[dict], list[float]]:
    """10-s samples of a daemon whose RSS jumps ~20 MB during each retune (first 60 s of a cycle), dips ~13 MB
    between measurement windows, and drifts by `mb_per_h` underneath; plus the cycle starts."""
    rng = random.Random(7)
    rows = []
    for k in range(int(hours * 360)):
        t = 10.0 * k
        base = 140.0 + mb_per_h * t / 3600 + rng.uniform(-0.3, 0.3)
        phase = t % cycle_s
        rss = base + (20.0 * rng.random() if phase < 60 else 0.0) - (13.0 if rng.random() < 0.3 else 0.0)
        rows.append({"t_s": t, "rss_mb": round(rss, 2), "worker_rss_mb": 400.0 if phase < 60 else 0.0})
    starts = [c * cycle_s for c in range(int(hours * 3600 / cycle_s))]
    return rows, starts


def test_soak_slope_tells_a_plateau_from_a_leak_despite_retune_swings():
    bench = _soak_bench()
    flat_rows, starts = _sawtooth_run(0.0)
    flat = bench.slope_report(flat_rows, bench.rss_cycles(flat_rows, starts), warmup_s=600.0)
    assert flat["verdict"] == "met", flat
    lo, hi = flat["cycle_troughs_theil_sen"]["ci95"]
    assert lo <= 0.0 <= hi and hi <= 1.0
    assert flat["warmup_cut_s"] == 600.0 and flat["post_warmup_cycles"] == len(starts) - 2 - 1  # last is open

    leak_rows, starts = _sawtooth_run(5.0)
    leak = bench.slope_report(leak_rows, bench.rss_cycles(leak_rows, starts), warmup_s=600.0)
    assert leak["verdict"] == "exceeded", leak
    lo, hi = leak["cycle_troughs_theil_sen"]["ci95"]
    assert lo <= 5.0 <= hi

    short_rows, starts = _sawtooth_run(0.0, hours=0.4)  # too few cycles after warm-up to bound the slope
    short = bench.slope_report(short_rows, bench.rss_cycles(short_rows, starts), warmup_s=600.0)
    assert short["verdict"] == "not shown", short


def test_soak_cycles_report_peak_trough_and_settled_rss_per_retune():
    bench = _soak_bench()
    rows = [
        {"t_s": t, "rss_mb": rss, "worker_rss_mb": w}
        for t, rss, w in [(0, 100.0, 0.0), (10, 130.0, 400.0), (20, 120.0, 0.0), (30, 125.0, 300.0), (40, 121.0, 0.0)]
    ]
    cycles = bench.rss_cycles(rows, [0.0, 25.0])
    assert [(c["rss_mb_peak"], c["rss_mb_trough"], c["rss_mb_last"]) for c in cycles] == [
        (130.0, 100.0, 120.0),
        (125.0, 121.0, 121.0),
    ]
    assert [c["closed"] for c in cycles] == [True, False]
    assert cycles[0]["worker_rss_mb_last"] == 0.0 and cycles[0]["end_s"] == 25.0
    assert "rss_less_arenas_mb_trough" not in cycles[0]  # only when the samples split RSS
    split = [{**r, "rss_less_arenas_mb": r["rss_mb"] - 20.0} for r in rows]
    assert [c["rss_less_arenas_mb_trough"] for c in bench.rss_cycles(split, [0.0, 25.0])] == [80.0, 101.0]


def test_soak_rss_parts_split_the_daemons_memory():
    bench = _soak_bench()
    parts = bench.rss_parts(psutil.Process())
    assert parts["arenas_mb"] >= 0.0 and parts["rss_less_arenas_mb"] > 0.0
    total = psutil.Process().memory_info().rss / 2**20
    assert abs(parts["arenas_mb"] + parts["rss_less_arenas_mb"] - total) < 0.25 * total


def test_soak_warmup_lasts_until_the_daemons_bounded_stores_fill():
    bench = _soak_bench()
    decisions = [100.0 * k for k in range(1, 12)]
    assert bench.Warmup(600.0, 8).cut_s(decisions) == 800.0  # the 8th decision, later than the minimum
    assert bench.Warmup(900.0, 8).cut_s(decisions) == 900.0
    assert bench.Warmup(600.0, 8).cut_s(decisions[:5]) == float("inf")  # all warm-up: no slope claimed
    assert bench.Warmup(600.0, 0).cut_s(decisions[:2]) == 600.0  # by default no retune is waited for
    # ... but the holding-window ring must be full and every load level visited once
    run = {"window_s": 5.0, "levels_qps": [1, 2, 3, 4, 5, 6], "step_s": 240.0}
    assert bench.warmup_for(run, 600.0, 0).min_s == max(bench.KEEP_WINDOWS * 5.0, 6 * 240.0)
    assert bench.warmup_for(run, 7200.0, 0).min_s == 7200.0


@pytest.fixture(autouse=True)
def _quiet_ax(monkeypatch):
    monkeypatch.setenv("PYTHONWARNINGS", "ignore")
