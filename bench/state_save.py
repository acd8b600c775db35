"""Cost of one save of the daemon's state (`tuner.daemon.state.StateStore.save`) against the history it keeps;
prints JSON.

For each level of kept history (trials, with the decisions and holding windows a daemon keeps beside them) it
times `--saves` saves of two kinds, each on a store already holding that history:
  trial    -- one trial row appended and the retune's optimiser JSON replaced, as after every trial: a synthetic
              one of `--optimizer-kb` (the real Ax snapshot grows ~15 KB per trial of a retune, ~220 KB at
              trial 16 of 30), or a real one (`--optimizer-json`, e.g. a daemon's experiments/<retune>.json);
  holding  -- 20 holding windows appended, no retune in progress, as every 20 holding windows.
Bytes written per save are counted twice: by the files' growth (state.json is rewritten whole, journals
grow by what is appended) and, where the kernel reports it, by the process's own write() count
(/proc/self/io `wchar`, temp files included). It also times a load of that history.

The bench uses only `StateStore(dir)`, `.ensure()`, `.load()`, `.save(state)` and `DaemonState`, so the same
file measures another checkout's store with `--tree` (e.g. one before the journal: `git worktree add /tmp/old
<commit>`).

    nice -n 10 .venv/bin/python bench/state_save.py
    nice -n 10 .venv/bin/python bench/state_save.py --tree /tmp/old
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

TREE = Path(__file__).resolve().parents[1]
if __name__ == "__main__":  # `--tree` picks the source tree measured (default: this file's)
    _i = sys.argv.index("--tree") if "--tree" in sys.argv else -1
    TREE = Path(sys.argv[_i + 1]).resolve() if 0 <= _i < len(sys.argv) - 1 else TREE
sys.path.insert(0, str(TREE))

from actuators.host import PERCENTILES, Measurement, OperatingPoint  # noqa: E402 - after the path
from tuner.daemon import state as state_module  # noqa: E402
from tuner.daemon.plain import measurement_dict  # noqa: E402


def trial_row(i: int) -> dict[str, Any]:
    """A trial row as the daemon records it (~1.1 KB of JSON)."""
    lat = {p: 100.0 + p + i % 7 for p in PERCENTILES}
    m = Measurement(
        seconds=5.0,
        offered_qps=2e5 + i,
        achieved_qps=2e5 + i,
        requests=1_000_000,
        latency_us=lat,
        latency_ci_us={p: (v * 0.9, v * 1.1) for p, v in lat.items()},
        energy_j=150.0 + i % 11,
        point=OperatingPoint(2 + 8 * (i % 50), 1.2 + 0.1 * (i % 17)),
    )
    return {
        "retune_id": f"r{i // 30:06d}",
        "index": i % 30,
        "point": m.point,
        "qps": m.offered_qps,
        "status": "completed",
        "measurement": measurement_dict(m, 1.7e9 + i),
        "reward": -150.0,
        "error": None,
        "time": 1.7e9 + i,
        "objective": {"sla_us": 500.0, "percentile": 99.0, "reward": "constrained"},
        "host": "sim",
    }


def json_measurement(i: int) -> dict[str, Any]:
    """`trial_row(i)`'s measurement as JSON holds it (the point as [itr_us, dvfs_ghz])."""
    return state_module.row_json(trial_row(i))["measurement"]


def window_row(i: int) -> dict[str, Any]:
    md = trial_row(i)["measurement"]
    return {"point": md["point"], "qps": md["offered_qps"], "measurement": md, "time": md["time"]}


def decision_row(i: int) -> dict[str, Any]:
    return {
        "retune_id": f"r{i:06d}",
        "reason": "period",
        "point": [50, 2.0],
        "met_sla": True,
        "detail": "best measured point",
        "qps": 2e5,
        "time": 1.7e9 + i,
        "measurement": trial_row(i)["measurement"],
        "percentile": 99.0,
        "sla_us": 500.0,
        "reward": "constrained",
        "trials": 30,
        "history_trials": 0,
    }


def optimizer_blob(kb: int) -> str:
    """A JSON text of about `kb` KB shaped like an experiment snapshot (quoted keys to escape inside state.json)."""
    trials: list[dict[str, Any]] = []
    i = 0
    while len(json.dumps(trials)) < kb * 1024:
        trials.append({"index": i, "arm": {"itr_us": 2 + i, "dvfs_ghz": 2.0}, "data": json_measurement(i)})
        i += 1
    return json.dumps({"version": 1, "trials": trials})


