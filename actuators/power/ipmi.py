"""The BMC's power over IPMI-over-LAN, through Debian's `ipmitool` (`-I lanplus`, RMCP+).

`read` asks DCMI `Get Power Reading` (`ipmitool dcmi power reading`: the instantaneous input power) where the BMC
has it; a BMC that answers it with an error (no DCMI: many older or cheaper BMCs, and `ipmi_sim`) is asked for an
SDR sensor in watts instead -- `sensor` by name, or by default the first full sensor record whose unit is Watts
(`ipmitool -c sdr list full`), then read alone (`ipmitool -c sensor reading NAME`). Which one answered is decided at
the first read and kept.

Why ipmitool and not python-ipmi: python-ipmi's own LAN interface speaks IPMI 1.5 only (no RMCP+), and for
IPMI 2.0 it runs ipmitool anyway; ipmitool is in Debian, kept, and what operators already use against their BMCs.
The password never appears on a command line: it is read by ipmitool from `password_file` (`-f`), or given
through the environment (`-E`, `IPMI_PASSWORD`) from `password_env`, the name of a variable of this process.

Faults: a BMC that does not answer (timeout, no session) is a transient `HostError` (the energy meter backs off and
retries); a refused login, a missing password file or a BMC with no power reading at all are permanent.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import time
from dataclasses import dataclass, field
from typing import Any

from actuators.power.source import PowerSample, SourceInfo
from core.errors import HostError

DCMI = "dcmi"
SDR = "sdr"
_DCMI_WATTS = re.compile(r"Instantaneous power reading:\s*([0-9.]+)\s*Watts", re.IGNORECASE)
_PERMANENT = ("password", "unauthorized", "invalid user", "rakp", "insufficient privilege", "authentication")


@dataclass
class IpmiReader:
    """A `PowerReader` of one BMC (see the module docstring); `make_reader` builds it from `[host.options]`."""

    host: str
    user: str
    port: int = 623
    password_file: str | None = None
    password_env: str | None = None
    sensor: str | None = None  # SDR sensor name; None: the first one in watts (only when DCMI is not served)
    cipher_suite: int = 3
    update_period_s: float = 1.0
    resolution_w: float = 1.0
    timeout_s: float = 1.0
    use_dcmi: bool = True
    ipmitool: str = "ipmitool"
    _mode: str | None = field(default=None, repr=False)

    @property
    def info(self) -> SourceInfo:
        return SourceInfo("ipmi", ("platform",), self.update_period_s, self.resolution_w, "W")

    def read(self) -> PowerSample:
        """The BMC's power now (DCMI, else the SDR sensor)."""
        if self._mode is None:
            self._mode = self._discover()
        t0 = time.monotonic()
        if self._mode == DCMI:
            watts = self._dcmi_watts(self._run("dcmi", "power", "reading"))
        else:
            assert self.sensor is not None
            watts = _csv_value(self._run("-c", "sensor", "reading", self.sensor), self.sensor)
        return PowerSample((t0 + time.monotonic()) / 2.0, watts=watts)  # stamped mid-way through the session

    def close(self) -> None:
        """Nothing held between reads (each read is one ipmitool session)."""

    def describe(self) -> str:
        how = "DCMI power reading" if self._mode == DCMI else f"SDR sensor {self.sensor!r}"
        return f"ipmi {self.host}:{self.port} ({how if self._mode else 'not read yet'})"

    def _discover(self) -> str:
        """DCMI if the BMC answers it, else the SDR sensor in watts (named, or the first)."""
        if self.use_dcmi and self.sensor is None:
            try:
                out = self._run("dcmi", "power", "reading")
                self._dcmi_watts(out)
                return DCMI
            except HostError as exc:
                if not _refused(str(exc)):
                    raise
        self.sensor = self._find_sensor()
        return SDR

    def _find_sensor(self) -> str:
        rows = [line.split(",") for line in self._run("-c", "sdr", "list", "full").splitlines() if line.strip()]
        for row in rows:
            if len(row) >= 3 and (row[0] == self.sensor or (self.sensor is None and row[2].strip() == "Watts")):
                return row[0]
        what = f"no SDR sensor named {self.sensor!r}" if self.sensor else "no SDR sensor in Watts"
        raise HostError(f"ipmi {self.host}:{self.port}: no DCMI power reading and {what}", permanent=True)

    def _dcmi_watts(self, out: str) -> float:
        m = _DCMI_WATTS.search(out)
        if not m:
            raise HostError(f"ipmi {self.host}:{self.port}: DCMI power reading not understood: {out.strip()[:80]!r}")
        return float(m.group(1))

    def _command(self, *args: str) -> tuple[list[str], dict[str, str]]:
        cmd = [self.ipmitool, "-I", "lanplus", "-C", str(self.cipher_suite), "-H", self.host, "-p", str(self.port)]
        cmd += ["-U", self.user, "-N", f"{max(int(self.timeout_s), 1)}", "-R", "1"]
        env = dict(os.environ)
        if self.password_file:
            cmd += ["-f", self.password_file]
        elif self.password_env:
            env["IPMI_PASSWORD"] = os.environ.get(self.password_env, "")
            cmd += ["-E"]
        return [*cmd, *args], env

    def _run(self, *args: str) -> str:
        cmd, env = self._command(*args)
        try:
            done = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=self.timeout_s * 3 + 1)
        except subprocess.TimeoutExpired:
            raise HostError(f"ipmi {self.host}:{self.port}: no answer within {self.timeout_s * 3 + 1:.0f} s") from None
        except OSError as exc:
            raise HostError(f"ipmi: cannot run {self.ipmitool}: {exc.strerror or exc}", permanent=True) from None
        if done.returncode != 0:
            err = " ".join((done.stderr or done.stdout).split())[:200]
            permanent = any(word in err.lower() for word in _PERMANENT)
            raise HostError(f"ipmi {self.host}:{self.port}: {err or 'ipmitool failed'}", permanent=permanent)
        return done.stdout


