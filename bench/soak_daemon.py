"""Soak the daemon on a simulated host whose load moves; prints (and writes) JSON.

Starts `tuner daemon` (host `sim` with a `steps` load schedule swinging between 100K and 600K QPS every
`--step-s` seconds of wall time, the real Ax optimiser in its worker process per retune) and, for
`--minutes` of wall time, samples every `--sample-s` seconds with psutil: the RSS of the daemon and of its
optimiser worker (0 when no retune runs), open file descriptors, threads.  It polls `GetStatus` every second
to follow each holding window (load, latency, the band the point was tuned for) and counts retunes started
and ended (daemon log), guardrail reverts and SLA-violating holding windows, split as the daemon counts them
(`sla_violations_steady_total`): steady-state ones (the window's load inside the band the held point was tuned
for) and load-shift ones (the load had just left it: the daemon holds another point or retunes next).
Then it sends SIGTERM and checks the exit.

The RSS slope: the warm-up lasts until the daemon's ring of holding windows is full (`KEEP_WINDOWS` x
`--window-s`) and the load schedule has visited every level once, and at least `--warmup-min` (`--warmup-retunes`
also waits for that many retune decisions; off by default: a daemon that holds from its model may not retune for
hours, and what a retune adds is bounded too); the cut is stated in the JSON.  The run is split into load-step
cycles (one per `--step-s` of the schedule: the daemon holds one point, or retunes, per step), each with its RSS
peak, trough and last sample (`cycles`: a plateau shows as level troughs, a leak as rising ones).  The verdict's
slope is Theil-Sen over the post-warm-up cycles' troughs with Sen's 95 % interval (`rss_slope`; least squares and Theil-Sen over every sample are reported
beside it, with intervals too narrow for correlated samples): `met` when the interval is <= 1 MB/hour,
`exceeded` when it is wholly above, `not shown` otherwise.  Also reported: fds/threads ranges, worker RSS
while retuning and between retunes, tracebacks in the log.  Targets: slope met, fds and threads flat, no worker
between retunes, every retune ended, 0 steady-state SLA violations, 0 tracebacks, exit code 0.
`--analyse RUN.json` recomputes the summary of an earlier run from its samples and its daemon log.

    nice -n 10 .venv/bin/python bench/soak_daemon.py --minutes 110 --json-out soak-daemon.json
    .venv/bin/python bench/soak_daemon.py --analyse soak-daemon.json   # e.g. with another --warmup-min
"""

from __future__ import annotations

import argparse
import bisect
import json
import os
import re
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from bench.soak_stats import (  # noqa: E402
    WARMUP_RETUNES,
    Warmup,
    rss_cycles,
    rss_parts,
    slope_report,
    warmup_floor_s,
)
from tuner.daemon.model_tables import MODEL_TABLES  # noqa: E402
from tuner.daemon.state import KEEP_DECISIONS, KEEP_TRIALS, KEEP_WINDOWS  # noqa: E402 - after the path

LEVELS = (100_000, 600_000, 300_000, 550_000, 150_000, 450_000)


def config_text(tmp: Path, sock: Path, args: argparse.Namespace) -> str:
    levels = ", ".join(str(q) for q in args.levels)
    return f"""[host]
spec = "sim"
[host.options]
seed = 1
[host.options.load_schedule]
shape = "steps"
levels = [{levels}]
step_s = {args.step_s}
[policy]
sla_us = {args.sla_us}
[tuning]
trials = {args.trials}
sobol_trials = {args.sobol}
window_s = {args.window_s}
settle_s = 0.5
[state]
dir = "{tmp / "state"}"
[grpc]
listen = "unix://{sock}"
[metrics]
listen = "127.0.0.1:0"
"""


def parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--minutes", type=float, default=35.0)
    ap.add_argument(
        "--warmup-min",
        type=float,
        default=10.0,
        help="the warm-up lasts at least this long (and until the holding-window ring is full and every load level "
        "was visited once)",
    )
    ap.add_argument(
        "--warmup-retunes",
        type=int,
        default=0,
        help=f"... and until this many retunes have decided (e.g. {WARMUP_RETUNES}: the model tables the daemon "
        "keeps; default 0)",
    )
    ap.add_argument("--sample-s", type=float, default=10.0)
    ap.add_argument("--step-s", type=float, default=240.0, help="seconds each load level holds")
    ap.add_argument("--levels", type=lambda s: [float(x) for x in s.split(",")], default=list(LEVELS))
    ap.add_argument("--window-s", type=float, default=5.0)
    ap.add_argument("--trials", type=int, default=12)
    ap.add_argument("--sobol", type=int, default=4)
    ap.add_argument("--sla-us", type=float, default=500.0)
    ap.add_argument("--json-out", type=Path, default=None, help="also write the JSON here (replaced atomically)")
    ap.add_argument("--analyse", type=Path, default=None, help="recompute the summary of an earlier run's JSON")
    return ap


def main() -> int:
    args = parser().parse_args()
    if args.analyse is not None:
        return analyse(args.analyse, args.warmup_min * 60, args.warmup_retunes, args.json_out)
    import psutil

    # a SIGTERM to the bench stops the soak early: the `finally` below still stops the daemon it started
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    tmp = Path(tempfile.mkdtemp(prefix="tuner-soak-"))
    sock = tmp / "t.sock"
    cfg = tmp / "tuner.toml"
    cfg.write_text(config_text(tmp, sock, args))
    logf = tmp / "daemon.log"
    log = open(logf, "w")
    cmd = [sys.executable, "-m", "tuner.cli", "daemon", "--config", str(cfg)]
    t0, t0_unix = time.monotonic(), time.time()
    proc = subprocess.Popen(cmd, cwd=REPO, env={**os.environ, "PYTHONPATH": str(REPO)}, stdout=log, stderr=log)
    out: dict = {
        "bench": "soak_daemon",
        "host": "sim (steps load schedule, wall clock)",
        "levels_qps": args.levels,
        "step_s": args.step_s,
        "window_s": args.window_s,
        "trials_per_retune": args.trials,
        "sla_us": args.sla_us,
        "log": str(logf),
        "machine": "shared 2-core VM (8 engineers at work): timings are indicative",
    }
    soak = Soak(psutil.Process(proc.pid), t0, out)
    try:
        while not sock.exists():
            if proc.poll() is not None or time.monotonic() - t0 > 120:
                raise SystemExit(f"daemon did not start; see {logf}")
            time.sleep(0.2)
        soak.run(proc, sock, args)
    finally:
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
            try:
                out["exit_code"] = proc.wait(120)
            except subprocess.TimeoutExpired:
                proc.kill()
                out["exit_code"] = None
        else:
            out["exit_code"] = proc.returncode
        log.close()

    out["t0_unix"] = t0_unix
    out["wall_s"] = round(time.monotonic() - t0, 1)
    out["violations"] = soak.violations
    out["holding_windows_seen"] = len(soak.windows)
    summarise(
        out, soak.samples, logf.read_text(errors="replace"), warmup_for(out, args.warmup_min * 60, args.warmup_retunes)
    )
    return finish(out, args.json_out)


