"""Built-in latency prober: real memcached (or Redis/Valkey: `ProberConfig.protocol`) requests at a fixed low rate,
open-loop, into an HdrHistogram.

Open-loop pacing (wrk2 / HdrHistogram convention, Maricq et al. 2018, Antoniou et al.): request k is
*intended* at `t0 + k / rate` and its latency is measured from that intended time, not from when it
was actually sent. If the server (or the prober) stalls, the requests that should have gone out
during the stall are sent late, back to back, and each carries the stall in its latency --
coordinated omission cannot hide it. The thread sleeps until `spin_us` before the intended time and
then spins, so timer slack does not bias the samples; any remaining send lag *is* counted (it never
hides a stall, it may overstate) and is reported as `ProbeWindow.send_lag_p99_us` so you can see it.

Latencies are recorded in nanoseconds (sub-µs resolution, 3 significant digits) and reported in µs.
Percentile CIs come from order statistics (`core.stats.quantile_ci_ranks`) read off the histogram:
the low end at the lowest value of its bucket, the high end at the highest, so quantisation never
narrows the interval.

The prober also records the client-side settings that change measured tails (`ClientSettings`:
cpufreq governor, cpuidle driver/governor and C-states of the CPUs it may run on), read-only from
sysfs under a configurable root.

Modules: `engine` (settings, window, the in-process probe thread), `probe_env` (client settings, local-path
warnings); this one holds the `Prober` facade, the child-process isolation and the `python -m` entry.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from dataclasses import asdict
from pathlib import Path
from typing import TYPE_CHECKING, Any

from actuators.latency.dist import histogram_quantiles
from actuators.latency.engine import ProberConfig, ProbeWindow, ThreadProber, new_histogram, record_ns
from actuators.latency.memcached import MemcachedAddress
from actuators.latency.probe_env import ClientSettings, local_path_reason, read_client_settings, target_warning
from actuators.latency.servers import SERVER_KINDS, parse_address
from core.errors import HostError
from core.lifeline import PARENT_GONE, Lifeline, follow_parent, new_lifeline, send_to_parent, spawned_from_main_thread

if TYPE_CHECKING:
    import argparse
    from multiprocessing.connection import Connection

# names callers import from here (the prober's public face)
__all__ = [
    "ClientSettings",
    "Prober",
    "ProberConfig",
    "ProbeWindow",
    "ThreadProber",
    "histogram_quantiles",
    "local_path_reason",
    "main",
    "new_histogram",
    "read_client_settings",
    "record_ns",
    "target_warning",
]


class Prober:
    """`LatencySource`: paced memcached gets (and optional sets), open-loop, into an HdrHistogram.

    Probing runs only between `begin()` and `end()`; `begin()` seeds the keys (first window, and after
    misses), resets the histogram and restarts the schedule at now. `end()` stops new sends at the
    window end, waits up to `timeout_s` for requests still owed, and returns a `ProbeWindow`. It raises
    HostError naming the address when requests failed (refused, reset, protocol error).

    With `isolation="process"` (default) the probe loop runs in a spawned child process with its own
    interpreter: a Python thread shares the GIL with the tuner, and a busy tuner thread delays every
    probe by up to the 5 ms GIL switch interval (measured: p50 from 82 µs to 265 ms on this VM).
    `isolation="thread"` runs it in-process (tests, or a process that is idle while it measures).
    """

    def __init__(
        self,
        config: ProberConfig | None = None,
        *,
        settings_root: str | os.PathLike[str] | None = "/",
        **overrides: object,
    ) -> None:
        if config is None:
            config = ProberConfig(**overrides)  # type: ignore[arg-type]
        elif overrides:
            raise TypeError("pass either a ProberConfig or keyword overrides, not both")
        self.config = config
        self.address: MemcachedAddress = parse_address(config.protocol, config.target)
        self.settings: ClientSettings | None = (
            read_client_settings(settings_root, cpus=config.cpus or None) if settings_root is not None else None
        )
        self._engine: ThreadProber | ProcessProber = (
            ThreadProber(config) if config.isolation == "thread" else ProcessProber(config)
        )

    def begin(self) -> None:
        """Seed keys if needed (HostError if unreachable), reset the window, start probing now."""
        self._engine.begin()

    def end(self) -> ProbeWindow:
        """Close the window and summarise it."""
        return self._engine.end()

    def close(self) -> None:
        """Stop the probe thread/process and close its connection (idempotent)."""
        self._engine.close()

    def warnings(self) -> list[str]:
        """What limits this prober's view: a target that bypasses the NIC, client-side settings."""
        out = [w] if (w := target_warning(self.address)) else []
        return out + (self.settings.warnings() if self.settings is not None else [])


