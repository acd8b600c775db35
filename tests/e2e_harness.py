"""End to end on this machine: real memcached (or redis-server: `E2EConfig.server`), `tuner load` replaying the
bundled trace, the daemon driving the fake-hardware kit (tuning) or the real host (observe), and the checks both
the e2e test and bench/e2e.py make.

`run_e2e` starts memcached on 127.0.0.1 (a free port), a generator at `qps` from `--start` into the trace's busy
hours, the daemon (its process: `tests.daemon_fakes` with the light optimiser, or `tuner daemon` with Ax), waits
for the first decision and `hold_windows` holding windows, adds a second generator at `step - 1` times the rate
(a +50 % step with the default), waits for the retune the step causes and its decision, then SIGTERMs everything
and compares what the daemon measured with what the generators logged, window by window:

* offered QPS: the daemon's per-window QPS vs. the generators' completions in the same wall-clock interval
  (their `.hlog`s, per second, interpolated within a second), windows straddling the step excluded;
* latency: the prober's p99 and its 95 % CI vs. the generators' pooled p99 CI over the same seconds;
* the kit's knobs after SIGTERM (boot values), tracebacks in every log, trials recorded.

A loopback run: no NIC between client and server, so ITR has no effect on what is measured here.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from actuators.fakehw import FileNic, create
from actuators.fakehw.kit import IFACE
from actuators.latency.dist import histogram_quantiles
from actuators.latency.hlog import read_log
from tests.memcached_server import start_memcached
from tests.redis_server import start_redis
from tuner.daemon.state import StateStore
from tuner.load.hist import new_histogram

REPO = Path(__file__).resolve().parent.parent
PY = sys.executable
TRACE_START_S = 66_000  # the bundled day's busiest ~2 h (10-minute rates within ~8 % of each other)


@dataclass(frozen=True)
class E2EConfig:
    qps: float = 2000.0
    step: float = 1.5
    mode: str = "tune"  # "tune" (fake-hardware kit) or "observe" (the real host: nothing written)
    kit: str = "acpi"  # the kit's CPUs (`actuators.fakehw.kit.KINDS`): acpi, hwp (intel_pstate active), amd
    optimizer: str = "light"  # "light" (tests.daemon_fakes, no Ax) or "ax" (tuner daemon)
    window_s: float = 2.0
    trials: int = 3
    hold_windows: int = 2
    prober_hz: float = 500.0
    processes: int = 1
    connections: int = 2
    timeout_s: float = 120.0
    server: str = "memcached"  # or "redis" (Debian's redis-server; the prober and the generators speak RESP)


def _wait(pred: Any, timeout_s: float, what: str) -> Any:
    deadline = time.monotonic() + timeout_s
    while True:
        value = pred()
        if value:
            return value
        if time.monotonic() > deadline:
            raise TimeoutError(f"e2e: {what} did not happen within {timeout_s:g} s")
        time.sleep(0.1)  # poll interval of a deadline loop


def _state(tmp: Path) -> dict:
    """The daemon's saved state (state.json with its journals), {} while there is none."""
    if not (tmp / "state" / "state.json").exists():
        return {}
    return asdict(StateStore(tmp / "state").load())


def _config(tmp: Path, cfg: E2EConfig, address: str) -> Path:
    hw = tmp / "hw"
    latency = {"kind": "prober", "target": address, "rate_hz": cfg.prober_hz}
    if cfg.mode == "tune":
        spec = "actuators.fakehw:make_fake_host"
        options = {"root": str(hw), "qps": f"{cfg.server}:{address}", "state_dir": str(tmp / "hwstate")}
    else:
        spec = "real"
        options = {"qps": f"{cfg.server}:{address}", "state_dir": str(tmp / "hwstate")}
    opt_lines = "\n".join(f"{k} = {json.dumps(v)}" for k, v in options.items())
    lat_lines = "\n".join(f"{k} = {json.dumps(v)}" for k, v in latency.items())
    text = f"""
[host]
spec = "{spec}"
server = "{cfg.server}"
{'mode = "observe"' if cfg.mode == "observe" else ""}
[host.options]
{opt_lines}
[host.options.latency]
{lat_lines}
[policy]
sla_us = 1000000.0
percentile = 99
[tuning]
trials = {cfg.trials}
sobol_trials = {min(cfg.trials, 2)}
window_s = {cfg.window_s}
settle_s = 0
retune_period_s = 3600
load_change_pct = 20
guardrail_margin_pct = 10
context = false
stop_ei_pct = 0
safe_delta = 0
window_mode = "fixed"
[state]
dir = "state"
[grpc]
listen = "unix://{tmp / "t.sock"}"
[metrics]
listen = "off"
"""
    path = tmp / "tuner.toml"
    path.write_text(text)
    return path


