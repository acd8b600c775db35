"""Larger mutation fuzz of the config loader and the trace parser than the test suite runs; prints JSON.

Same engine and checks as `tests/system/test_fuzz_mutation.py` (`tests/fuzzkit.py`): a valid input (the example config,
the head of the bundled sample trace) is mutated and fed to `tuner daemon --check` / `tuner trace stats`; each
run must succeed or exit 2 with one line per problem naming the file, never a traceback. Reports, per target,
the examples and CLI runs, how many inputs were accepted / refused, the wall time, and the first
failing example (minimised by hypothesis) if any.

    .venv/bin/python bench/fuzz.py [--examples 3000] [--targets config,trace] [--seed 0]

Target `start` (`--targets start [--count 10000]`) checks that `tuner daemon --check` is the daemon's start-up
check: `--count` mutants of the example config, made to start under a temporary directory on the simulated host
(`tests.fuzzkit.check_then_start`), each through `--check` and then the daemon's own start-up in process (as
`tuner daemon` starts it, a light optimiser, no control loop). Every one --check accepts must start and answer
GetStatus; every one it refuses the start-up must refuse with status 78 and lines --check printed. Reports the
counts of outcomes (accepted-and-started, refused-with-78, and the mutants not started because they would write
or bind outside the temporary directory and loopback), tracebacks and mismatches, and the first few of each.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))


def run_target(name: str, examples: int, seed: int) -> dict:
    from hypothesis import HealthCheck, given, settings
    from hypothesis import seed as hseed

    from tests.fuzzkit import MUTATIONS, check_config, check_trace, config_base, mutate, trace_base

    base = config_base() if name == "config" else trace_base()
    outcomes: Counter = Counter()
    failure: dict | None = None

    def one(mutations: list) -> None:
        data = mutate(base, mutations)
        with tempfile.TemporaryDirectory() as tmp:
            runs = (
                [check_config(Path(tmp), data)]
                if name == "config"
                else [check_trace(Path(tmp), data, skip_bad=skip) for skip in (False, True)]
            )
            for code, bad in runs:
                outcomes["accepted" if code == 0 else "refused"] += 1
                if bad:
                    raise AssertionError(bad)

    test = settings(max_examples=examples, deadline=None, database=None, suppress_health_check=list(HealthCheck))(
        given(mutations=MUTATIONS)(one)
    )
    test = hseed(seed)(test)
    t0 = time.perf_counter()
    try:
        test()
    except AssertionError as exc:
        failure = {"problems": str(exc)[:2000]}
    elapsed = time.perf_counter() - t0
    return {
        "target": name,
        "examples": examples,
        "runs": sum(outcomes.values()),
        "accepted": outcomes["accepted"],
        "refused": outcomes["refused"],
        "wall_s": round(elapsed, 2),
        "ok": failure is None,
        "failure": failure,
    }


def run_start(count: int, seed: int) -> dict:
    """Target `start`: `count` mutants through `--check` and the real start-up; counts of outcomes."""
    import logging
    import traceback

    from hypothesis import HealthCheck, given, settings
    from hypothesis import seed as hseed

    from tests.fuzzkit import MUTATIONS, START_OUTCOMES, check_then_start, mutate, start_base

    logging.disable(logging.WARNING)  # the daemons' own start and stop lines; problems are counted below
    outcomes: Counter = Counter({name: 0 for name in START_OUTCOMES})
    firsts: dict[str, list] = {"tracebacks": [], "mismatches": []}

    def one(mutations: list) -> None:
        with tempfile.TemporaryDirectory() as tmp:
            data = mutate(start_base(Path(tmp)), mutations)
            try:
                outcome, bad = check_then_start(Path(tmp), data)
            except Exception:  # noqa: BLE001 - counted and shown, the run goes on
                outcomes["tracebacks"] += 1
                if len(firsts["tracebacks"]) < 5:
                    firsts["tracebacks"].append(
                        {"mutations": repr(mutations), "traceback": traceback.format_exc()[-2000:]}
                    )
                return
        outcomes[outcome] += 1
        if bad:
            outcomes["mismatches"] += 1
            if len(firsts["mismatches"]) < 5:
                firsts["mismatches"].append({"mutations": repr(mutations), "problems": bad[:5]})

    test = settings(max_examples=count, deadline=None, database=None, suppress_health_check=list(HealthCheck))(
        given(mutations=MUTATIONS)(one)
    )
    t0 = time.perf_counter()
    hseed(seed)(test)()
    elapsed = time.perf_counter() - t0
    runs = sum(outcomes[name] for name in START_OUTCOMES) + outcomes["tracebacks"]
    return {
        "target": "start",
        "count": count,
        "runs": runs,
        **{name: outcomes[name] for name in START_OUTCOMES},
        "tracebacks": outcomes["tracebacks"],
        "mismatches": outcomes["mismatches"],
        "wall_s": round(elapsed, 2),
        "per_minute": round(runs / elapsed * 60) if elapsed else 0,
        "ok": outcomes["tracebacks"] == 0 and outcomes["mismatches"] == 0,
        "first": firsts,
    }


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--examples", type=int, default=3000, help="hypothesis examples per target (default 3000)")
    ap.add_argument("--targets", default="config,trace", help="comma list of config, trace, start")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--count", type=int, default=10_000, help="target start: mutated configs (default 10000)")
    args = ap.parse_args()
    targets = [t for t in args.targets.split(",") if t]
    for t in targets:
        if t not in ("config", "trace", "start"):
            ap.error(f"--targets: unknown target {t!r}: expected config, trace, start")
    results = [
        run_start(args.count, args.seed) if t == "start" else run_target(t, args.examples, args.seed) for t in targets
    ]
    print(json.dumps({"results": results, "ok": all(r["ok"] for r in results)}, indent=2))
    return 0 if all(r["ok"] for r in results) else 1


if __name__ == "__main__":
    sys.exit(main())
