"""Load control for a real testbed: a `LoadControl` that runs a load generator as a child process.

`CommandLoad` starts a command built from a template each time the offered load changes -- `tuner load`, or an
external generator such as mutilate -- with `{qps}`, `{seconds}` and `{server}` filled in, and stops the previous
run first (SIGTERM, then SIGKILL after `stop_timeout_s`). The template is split like a shell would (`shlex`) but
never run through a shell. A generator that exits on its own with an error is reported as a one-line `HostError`
(its last stderr line) the next time the load is set or checked. `LoadedHost` gives any `Host` this control, so
`tuner sweep --host real --qps ...` and `tuner replay TRACE --host real` drive the testbed's load themselves.

Example templates::

    tuner load --server {server} --qps {qps} --duration {seconds} --quiet
    mutilate -s {server} -q {qps} -t {seconds} -T 8 -c 4
"""

from __future__ import annotations

import math
import shlex
import signal
import subprocess
import tempfile
import time
from typing import Any

from actuators.abilities import Closable, abilities_of
from actuators.host import Host, KnobSpace, LoadControl, Measurement, OperatingPoint
from core.errors import HostError

FIELDS = ("qps", "seconds", "server")


class CommandLoad:
    """Runs `template` (with `{qps}`, `{seconds}`, `{server}`) as the load generator; one run at a time."""

    def __init__(
        self,
        template: str,
        *,
        server: str = "127.0.0.1:11211",
        seconds: float = 86_400,
        stop_timeout_s: float = 5.0,
        max_requests: float | None = None,
    ) -> None:
        if "{qps}" not in template:
            raise HostError(f"load command {template!r}: expected a {{qps}} placeholder for the offered load")
        try:
            shlex.split(template.format(qps=1, seconds=1, server=server))
        except (KeyError, IndexError, ValueError) as exc:
            raise HostError(f"load command {template!r}: bad template ({exc}); placeholders: {FIELDS}") from None
        if not (seconds > 0 and math.isfinite(seconds)):
            raise HostError(f"load seconds {seconds!r}: expected > 0")
        self.template = template
        self.server = server
        self.seconds = seconds
        self.max_requests = max_requests  # a generator that plans its run in memory: {seconds} <= this / {qps}
        self.stop_timeout_s = stop_timeout_s
        self.qps: float | None = None
        self._proc: subprocess.Popen[bytes] | None = None
        self._err: Any = None

    def run_seconds(self, qps: float) -> int:
        """`{seconds}` for `qps`: `seconds`, or less when `max_requests` would be exceeded (at least 60 s)."""
        seconds = self.seconds
        if self.max_requests is not None and qps > 0:
            seconds = min(seconds, max(60.0, self.max_requests / qps))
        return int(math.ceil(seconds))

    def argv(self, qps: float) -> list[str]:
        """The command for `qps` (rounded to a whole request/s; seconds as an integer)."""
        return shlex.split(self.template.format(qps=int(round(qps)), seconds=self.run_seconds(qps), server=self.server))

    def set_offered_qps(self, qps: float) -> None:
        """Stop the running generator and start one at `qps` (0 = just stop)."""
        if not (qps >= 0 and math.isfinite(qps)):
            raise HostError(f"offered load {qps!r}: expected a finite rate >= 0")
        self.check()
        self.stop()
        self.qps = qps
        if qps == 0:
            return
        self._start(qps)

    def _start(self, qps: float) -> None:
        argv = self.argv(qps)
        self._err = tempfile.TemporaryFile()
        try:
            self._proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=self._err)
        except OSError as exc:
            raise HostError(f"load command {argv[0]!r}: cannot start: {exc.strerror}") from None

    def check(self) -> None:
        """HostError if the generator exited with an error (its last stderr line); fine while it runs. A run that
        ended on its own ({seconds} over) is started again while the load is still wanted."""
        proc = self._proc
        if proc is None or proc.poll() is None:
            return
        if proc.returncode == 0:
            self.stop()
            if self.qps:
                self._start(self.qps)
            return
        line = self._last_line()
        code = proc.returncode
        self._proc = None
        raise HostError(f"load generator exited with status {code}: {line or 'no message'}")

    def _last_line(self) -> str:
        if self._err is None:
            return ""
        self._err.seek(0)
        lines = [ln for ln in self._err.read().decode(errors="replace").splitlines() if ln.strip()]
        return lines[-1].strip() if lines else ""

    def running(self) -> bool:
        return self._proc is not None and self._proc.poll() is None

    def stop(self) -> None:
        """Stop the generator (SIGTERM, then SIGKILL); idempotent."""
        proc, self._proc = self._proc, None
        if proc is not None and proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(timeout=self.stop_timeout_s)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(timeout=self.stop_timeout_s)
        if self._err is not None:
            self._err.close()
            self._err = None

    close = stop