def _generator(tmp: Path, name: str, address: str, qps: float, start_s: float, cfg: E2EConfig) -> subprocess.Popen:
    cmd = [
        PY,
        "-m",
        "tuner.cli",
        "load",
        "--server",
        address,
        "--trace",
        "sample",
        "--peak-qps",
        f"{qps:g}",
        "--peak-window",
        "600",
        "--start",
        f"{start_s:g}",
        "--duration",
        f"{cfg.timeout_s:g}",
        "--processes",
        str(cfg.processes),
        "--connections",
        str(cfg.connections),
        "--quiet",
        "--hlog",
        str(tmp / f"{name}.hlog"),
        "--json",
        str(tmp / f"{name}.json"),
        "--seed",
        str(len(name)),
        "--protocol",
        cfg.server,
    ]
    err = open(tmp / f"{name}.err", "w")
    return subprocess.Popen(
        cmd, cwd=REPO, env={**os.environ, "PYTHONPATH": str(REPO)}, stdout=subprocess.DEVNULL, stderr=err
    )


def _terminate(proc: subprocess.Popen) -> None:
    """SIGTERM, once: a second one could land after `tuner load` restored the default handler and kill it while it
    writes its summary."""
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)


def _reap(proc: subprocess.Popen, timeout_s: float = 30.0) -> int:
    try:
        return proc.wait(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        proc.kill()
        return proc.wait(timeout=5)


def _stop(proc: subprocess.Popen, timeout_s: float = 30.0) -> int:
    _terminate(proc)
    return _reap(proc, timeout_s)


def run_e2e(tmp: Path, cfg: E2EConfig = E2EConfig()) -> dict[str, Any]:
    """Run the scenario under `tmp` and return its report (see the module doc); raises TimeoutError if a stage
    never happens."""
    tmp.mkdir(parents=True, exist_ok=True)
    server = start_memcached(extra_args=("-m", "64", "-c", "256")) if cfg.server == "memcached" else start_redis()
    procs: list[subprocess.Popen] = []
    daemon = None
    poller = None
    t_step = None
    try:
        if cfg.mode == "tune":
            create(tmp / "hw", kind=cfg.kit)
            (tmp / "boot_knobs.json").write_text(json.dumps(_knobs_after_sigterm(tmp)))
        conf = _config(tmp, cfg, server.address)
        procs.append(_generator(tmp, "gen_a", server.address, cfg.qps, TRACE_START_S, cfg))
        _wait(lambda: _sending(tmp / "gen_a.hlog"), cfg.timeout_s, "the generator's first second")
        if cfg.optimizer == "light":
            cmd = [PY, "-m", "tests.daemon_fakes", str(conf)]
        else:
            cmd = [PY, "-m", "tuner.cli", "daemon", "--config", str(conf)]
        log = open(tmp / "daemon.log", "w")
        daemon = subprocess.Popen(
            cmd, cwd=tmp, env={**os.environ, "PYTHONPATH": str(REPO)}, stdout=log, stderr=subprocess.STDOUT
        )
        if cfg.mode == "tune":
            _wait(lambda: (_state(tmp).get("held") or {}).get("reason") == "startup", cfg.timeout_s, "first decision")
        else:
            poller = StatusPoller(tmp / "t.sock")
            _wait(lambda: len(poller.windows) >= 1, cfg.timeout_s, "the daemon's first observed window")
        # the load phase before the step: `hold_windows` windows at the first load (scenario time, not a sync)
        time.sleep(cfg.hold_windows * cfg.window_s + 0.5)
        procs.append(_generator(tmp, "gen_b", server.address, cfg.qps * (cfg.step - 1), TRACE_START_S + 3600, cfg))
        _wait(lambda: _sending(tmp / "gen_b.hlog"), cfg.timeout_s, "the second generator's first second")
        t_step = time.time() - 1.0
        if cfg.mode == "tune":
            _wait(
                lambda: any(d.get("reason") == "load" and d.get("time", 0) > t_step for d in _decisions(tmp)),
                cfg.timeout_s,
                "a retune for the load step and its decision",
            )
        # one more phase at the new load: windows the daemon measured after the step (scenario time)
        time.sleep(max(cfg.hold_windows, 2) * cfg.window_s + 1.5)
        daemon_rc = _stop(daemon)
    finally:
        if poller is not None:
            poller.stop()
        if daemon is not None and daemon.poll() is None:
            daemon.kill()
        for p in procs:  # all told at once: each generator takes ~2 s to write its summary
            _terminate(p)
        for p in procs:
            _reap(p)
        server.stop()
    observed = None
    if poller is not None:
        observed = {"windows": list(poller.windows.values()), "status": poller.status}
        (tmp / "observed.json").write_text(json.dumps(observed))
    return analyse(tmp, cfg, daemon_rc, t_step, observed)


class StatusPoller:
    """Collects the daemon's measured windows from GetStatus (observe mode keeps no per-window record on disk)."""

    def __init__(self, sock: Path, period_s: float = 0.3) -> None:
        import threading

        self.sock, self.period_s = sock, period_s
        self.windows: dict[float, dict] = {}
        self.status: dict = {}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        import grpc
        from google.protobuf import json_format

        from tuner.daemon.service import protos

        pb, services = protos()
        while not self._stop.wait(self.period_s):
            if not self.sock.exists():
                continue
            try:
                with grpc.insecure_channel(f"unix://{self.sock}") as ch:
                    resp = services.TunerStub(ch).GetStatus(pb.GetStatusRequest(), timeout=2)
            except grpc.RpcError:
                continue
            self.status = json_format.MessageToDict(resp, preserving_proto_field_name=True)
            m = self.status.get("last_measurement")
            if m and m.get("time"):
                self.windows[float(m["time"])] = m

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=5)


