"""Soak the daemon on a simulated host whose load moves; prints (and writes) JSON.

Starts `tuner daemon` (host `sim` with a `steps` load schedule swinging between 100K and 600K QPS every
`--step-s` seconds of wall time, the real Ax optimiser in its worker process per retune) and, for
`--minutes` of wall time, samples every `--sample-s` seconds with psutil: the RSS of the daemon and of its
optimiser worker (0 when no retune runs), open file descriptors, threads.  It polls `GetStatus` every second
to follow each holding window (load, latency, the band the point was tuned for) and counts retunes started
and ended (daemon log), guardrail reverts and SLA-violating holding windows, split into steady-state ones
(load within the tuned band) and load-shift ones (the load just left the band: the daemon retunes next).
Then it sends SIGTERM and checks the exit.  Reported: the daemon's RSS slope after `--warmup-min`
(least squares over the later samples, MB/hour), fds/threads ranges, worker RSS while retuning and while
holding, tracebacks in the log.  Targets: slope <= 1 MB/hour, fds and threads flat, no worker between
retunes, every retune ended, 0 steady-state SLA violations, 0 tracebacks, exit code 0.

    nice -n 10 .venv/bin/python bench/soak_daemon.py --minutes 35 --json-out soak-daemon.json
"""

from __future__ import annotations

import argparse
import json
import os
import re
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

LEVELS = (100_000, 600_000, 300_000, 550_000, 150_000, 450_000)


