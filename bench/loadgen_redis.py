"""`tuner load --protocol redis` against Redis's own INFO counters: is the schedule what the server served? (JSON)

For each rate, Poisson GETs (3 % SETs) over RESP to Debian's redis-server on 127.0.0.1 (a free port, no
persistence) for --seconds, while a thread reads the server's INFO every 0.1 s (stamped by the server's clock) (`actuators.qps.RedisInfoQps`: data
commands only, its own INFO reads not counted). Per run: the requests the server counted over the run against the
requests scheduled (the whole run, and each full second, the server's counter interpolated at the run's second
boundaries), the generator's own per-second completions, its send lag and latency, and the server's CPU per request.
A run *holds* when the server's count is within 1 % of the schedule over the run and in every full second.

Loopback only: no NIC between client and server; redis-server, the generator and this script share the machine's
cores (`loadavg` before and after is recorded). Bounded: ~ rates x (--seconds + 2) s.

    nice -n 10 .venv/bin/python bench/loadgen_redis.py [--seconds 4] [--rates 2000,5000,10000,20000]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import threading
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from actuators.qps import RedisInfoQps  # noqa: E402
from bench.loadgen import _proc_cpu_s  # noqa: E402
from tests.redis_server import start_redis  # noqa: E402
from tuner.load.coordinator import LoadSettings, address_of, run_load, warm  # noqa: E402
from tuner.load.plan import poisson_plan, warm_requests  # noqa: E402

ACHIEVED_LIMIT = 0.01
POLL_S = 0.1


class InfoPoller:
    """Reads the server's request count every `POLL_S` in a thread: (time, count) pairs, the time the server's own
    clock when it answered (INFO's `server_time_usec`: this machine's clock on loopback, so no client scheduling
    delay in the stamps)."""

    def __init__(self, source: RedisInfoQps) -> None:
        self.source = source
        self.reads: list[tuple[float, float]] = []
        self._stop = threading.Event()
        self._first = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while True:
            t0 = time.time()
            count = self.source.total_requests()
            stamp = (self.source.last.server_time_us / 1e6) if self.source.last else 0.0
            self.reads.append((stamp or (t0 + time.time()) / 2, count))  # the server's clock, else the midpoint
            self._first.set()
            if self._stop.wait(POLL_S):
                return

    def __enter__(self) -> InfoPoller:
        self._thread.start()
        self._first.wait(10.0)
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(timeout=5)

    def at(self, t: float) -> float:
        """The count at epoch time `t`, interpolated between the reads around it."""
        times, counts = zip(*self.reads, strict=True)
        return float(np.interp(t, times, counts))


def one_run(address: str, qps: float, seconds: float, procs: int, conns: int, seed: int, server_pid: int) -> dict:
    plan = poisson_plan(qps, seconds, seed=seed, protocol="redis")
    source = RedisInfoQps(address)
    srv0 = _proc_cpu_s(server_pid)
    with InfoPoller(source) as poller:
        time.sleep(0.3)  # reads before the start (interpolation needs a read on each side of it)
        result = run_load(plan, LoadSettings(address_of(address, "redis"), seconds, procs, conns, drain_s=1.0))
        time.sleep(0.3)
    srv1 = _proc_cpu_s(server_pid)
    s = result.summary()
    start = result.start_epoch_s
    full = int(seconds)
    scheduled = plan.per_second(full)
    served_by_second = [poller.at(start + k + 1) - poller.at(start + k) for k in range(full)]
    # the whole run: from the last read before the start to the last read (after every reply came back)
    served = poller.reads[-1][1] - max((c for t, c in poller.reads if t <= start), default=poller.reads[0][1])
    errors = [abs(got / want - 1) for got, want in zip(served_by_second, scheduled.tolist(), strict=True) if want]
    run_error = abs(served / len(plan) - 1)
    worst = max(errors) if errors else None
    return {
        "processes": procs,
        "connections_per_process": conns,
        "scheduled_qps": s["scheduled_qps"],
        "scheduled_requests": len(plan),
        "server_counted_requests": round(served),
        "server_run_error": round(run_error, 5),
        "server_worst_second_error": None if worst is None else round(worst, 5),
        "server_per_second": [round(x) for x in served_by_second],
        "scheduled_per_second": scheduled.tolist(),
        "generator_achieved_qps": s["achieved_qps"],
        "generator_worst_second_error": s["worst_second_achieved_error"],
        "send_lag_us": s["send_lag_us"],
        "latency_us": {k: v["us"] for k, v in (s["latency_us"] or {}).items()},
        "unanswered": s["unanswered"],
        "errors": s["errors"],
        "holds": run_error <= ACHIEVED_LIMIT and worst is not None and worst <= ACHIEVED_LIMIT,
        "redis_cpu_us_per_request": round((srv1 - srv0) / max(s["completed"], 1) * 1e6, 2),
        "info_reads": len(poller.reads),
    }


def main() -> int:
    ap = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    ap.add_argument("--seconds", type=float, default=4.0)
    ap.add_argument("--rates", default="2000,5000,10000,20000")
    ap.add_argument("--processes", type=int, default=1)
    ap.add_argument("--connections", type=int, default=4)
    args = ap.parse_args()
    load_before = os.getloadavg()
    server = start_redis()
    runs = []
    try:
        warm(address_of(server.address, "redis"), warm_requests(poisson_plan(1, 1, protocol="redis")), protocol="redis")
        for qps in (float(r) for r in args.rates.split(",")):
            run = one_run(
                server.address, qps, args.seconds, args.processes, args.connections, int(qps), server.process.pid
            )
            runs.append(run)
            print(json.dumps({k: v for k, v in run.items() if not k.endswith("per_second")}), file=sys.stderr)
        version = RedisInfoQps(server.address).snapshot().version
    finally:
        server.stop()
    held = [r for r in runs if r["holds"]]
    print(
        json.dumps(
            {
                "what": "tuner load --protocol redis: open-loop Poisson GETs (3 % SETs) against redis-server on "
                "loopback, the server's own INFO count against the schedule",
                "server": version,
                "loopback": True,
                "note": "loopback: no NIC between client and server; redis-server, the generator and other users' "
                "work share this machine's cores (see loadavg)",
                "target": {"achieved_within": ACHIEVED_LIMIT, "counted_by": "INFO total_commands_processed"},
                "highest_held_qps": max((r["scheduled_qps"] for r in held), default=None),
                "runs": runs,
                "machine": {
                    "cpus": os.cpu_count(),
                    "python": platform.python_version(),
                    "loadavg_before": load_before,
                    "loadavg_after": os.getloadavg(),
                },
                "command": "nice -n 10 .venv/bin/python bench/loadgen_redis.py " + " ".join(sys.argv[1:]),
            },
            indent=1,
        )
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