class Soak:
    """The daemon's status polled every second: holding windows seen, SLA violations as they are counted, and
    a resource sample (RSS, workers, fds, threads) every --sample-s seconds."""

    def __init__(self, ps: Any, t0: float, out: dict) -> None:
        self.ps, self.t0, self.out = ps, t0, out
        self.samples: list[dict] = []
        self.windows: dict[float, dict] = {}  # holding windows seen, by measurement end time
        self.violations: list[dict] = []
        self.last_viol = self.last_steady = 0

    def run(self, proc: subprocess.Popen, sock: Path, args: argparse.Namespace) -> None:
        import grpc

        from tuner.daemon.service import protos

        pb, services = protos()
        channel = grpc.insecure_channel(f"unix://{sock}")
        stub = services.TunerStub(channel)
        next_sample = time.monotonic()
        end = self.t0 + args.minutes * 60
        while time.monotonic() < end:
            if proc.poll() is not None:
                self.out["died"] = f"daemon exited early with {proc.returncode}"
                break
            now = time.monotonic()
            try:
                s = stub.GetStatus(pb.GetStatusRequest(), timeout=5)
            except grpc.RpcError as exc:
                s = None
                self.out.setdefault("status_errors", 0)
                self.out["status_errors"] += 1
                self.out["last_status_error"] = str(exc.code())
            if s is not None:
                self.status(s, now)
            if now >= next_sample:
                next_sample += args.sample_s
                self.sample(s, now)
            time.sleep(1.0)
        channel.close()

    def status(self, s: Any, now: float) -> None:
        """A new holding window, and SLA violations counted since the last status."""
        m = s.last_measurement
        lat = dict(m.latency_us)
        key = round(m.time, 3)
        if s.state == "holding" and key not in self.windows and s.tuned_qps > 0:
            in_band = s.band_low_qps <= s.offered_qps <= s.band_high_qps
            self.windows[key] = {"qps": s.offered_qps, "tuned_qps": s.tuned_qps, "in_band": in_band}
        if s.sla_violations_total > self.last_viol:
            # the daemon tells the windows apart as it counts them (the load against the band the held
            # point was tuned for, before the band moves); a poll would see the band already moved
            steady = int(s.sla_violations_steady_total) - self.last_steady
            self.violations.append(
                {
                    "t_s": round(now - self.t0, 1),
                    "count": int(s.sla_violations_total - self.last_viol),
                    "steady": steady,
                    "qps": round(s.offered_qps),
                    "tuned_qps": round(s.tuned_qps),
                    "steady_state": steady > 0,
                    "p99_us": lat.get("99"),
                }
            )
            self.last_viol = int(s.sla_violations_total)
            self.last_steady = int(s.sla_violations_steady_total)

    def sample(self, s: Any, now: float) -> None:
        """One resource sample of the daemon and its optimiser workers (one stderr line)."""
        import psutil

        ps = self.ps
        try:
            workers = self.workers()
            row = {
                "t_s": round(now - self.t0, 1),
                "rss_mb": round(ps.memory_info().rss / 2**20, 2),
                **rss_parts(ps),
                "worker_rss_mb": round(sum(w.memory_info().rss for w in workers) / 2**20, 1),
                "workers": len(workers),
                "fds": ps.num_fds(),
                "threads": ps.num_threads(),
                "state": s.state if s is not None else "?",
                "qps": round(s.offered_qps) if s is not None else None,
                "trials": int(s.trials_total) if s is not None else None,
                "reverts": int(s.guardrail_reverts_total) if s is not None else None,
            }
        except psutil.Error as exc:
            row = {"t_s": round(now - self.t0, 1), "error": str(exc)}
        self.samples.append(row)
        print(json.dumps(row), file=sys.stderr, flush=True)

    def workers(self) -> list:
        """The daemon's child processes but multiprocessing's resource tracker."""
        import psutil

        try:
            kids = self.ps.children(recursive=True)
        except psutil.Error:
            return []
        return [k for k in kids if "resource_tracker" not in " ".join(_cmdline(k))]


def _cmdline(p: Any) -> list[str]:
    import psutil

    try:
        return p.cmdline()
    except psutil.Error:
        return []


