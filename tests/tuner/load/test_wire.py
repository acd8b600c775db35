"""`tuner load --protocol redis`: the same plans in RESP, replies counted without parsing, against Debian's
redis-server, each request counted once by the server's own INFO."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from actuators.latency.resp import RespClient
from actuators.qps import RedisInfoQps
from core.errors import TunerError
from tuner.load.coordinator import LoadSettings, address_of, run_load, warm
from tuner.load.plan import poisson_plan, trace_plan, warm_requests
from tuner.load.wire import MEMCACHED, RESP, WIRES, count_mn

TRACE = b"".join(
    b"%d,key%d,%d,%d,client%d,%s,0\n" % (t, i, 10, 100 + i, i % 5, op)
    for i, (t, op) in enumerate((t, op) for t in range(10) for op in (b"get", b"set", b"gets", b"delete", b"add"))
)
REPO = Path(__file__).resolve().parents[3]


def test_the_trace_mix_is_the_same_in_both_protocols(tmp_path) -> None:
    path = tmp_path / "t.csv"
    path.write_bytes(TRACE)
    mc = trace_plan(path, time_scale=10.0, duration_s=1.0, seed=1)
    rd = trace_plan(path, time_scale=10.0, duration_s=1.0, seed=1, protocol="redis")
    assert rd.ops == mc.ops == {"get": 20, "set": 20, "delete": 10}
    assert (rd.times_ns == mc.times_ns).all() and (rd.template == mc.template).all()
    verbs = {t.split(b"\r\n")[2] for t in rd.templates}
    assert verbs == {b"GET", b"SET", b"DEL"} and rd.protocol == "redis"
    assert rd.part(1, 2).protocol == "redis"


def test_poisson_plan_in_resp_and_its_warm_set() -> None:
    plan = poisson_plan(1000, 1.0, keys=5, value_bytes=3, protocol="redis")
    assert plan.templates[:2] == [
        b"*2\r\n$3\r\nGET\r\n$30\r\ntl:000000000000000000000000000\r\n",
        b"*3\r\n$3\r\nSET\r\n$30\r\ntl:000000000000000000000000000\r\n$3\r\nxxx\r\n",
    ]
    assert warm_requests(plan) == plan.templates[1::2]
    assert warm_requests(poisson_plan(1000, 1.0, keys=5)) == poisson_plan(1000, 1.0, keys=5).templates[1::2]
    with pytest.raises(TunerError, match="--protocol 'valkey': expected one of memcached, redis"):
        poisson_plan(1000, 1.0, protocol="valkey")


def test_memcached_counter_is_the_terminator_count() -> None:
    assert WIRES == {"memcached": MEMCACHED, "redis": RESP}
    stream = b"VALUE a 0 1\r\nx\r\nEND\r\nMN\r\nSTORED\r\nMN\r\nERROR\r\nMN\r\n"
    total = errors = 0
    tail = MEMCACHED.first_tail
    for cut in ((0, 23), (23, 36), (36, len(stream))):  # MN split over the first two reads
        k, e, tail = count_mn(stream[cut[0] : cut[1]], cut[1] - cut[0], tail)
        total, errors = total + k, errors + e
    assert (total, errors) == (3, 1)


def test_run_against_redis_sends_every_request_once(redis_server) -> None:
    stats = RedisInfoQps(redis_server.address)
    address = address_of(redis_server.address, "redis")
    plan = poisson_plan(3000, 1.5, seed=2, keys=200, set_ratio=0.2, protocol="redis")
    before = stats.total_requests()
    warm(address, warm_requests(plan), protocol="redis")
    with RespClient(redis_server.address) as c:
        assert c.get("tl:" + "0" * 27) == b"x" * 200  # the warm set stored the key set
    warmed = stats.total_requests()
    result = run_load(plan, LoadSettings(address, 1.5, processes=1, connections=3, drain_s=1.0))
    s = result.summary()
    assert warmed - before == 200 + 1
    assert s["completed"] == s["sent"] == len(plan) and s["errors"] == 0 and s["unanswered"] == 0
    assert stats.total_requests() - warmed == len(plan)  # the server's own count, request for request


def test_error_replies_are_counted_as_errors(redis_server) -> None:
    plan = poisson_plan(500, 0.5, seed=1, keys=3, protocol="redis")
    plan.templates[:] = [b"*1\r\n$3\r\nGET\r\n"] * len(plan.templates)  # wrong arity: every reply is an error
    result = run_load(plan, LoadSettings(address_of(redis_server.address, "redis"), 0.5, 1, 1))
    s = result.summary()
    assert s["completed"] == len(plan) and s["errors"] == len(plan)


def test_cli_protocol_redis_replays_the_bundled_trace(redis_server, tmp_path) -> None:
    stats = RedisInfoQps(redis_server.address)
    before = stats.total_requests()
    cmd = [
        sys.executable, "-m", "tuner.cli", "load", "--protocol", "redis", "--server", redis_server.address,
        "--trace", "sample", "--peak-qps", "1500", "--start", "66000", "--duration", "1.5", "--quiet",
        "--json", str(tmp_path / "out.json"),
    ]  # fmt: skip
    run = subprocess.run(cmd, cwd=REPO, capture_output=True, text=True, timeout=120)
    assert run.returncode == 0, run.stderr
    out = json.loads((tmp_path / "out.json").read_text())
    assert out["completed"] == out["planned"] > 1000 and out["errors"] == 0
    assert stats.total_requests() - before == out["planned"]
