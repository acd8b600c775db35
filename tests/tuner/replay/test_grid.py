"""Replays at scale: the grid, its report's confidence intervals, and Ray runs equal to serial ones, run for run."""

from __future__ import annotations

import argparse
import ipaddress
import math
import os
import socket

import pytest

from core.errors import TunerError
from tuner.replay import grid as g

NOON = g.TraceSpec("noon", start_hour=12, hours=1)


def test_grid_is_the_cross_product_in_a_stable_order():
    specs = g.grid(
        [NOON, g.TraceSpec("night", start_hour=3, hours=1)],
        [0, 1, 2],
        [(99, 500), (99, 200)],
        [("warm", "warm", {}), ("cold", "cold", {"trials": 5})],
        trials=4,
    )
    assert len(specs) == 2 * 3 * 2 * 2
    assert len({s for s in specs}) == len(specs)  # hashable and distinct: usable as task keys
    assert [s.seed for s in specs[:3]] == [0, 1, 2] and specs[0].trace == NOON
    assert dict(specs[3].overrides) == {"trials": 5} and specs[3].variant == "cold"


def test_bad_grids_are_refused_in_one_line_before_any_run():
    with pytest.raises(TunerError, match="preset"):
        g.check(g.grid([NOON], [0], [(99, 500)], [("x", "lukewarm", {})]))
    with pytest.raises(TunerError, match="fewer than"):  # the trace has 24 hours
        g.check(g.grid([g.TraceSpec("late", start_hour=30, hours=1)], [0], [(99, 500)], [("w", "warm", {})]))
    with pytest.raises(TunerError, match="engine"):
        g.run_grid(g.grid([NOON], [0], [(99, 500)], [("w", "warm", {})]), engine="spark")


def test_mean_ci_is_students_t():
    ci = g.mean_ci([1.0, 2.0, 3.0, None])
    # t(0.975, 2) = 4.303; sd = 1; half width = 4.303 / sqrt(3)
    assert ci["mean"] == 2.0 and ci["n"] == 3
    assert ci["ci_high"] - 2.0 == pytest.approx(4.302653 / math.sqrt(3), rel=1e-6)
    assert ci["ci_low"] == pytest.approx(4.0 - ci["ci_high"])
    one = g.mean_ci([5.0])
    assert one["mean"] == 5.0 and one["ci_low"] is None and one["ci_high"] is None
    assert g.mean_ci([None]) is None


def test_without_ray_auto_runs_serially_and_ray_is_refused(monkeypatch):
    monkeypatch.setattr(g, "ray_available", lambda: False)
    monkeypatch.setattr(g, "oracle_memo", lambda trace, pct, sla, plant="bundled": {"sla": sla})
    seen = []

    def fake_run(spec, memo):
        seen.append(memo)
        return {**spec.key(), "summary": dict.fromkeys(g.METRICS, float(spec.seed)), "wall_s": 0.0}

    monkeypatch.setattr(g, "run_one", fake_run)
    specs = g.grid([NOON], [0, 1, 2], [(99, 500), (99, 200)], [("warm", "warm", {})])
    report = g.run_grid(specs, engine="auto")
    assert report.engine == "serial" and len(report.runs) == 6
    assert seen == [{"sla": 500.0}] * 3 + [{"sla": 200.0}] * 3  # one oracle memo per SLA, handed to its runs
    (agg500, agg200) = report.aggregate
    assert agg500["sla_us"] == 500.0 and agg500["seeds"] == [0, 1, 2]
    assert agg500["energy_j"]["mean"] == 1.0 and agg500["energy_j"]["ci_low"] < 1.0 < agg500["energy_j"]["ci_high"]
    with pytest.raises(TunerError, match="Ray is not installed"):
        g.run_grid(specs, engine="ray")


def _listening(pids: set[int]) -> list[tuple[str, int, int]]:
    """(address, port, pid) of every TCP/UDP socket of `pids` in the LISTEN state (TCP) or bound (UDP)."""
    import psutil

    out = []
    for c in psutil.net_connections("inet"):
        if c.pid in pids and c.laddr and (c.status == psutil.CONN_LISTEN or c.type == socket.SOCK_DGRAM):
            out.append((c.laddr.ip, c.laddr.port, c.pid))
    return out


def _loopback(ip: str) -> bool:
    addr = ipaddress.ip_address(ip.split("%")[0])
    mapped = getattr(addr, "ipv4_mapped", None)
    return (mapped or addr).is_loopback