class ProcessProber:
    """Runs a `ThreadProber` in a child interpreter (`python -c ...`, its own GIL and session).

    Commands and `ProbeWindow`s travel over two pipes as `multiprocessing.connection` messages. The
    child exits when told to, or quietly when the parent goes away: its lifeline pipe (`core.lifeline`) closes,
    or a read or write on its pipes finds them closed.
    """

    #: First call: starting the interpreter and importing numpy/scipy/hdrh.
    START_TIMEOUT_S = 60.0

    def __init__(self, config: ProberConfig) -> None:
        self.config = config
        self.address = parse_address(config.protocol, config.target)
        self.process: subprocess.Popen[bytes] | None = None
        self._tx: Connection | None = None  # commands to the child, set and cleared with `process`
        self._rx: Connection | None = None  # its answers
        self._lifeline: int | None = None  # the write end the child watches (never written)
        self._closed = False

    def begin(self) -> None:
        first = self.process is None
        budget = self.config.timeout_s * (self.config.keys + 2) + (self.START_TIMEOUT_S if first else 5.0)
        self._call("begin", budget)

    def end(self) -> ProbeWindow:
        window: ProbeWindow = self._call("end", self.config.timeout_s + 10.0)
        return window

    def close(self) -> None:
        self._closed = True
        if self.process is None or self._tx is None or self._rx is None:
            return
        try:
            self._tx.send("close")
            if self._rx.poll(self.config.timeout_s + 3.0):
                self._rx.recv()
        except (EOFError, OSError):
            pass
        self._abandon(grace_s=3.0)

    def _start(self) -> None:
        from multiprocessing.connection import Connection

        cmd_r, cmd_w = os.pipe()
        res_r, res_w = os.pipe()
        life_r, life_w = new_lifeline()
        line = Lifeline(os.getpid(), life_r, spawned_from_main_thread())
        env = dict(os.environ)
        pkg_root = str(Path(__file__).resolve().parents[2])  # importable without an installed package
        env["PYTHONPATH"] = pkg_root + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
        try:
            self.process = subprocess.Popen(
                [
                    sys.executable,
                    "-c",
                    "from actuators.latency.prober import _serve; _serve()",
                    str(cmd_r),
                    str(res_w),
                    json.dumps(asdict(self.config)),
                    json.dumps(asdict(line)),
                ],
                pass_fds=(cmd_r, res_w, life_r),
                stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL,
                env=env,
                start_new_session=True,  # Ctrl-C goes to the parent, which closes us
            )
        except OSError as exc:
            for fd in (cmd_r, cmd_w, res_r, res_w, life_r, life_w):
                os.close(fd)
            raise HostError(f"cannot start the prober process: {exc.strerror or exc}") from None
        for fd in (cmd_r, res_w, life_r):
            os.close(fd)
        self._tx = Connection(cmd_w, readable=False)
        self._rx = Connection(res_r, writable=False)
        self._lifeline = life_w

    def _call(self, cmd: str, timeout_s: float) -> Any:
        if self._closed:
            raise HostError("prober is closed")
        if self.process is None:
            self._start()
        tx, rx = self._tx, self._rx
        if tx is None or rx is None:  # _start sets both or raises
            raise HostError("prober process has no pipes")
        try:
            tx.send(cmd)
            if not rx.poll(timeout_s):
                self._abandon()
                raise HostError(f"prober process did not answer {cmd!r} within {timeout_s:g} s (killed)")
            status, payload = rx.recv()
        except (EOFError, OSError):
            code = self.process.poll() if self.process else None
            self._abandon()
            raise HostError(f"prober process died (exit status {code}); the next begin() starts a new one") from None
        if status != "ok":
            raise HostError(payload)
        return payload

    def _abandon(self, grace_s: float = 0.0) -> None:
        proc, tx, rx, life = self.process, self._tx, self._rx, self._lifeline
        self.process = self._tx = self._rx = self._lifeline = None
        for conn in (tx, rx):
            if conn is not None:
                conn.close()
        if life is not None:
            os.close(life)
        if proc is not None:
            try:
                proc.wait(timeout=grace_s) if grace_s else None
            except subprocess.TimeoutExpired:
                pass
            if proc.poll() is None:
                proc.kill()
                proc.wait(timeout=5.0)


def _serve() -> None:
    """Child interpreter: serve begin/end/close for one `ThreadProber` until told to close or orphaned."""
    from multiprocessing.connection import Connection

    follow_parent(Lifeline(**json.loads(sys.argv[4])))
    import scipy.stats  # noqa: F401 - import now, not inside the first window (it would steal the GIL)

    rx = Connection(int(sys.argv[1]), writable=False)
    tx = Connection(int(sys.argv[2]), readable=False)
    serve(rx, tx, ThreadProber(ProberConfig(**json.loads(sys.argv[3]))))


def serve(rx: Connection, tx: Connection, engine: ThreadProber | Any) -> None:
    """Answer the commands read from `rx` on `tx` until "close", or until a pipe is found closed (the parent is
    gone: stop probing and return, quietly -- there is nobody to report to)."""
    while True:
        try:
            cmd = rx.recv()
        except PARENT_GONE:
            cmd = "close"
        if cmd == "close":
            engine.close()
            send_to_parent(tx, ("ok", None), "prober: ")
            return
        if not send_to_parent(tx, _answer(engine, cmd), "prober: "):
            engine.close()
            return


