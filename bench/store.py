"""Trial store throughput and the class warm-start query at 100,000 stored trials; prints JSON.

For each store (a SQLite file in a temp dir; PostgreSQL with `--pg URL`, or `--pg auto` for a throwaway
cluster started like the tests' `tests/pg_server.py`):
  * writes/s of durable adds of one trial each (one transaction per trial: the worst case) and in batches
    of 100 (a retune's trials arrive together);
    (wall time, plus the client's CPU time: on a shared machine the wall time also counts waiting for a core;
    the load average is recorded);
  * filled to `--trials` (default 100,000) trials over `--hosts` hosts in `--classes` classes, the
    warm-start read a retune does -- `store.warm_start(host, class, limit)`: this host's newest `limit`
    trials and its class's, parsed into entries -- median and max over 20 hosts, at each `--limits`.

Targets: >= 1,000 trial writes/s, warm-start query <= 50 ms at 100,000 stored trials.

    .venv/bin/python bench/store.py [--trials 100000] [--pg auto] [--limits 100,500,2000]
"""

from __future__ import annotations

import argparse
import json
import os
import random
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

TARGETS = {"writes_per_s": 1000.0, "warm_start_query_s": 0.050}


def _entries(n: int, hosts: int, classes: int, seed: int = 0) -> list:
    from actuators.host import PERCENTILES, Measurement, OperatingPoint
    from tuner.optimize.optimizer import Objective, TrialRecord
    from tuner.store.history import HistoryEntry

    rng = random.Random(seed)
    obj = Objective()
    out = []
    for i in range(n):
        h = rng.randrange(hosts)
        q = rng.choice([1e5, 2e5, 3e5, 4e5, 5e5, 6e5]) * (1 + rng.uniform(-0.05, 0.05))
        p = OperatingPoint(rng.randrange(2, 1024, 2), rng.choice([1.2, 1.6, 2.0, 2.4, 2.9]))
        lat = {pc: rng.uniform(50, 900) * (0.5 + pc / 200) for pc in PERCENTILES}
        m = Measurement(
            seconds=10.0,
            offered_qps=q,
            achieved_qps=q,
            requests=int(q * 10),
            latency_us=lat,
            latency_ci_us={pc: (v * 0.95, v * 1.05) for pc, v in lat.items()},
            energy_j=rng.uniform(300, 1200) + i * 1e-6,
            point=p,
        )
        rec = TrialRecord(i, p, q, "completed", m, m.power_w, None)
        out.append(HistoryEntry(rec, f"host{h:03d}", 1.7e9 + i, obj, f"class{h % classes}"))
    return out


def bench_store(open_fn: Any, entries: list, limits: list[int], hosts: int, classes: int) -> dict:
    res: dict = {}
    s = open_fn()
    res["load_average_at_start"] = [round(x, 1) for x in os.getloadavg()]
    single = entries[:1000]
    t0 = time.perf_counter()
    for e in single:
        s.add([e])
    res["writes_per_s_one_per_transaction"] = round(len(single) / (time.perf_counter() - t0))
    batch = entries[1000:11000]
    t0 = time.perf_counter()
    for i in range(0, len(batch), 100):
        s.add(batch[i : i + 100])
    res["writes_per_s_batches_of_100"] = round(len(batch) / (time.perf_counter() - t0))
    rest = entries[11000:]
    t0 = time.perf_counter()
    for i in range(0, len(rest), 5000):
        s.add(rest[i : i + 5000])
    res["fill_s"] = round(time.perf_counter() - t0, 1)
    res["stored_trials"] = s.count()
    rng = random.Random(1)
    for limit in limits:
        times, cpu, sizes = [], [], []
        for _ in range(20):
            h = rng.randrange(hosts)
            t0, c0 = time.perf_counter(), time.process_time()
            own, cls = s.warm_start(f"host{h:03d}", f"class{h % classes}", limit)
            times.append(time.perf_counter() - t0)
            cpu.append(time.process_time() - c0)
            sizes.append(len(own) + len(cls))
        res[f"warm_start_limit_{limit}"] = {
            "median_s": round(statistics.median(times), 4),
            "max_s": round(max(times), 4),
            "median_client_cpu_s": round(statistics.median(cpu), 4),
            "trials_returned_median": statistics.median(sizes),
        }
    res["load_average_at_end"] = [round(x, 1) for x in os.getloadavg()]
    s.close()
    return res


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--trials", type=int, default=100_000)
    ap.add_argument("--hosts", type=int, default=100)
    ap.add_argument("--classes", type=int, default=5)
    ap.add_argument("--limits", default="100,500,2000")
    ap.add_argument("--pg", default=None, help="postgresql:// URL of an empty database, or 'auto'")
    ap.add_argument("--no-sqlite", action="store_true")
    args = ap.parse_args(argv)
    limits = [int(x) for x in args.limits.split(",")]

    from tuner.store.postgres import PostgresStore
    from tuner.store.sqlite import SqliteStore

    t0 = time.perf_counter()
    entries = _entries(args.trials, args.hosts, args.classes)
    out: dict = {
        "command": " ".join([Path(sys.argv[0]).name, *sys.argv[1:]]),
        "note": "timings from a shared 2-core machine; SQLite synchronous=FULL (every add fsynced)",
        "trials": args.trials,
        "hosts": args.hosts,
        "classes": args.classes,
        "generate_s": round(time.perf_counter() - t0, 1),
        "targets": TARGETS,
        "stores": {},
    }
    server = None
    with tempfile.TemporaryDirectory() as tmp:
        if not args.no_sqlite:
            out["stores"]["sqlite"] = bench_store(
                lambda: SqliteStore(Path(tmp) / "trials.sqlite"), entries, limits, args.hosts, args.classes
            )
            print(json.dumps(out["stores"]["sqlite"]), file=sys.stderr, flush=True)
        if args.pg:
            url = args.pg
            if url == "auto":
                from tests.pg_server import start_pg

                server = start_pg()
                url = server.create_db()
            try:
                out["stores"]["postgresql"] = bench_store(
                    lambda: PostgresStore(url, Path(tmp) / "spool.sqlite"), entries, limits, args.hosts, args.classes
                )
            finally:
                if server is not None:
                    server.stop("immediate")
                    import shutil

                    shutil.rmtree(server.root, ignore_errors=True)
    print(json.dumps(out, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
