"""Benchmark: how far a trial's reading of the tail under-states the long-run tail near the SLA (simulated host).

    python bench/margin.py --reps 4                 # 99 % < 500 µs and < 200 µs, p90/p99/p99.9, 5 loads (docs)
    python bench/margin.py --quick                  # 2 loads, 4 repetitions
    python bench/margin.py --trials out/trials.jsonl --sla-us 500 --percentile 99   # a replay's own trials

What the final choice's safety margin has to cover: a point held for an hour is judged by its long-run
percentile (what the hour converges to, `SimHost.expected()`), but chosen from a trial's few-second window
(adaptive, as the warm tuner measures it). Per (SLA, percentile, load) this takes the points of the tuner's ITR
grid (16 µs) whose noise-free percentile lies in [0.85, 1.10] x SLA at three frequencies, measures each `--reps`
times as a trial (1 s settle, then `measure_window` with the warm preset's policy), and reports per reading:

* `h_pct`: the trial's 95 % CI half-width (upper end - estimate) in % of the estimate;
* `under_pct`: (expected - estimate) / estimate in % -- how much the reading under-states the long run;
* `z`: (expected - estimate) / (upper end - estimate) -- the under-statement in units of the CI half-width
  (> 1: the long run lies above the trial's CI);
* and what each candidate rule for the final choice would have let through: `over_sla` = readings a rule
  accepts (meets its limit) whose long-run percentile is above the SLA, out of those it accepts, and the mean
  long-run percentile of what it accepts (in % of the SLA: the closer to 100 the less energy left on the table).

`--fixed-s 20` measures the cold tuner's trials instead (one fixed 20 s window each, no adaptive sizing).
`--trials FILE` instead reads a replay's trial records (`tuner.trial/v1` JSON lines, `OUT/trials.jsonl`) and
reports the same per-reading quantities for the points the tuner actually measured (selection included).
Noise-free values come from the simulator's own `expected()`; times are the simulator's, not wall time.
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import sys
from dataclasses import replace
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from actuators.host import OperatingPoint, apply_point
from actuators.sim.host import SimHost
from tuner.optimize.records import STATUS_COMPLETED
from tuner.optimize.windowing import WindowPolicy, measure_window
from tuner.replay.run import preset_settings
from tuner.store.history import read_trials

LOADS = (100_000, 250_000, 400_000, 500_000, 600_000)
FREQS = (1.4, 2.0, 2.6)
#: the points measured: noise-free percentile within this band of the SLA (over it too: a rule must refuse those)
BAND = (0.85, 1.10)
#: candidate final-choice rules: name -> (extra half-widths k, margin % of the SLA): accept when
#: estimate + (1 + k) h <= SLA x (1 - margin)
RULES: dict[str, tuple[float, float]] = {
    "ci, 5 % margin (today)": (0.0, 5.0),
    "ci, no margin": (0.0, 0.0),
    "ci, 1 % margin": (0.0, 1.0),
    "ci x2, 1 % margin": (1.0, 1.0),
    "ci x2, 2 % margin": (1.0, 2.0),
    "ci x3, 1 % margin": (2.0, 1.0),
}


def _reading(m: Any, pct: float) -> tuple[float, float]:
    est = float(m.percentile(pct))
    ci = m.latency_ci_us.get(pct)
    hi = max(float(ci[1]), est) if ci is not None else est
    return est, hi


def _row(est: float, hi: float, exp: float, sla: float) -> dict[str, float]:
    h = hi - est
    return {
        "est": est,
        "hi": hi,
        "exp": exp,
        "h_pct": 100 * h / est,
        "under_pct": 100 * (exp - est) / est,
        "z": (exp - est) / h if h > 0 else math.inf if exp > est else 0.0,
        "sla": sla,
    }


def _summary(rows: list[dict[str, float]]) -> dict[str, Any]:
    if not rows:
        return {"readings": 0}
    q = lambda xs, p: statistics.quantiles(xs, n=100, method="inclusive")[p - 1] if len(xs) > 1 else xs[0]
    under = [r["under_pct"] for r in rows]
    zs = [r["z"] for r in rows if math.isfinite(r["z"])]
    h = [r["h_pct"] for r in rows]
    out: dict[str, Any] = {
        "readings": len(rows),
        "h_pct_median": round(statistics.median(h), 2),
        "h_pct_p90": round(q(h, 90), 2),
        "under_pct_median": round(statistics.median(under), 2),
        "under_pct_p95": round(q(under, 95), 2),
        "under_pct_max": round(max(under), 2),
        "z_p95": round(q(zs, 95), 2) if zs else None,
        "z_max": round(max(zs), 2) if zs else None,
        "long_run_above_ci": sum(1 for r in rows if r["exp"] > r["hi"]),
        "rules": {},
    }
    for name, (k, margin) in RULES.items():
        ok = [r for r in rows if r["est"] + (1 + k) * (r["hi"] - r["est"]) <= r["sla"] * (1 - margin / 100)]
        out["rules"][name] = {
            "accepted": len(ok),
            "over_sla": sum(1 for r in ok if r["exp"] > r["sla"]),
            "long_run_pct_of_sla_mean": round(100 * statistics.fmean(r["exp"] / r["sla"] for r in ok), 2)
            if ok
            else None,
            "long_run_pct_of_sla_max": round(100 * max(r["exp"] / r["sla"] for r in ok), 2) if ok else None,
        }
    return out


def sweep(
    slas: list[float], pcts: list[float], loads: list[int], reps: int, seed: int, fixed_s: float | None = None
) -> dict[str, Any]:
    settings = preset_settings("warm")
    if fixed_s is not None:  # the cold tuner's trials: one fixed window each
        settings = replace(settings, window_mode="fixed", window_s=fixed_s)
    host = SimHost(seed=seed)
    itrs = [v for v in host.knobs().itr_us if (v - host.knobs().itr_us[0]) % 16 == 0]
    results: dict[str, Any] = {}
    for sla in slas:
        for pct in pcts:
            policy = WindowPolicy.from_settings(
                settings, pct, stop_above_us=sla * (1 - settings.sla_margin_pct / 100), abort_above_us=sla
            )
            key = f"p{pct:g} < {sla:g} us"
            per_load: dict[str, Any] = {}
            every: list[dict[str, float]] = []
            for qps in loads:
                host.set_offered_qps(qps)
                pts = [OperatingPoint(i, f) for f in FREQS for i in itrs]
                exp = host.expected(pts, qps)
                near = [
                    (p, e.latency_us[pct])
                    for p, e in zip(pts, exp)
                    if BAND[0] * sla <= e.latency_us[pct] <= BAND[1] * sla
                ]
                rows: list[dict[str, float]] = []
                for p, e in near:
                    for _ in range(reps):
                        apply_point(host, p)
                        host.measure(settings.settle_s)
                        m = measure_window(host, policy)
                        est, hi = _reading(m, pct)
                        rows.append(_row(est, hi, e, sla) | {"seconds": m.seconds})
                s = _summary(rows)
                s["points"] = len(near)
                s["window_s_mean"] = round(statistics.fmean(r["seconds"] for r in rows), 2) if rows else None
                per_load[str(qps)] = s
                every += rows
            results[key] = {"all": _summary(every), "by_load": per_load}
    return results


def from_trials(path: Path, sla: float, pct: float, seed: int) -> dict[str, Any]:
    host = SimHost(seed=seed)
    rows = []
    for r in read_trials(path):
        if r.status != STATUS_COMPLETED or r.measurement is None or not math.isfinite(r.qps):
            continue
        (e,) = host.expected([r.point], r.qps)
        exp = e.latency_us[pct]
        if exp > 2 * sla:
            continue
        est, hi = _reading(r.measurement, pct)
        rows.append(_row(est, hi, exp, sla))
    return {"trials": str(path), "sla_us": sla, "percentile": pct, "all": _summary(rows)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--reps", type=int, default=8)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--sla-us", type=float, action="append")
    ap.add_argument("--percentile", type=float, action="append")
    ap.add_argument("--loads", default=None, help="comma list of QPS")
    ap.add_argument("--trials", type=Path, help="a replay's trials.jsonl instead of the sweep")
    ap.add_argument("--fixed-s", type=float, help="fixed trial windows of this many seconds (the cold tuner's: 20)")
    a = ap.parse_args()
    if a.trials:
        out = from_trials(a.trials, (a.sla_us or [500.0])[0], (a.percentile or [99.0])[0], a.seed)
    else:
        loads = [int(x) for x in a.loads.split(",")] if a.loads else list(LOADS)
        reps = a.reps
        if a.quick:
            loads, reps = [250_000, 500_000], 4
        out = sweep(a.sla_us or [500.0, 200.0], a.percentile or [90.0, 99.0, 99.9], loads, reps, a.seed, a.fixed_s)
    print(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()