def _answer(engine: ThreadProber | Any, cmd: object) -> tuple[str, Any]:
    """The reply to `cmd`: ("ok", payload) or ("err", one line)."""
    try:
        if cmd == "begin":
            engine.begin()
            return "ok", None
        if cmd == "end":
            return "ok", engine.end()
        raise HostError(f"prober: unknown command {cmd!r}")
    except HostError as exc:
        return "err", str(exc)
    except Exception as exc:  # noqa: BLE001 - report, keep serving
        return "err", f"prober: {type(exc).__name__}: {exc}"


# -- standalone: run the prober anywhere (e.g. a client machine) and print the hook JSON ----------
def _parser(description: str) -> argparse.ArgumentParser:
    """The standalone prober's command line."""
    import argparse

    ap = argparse.ArgumentParser(prog="python -m actuators.latency.prober", description=description)
    ap.add_argument("--target", required=True, help="the server's HOST:PORT or unix:/path (its NIC address)")
    ap.add_argument(
        "--protocol", choices=SERVER_KINDS, default="memcached", help="the server's: memcached or redis (Valkey too)"
    )
    # flags are ProberConfig's field names ([host.options.latency] keys) with dashes: one name per option
    ap.add_argument("--rate-hz", type=float, default=200.0, help="probes per second (default 200)")
    ap.add_argument("--timeout-s", type=float, default=0.5, help="per-request timeout in s (default 0.5)")
    ap.add_argument("--keys", type=int, default=16)
    ap.add_argument("--set-every", type=int, default=0, help="every Nth probe is a set (default 0: gets only)")
    ap.add_argument("--cpus", default="", help="pin the probe loop, e.g. 3 or 2,3")
    ap.add_argument(
        "--hlog",
        metavar="FILE",
        help="also write the probes as an HdrHistogram interval log, one interval per second (latency untagged, "
        "send_lag, response): the format `tuner load --hlog` writes, to compare the two second by second",
    )
    ap.add_argument(
        "--hlog-base",
        type=float,
        default=None,
        metavar="EPOCH_S",
        help="start the log's one-second intervals at this time (seconds since the epoch; default: the first probe), "
        "e.g. the StartTime of a `tuner load` log, so both logs' intervals cover the same seconds",
    )
    when = ap.add_mutually_exclusive_group(required=True)
    when.add_argument("--seconds", type=float, help="probe for this long")
    when.add_argument("--until-eof", action="store_true", help="probe until stdin is closed")
    return ap


def main(argv: list[str] | None = None) -> int:
    """`python -m actuators.latency.prober`: probe a memcached (or Redis) for a window and print hook JSON on stdout.

    With `--until-eof` it probes until its stdin closes, which is how `CommandLatency(mode="span")`
    drives it, locally or over ssh from the tuner host.
    """
    ap = _parser((main.__doc__ or "").splitlines()[0])
    args = ap.parse_args(argv)
    try:
        cpus = tuple(int(c) for c in args.cpus.split(",") if c.strip())
    except ValueError:
        ap.error(f"--cpus {args.cpus!r}: expected CPU numbers like 2,3")
    try:
        config = ProberConfig(
            target=args.target,
            rate_hz=args.rate_hz,
            timeout_s=args.timeout_s,
            keys=args.keys,
            set_every=args.set_every,
            isolation="thread",
            cpus=cpus,
            protocol=args.protocol,
        )
        engine = ThreadProber(config, keep_samples=args.hlog is not None)
        try:
            engine.begin()
            if args.until_eof:
                sys.stdin.buffer.read()  # blocks (GIL released) until the tuner closes our stdin
            else:
                time.sleep(max(args.seconds, 0.0))  # the window itself
            window = engine.end()
        finally:
            engine.close()
    except HostError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    if args.hlog is not None:
        from actuators.latency.hlog import write_sample_log

        try:
            with open(args.hlog, "w", encoding="utf-8") as out:
                write_sample_log(out, window.samples or [], args.hlog_base, comment=f"prober -> {config.target}")
        except OSError as exc:
            print(f"error: --hlog {args.hlog}: {exc.strerror}", file=sys.stderr)
            return 2
    from actuators.latency.hook import HOOK_KEYS, hook_json

    doc = hook_json(window, time.time())
    doc.update(
        ci_achieved={HOOK_KEYS[p]: ok for p, ok in window.ci_achieved.items()},
        timeouts=window.timeouts,
        incomplete=window.incomplete,
        send_lag_p99_us=window.send_lag_p99_us,
        target=str(config.target),
        client_warnings=read_client_settings("/", cpus=cpus or None).warnings(),
    )
    print(json.dumps(doc))
    return 0


if __name__ == "__main__":
    sys.exit(main())