def _sending(hlog: Path) -> bool:
    """Whether a generator has logged its first second (it is sending)."""
    try:
        return any(line[:1].isdigit() for line in hlog.read_text().splitlines())
    except FileNotFoundError:
        return False


def _decisions(tmp: Path) -> list[dict]:
    return list(_state(tmp).get("decisions", []))


def _gen_logs(tmp: Path) -> tuple[dict[int, Any], dict[int, int]]:
    """Per absolute second: the generators' summed latency histogram and completions."""
    hists: dict[int, Any] = {}
    for name in ("gen_a", "gen_b"):
        path = tmp / f"{name}.hlog"
        if not path.exists():
            continue
        for sec, h in read_log(path).by_tag[None].items():
            if sec not in hists:
                hists[sec] = new_histogram()
            hists[sec].add(h)
    return hists, {s: h.get_total_count() for s, h in hists.items()}


def _gen_rate(counts: dict[int, int], t0: float, t1: float) -> float:
    """Completions/s over [t0, t1] (a second's completions spread evenly over it)."""
    total = 0.0
    for sec in range(int(t0), int(t1) + 1):
        overlap = min(t1, sec + 1) - max(t0, sec)
        if overlap > 0:
            total += counts.get(sec, 0) * overlap
    return total / (t1 - t0)


def _windows(state: dict, observed: dict | None = None) -> list[dict]:
    """The daemon's measured windows (trials and holding windows, or observed ones): start, end, QPS, latency."""
    rows = []
    for m in (observed or {}).get("windows", []):
        end = float(m["time"])
        rows.append(
            {
                "kind": "observe",
                "start": end - float(m["seconds"]),
                "end": end,
                "qps": float(m.get("offered_qps", 0.0)),
                "p99": (m.get("latency_us") or {}).get("99"),
                "p99_ci": None,
            }
        )
    for kind, items in (("trial", state.get("trials", [])), ("hold", state.get("windows", []))):
        for r in items:
            m = r.get("measurement")
            if not m:
                continue
            end = float(m.get("time", r.get("time")))
            rows.append(
                {
                    "kind": kind,
                    "start": end - float(m["seconds"]),
                    "end": end,
                    "qps": float(m["offered_qps"]),
                    "p99": m["latency_us"].get("99"),
                    "p99_ci": m["latency_ci_us"].get("99"),
                }
            )
    return sorted(rows, key=lambda r: r["start"])


def _compare_windows(tmp: Path, state: dict, t_step: float | None, observed: dict | None) -> list[dict[str, Any]]:
    """Each daemon window the generators' logs cover, beside the generators' rate and pooled p99 over it."""
    hists, counts = _gen_logs(tmp)
    rows = []
    for w in _windows(state, observed):
        if int(w["start"]) not in counts or int(w["end"]) not in counts:
            continue
        straddles = t_step is not None and w["start"] - 1.0 <= t_step <= w["end"] + 1.0
        gen = _gen_rate(counts, w["start"], w["end"])
        pooled = new_histogram()
        for sec in range(int(w["start"]), int(w["end"]) + 1):
            if sec in hists:
                pooled.add(hists[sec])
        g99 = g_ci = None
        if pooled.get_total_count():
            _, v, ci = histogram_quantiles(pooled, (99.0,))
            g99, g_ci = v[99.0], ci[99.0]
        agree = None
        if w["p99_ci"] and g_ci:
            agree = w["p99_ci"][0] <= g_ci[1] and g_ci[0] <= w["p99_ci"][1]
        rows.append(
            {
                **w,
                "gen_qps": round(gen, 1),
                "qps_error": round(w["qps"] / gen - 1, 5) if gen else None,
                "straddles_step": straddles,
                "gen_p99": g99,
                "gen_p99_ci": g_ci,
                "p99_cis_overlap": agree,
            }
        )
    return rows


