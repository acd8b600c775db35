"""Measured savings on the simulated host, as the daemon reports them; prints JSON.

The safe order an operator follows on a real host, on `sim`: observe mode for `--observe` windows (the OS's
own policy: adaptive ITR and the cpufreq governor, per load band, persisted), then tuning (the real Ax
optimiser in its worker process) on the same state directory until `--tuned` holding windows are measured.
Prints the daemon's own `tuner_energy_saved_ratio` with its 95 % CI, and the baseline/tuned power per band.

    .venv/bin/python bench/savings.py [--qps 150000] [--sla-us 500] [--seed 1] [--observe 30] [--tuned 30]

Windows are `--window-s` long in simulated time and paced to the wall clock (so keep them short here).
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

CONFIG = """
[host]
spec = "sim"
mode = "{mode}"
[host.options]
seed = {seed}
qps = {qps}
[policy]
sla_us = {sla_us}
percentile = 99
[tuning]
trials = {trials}
sobol_trials = 4
window_s = {window_s}
settle_s = 0
seed = {seed}
[state]
dir = "state"
[grpc]
listen = "unix://{tmp}/t.sock"
[metrics]
listen = "off"
"""


def run(tmp: Path, mode: str, args: argparse.Namespace, until) -> dict:
    import threading

    from tuner.config import load_config
    from tuner.daemon.loop import Daemon

    cfg = tmp / f"{mode}.toml"
    cfg.write_text(CONFIG.format(mode=mode, tmp=tmp, **vars(args)))
    d = Daemon(load_config(cfg), serve=False)
    d.start()
    t = threading.Thread(target=d.run, daemon=True)
    t0 = time.monotonic()
    t.start()
    while not until(d):
        if time.monotonic() - t0 > args.timeout_s:
            break
        time.sleep(0.2)
    d.request_stop()
    t.join(60)
    return {"daemon": d, "seconds": time.monotonic() - t0}


def bands(stats) -> dict:
    return {
        stats.bands.label(k): {
            "windows": b.power.n,
            "power_w": round(b.power.mean, 2) if b.power.n else None,
            "p99_us": round(b.latency[99.0].mean, 1) if 99.0 in b.latency else None,
        }
        for k, b in sorted(stats.data.items())
    }


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--qps", type=float, default=150_000.0)
    ap.add_argument("--sla-us", type=float, default=500.0)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--observe", type=int, default=30, help="observe-mode windows")
    ap.add_argument("--tuned", type=int, default=30, help="holding windows at the tuned point")
    ap.add_argument("--trials", type=int, default=12)
    ap.add_argument("--window-s", type=float, default=0.2)
    ap.add_argument("--timeout-s", type=float, default=900.0)
    args = ap.parse_args()
    from tuner.daemon.plain import point_list

    with tempfile.TemporaryDirectory() as name:
        tmp = Path(name)
        obs = run(
            tmp, "observe", args, lambda d: sum(b.power.n for b in d.observer.baseline.data.values()) >= args.observe
        )
        tun = run(tmp, "tune", args, lambda d: sum(b.power.n for b in d.observer.tuned.data.values()) >= args.tuned)
        d = tun["daemon"]
        s = d.observer.savings
        held = (d.state.held or {}).get("point")
        print(
            json.dumps(
                {
                    "host": "sim",
                    "qps": args.qps,
                    "sla_us": args.sla_us,
                    "seed": args.seed,
                    "held_point": point_list(held),
                    "trials": int(d.state.counters.get("trials", 0)),
                    "energy_saved_ratio": None if s is None else round(s.ratio, 4),
                    "ci95": None if s is None else [round(s.lower, 4), round(s.upper, 4)],
                    "bands_compared": None if s is None else list(s.bands),
                    "baseline": bands(obs["daemon"].observer.baseline),
                    "tuned": bands(d.observer.tuned),
                    "wall_s": {"observe": round(obs["seconds"], 1), "tune": round(tun["seconds"], 1)},
                },
                indent=1,
            )
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
