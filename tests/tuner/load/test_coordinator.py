"""The open-loop load generator: plans, the run against a real memcached, interval logs and their merge."""

from __future__ import annotations

import io
import os
import signal
import threading

import numpy as np
import pytest
from hdrh.log import HistogramLogReader

from actuators.latency.hlog import LAG_TAG, read_log
from core.errors import HostError, InputError, TunerError
from tuner.cli.app import main
from tuner.load.coordinator import LoadSettings, address_of, run_load
from tuner.load.hist import new_histogram
from tuner.load.hlog_merge import merge_logs
from tuner.load.plan import Shard, poisson_plan, trace_plan

TRACE = b"".join(
    b"%d,key%d,%d,%d,client%d,%s,0\n" % (t, i, 10, 100 + i, i % 5, op)
    for i, (t, op) in enumerate((t, op) for t in range(10) for op in (b"get", b"set", b"gets", b"delete", b"add"))
)


def test_poisson_plan_rate_mix_and_order() -> None:
    plan = poisson_plan(20_000, 2.0, seed=3, set_ratio=0.25)
    n = len(plan)
    assert abs(n - 40_000) < 6 * np.sqrt(40_000)
    assert np.all(np.diff(plan.times_ns) >= 0) and plan.times_ns[-1] < 2e9
    assert abs(plan.ops["set"] / n - 0.25) < 0.02
    assert plan.per_second(2).sum() == n
    assert all(plan.templates[j].endswith(b"mn\r\n") for j in plan.template[:100].tolist())


def test_poisson_plan_refuses_unbounded_runs() -> None:
    with pytest.raises(TunerError, match="more than"):
        poisson_plan(1e6, 3600)
    with pytest.raises(TunerError, match="--qps"):
        poisson_plan(float("inf"), 1)


def test_trace_plan_scales_time_maps_ops_and_shards(tmp_path) -> None:
    path = tmp_path / "t.csv"
    path.write_bytes(TRACE)
    plan = trace_plan(path, time_scale=10.0, duration_s=1.0)
    assert len(plan) == 50  # 10 trace seconds played 10x faster fit in 1 s
    assert plan.times_ns.max() < 1e9 and np.all(np.diff(plan.times_ns) >= 0)
    assert plan.ops == {"get": 20, "set": 20, "delete": 10}
    assert any(t.startswith(b"set tl:key1_") and b" 101\r\n" in t for t in plan.templates)
    half = trace_plan(path, time_scale=10.0, duration_s=0.5)
    assert len(half) == 25 or abs(len(half) - 25) <= 5  # rows jittered within their second
    shards = [trace_plan(path, time_scale=10.0, duration_s=1.0, shard=Shard(i, 3)) for i in range(3)]
    assert sum(len(s) for s in shards) == 50  # every client in exactly one shard


def test_trace_plan_bad_row_names_file_and_line(tmp_path) -> None:
    path = tmp_path / "bad.csv"
    path.write_bytes(b"".join(TRACE.splitlines(keepends=True)[:2]) + b"1,k,10,x,c,get,0\n")
    with pytest.raises(InputError, match=r"bad.csv:3: field 'value size'"):
        trace_plan(path, time_scale=1.0, duration_s=5.0)
    with pytest.raises(TunerError, match="i/n"):
        Shard.parse("3/3")


def test_run_sends_every_request_and_logs_per_second(memcached, tmp_path) -> None:
    plan = poisson_plan(3000, 1.0, seed=1)
    out = io.StringIO()
    result = run_load(plan, LoadSettings(address_of(memcached.address), 1.0, 2, 2, drain_s=2.0), hlog=out)
    s = result.summary()
    assert s["sent"] == s["completed"] == len(plan) and s["unanswered"] == 0 and s["errors"] == 0
    assert result.seconds[0].scheduled == len(plan)
    assert s["latency_us"]["p50"]["us"] > 0 and s["send_lag_us"]["p99"] >= 0
    log = tmp_path / "a.hlog"
    log.write_text(out.getvalue())
    reader = HistogramLogReader(str(log), new_histogram())  # the hdrh package's own reader
    total = tagged = 0
    while (h := reader.get_next_interval_histogram()) is not None:
        if h.get_tag() is None:
            total += h.get_total_count()
        elif h.get_tag() == LAG_TAG:
            tagged += h.get_total_count()
    assert total == tagged == len(plan)
    merged = io.StringIO()
    totals = merge_logs([str(log), str(log)], merged)
    assert totals[None].get_total_count() == 2 * len(plan)
    (tmp_path / "m.hlog").write_text(merged.getvalue())
    assert sum(h.get_total_count() for h in read_log(tmp_path / "m.hlog").by_tag[None].values()) == 2 * len(plan)


def test_a_server_stall_shows_in_the_tail(memcached) -> None:
    """Latency counts from the scheduled time: requests due while the server is stopped carry the stall."""
    pid = memcached.process.pid
    plan = poisson_plan(2000, 1.0, seed=2)
    stop = threading.Timer(0.3, os.kill, (pid, signal.SIGSTOP))
    cont = threading.Timer(0.6, os.kill, (pid, signal.SIGCONT))
    try:
        stop.start()
        cont.start()
        result = run_load(plan, LoadSettings(address_of(memcached.address), 1.0, 1, 2, drain_s=2.0))
    finally:
        stop.cancel()
        cont.cancel()
        os.kill(pid, signal.SIGCONT)
    s = result.summary()
    assert s["completed"] == len(plan)
    # ~300 ms stopped at 2000/s: ~600 requests wait on it, the first ~300 ms, so the p99 is well over 100 ms
    assert s["latency_us"]["p99"]["us"] > 100_000
    assert result.latency.get_max_value() > 200e6


def test_unreachable_server_is_one_line() -> None:
    with pytest.raises(HostError, match="cannot connect"):
        run_load(poisson_plan(10, 0.1), LoadSettings(address_of("127.0.0.1:1"), 0.1))


def test_cli_run_and_merge(memcached, tmp_path, capsys) -> None:
    trace = tmp_path / "t.csv"
    trace.write_bytes(TRACE)
    hlog, js = tmp_path / "r.hlog", tmp_path / "r.json"
    rc = main(
        [
            "load",
            "--server",
            memcached.address,
            "--trace",
            str(trace),
            "--time-scale",
            "10",
            "--duration",
            "1",
            "--hlog",
            str(hlog),
            "--json",
            str(js),
            "--quiet",
        ]
    )
    assert rc == 0
    err = capsys.readouterr().err
    assert "loopback" in err and "unanswered 0" in err
    assert main(["load", "merge", str(hlog), str(hlog), "-o", str(tmp_path / "m.hlog")]) == 0
    assert "100 requests" in capsys.readouterr().err
    assert main(["load", "--qps", "10", "--duration", "1"]) == 2
    assert "give --server" in capsys.readouterr().err


def test_batching_holds_sends_and_charges_the_wait_to_send_lag(memcached) -> None:
    plan = poisson_plan(500, 0.5, seed=4)
    result = run_load(plan, LoadSettings(address_of(memcached.address), 0.5, 1, 1, drain_s=2.0, batch_us=3000))
    s = result.summary()
    assert s["completed"] == len(plan)
    # the first request of every batch waited >= 3 ms; at 500/s (2 ms apart) that is over a third of them
    assert s["send_lag_us"]["p50"] >= 500 and s["send_lag_max_us"] >= 3000
    assert s["latency_us"]["p99"]["us"] >= 3000