def _phases(steady: list[dict[str, Any]], t_step: float | None) -> dict[str, dict[str, Any]]:
    """The daemon's and the generators' mean QPS before and after the load step, over the steady windows."""
    phases = {}
    for name, part in (
        ("before_step", [r for r in steady if t_step is None or r["end"] < t_step]),
        ("after_step", [r for r in steady if t_step is not None and r["start"] > t_step]),
    ):
        secs = sum(r["end"] - r["start"] for r in part)
        if secs > 0:
            daemon_q = sum(r["qps"] * (r["end"] - r["start"]) for r in part) / secs
            gen_q = sum(r["gen_qps"] * (r["end"] - r["start"]) for r in part) / secs
            phases[name] = {
                "windows": len(part),
                "seconds": round(secs, 3),
                "daemon_qps": round(daemon_q, 1),
                "generator_qps": round(gen_q, 1),
                "error": round(daemon_q / gen_q - 1, 5),
            }
    return phases


def _knobs_after_sigterm(tmp: Path) -> dict[str, Any]:
    hw = tmp / "hw"
    cpus = sorted((hw / "sys/devices/system/cpu").glob("cpu[0-9]*"))
    files = ("scaling_min_freq", "scaling_max_freq", "energy_performance_preference")
    return {
        "governors": [(c / "cpufreq/scaling_governor").read_text().strip() for c in cpus],
        "limits": [
            {f: (c / "cpufreq" / f).read_text().strip() for f in files if (c / "cpufreq" / f).exists()} for c in cpus
        ],
        "nic": FileNic(hw).get_coalesce(IFACE),
    }


def analyse(
    tmp: Path, cfg: E2EConfig, daemon_rc: int, t_step: float | None, observed: dict | None = None
) -> dict[str, Any]:
    state = _state(tmp)
    rows = _compare_windows(tmp, state, t_step, observed)
    steady = [r for r in rows if not r["straddles_step"] and r["qps_error"] is not None]
    logs = {p.name: p.read_text(errors="replace") for p in tmp.glob("*.log")} | {
        p.name: p.read_text(errors="replace") for p in tmp.glob("*.err")
    }
    gens = {n: json.loads((tmp / f"{n}.json").read_text()) for n in ("gen_a", "gen_b") if (tmp / f"{n}.json").exists()}
    phases = _phases(steady, t_step)
    report: dict[str, Any] = {
        "config": asdict(cfg),
        "loopback": True,
        "daemon_exit_status": daemon_rc,
        "tracebacks": {name: text.count("Traceback") for name, text in logs.items()},
        "windows_compared": len(steady),
        "qps_error_max": max((abs(r["qps_error"]) for r in steady), default=None),
        "qps_error_mean": (sum(abs(r["qps_error"]) for r in steady) / len(steady)) if steady else None,
        "qps_by_phase": phases,
        "qps_error_phase_max": max((abs(p["error"]) for p in phases.values()), default=None),
        "retune_reasons": [d.get("reason") for d in state.get("decisions", [])],
        "load_retune_after_step": any(
            d.get("reason") == "load" and t_step is not None and float(d.get("time", 0)) > t_step
            for d in state.get("decisions", [])
        ),
        "trials_recorded": len(state.get("trials", [])),
        "observe_status": None
        if observed is None
        else {k: observed["status"].get(k) for k in ("mode", "trials_total", "point", "warnings")},
        "p99_cis_overlap": [r["p99_cis_overlap"] for r in rows if r["p99_cis_overlap"] is not None],
        "generators": {
            n: {
                k: g[k]
                for k in (
                    "scheduled_qps",
                    "achieved_qps",
                    "worst_second_achieved_error",
                    "send_lag_us",
                    "latency_us",
                    "unanswered",
                    "errors",
                )
            }
            for n, g in gens.items()
        },
        "windows": rows,
    }
    if cfg.mode == "tune":
        after = report["knobs_after_sigterm"] = _knobs_after_sigterm(tmp)
        boot = json.loads((tmp / "boot_knobs.json").read_text())
        report["knobs_restored"] = (
            after["governors"] == boot["governors"]
            and after["limits"] == boot["limits"]
            and after["nic"]["use_adaptive_rx_coalesce"] == 1
            and after["nic"]["rx_coalesce_usecs"] == 1
        )
        report["trial_points"] = [  # (asked, read back from the kit while measuring) per completed trial
            (t.get("point"), (t.get("measurement") or {}).get("point"))
            for t in state.get("trials", [])
            if t.get("status") == "completed"
        ]
    return report