def wchar() -> int | None:
    try:
        text = Path("/proc/self/io").read_text()
    except OSError:
        return None
    return next(int(line.split()[1]) for line in text.splitlines() if line.startswith("wchar:"))


def disk_bytes(d: Path) -> int:
    return sum(p.stat().st_size for p in d.rglob("*") if p.is_file())


def summary(ms: list[float], grown: list[int], written: list[int | None]) -> dict[str, Any]:
    known = [w for w in written if w is not None]
    return {
        "ms_median": round(statistics.median(ms), 3),
        "ms_p90": round(sorted(ms)[int(0.9 * (len(ms) - 1))], 3),
        "bytes_by_files_median": int(statistics.median(grown)),
        "bytes_by_write_calls_median": int(statistics.median(known)) if known else None,
    }


def measure(kept: int, saves: int, optimizer: str, root: Path) -> dict[str, Any]:
    d = root / f"kept-{kept}"
    store = state_module.StateStore(d)
    store.ensure()
    st = store.load()
    st.trials.extend(trial_row(i) for i in range(kept))
    st.decisions.extend(decision_row(i) for i in range(min(kept // 10, state_module.KEEP_DECISIONS)))
    st.windows.extend(window_row(i) for i in range(min(kept, state_module.KEEP_WINDOWS)))
    store.save(st)
    result: dict[str, Any] = {
        "kept_trials": len(st.trials),
        "kept_decisions": len(st.decisions),
        "kept_windows": len(st.windows),
    }
    n = kept
    for kind in ("trial", "holding"):
        ms: list[float] = []
        grown: list[int] = []
        written: list[int | None] = []
        for _ in range(saves):
            if kind == "trial":
                st.trials.append(trial_row(n))
                st.current_retune = {"id": "r999999", "reason": "period", "optimizer": optimizer}
                n += 1
            else:
                st.current_retune = None
                st.windows.extend(window_row(n + k) for k in range(20))
            before, w0 = disk_bytes(d), wchar()
            t0 = time.perf_counter()
            store.save(st)
            ms.append(1000 * (time.perf_counter() - t0))
            w1 = wchar()
            state_json = (d / "state.json").stat().st_size
            grown.append(max(disk_bytes(d) - before, 0) + state_json)  # state.json is written whole
            written.append(None if w0 is None or w1 is None else w1 - w0)
        result[f"{kind}_save"] = summary(ms, grown, written)
    t0 = time.perf_counter()
    state_module.StateStore(d).load()
    result["load_ms"] = round(1000 * (time.perf_counter() - t0), 1)
    result["disk_bytes"] = disk_bytes(d)
    store.release()
    return result


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--kept", default="0,1000,5000", help="kept trials per level, comma-separated")
    ap.add_argument("--saves", type=int, default=20, help="saves timed per kind and level")
    ap.add_argument("--optimizer-kb", type=int, default=220, help="size of the retune's optimiser JSON in a trial save")
    ap.add_argument(
        "--optimizer-json",
        type=Path,
        help="a real optimiser JSON to use instead (e.g. a daemon's experiments/<retune>.json)",
    )
    ap.add_argument(
        "--tree", type=Path, default=TREE, help="source tree whose StateStore is measured (default: this one)"
    )
    args = ap.parse_args(argv)
    optimizer = args.optimizer_json.read_text() if args.optimizer_json else optimizer_blob(args.optimizer_kb)
    with tempfile.TemporaryDirectory(prefix="tuner-state-bench-") as tmp:
        levels = [measure(int(k), args.saves, optimizer, Path(tmp)) for k in args.kept.split(",")]
    out = {
        "bench": "state_save",
        "state_module": state_module.__file__,
        "state_version": state_module.STATE_VERSION,
        "optimizer_json": str(args.optimizer_json) if args.optimizer_json else "synthetic",
        "optimizer_json_bytes": len(optimizer),
        "saves_per_kind": args.saves,
        "levels": levels,
        "note": "fsync-bound times; the disk and 2 cores are shared with other work: compare bytes, read times loosely",
    }
    print(json.dumps(out, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
