"""Soak the replay: days of the bundled trace in fine windows, every policy, in one process; prints JSON.

Runs `tuner replay` as a user would (`--days 3 --bin 300`: 864 five-minute windows, all policies, on the
simulated host) through the CLI's own code path, with the host factory wrapped only to keep a handle on the
hosts it builds, and reports the wall time, the peak RSS of the process, the hit rate of the simulator's
long-run cache (`actuators.sim.cells.ExpectedCache`, byte-bounded) and of the CI-rank memo, the per-policy
energies (the tuner's windows held from the model, its ratio to the hourly oracle: with 5-minute windows the
replay's oracle is the hourly one, computed once per hour and held), the CPU time, and the tracebacks written to
stderr.  A soak passes when the replay finishes with no failed window and no traceback.

    nice -n 10 .venv/bin/python bench/soak_replay.py [--days 3] [--bin 300] [--json-out soak-replay.json]

`--hours` shortens each day (a quick check of the bench itself).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import resource
import sys
import tempfile
import time
import traceback
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))


class _CountingTee:
    """stderr that passes everything through and counts the Python tracebacks written to it."""

    def __init__(self, out: Any) -> None:
        self.out, self.tracebacks = out, 0

    def write(self, text: str) -> int:
        self.tracebacks += text.count("Traceback (most recent call last)")
        return self.out.write(text)

    def flush(self) -> None:
        self.out.flush()


class _Recorder:
    """The `sim` host factory, keeping every host it builds (for their cache counters)."""

    hosts: list[Any] = []

    @classmethod
    def make(cls, **options: Any) -> Any:
        from tuner.hosts import make_sim

        host = make_sim(**options)
        cls.hosts.append(host)
        return host


sim_host = _Recorder.make  # `--host bench.soak_replay:sim_host`


def parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--days", type=int, default=3)
    ap.add_argument("--bin", type=float, default=300.0, help="window length, s (default 300: 5 minutes)")
    ap.add_argument("--hours", type=float, default=None, help="hours of each day (default: all 24)")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--out", type=Path, default=None, help="replay output directory (default: a temp dir)")
    ap.add_argument("--json-out", type=Path, default=None, help="also write the JSON here (replaced atomically)")
    return ap


def main() -> int:
    args = parser().parse_args()

    # the module as `make_host` imports it (by name), so the recorder seen here is the one that records
    import bench.soak_replay as me
    from actuators.abilities import ExpectedCacheShared
    from actuators.latency import dist
    from core.fsutil import atomic_write
    from tuner.cli.app import build_parser

    out_dir = args.out or Path(tempfile.mkdtemp(prefix="tuner-soak-replay-"))
    argv = ["replay", "--host", "bench.soak_replay:sim_host", "--days", str(args.days), "--bin", f"{args.bin:g}"]
    argv += ["--seed", str(args.seed), "--quiet", "--out", str(out_dir)]
    if args.hours is not None:
        argv += ["--hours", f"{args.hours:g}"]
    ns = build_parser().parse_args(argv)
    t0 = time.perf_counter()
    cpu0 = time.process_time()
    error = None
    tee = _CountingTee(sys.stderr)
    try:
        with contextlib.redirect_stderr(tee):
            rc = ns.func(ns)
    except Exception as exc:  # noqa: BLE001 - the soak reports any failure instead of dying on it
        rc, error = None, f"{type(exc).__name__}: {exc}"
        traceback.print_exc()
        tee.tracebacks += 1
    wall = time.perf_counter() - t0
    cpu = time.process_time() - cpu0
    summary_path = out_dir / "summary.json"
    summary = json.loads(summary_path.read_text()) if summary_path.exists() else {}
    caches: dict[str, dict] = {}
    seen: set[int] = set()
    for host in me._Recorder.hosts:
        if not isinstance(host, ExpectedCacheShared) or id(host.expected_cache) in seen:
            continue
        cache = host.expected_cache
        seen.add(id(cache))
        for st in cache.stats():
            caches[f"{st.name}#{len(seen)}"] = st.as_dict()
    caches["latency.ci_ranks"] = dist.RANKS_CACHE.stats().as_dict()
    result = report(args, argv, summary, rc, error, wall, cpu, tee.tracebacks, caches, out_dir)
    text = json.dumps(result, indent=1)
    if args.json_out is not None:
        atomic_write(args.json_out, (text + "\n").encode(), mode=0o644)
    print(text)
    return 0 if result["pass"] else 1


def report(
    args: argparse.Namespace,
    argv: list[str],
    summary: dict,
    rc: int | None,
    error: str | None,
    wall: float,
    cpu: float,
    tracebacks: int,
    caches: dict[str, dict],
    out_dir: Path,
) -> dict[str, Any]:
    """The soak's JSON: the replay's outcome, its cost, the caches' counters, each policy's summary, a verdict."""
    import bench.soak_replay as me

    policies = summary.get("policies", {})
    result = {
        "bench": "soak_replay",
        "command": "tuner " + " ".join(argv),
        "windows": summary.get("windows"),
        "days": args.days,
        "bin_s": args.bin,
        "exit_code": rc,
        "error": error,
        "wall_s": round(wall, 1),
        "cpu_s": round(cpu, 1),
        "tracebacks": tracebacks,
        "peak_rss_mb": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1),
        "hosts_built": len(me._Recorder.hosts),
        "caches": caches,
        "policies": {
            name: {
                "energy_j": p.get("energy_j"),
                "failed_windows": p.get("failed_windows"),
                "sla_violating_windows": p.get("sla_violating_windows"),
                "trials": p.get("trials"),
                "held_windows": p.get("held_windows"),
                "ratio_to_hourly_oracle": p.get("ratio_to_hourly_oracle"),
                "wall_s": None if p.get("wall_s") is None else round(p["wall_s"], 1),
            }
            for name, p in policies.items()
        },
        "oracle_comparison": summary.get("oracle_comparison"),
        "out": str(out_dir),
        "machine": "shared 2-core VM (8 engineers at work): timings are indicative",
    }
    result["pass"] = bool(
        error is None
        and rc == 0
        and not tracebacks
        and policies
        and all(not p.get("failed_windows") for p in policies.values())
    )
    return result


if __name__ == "__main__":
    sys.exit(main())