def test_ray_runs_equal_serial_runs_exactly_on_a_loopback_only_local_ray():
    """Two tiny replays (one window, 3 trials, two seeds and both tuner presets) in this process and as tasks on
    a local 2-CPU Ray: every window's energy and point, every trial's point, identical. While that Ray is up,
    every socket its processes (this driver, the GCS, the raylet, its agents and workers) listen on is a
    loopback address; after it, the process environment is as before."""
    pytest.importorskip("ray")
    import psutil
    import ray

    specs = [
        g.RunSpec(NOON, 0, 99.0, 500.0, "warm", "warm", trials=3, policies=("tuner",)),
        g.RunSpec(NOON, 1, 99.0, 200.0, "cold", "cold", trials=3, policies=("tuner",)),
    ]
    serial = g.run_grid(specs, engine="serial")
    env_before = {k: os.environ.get(k) for k in (g.RAY_CLUSTER_ENV, "RAY_USAGE_STATS_ENABLED")}
    with g.local_ray(2, g.worker_env()):
        on_ray = g.run_grid(specs, engine="ray", num_cpus=2)
        me = psutil.Process()
        procs = [me, *me.children(recursive=True)]
        names = {p.pid: p.name() for p in procs}
        socks = _listening(set(names))
    assert not ray.is_initialized()
    assert {k: os.environ.get(k) for k in env_before} == env_before
    assert any("gcs_server" in n for n in names.values()) and any("raylet" in n for n in names.values())
    listeners = {names[pid] for _, _, pid in socks}
    assert len(socks) >= 3 and any("gcs_server" in n for n in listeners), socks  # the check saw Ray's servers
    exposed = [(ip, port, names[pid]) for ip, port, pid in socks if not _loopback(ip)]
    assert exposed == []
    assert on_ray.engine == "ray" and serial.engine == "serial"
    for a, b in zip(serial.runs, on_ray.runs, strict=True):
        assert g.deterministic_part(a) == g.deterministic_part(b)
        assert len(a["trial_points"]) == 3 and a["windows"]["tuner"][0]["energy_j"] > 0
    # and the two specs really differ (the comparison is not of two copies of one run)
    assert serial.runs[0]["trial_points"] != serial.runs[1]["trial_points"]


def test_cli_flags_build_the_grid_or_refuse_in_one_line(capsys):
    from tuner.cli import replay_grid as cli
    from tuner.cli.app import main

    ap = argparse.ArgumentParser()
    cli.add_arguments(ap)
    args = ap.parse_args(["--traces", "a:12:2,b:0:4:2", "--seeds", "3", "--slas", "99:500", "--variants", "warm,cold"])
    specs = cli.specs_from(args)
    assert len(specs) == 2 * 3 * 2
    assert {(s.trace.name, s.trace.start_hour, s.trace.hours, s.trace.every) for s in specs} == {
        ("a", 12, 2.0, 1),
        ("b", 0, 4.0, 2),
    }
    added = cli.specs_from(ap.parse_args(["--seeds", "1", "--slas", "99:500", "--variants", "warm-monotone"]))
    assert {s.variant for s in added} == {"warm-monotone"}  # a preset that adds a feature is a variant too
    for bad, what in (
        (["--traces", "a:x:2"], "--traces"),
        (["--traces", "a:0:0"], "HOURS > 0"),
        (["--slas", "99"], "--slas"),
        (["--variants", "tepid"], "--variants"),
        (["--seeds", "0"], "--seeds"),
    ):
        assert main(["replay-grid", *bad]) == 2
        err = capsys.readouterr().err
        assert what in err and "Traceback" not in err and len(err.strip().splitlines()) == 1


def test_oracle_memo_for_gives_the_oracles_points_and_what_each_cost() -> None:
    """One entry per distinct load, under the replay's key, equal to `oracle_point`'s answer; cold, each load's
    cost (wall, CPU, grid points evaluated) is measured from an empty cell cache."""
    from actuators.sim.host import SimHost
    from tuner.optimize.settings import Objective
    from tuner.replay.oracle import oracle_answer, oracle_point

    loads = [300_000.0, 450_000.0, 300_000.0]
    memo, costs = g.oracle_memo_for(loads, 99.0, 500.0, cold=True)
    assert list(memo) == [g.oracle_key(300_000.0, 99.0, 500.0), g.oracle_key(450_000.0, 99.0, 500.0)]
    assert [c.qps for c in costs] == [300_000.0, 450_000.0]
    obj = Objective("constrained", 99.0, 500.0)
    for q, cost in zip((300_000.0, 450_000.0), costs, strict=True):
        answer = oracle_answer(SimHost(seed=0), obj, q)
        assert memo[g.oracle_key(q, 99.0, 500.0)] == (answer.point, answer.how) == oracle_point(SimHost(seed=0), obj, q)
        assert cost.points == answer.points and 0 < answer.points < answer.total == 511 * 18
        assert cost.wall_s > 0 and cost.cpu_s > 0


def test_a_run_without_the_tuner_records_its_policies_windows_and_no_tuner_summary():
    run = g.run_one(g.RunSpec(NOON, 0, 99.0, 500.0, policies=("oracle",)))
    assert set(run["windows"]) == {"oracle"} and run["windows"]["oracle"][0]["energy_j"] > 0
    assert run["trial_points"] == [] and run["summary"] == dict.fromkeys(g.METRICS)
    (agg,) = g.aggregate([run])
    assert all(agg[k] is None for k in g.METRICS)  # nothing of the tuner's to aggregate, and no error