def _refused(message: str) -> bool:
    """Whether an ipmitool error says the BMC does not serve the command (rather than not answering)."""
    low = message.lower()
    return "invalid command" in low or "dcmi request failed" in low or "not supported" in low


def _csv_value(out: str, name: str) -> float:
    """The value of `ipmitool -c sensor reading NAME` (`NAME,VALUE`)."""
    for line in out.splitlines():
        head, _, value = line.rpartition(",")
        if head.strip() == name:
            try:
                return float(value)
            except ValueError:
                raise HostError(f"ipmi sensor {name!r} has no reading ({value.strip() or 'empty'})") from None
    raise HostError(f"ipmi sensor {name!r}: no reading in {out.strip()[:80]!r}")


_OPTIONS = {
    "host": str,
    "user": str,
    "port": int,
    "password_file": str,
    "password_env": str,
    "sensor": str,
    "cipher_suite": int,
    "update_period_s": float,
    "resolution_w": float,
    "timeout_s": float,
    "use_dcmi": bool,
    "ipmitool": str,
}


def make_reader(**options: Any) -> IpmiReader:
    """An `IpmiReader` from `[host.options.energy]` keys (kind = "ipmi"); one-line errors name the key."""
    for key, value in options.items():
        kind = _OPTIONS.get(key)
        if kind is None:
            raise HostError(f"energy.{key}: unknown ipmi option (expected {', '.join(_OPTIONS)})", permanent=True)
        if not isinstance(value, kind) or (kind is int and isinstance(value, bool)):
            if not (kind is float and isinstance(value, int) and not isinstance(value, bool)):
                raise HostError(f"energy.{key}: {value!r}: expected {kind.__name__}", permanent=True)
    for key in ("host", "user"):
        if not options.get(key):
            raise HostError(f"energy.{key}: required for kind ipmi", permanent=True)
    if not options.get("password_file") and not options.get("password_env"):
        raise HostError("energy.password_file: required for kind ipmi (or password_env)", permanent=True)
    pw = options.get("password_file")
    if pw and not os.access(pw, os.R_OK):
        raise HostError(f"energy.password_file: {pw} is not readable", permanent=True)
    for key in ("update_period_s", "timeout_s", "resolution_w"):
        if key in options and not float(options[key]) > 0:
            raise HostError(f"energy.{key}: {options[key]!r}: expected > 0", permanent=True)
    reader = IpmiReader(**options)
    if shutil.which(reader.ipmitool) is None:
        raise HostError(f"energy.ipmitool: {reader.ipmitool} not found (Debian package ipmitool)", permanent=True)
    return reader
