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

Target `rpc` (`--targets rpc [--count 10000] [--rpcs GetStatus,...]`) starts `tuner daemon` on the simulated
host (a subprocess, its gRPC on a unix socket), waits for its first decision, and sends `--count` requests per RPC drawn by hypothesis from
`tests/rpckit.py` (the strategies of `tests/tuner/daemon/test_service_inputs.py`) with drawn extra metadata;
each call must get an allowed status code within its deadline, an answer without NaN or infinity, and leave
the policy as it was (an accepted `SetPolicy` sets what it asked, and is undone). Reports per RPC the counts of
each status code and of problems, the first problems, and the tracebacks in the daemon's log.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path
from typing import Any

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


RPC_CONFIG = """[host]
spec = "sim"
[host.options]
seed = 1
qps = 200000
[tuning]
trials = 4
sobol_trials = 4
window_s = 0.2
settle_s = 0
[state]
dir = "state"
[grpc]
listen = "unix://{sock}"
[metrics]
listen = "off"
"""


def start_rpc_daemon(tmp: Path) -> tuple[Any, Path]:
    """`tuner daemon` on the simulated host in `tmp` (log in tmp/daemon.log); (process, socket) once it serves."""
    import os
    import subprocess

    sock = tmp / "t.sock"
    (tmp / "tuner.toml").write_text(RPC_CONFIG.format(sock=sock))
    log = open(tmp / "daemon.log", "w")
    proc = subprocess.Popen(
        [sys.executable, "-m", "tuner.cli", "daemon", "--config", str(tmp / "tuner.toml")],
        cwd=tmp,
        env={**os.environ, "PYTHONPATH": str(REPO)},
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    deadline = time.monotonic() + 120
    while not sock.exists():
        if proc.poll() is not None or time.monotonic() > deadline:
            proc.kill()
            raise SystemExit(f"daemon did not start; see {tmp / 'daemon.log'}")
        time.sleep(0.2)
    return proc, sock


def rpc_one(pb: Any, stub: Any, rpc: str, fields: dict, metadata: list, before: tuple) -> tuple[str, list[str], tuple]:
    """One drawn request of `rpc` checked (`tests.rpckit`), the policy `before` it in force: (status code name,
    problems, the policy after it)."""
    from tests.rpckit import (
        DEADLINE_S,
        call,
        non_finite,
        outcome_problems,
        policy_asked,
        policy_of,
        request,
        same_policy,
    )

    code, resp, took, details = call(stub, rpc, request(pb, rpc, fields), metadata=metadata)
    problems = outcome_problems(rpc, code, details, took)
    if resp is not None and non_finite(resp):
        problems.append(f"not finite: {non_finite(resp)}")
    after = policy_of(stub.GetStatus(pb.GetStatusRequest(), timeout=DEADLINE_S))
    if rpc == "SetPolicy" and code.name == "OK":
        asked = policy_asked(before, fields)
        if not same_policy(after, asked):
            problems.append(f"policy {after} after SetPolicy {asked}")
        stub.SetPolicy(
            pb.SetPolicyRequest(sla_us=before[0], percentile=before[1], reward=before[2]), timeout=DEADLINE_S
        )
        after = policy_of(stub.GetStatus(pb.GetStatusRequest(), timeout=DEADLINE_S))
        if after != before:
            problems.append(f"policy {after} after restoring {before}")
    elif after != before:
        problems.append(f"policy changed {before} -> {after}")
    return code.name, [f"{rpc} {str(fields)[:300]}: {p}" for p in problems], after


def rpc_target(pb: Any, stub: Any, rpc: str, count: int, seed: int) -> dict:
    """`count` drawn requests of `rpc`: counts per status code, problems, wall time."""
    from hypothesis import HealthCheck, Phase, given, settings
    from hypothesis import seed as hseed
    from hypothesis import strategies as st

    from tests.rpckit import DEADLINE_S, FIELDS, policy_of

    # extra metadata a client may send: any lowercase key (not the reserved grpc- ones), printable values
    meta = st.lists(
        st.tuples(
            st.from_regex(r"[a-z][a-z0-9_.-]{0,30}", fullmatch=True),
            st.text(st.characters(min_codepoint=0x20, max_codepoint=0x7E), max_size=200),
        ).filter(lambda kv: not kv[0].startswith("grpc-") and kv[0] not in ("te", "content-type", "user-agent")),
        max_size=3,
    )
    codes: Counter = Counter()
    problems: list[str] = []
    policy = [policy_of(stub.GetStatus(pb.GetStatusRequest(), timeout=DEADLINE_S))]

    def one(fields: dict, metadata: list) -> None:
        code, bad, policy[0] = rpc_one(pb, stub, rpc, fields, metadata, policy[0])
        codes[code] += 1
        problems.extend(bad)
        if sum(codes.values()) % 1000 == 0:
            print(f"{rpc}: {sum(codes.values())} requests, {dict(codes)}", file=sys.stderr, flush=True)

    test = settings(
        max_examples=count,
        deadline=None,
        database=None,
        phases=[Phase.generate],
        suppress_health_check=list(HealthCheck),
    )(given(fields=FIELDS[rpc], metadata=meta)(one))
    t0 = time.perf_counter()
    hseed(seed)(test)()
    result = {
        "requests": sum(codes.values()),
        "codes": dict(sorted(codes.items())),
        "problems": len(problems),
        "first_problems": problems[:5],
        "wall_s": round(time.perf_counter() - t0, 1),
    }
    print(json.dumps({rpc: result}), file=sys.stderr, flush=True)
    return result


def first_decision(pb: Any, stub: Any, timeout_s: float = 600.0) -> None:
    """Wait for the daemon's first decision: before it `WatchDecisions` has nothing to send first."""
    import grpc

    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            if stub.GetStatus(pb.GetStatusRequest(), timeout=5).last_retune_time > 0:
                return
        except grpc.RpcError:
            pass
        time.sleep(0.5)
    raise SystemExit(f"no decision within {timeout_s:g} s")


def run_rpc(count: int, seed: int, rpcs: list[str]) -> dict:
    """The `rpc` target: one daemon on the simulated host, `count` drawn requests per RPC in `rpcs`."""
    import grpc

    from tuner.daemon.service import protos

    pb, services = protos()
    with tempfile.TemporaryDirectory(prefix="tuner-fuzz-rpc-") as d:
        tmp = Path(d)
        proc, sock = start_rpc_daemon(tmp)
        try:
            with grpc.insecure_channel(f"unix://{sock}") as ch:
                stub = services.TunerStub(ch)
                first_decision(pb, stub)
                per_rpc = {rpc: rpc_target(pb, stub, rpc, count, seed) for rpc in rpcs}
        finally:
            proc.terminate()
            exit_code = proc.wait(60)
        log = (tmp / "daemon.log").read_text(errors="replace")
    tracebacks = log.count("Traceback (most recent call last)")
    bad_codes = sum(n for r in per_rpc.values() for c, n in r["codes"].items() if c in ("UNKNOWN", "INTERNAL"))
    return {
        "target": "rpc",
        "host": "sim",
        "count_per_rpc": count,
        "rpcs": per_rpc,
        "unknown_or_internal": bad_codes,
        "daemon_log_tracebacks": tracebacks,
        "daemon_exit_code": exit_code,
        "ok": bad_codes == 0
        and tracebacks == 0
        and exit_code == 0
        and all(r["problems"] == 0 for r in per_rpc.values()),
    }


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--examples", type=int, default=3000, help="hypothesis examples per target (default 3000)")
    ap.add_argument("--targets", default="config,trace", help="comma list of config, trace, start, rpc")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument(
        "--count",
        type=int,
        default=10_000,
        help="targets start and rpc: mutated configs / requests per RPC (default 10000)",
    )
    ap.add_argument("--rpcs", default="", help="target rpc: comma list of RPCs (default: all eight)")
    args = ap.parse_args()
    targets = [t for t in args.targets.split(",") if t]
    for t in targets:
        if t not in ("config", "trace", "start", "rpc"):
            ap.error(f"--targets: unknown target {t!r}: expected config, trace, start, rpc")
    from tests.rpckit import RPCS

    rpcs = [r for r in args.rpcs.split(",") if r] or list(RPCS)
    if set(rpcs) - set(RPCS) or args.count < 1:
        ap.error(f"--rpcs: expected some of {', '.join(RPCS)}; --count: expected >= 1")
    runners = {
        "start": lambda: run_start(args.count, args.seed),
        "rpc": lambda: run_rpc(args.count, args.seed, rpcs),
    }
    results = [runners[t]() if t in runners else run_target(t, args.examples, args.seed) for t in targets]
    print(json.dumps({"results": results, "ok": all(r["ok"] for r in results)}, indent=2))
    return 0 if all(r["ok"] for r in results) else 1


if __name__ == "__main__":
    sys.exit(main())
