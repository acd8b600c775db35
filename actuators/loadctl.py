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
from typing import Any

from actuators.host import Host, KnobSpace, Measurement, OperatingPoint
from core.errors import HostError

FIELDS = ("qps", "seconds", "server")


class CommandLoad:
    """Runs `template` (with `{qps}`, `{seconds}`, `{server}`) as the load generator; one run at a time."""

    def __init__(
        self, template: str, *, server: str = "127.0.0.1:11211", seconds: float = 86_400, stop_timeout_s: float = 5.0
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
        self.stop_timeout_s = stop_timeout_s
        self.qps: float | None = None
        self._proc: subprocess.Popen[bytes] | None = None
        self._err: Any = None

    def argv(self, qps: float) -> list[str]:
        """The command for `qps` (rounded to a whole request/s; seconds as an integer)."""
        return shlex.split(
            self.template.format(qps=int(round(qps)), seconds=int(math.ceil(self.seconds)), server=self.server)
        )

    def set_offered_qps(self, qps: float) -> None:
        """Stop the running generator and start one at `qps` (0 = just stop)."""
        if not (qps >= 0 and math.isfinite(qps)):
            raise HostError(f"offered load {qps!r}: expected a finite rate >= 0")
        self.check()
        self.stop()
        self.qps = qps
        if qps == 0:
            return
        argv = self.argv(qps)
        self._err = tempfile.TemporaryFile()
        try:
            self._proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=self._err)
        except OSError as exc:
            raise HostError(f"load command {argv[0]!r}: cannot start: {exc.strerror}") from None

    def check(self) -> None:
        """HostError if the generator exited with an error (its last stderr line); fine while it runs."""
        proc = self._proc
        if proc is None or proc.poll() is None or proc.returncode == 0:
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


class LoadedHost:
    """A `Host` plus a load controller: `set_offered_qps` drives the generator, everything else is the host's."""

    def __init__(self, host: Host, load: CommandLoad) -> None:
        self.host = host
        self.load = load
        self.name = f"{host.name}+load"

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

    def close(self) -> None:
        self.load.stop()
        closer = getattr(self.host, "close", None)
        if callable(closer):
            closer()

    def __getattr__(self, name: str) -> Any:  # apply(), warnings, hardware class, ... of the wrapped host
        return getattr(self.host, name)
