"""End to end on this machine (JSON on stdout): real memcached, `tuner load` replaying the bundled trace, and the
daemon in observe mode on the real host and in tuning mode on the fake-hardware kit.

Targets: the daemon's offered QPS within 2 % of the generators' (pooled over each steady load phase; per window
reported too), a +50 % load step triggers a retune, 0 tracebacks in any log, 0 trials recorded in observe mode,
SIGTERM restores the kit's knobs. Also reported: whether the prober's p99 CI and the generators' p99 CI over the
same daemon window overlap (iid order-statistic CIs, per 2 s window: a naive comparison), and `agreement`: the
standalone prober and the generator run together (`tests/agreement_harness.py`), compared over the same seconds
with block-bootstrap CIs for latency (from the scheduled send), response time (from the actual send) and
service time (requests sent alone, send to the kernel's receive stamp) -- see docs/load-generator.md.

Loopback only (memcached from Debian on 127.0.0.1, a free port): no NIC between client and server, so ITR has no
effect on what is measured. Timings come from a shared 2-core machine. About 2 x (30..60) s.

    nice -n 10 .venv/bin/python bench/e2e.py [--optimizer ax|light] [--qps 2000]
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT), str(ROOT / "tests")]

from agreement_harness import AgreementConfig, run_agreement  # noqa: E402
from e2e_harness import E2EConfig, run_e2e  # noqa: E402

MEASURES = ("latency", "response", "service", "send_lag")


def agreement(runs: int, seconds: float, qps: float, tmp: Path) -> dict:
    """`runs` prober-vs-generator runs: per measure, the share of runs whose p99 CIs overlap (block bootstrap and
    iid), whose paired difference CI holds 0, and each run's numbers."""
    rows = [
        run_agreement(tmp / f"agree{i}", AgreementConfig(qps=qps, seconds=seconds, resamples=2000)) for i in range(runs)
    ]
    out: dict = {"runs": runs, "seconds": seconds, "generator_qps": qps, "prober_hz": 500.0}
    for m in MEASURES:
        failed = [r[m]["error"] for r in rows if "error" in r[m]]
        rows_m = [r for r in rows if "error" not in r[m]]
        if failed:
            out[m + "_not_compared"] = failed
        n_m = max(len(rows_m), 1)
        out[m] = {
            "compared_runs": len(rows_m),
            "block_cis_overlap_share": sum(r[m]["cis_overlap"] for r in rows_m) / n_m,
            "iid_cis_overlap_share": sum(r[m]["iid_cis_overlap"] for r in rows_m) / n_m,
            "paired_diff_ci_holds_zero_share": sum(r[m]["diff_ci_contains_zero"] for r in rows_m) / n_m,
            "per_run": [
                {
                    "generator_p99_us": r[m]["generator"]["us"],
                    "generator_ci_us": r[m]["generator"]["ci_us"],
                    "generator_iid_ci_us": r[m]["generator"]["iid_ci_us"],
                    "generator_samples": r[m]["generator"]["samples"],
                    "generator_effective_samples": r[m]["generator"]["effective_samples"],
                    "prober_p99_us": r[m]["prober"]["us"],
                    "prober_ci_us": r[m]["prober"]["ci_us"],
                    "prober_iid_ci_us": r[m]["prober"]["iid_ci_us"],
                    "prober_samples": r[m]["prober"]["samples"],
                    "prober_effective_samples": r[m]["prober"]["effective_samples"],
                    "diff_ci_us": r[m]["diff_ci_us"],
                    "lag1_autocorrelation": r[m]["lag1_autocorrelation"],
                    "loadavg": r["loadavg"],
                }
                for r in rows_m
            ],
        }
    return out


def _brief(r: dict) -> dict:
    windows = r.pop("windows")
    overlaps = r.get("p99_cis_overlap") or []
    return {
        **r,
        "per_window": [
            {
                k: w[k]
                for k in (
                    "kind",
                    "qps",
                    "gen_qps",
                    "qps_error",
                    "straddles_step",
                    "p99",
                    "p99_ci",
                    "gen_p99",
                    "gen_p99_ci",
                )
            }
            for w in windows
        ],
        "p99_cis_overlap_share": (sum(overlaps) / len(overlaps)) if overlaps else None,
    }


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--optimizer", choices=("ax", "light"), default="ax")
    ap.add_argument("--qps", type=float, default=2000.0)
    ap.add_argument("--window", type=float, default=2.0)
    ap.add_argument("--agreement-runs", type=int, default=4, help="prober-vs-generator runs (0: skip)")
    ap.add_argument("--agreement-seconds", type=float, default=20.0)
    args = ap.parse_args()
    out: dict = {
        "what": "end to end on this machine (loopback: no NIC between client and server)",
        "loadavg_before": os.getloadavg(),
    }
    with tempfile.TemporaryDirectory(prefix="tuner-e2e-") as tmp:
        for mode in ("observe", "tune"):
            cfg = E2EConfig(
                qps=args.qps,
                mode=mode,
                optimizer=args.optimizer,
                window_s=args.window,
                hold_windows=3,
                timeout_s=180.0 if args.optimizer == "ax" else 60.0,
            )
            t0 = time.monotonic()
            r = _brief(run_e2e(Path(tmp) / mode, cfg))
            r["wall_s"] = round(time.monotonic() - t0, 1)
            out[mode] = r
        if args.agreement_runs > 0:
            out["agreement"] = agreement(args.agreement_runs, args.agreement_seconds, args.qps, Path(tmp))
    obs, tune = out["observe"], out["tune"]
    out["targets"] = {
        "offered_qps_error_le_2pct": all((x["qps_error_phase_max"] or 1) <= 0.02 for x in (obs, tune)),
        "zero_tracebacks": sum(obs["tracebacks"].values()) + sum(tune["tracebacks"].values()) == 0,
        "zero_trials_in_observe": obs["trials_recorded"] == 0,
        "load_step_retuned": tune["load_retune_after_step"],
        "sigterm_restores_knobs": tune["knobs_restored"],
    }
    if "agreement" in out:
        # like for like (service time, same seconds, CIs that allow for autocorrelation): every run's CIs overlap
        out["targets"]["prober_generator_service_p99_cis_overlap"] = (
            out["agreement"]["service"]["block_cis_overlap_share"] == 1.0
        )
    out["loadavg_after"] = os.getloadavg()
    out["note"] = "loopback; shared 2-core machine (loadavg above): latency numbers include other users' load"
    out["command"] = "nice -n 10 .venv/bin/python bench/e2e.py " + " ".join(sys.argv[1:])
    print(json.dumps(out, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