def slope_mb_per_hour(points: list[tuple[float, float]]) -> float | None:
    """Least-squares slope of (seconds, bytes) samples, in MB per hour."""
    if len(points) < 3:
        return None
    n = len(points)
    mt = sum(t for t, _ in points) / n
    my = sum(y for _, y in points) / n
    sxx = sum((t - mt) ** 2 for t, _ in points)
    if sxx == 0:
        return None
    sxy = sum((t - mt) * (y - my) for t, y in points)
    return sxy / sxx * 3600 / 2**20


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


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--minutes", type=float, default=35.0)
    ap.add_argument("--warmup-min", type=float, default=10.0, help="samples before this are left out of the slope")
    ap.add_argument("--sample-s", type=float, default=10.0)
    ap.add_argument("--step-s", type=float, default=240.0, help="seconds each load level holds")
    ap.add_argument("--levels", type=lambda s: [float(x) for x in s.split(",")], default=list(LEVELS))
    ap.add_argument("--window-s", type=float, default=5.0)
    ap.add_argument("--trials", type=int, default=12)
    ap.add_argument("--sobol", type=int, default=4)
    ap.add_argument("--sla-us", type=float, default=500.0)
    ap.add_argument("--json-out", type=Path, default=None, help="also write the JSON here (replaced atomically)")
    args = ap.parse_args()

    import grpc
    import psutil

    from core.fsutil import atomic_write
    from tuner.daemon.service import protos

    pb, services = protos()
    tmp = Path(tempfile.mkdtemp(prefix="tuner-soak-"))
    sock = tmp / "t.sock"
    cfg = tmp / "tuner.toml"
    cfg.write_text(config_text(tmp, sock, args))
    logf = tmp / "daemon.log"
    log = open(logf, "w")
    cmd = [sys.executable, "-m", "tuner.cli", "daemon", "--config", str(cfg)]
    t0, t0_unix = time.monotonic(), time.time()
    proc = subprocess.Popen(cmd, cwd=REPO, env={**os.environ, "PYTHONPATH": str(REPO)}, stdout=log, stderr=log)
    ps = psutil.Process(proc.pid)
    samples: list[dict] = []
    windows: dict[float, dict] = {}  # holding windows seen, by measurement end time
    violations: list[dict] = []
    last_viol = 0
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

    def worker_procs() -> list:
        try:
            kids = ps.children(recursive=True)
        except psutil.Error:
            return []
        return [k for k in kids if "resource_tracker" not in " ".join(_cmdline(k))]

    def _cmdline(p) -> list[str]:
        try:
            return p.cmdline()
        except psutil.Error:
            return []

    try:
        while not sock.exists():
            if proc.poll() is not None or time.monotonic() - t0 > 120:
                raise SystemExit(f"daemon did not start; see {logf}")
            time.sleep(0.2)
        channel = grpc.insecure_channel(f"unix://{sock}")
        stub = services.TunerStub(channel)
        next_sample = time.monotonic()
        end = t0 + args.minutes * 60
        while time.monotonic() < end:
            if proc.poll() is not None:
                out["died"] = f"daemon exited early with {proc.returncode}"
                break
            now = time.monotonic()
            try:
                s = stub.GetStatus(pb.GetStatusRequest(), timeout=5)
            except grpc.RpcError as exc:
                s = None
                out.setdefault("status_errors", 0)
                out["status_errors"] += 1
                out["last_status_error"] = str(exc.code())
            if s is not None:
                m = s.last_measurement
                lat = dict(m.latency_us)
                key = round(m.time, 3)
                if s.state == "holding" and key not in windows and s.tuned_qps > 0:
                    in_band = s.band_low_qps <= s.offered_qps <= s.band_high_qps
                    windows[key] = {"qps": s.offered_qps, "tuned_qps": s.tuned_qps, "in_band": in_band}
                if s.sla_violations_total > last_viol:
                    in_band = s.band_low_qps <= s.offered_qps <= s.band_high_qps
                    violations.append(
                        {
                            "t_s": round(now - t0, 1),
                            "count": int(s.sla_violations_total - last_viol),
                            "qps": round(s.offered_qps),
                            "tuned_qps": round(s.tuned_qps),
                            "steady_state": bool(in_band),
                            "p99_us": lat.get("99"),
                        }
                    )
                    last_viol = int(s.sla_violations_total)
            if now >= next_sample:
                next_sample += args.sample_s
                try:
                    workers = worker_procs()
                    row = {
                        "t_s": round(now - t0, 1),
                        "rss_mb": round(ps.memory_info().rss / 2**20, 2),
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
                    row = {"t_s": round(now - t0, 1), "error": str(exc)}
                samples.append(row)
                print(json.dumps(row), file=sys.stderr, flush=True)
            time.sleep(1.0)
        channel.close()
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

    text = logf.read_text(errors="replace")
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
    warm = [r for r in good if r["t_s"] >= args.warmup_min * 60]
    # between retunes: from a decision until the next retune is asked for (the log's "left the band",
    # "retuning" or "up to" line: the worker is spawned then, long before the state says "retuning")
    holding = [r for r in good if _between_retunes(text, t0_unix + r["t_s"])]
    retuning = [r for r in good if r["state"] == "retuning"]
    out.update(
        {
            "wall_s": round(time.monotonic() - t0, 1),
            "samples": len(good),
            "tracebacks": text.count("Traceback"),
            "retunes_started": len(started),
            "retunes_ended": len(ended & started),
            "retunes_unended": sorted(started - ended - {in_flight}),
            "retune_in_flight_at_sigterm": in_flight,
            "trials": good[-1]["trials"] if good else None,
            "guardrail_reverts": good[-1]["reverts"] if good else None,
            "holding_windows_seen": len(windows),
            "sla_violations": sum(v["count"] for v in violations),
            "sla_violations_steady_state": sum(v["count"] for v in violations if v["steady_state"]),
            "violations": violations,
            "rss_mb_first_last": [good[0]["rss_mb"], good[-1]["rss_mb"]] if good else None,
            "rss_mb_max": max((r["rss_mb"] for r in good), default=None),
            "rss_slope_mb_per_h_after_warmup": _round(
                slope_mb_per_hour([(r["t_s"], r["rss_mb"] * 2**20) for r in warm])
            ),
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
                r["worker_rss_mb"] for r in _last_before(good, _retune_requests(text), t0_unix)
            ],
            "sample_rows": good,
        }
    )
    out["targets"] = {
        "rss_slope_mb_per_h_max": 1.0,
        "steady_state_sla_violations": 0,
        "tracebacks": 0,
        "every_retune_ended": True,
    }
    out["pass"] = bool(
        good
        and out["tracebacks"] == 0
        and not out["retunes_unended"]
        and out["sla_violations_steady_state"] == 0
        and (out["rss_slope_mb_per_h_after_warmup"] or 0.0) <= 1.0
        and out["exit_code"] == 0
        and "died" not in out
    )
    text_out = json.dumps(out, indent=1)
    if args.json_out is not None:
        atomic_write(args.json_out, (text_out + "\n").encode(), mode=0o644)
    print(text_out)
    return 0 if out["pass"] else 1


def _log_time(line: str) -> float | None:
    import datetime as dt

    m = re.match(r"(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3}) ", line)
    return dt.datetime.strptime(m.group(1), "%Y-%m-%d %H:%M:%S,%f").timestamp() if m else None


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


def _between_retunes(log_text: str, when: float) -> bool:
    """Whether unix time `when` falls after a decision and before the next retune was asked for."""
    import datetime as dt

    state = False
    for line in log_text.splitlines():
        m = re.match(r"(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3}) ", line)
        if not m:
            continue
        t = dt.datetime.strptime(m.group(1), "%Y-%m-%d %H:%M:%S,%f").timestamp()
        if t > when:
            break
        if " decision " in line:
            state = True
        elif "left the band" in line or "retuning" in line or "): up to" in line:
            state = False
    return state


def _round(x: float | None) -> float | None:
    return None if x is None else round(x, 3)


if __name__ == "__main__":
    sys.exit(main())
