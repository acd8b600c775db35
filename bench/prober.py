"""Measure what the built-in prober sees on this machine (JSON on stdout); backs the numbers in docs/real-hosts.md.

Starts the Debian memcached on 127.0.0.1 (a free port), then measures, each for --seconds:

* `closed_loop_back_to_back` / `closed_loop_after_idle_5ms`: one client, gets back to back vs. after a 5 ms
  idle gap -- the difference is CPU wake-up (idle-state exit, vCPU halt) on client and server;
* `prober_<isolation>_<main>`: the prober at --rate-hz in a child interpreter vs. a thread, with this process's
  main thread idle vs. spinning in Python (holding the GIL, as a tuner fitting a model would);
* `prober_process_idle_<5x rate>Hz`: a higher probe rate (shorter idle gaps).

Loopback only, bounded: about 8 x --seconds in total.

    .venv/bin/python bench/prober.py [--seconds 2] [--rate-hz 200]
"""

from __future__ import annotations

import argparse
import json
import platform
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from actuators.latency.memcached import MemcachedClient  # noqa: E402
from actuators.latency.prober import Prober, read_client_settings  # noqa: E402
from tests.memcached_server import start_memcached  # noqa: E402


def _pcts(samples_ns: list[int]) -> dict[str, float]:
    xs = sorted(samples_ns)
    pick = lambda q: xs[min(int(q * len(xs)), len(xs) - 1)] / 1e3
    return {"n": len(xs), "p50_us": round(pick(0.5), 1), "p99_us": round(pick(0.99), 1)}


def _closed_loop(address: str, n: int, gap_s: float) -> dict[str, float]:
    with MemcachedClient(address) as c:
        c.set("bench", b"x" * 64)
        out = []
        for _ in range(n):
            if gap_s:
                time.sleep(gap_s)  # the idle gap being measured
            t = time.perf_counter_ns()
            c.get("bench")
            out.append(time.perf_counter_ns() - t)
    return _pcts(out)


def _window(prober: Prober, seconds: float, busy_main: bool) -> dict[str, object]:
    prober.begin()
    end = time.monotonic() + seconds
    if busy_main:
        x = 0
        while time.monotonic() < end:  # pure-Python work: holds the GIL
            x += 1
    else:
        time.sleep(seconds)
    w = prober.end()
    return {
        "n": w.requests,
        "intended": w.intended,
        **{f"p{p:g}_us": round(w.latency_us[p], 1) for p in (50.0, 99.0)},
        "p99_ci_us": [round(v, 1) for v in w.latency_ci_us[99.0]],
        "send_lag_p99_us": round(w.send_lag_p99_us, 1),
    }


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seconds", type=float, default=2.0)
    ap.add_argument("--rate-hz", type=float, default=200.0)
    args = ap.parse_args()
    server = start_memcached()
    result: dict[str, object] = {
        "machine": platform.platform(),
        "python": platform.python_version(),
        "client_settings": read_client_settings("/").lines(),
        "rate_hz": args.rate_hz,
        "window_s": args.seconds,
    }
    try:
        n = int(args.seconds * args.rate_hz)
        result["closed_loop_back_to_back"] = _closed_loop(server.address, n, 0.0)
        result["closed_loop_after_idle_5ms"] = _closed_loop(server.address, n, 0.005)
        for isolation in ("process", "thread"):
            prober = Prober(target=server.address, rate_hz=args.rate_hz, isolation=isolation, settings_root=None)
            try:
                for busy in (False, True):
                    key = f"prober_{isolation}_{'busy' if busy else 'idle'}_main"
                    result[key] = _window(prober, args.seconds, busy)
            finally:
                prober.close()
        fast = Prober(target=server.address, rate_hz=args.rate_hz * 5, settings_root=None)
        try:
            result[f"prober_process_idle_{args.rate_hz * 5:g}Hz"] = _window(fast, args.seconds, False)
        finally:
            fast.close()
    finally:
        server.stop()
    json.dump(result, sys.stdout, indent=1)
    print()
    return 0


if __name__ == "__main__":
    sys.exit(main())