class LoadedHost(Host, LoadControl, Closable):
    """A `Host` plus a load controller: `set_offered_qps` drives the generator, everything else is the host's.

    It has the optional abilities of the host it wraps (`actuators.abilities`: `apply`, `hardware_class`,
    `expected`, ...) as that host's own bound members, set per instance, so `isinstance(loaded, Ability)` answers
    as for the wrapped host; `close` stops the generator, then closes the wrapped host if it can be.

    A generator needs time to start (an interpreter, a schedule, its key set, connections: a second or more for
    `tuner load`), and a window measured before it sends would be measured at the wrong load. So `set_offered_qps`
    returns only once the host's own QPS reading (memcached's counters, the prober's requests taken out) is
    within `1 - ready_share` of the commanded load over a `ready_poll_s` interval (a key-set warm-up burst is
    far above it), and raises a one-line `HostError` if it is not within `ready_timeout_s` (the generator cannot
    reach the rate, or loads another server). `ready_timeout_s` = 0 skips the wait, and so does a wrapped host
    that sets its own load (a simulator models the load, it does not measure the generator's).
    """

    def __init__(
        self,
        host: Host,
        load: CommandLoad,
        *,
        ready_share: float = 0.9,
        ready_poll_s: float = 0.5,
        ready_timeout_s: float = 30.0,
    ) -> None:
        self.host = host
        self.load = load
        self.name = f"{host.name}+load"
        self.ready_share = ready_share
        self.ready_poll_s = ready_poll_s
        self.ready_timeout_s = ready_timeout_s
        for ability, members in abilities_of(host).items():
            if ability is not Closable:
                for member in members:
                    self.__dict__[member] = getattr(host, member)  # bound to the wrapped host

    def knobs(self) -> KnobSpace:
        return self.host.knobs()

    def set_itr(self, itr_us: int) -> None:
        self.host.set_itr(itr_us)

    def set_dvfs(self, ghz: float) -> None:
        self.host.set_dvfs(ghz)

    def point(self) -> OperatingPoint | None:
        return self.host.point()

    def restore(self) -> None:
        self.host.restore()

    def offered_qps(self) -> float:
        self.load.check()
        return self.host.offered_qps()

    def measure(self, seconds: float) -> Measurement:
        self.load.check()
        m = self.host.measure(seconds)
        self.load.check()
        return m

    def set_offered_qps(self, qps: float) -> None:
        self.load.set_offered_qps(qps)
        if qps > 0 and self.ready_timeout_s > 0 and not isinstance(self.host, LoadControl):
            self._await_load(qps)

    def _await_load(self, qps: float) -> None:
        """Block until the host measures `qps` within 1 - `ready_share` over one poll interval (see the class doc)."""
        deadline = time.monotonic() + self.ready_timeout_s
        self.host.offered_qps()  # opens a fresh interval
        seen = 0.0
        while time.monotonic() < deadline:
            time.sleep(self.ready_poll_s)  # the measurement interval of the host's QPS reading
            self.load.check()
            seen = self.host.offered_qps()
            if abs(seen / qps - 1.0) <= 1.0 - self.ready_share:
                return
        raise HostError(
            f"load generator: the host measured {seen:,.0f} requests/s {self.ready_timeout_s:g} s after starting "
            f"it, not within {1 - self.ready_share:.0%} of the commanded {qps:,.0f}/s (too slow a client, or it "
            "loads another server than the host's QPS source?)"
        )

    def close(self) -> None:
        self.load.stop()
        if isinstance(self.host, Closable):
            self.host.close()
