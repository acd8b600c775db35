"""Do the prober and the load generator agree on the tail? Both against one memcached on 127.0.0.1, same seconds.

`run_agreement` starts memcached (a free port), `tuner load` replaying the bundled trace's busy hours at `qps`
(`--hlog`), and, once the generator runs, the standalone prober (`python -m actuators.latency.prober --hlog
--hlog-base <the generator's log start>`) for `seconds`, so the two logs' one-second intervals cover the same
seconds. It then compares, over the seconds both recorded (the prober's partial first and last second dropped):

* **latency** (from each client's *scheduled* send time): what each reports; includes its own send lag;
* **response time** (from the *actual* send to the reply read): the send lag taken out, the client's wake-up and
  its own pipelining (requests sent together after a stall wait on each other) still in;
* **service time**: requests sent on time (send lag <= 100 µs), alone, onto an idle connection, by a send that
  was not interrupted, from the send to the kernel's receive stamp of the reply (before the client wakes up) --
  the like-for-like number (docs/load-generator.md says why each condition is there);
* each client's send lag.

CIs are block-bootstrap CIs over seconds (`actuators.latency.agreement`), paired across the two clients; the
order-statistic (iid) CIs are reported beside them. Loopback: no NIC between client and server.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from actuators.latency.agreement import compare, effective_samples
from actuators.latency.hlog import LAG_TAG, RESPONSE_TAG, SERVICE_TAG, read_log
from tests.memcached_server import start_memcached

REPO = Path(__file__).resolve().parent.parent
PY = sys.executable
TRACE_START_S = 66_000  # the bundled day's busiest ~2 h


@dataclass(frozen=True)
class AgreementConfig:
    qps: float = 2000.0
    seconds: float = 15.0
    prober_hz: float = 500.0
    connections: int = 2
    memcached_threads: int = 2
    resamples: int = 2000


def _start_epoch(hlog: Path, timeout_s: float) -> float:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            for line in hlog.read_text().splitlines():
                if line.startswith("#[StartTime:"):
                    return float(line.split()[1])
        except FileNotFoundError:
            pass
        time.sleep(0.05)  # poll interval of a deadline loop (the generator writes the header at its start)
    raise TimeoutError(f"agreement: {hlog.name} has no StartTime within {timeout_s:g} s")


def run_agreement(tmp: Path, cfg: AgreementConfig = AgreementConfig()) -> dict[str, Any]:
    """Run both clients against one memcached for `cfg.seconds` and compare them (see the module doc)."""
    tmp.mkdir(parents=True, exist_ok=True)
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    server = start_memcached(extra_args=("-m", "64", "-c", "256", "-t", str(cfg.memcached_threads)))
    gen = None
    load_before = os.getloadavg()
    try:
        gen_cmd = [
            PY, "-m", "tuner.cli", "load", "--server", server.address, "--trace", "sample",
            "--peak-qps", f"{cfg.qps:g}", "--peak-window", "600", "--start", str(TRACE_START_S),
            "--duration", f"{cfg.seconds + 30:g}", "--connections", str(cfg.connections),
            "--quiet", "--hlog", str(tmp / "gen.hlog"), "--json", str(tmp / "gen.json"),
        ]  # fmt: skip
        gen = subprocess.Popen(gen_cmd, cwd=REPO, env=env, stdout=subprocess.DEVNULL, stderr=open(tmp / "gen.err", "w"))
        base = _start_epoch(tmp / "gen.hlog", 30.0)
        probe = subprocess.run(
            [
                PY,
                "-m",
                "actuators.latency.prober",
                "--target",
                server.address,
                "--rate-hz",
                f"{cfg.prober_hz:g}",
                "--seconds",
                f"{cfg.seconds:g}",
                "--hlog",
                str(tmp / "prober.hlog"),
                "--hlog-base",
                f"{base:.3f}",
            ],  # fmt: skip
            cwd=REPO,
            env=env,
            capture_output=True,
            text=True,
            timeout=cfg.seconds + 60,
        )
        if probe.returncode != 0:
            raise RuntimeError(f"prober failed: {probe.stderr.strip()}")
    finally:
        if gen is not None:
            if gen.poll() is None:
                gen.send_signal(signal.SIGTERM)
            gen.wait(timeout=30)
        server.stop()
    return analyse(tmp, cfg, load_before)


def analyse(tmp: Path, cfg: AgreementConfig, load_before: tuple[float, ...] = ()) -> dict[str, Any]:
    gen, probe = read_log(tmp / "gen.hlog"), read_log(tmp / "prober.hlog")
    probe_secs = sorted(s for s, h in probe.by_tag[None].items() if h.get_total_count())
    inner = set(probe_secs[1:-1])  # the prober's first and last second are partial
    gen_secs = {s for s, h in gen.by_tag[None].items() if h.get_total_count()}
    common = sorted(inner & gen_secs)
    out: dict[str, Any] = {"config": asdict(cfg), "loopback": True, "common_seconds": len(common)}
    for name, tag in (("latency", None), ("response", RESPONSE_TAG), ("service", SERVICE_TAG), ("send_lag", LAG_TAG)):
        try:
            ag = compare(gen.by_tag[tag], probe.by_tag[tag], 99.0, seconds=common, resamples=cfg.resamples)
        except ValueError as exc:  # e.g. no second in which both sent a request on time
            out[name] = {"error": str(exc)}
            continue
        row = ag.as_dict()
        row["generator"], row["prober"] = row.pop("a"), row.pop("b")
        for who, q in (("generator", ag.a), ("prober", ag.b)):
            row[who]["effective_samples"] = round(effective_samples(q.count, q.iid_ci_us, q.ci_us))
        out[name] = row
    for who, log in (("generator", gen), ("prober", probe)):
        out.setdefault("requests_compared", {})[who] = sum(log.by_tag[None][s].get_total_count() for s in common)
    out["loadavg"] = {"before": load_before, "after": os.getloadavg()}
    return out