def summarise(out: dict, samples: list[dict], text: str, warmup: Warmup) -> None:
    """Fill `out` (which holds t0_unix, violations, exit_code) from the samples and the daemon's log."""
    t0_unix = out["t0_unix"]
    decided = [t - t0_unix for t in _decision_times(text)]
    warmup_s = warmup.cut_s(decided)
    out["warmup"] = {
        "min_s": warmup.min_s,
        "retunes": warmup.retunes,
        "cut_s": round(warmup_s, 1),
        "why": f"the daemon keeps bounded data: its last {KEEP_WINDOWS} holding windows (full after "
        f"{KEEP_WINDOWS} x {out['window_s']:g} s), the model tables of its last {MODEL_TABLES} retunes (tens of KB "
        f"each), {KEEP_DECISIONS} decisions and {KEEP_TRIALS} trials (these two fill only after days: a few KB "
        "per load step)",
    }
    violations = out.get("violations", [])
    started_ids = re.findall(r"retune (\S+) \([^)]*\): up to", text)
    started = set(started_ids)
    ended = set(re.findall(r"decision (\S+) \(", text)) | set(re.findall(r"retune (\S+) dropped", text))
    # a retune in flight when SIGTERM came ends by the stop (its trials are kept for the next start)
    in_flight = (
        started_ids[-1]
        if started_ids and started_ids[-1] not in ended and samples and samples[-1].get("state") == "retuning"
        else None
    )
    good = [r for r in samples if "rss_mb" in r]
    warm = [r for r in good if r["t_s"] >= warmup_s]
    # between retunes: from a decision until the next retune is asked for (the log's "left the band",
    # "retuning" or "up to" line: the worker is spawned then, long before the state says "retuning")
    changes = _between_retunes(text)
    holding = [r for r in good if _is_between(changes, t0_unix + r["t_s"])]
    retuning = [r for r in good if r["state"] == "retuning"]
    requests = _retune_requests(text)
    last_s = good[-1]["t_s"] if good else 0.0
    step_s = float(out["step_s"])
    cycles = rss_cycles(good, [k * step_s for k in range(int(last_s // step_s) + 1)])
    slope = slope_report(good, cycles, warmup_s)
    out.update(
        {
            "samples": len(good),
            "tracebacks": text.count("Traceback"),
            "retunes_started": len(started),
            "retunes_ended": len(ended & started),
            "retunes_unended": sorted(started - ended - {in_flight}),
            "retune_in_flight_at_sigterm": in_flight,
            "trials": good[-1]["trials"] if good else None,
            "guardrail_reverts": good[-1]["reverts"] if good else None,
            "sla_violations": sum(v["count"] for v in violations),
            "sla_violations_steady_state": sum(v.get("steady", v["count"] * v["steady_state"]) for v in violations),
            "rss_mb_first_last": [good[0]["rss_mb"], good[-1]["rss_mb"]] if good else None,
            "rss_mb_max": max((r["rss_mb"] for r in good), default=None),
            "rss_slope": slope,
            "rss_slope_mb_per_h_after_warmup": slope["cycle_troughs_theil_sen"]["slope"]
            if slope["cycle_troughs_theil_sen"]
            else None,
            "rss_mb_warmup_end_last": [warm[0]["rss_mb"], warm[-1]["rss_mb"]] if warm else None,
            "fds_range": [min(r["fds"] for r in good), max(r["fds"] for r in good)] if good else None,
            "fds_range_after_warmup": [min(r["fds"] for r in warm), max(r["fds"] for r in warm)] if warm else None,
            "threads_range": [min(r["threads"] for r in good), max(r["threads"] for r in good)] if good else None,
            "threads_range_after_warmup": [min(r["threads"] for r in warm), max(r["threads"] for r in warm)]
            if warm
            else None,
            "worker_rss_mb_max_retuning": max((r["worker_rss_mb"] for r in retuning), default=0.0),
            "worker_rss_mb_max_between_retunes": max((r["worker_rss_mb"] for r in holding), default=0.0),
            "samples_between_retunes": len(holding),
            # the worker after each retune's post-decision work (model table): the last sample before the
            # next retune was asked for -- 0 MB means its memory went back to the OS
            "worker_rss_mb_before_each_next_retune": [
                r["worker_rss_mb"] for r in _last_before(good, requests, t0_unix)
            ],
            # per load step of the schedule: the daemon's RSS peak / trough / last sample, so a plateau (level
            # troughs) and a leak (rising troughs) can be told apart by eye
            "cycles": cycles,
            "sample_rows": good,
        }
    )
    verdict(out, good, slope)


def verdict(out: dict, good: list[dict], slope: dict) -> None:
    """The soak's targets and whether it met them."""
    out["targets"] = {
        "rss_slope_mb_per_h_max": 1.0,
        "rss_slope_basis": "Theil-Sen over the post-warm-up load steps' RSS troughs; met when its 95 % CI <= 1",
        "steady_state_sla_violations": 0,
        "tracebacks": 0,
        "every_retune_ended": True,
    }
    out["pass"] = bool(
        good
        and out["tracebacks"] == 0
        and not out["retunes_unended"]
        and out["sla_violations_steady_state"] == 0
        and slope["verdict"] == "met"
        and out["exit_code"] == 0
        and "died" not in out
    )


def finish(out: dict, json_out: Path | None) -> int:
    from core.fsutil import atomic_write

    text_out = json.dumps(out, indent=1)
    if json_out is not None:
        atomic_write(json_out, (text_out + "\n").encode(), mode=0o644)
    print(text_out)
    return 0 if out["pass"] else 1


def warmup_for(out: dict, minimum_s: float, retunes: int) -> Warmup:
    """The warm-up of a run described by `out` (its window, levels and step)."""
    floor = warmup_floor_s(float(out["window_s"]), len(out["levels_qps"]), float(out["step_s"]))
    return Warmup(max(minimum_s, floor), retunes)


def analyse(path: Path, minimum_s: float, retunes: int, json_out: Path | None) -> int:
    """Recompute the summary of an earlier run's JSON (its sample rows and its daemon log)."""
    out = json.loads(path.read_text())
    log = Path(out["log"])
    if "t0_unix" not in out:  # runs before t0_unix was written: the config is written just before the start
        out["t0_unix"] = (log.parent / "tuner.toml").stat().st_mtime
    out["reanalysed_from"] = str(path)
    summarise(out, out["sample_rows"], log.read_text(errors="replace"), warmup_for(out, minimum_s, retunes))
    return finish(out, json_out)


def _log_time(line: str) -> float | None:
    import datetime as dt

    m = re.match(r"(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3}) ", line)
    return dt.datetime.strptime(m.group(1), "%Y-%m-%d %H:%M:%S,%f").timestamp() if m else None


def _decision_times(log_text: str) -> list[float]:
    """Unix times of the daemon's decisions (a retune ended with a point held)."""
    out = []
    for line in log_text.splitlines():
        t = _log_time(line)
        if t is not None and " decision " in line:
            out.append(t)
    return out


def _retune_requests(log_text: str) -> list[float]:
    """Unix times a retune after the first was asked for (load left the band, reload, guardrail, ...)."""
    out = []
    for line in log_text.splitlines():
        t = _log_time(line)
        if t is not None and ("left the band" in line or "retuning" in line):
            out.append(t)
    return out


def _last_before(rows: list[dict], times: list[float], t0_unix: float) -> list[dict]:
    """For each time, the last sample taken before it (none if no sample precedes it)."""
    out = []
    for t in times:
        before = [r for r in rows if t0_unix + r["t_s"] < t]
        if before:
            out.append(before[-1])
    return out


def _between_retunes(log_text: str) -> list[tuple[float, bool]]:
    """(unix time, between retunes from then on) at each decision (True) and each retune request (False).

    A decision line that also says "retuning" (the load moved during the retune) asks for the next retune.
    """
    out = []
    for line in log_text.splitlines():
        t = _log_time(line)
        if t is None:
            continue
        if "left the band" in line or "retuning" in line or "): up to" in line:
            out.append((t, False))
        elif " decision " in line:
            out.append((t, True))
    return out


def _is_between(changes: list[tuple[float, bool]], when: float) -> bool:
    """Whether unix time `when` falls after a decision and before the next retune was asked for."""
    i = bisect.bisect_right([t for t, _ in changes], when)
    return changes[i - 1][1] if i else False


def _round(x: float | None) -> float | None:
    return None if x is None else round(x, 3)


if __name__ == "__main__":
    sys.exit(main())
