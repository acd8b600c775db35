"""A fake BMC: Debian's `ipmi_sim` (package `openipmi`) on 127.0.0.1, serving one power sensor in watts.

The BMC answers IPMI-over-LAN (RMCP+, `ipmitool -I lanplus -C 3`) on a free UDP port with one admin user. Its SDR
holds a full sensor record `name` (sensor 2, base unit Watts, M = 1: one raw byte is one watt, 0..255 W) whose
value ipmi_sim polls every `poll_ms` from a file -- `set_watts` writes that file, so the sensor follows whatever the
caller sets (the kit's modelled power, or a fixed value). ipmi_sim does not serve DCMI (`Get Power Reading` answers
"invalid command"), so a reader of this BMC falls back to the SDR sensor, as it does on BMCs without DCMI.

Everything lives in `workdir` (configuration, state, password file, the polled value); nothing is written elsewhere.
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path

from core.errors import HostError

USER = "tuner"
SENSOR = "Pwr Consumption"
START_DEADLINE_S = 10.0
MAX_WATTS = 255


def ipmi_sim_binary() -> str | None:
    """Path of `ipmi_sim`, or None when openipmi is not installed."""
    return shutil.which("ipmi_sim") or ("/usr/bin/ipmi_sim" if os.access("/usr/bin/ipmi_sim", os.X_OK) else None)


def free_udp_port() -> int:
    """A UDP port on 127.0.0.1 that was free a moment ago (ipmi_sim then binds it)."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def power_sdr(name: str, sensor: int = 2) -> list[int]:
    """A full sensor record (IPMI v2.0 section 43.1): owner 0x20, system board, threshold sensor of type
    "other units" (0x0b), unsigned, base unit Watts (6), M = 1, B = 0, exponents 0, id string `name`."""
    ident = name.encode("ascii")[:16]
    body = [0x20, 0x00, sensor, 0x07, 0x01, 0x67, 0x88, 0x0B, 0x01]  # key, entity, init, caps, type, reading code
    body += [0, 0, 0, 0, 0, 0]  # assertion, deassertion and reading masks (no thresholds)
    body += [0x00, 0x06, 0x00, 0x00]  # unsigned, Watts, no modifier unit, linear
    body += [0x01, 0x00, 0x00, 0x00, 0x00, 0x00]  # M = 1, tolerance, B = 0, accuracy, exponents
    body += [0x00, 0x00, 0x00, 0x00, MAX_WATTS, 0x00]  # analog flags, nominal, normal max/min, sensor max/min
    body += [0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0]  # thresholds, hysteresis, reserved, OEM
    body += [0xC0 | len(ident), *ident]  # 8-bit ASCII id string
    return [0x00, 0x00, 0x51, 0x01, len(body), *body]


@dataclass
class FakeBmc:
    """A running ipmi_sim: `host`, `port`, `user` and `password_file` are what a reader needs."""

    workdir: Path
    process: subprocess.Popen[bytes]
    port: int
    poll_ms: int
    host: str = "127.0.0.1"
    user: str = USER
    sensor: str = SENSOR
    _stopped: bool = field(default=False, repr=False)

    @property
    def password_file(self) -> Path:
        return self.workdir / "password"

    @property
    def value_file(self) -> Path:
        return self.workdir / "watts"

    def reader_options(self) -> dict[str, object]:
        """`[host.options.energy]` keys for this BMC (kind ipmi)."""
        return {
            "kind": "ipmi",
            "host": self.host,
            "port": self.port,
            "user": self.user,
            "password_file": str(self.password_file),
            "update_period_s": self.poll_ms / 1000.0,
        }

    def set_watts(self, watts: float) -> None:
        """The power the sensor reads from its next poll on (rounded to whole watts, clamped to 0..255)."""
        value = min(max(int(round(watts)), 0), MAX_WATTS)
        tmp = self.value_file.with_suffix(".tmp")
        tmp.write_text(f"{value}\n")
        os.replace(tmp, self.value_file)

    def pause(self) -> None:
        """Stop answering (SIGSTOP): a BMC that hangs."""
        self.process.send_signal(signal.SIGSTOP)

    def resume(self) -> None:
        self.process.send_signal(signal.SIGCONT)

    def stop(self) -> None:
        """Kill ipmi_sim and wait for it (idempotent)."""
        if self.process.poll() is None:
            self.process.kill()
        self.process.wait(timeout=5)
        self._stopped = True


def _write_config(workdir: Path, port: int, password: str, poll_ms: int, watts: float) -> None:
    (workdir / "state").mkdir(parents=True, exist_ok=True)
    (workdir / "watts").write_text(f"{min(max(int(round(watts)), 0), MAX_WATTS)}\n")
    pw = workdir / "password"
    pw.write_text(password + "\n")
    pw.chmod(0o600)
    (workdir / "lan.conf").write_text(
        f'name "tunerbmc"\nset_working_mc 0x20\n  startlan 1\n    addr 127.0.0.1 {port}\n    priv_limit admin\n'
        "    allowed_auths_callback none md5\n    allowed_auths_user md5\n    allowed_auths_operator md5\n"
        "    allowed_auths_admin md5\n    guid a123456789abcdefa123456789abcdef\n  endlan\n"
        f'  user 2 true "{USER}" "{password}" admin 10 md5\n'
    )
    sdr = " ".join(f"{b:#04x}" for b in power_sdr(SENSOR))
    (workdir / "bmc.emu").write_text(
        "mc_setbmc 0x20\nmc_add 0x20 0 no-device-sdrs 0x23 9 8 0x9f 0x1291 0xf02\n"
        f'sensor_add 0x20 0 2 0x0b 0x01 poll {poll_ms} file "{workdir / "watts"}"\n'
        f"main_sdr_add 0x20 {sdr}\n"
        "sensor_set_event_support 0x20 0 2 enable scanning per-state "
        "000000000000000 000000000000000 000000000000000 000000000000000\n"
        "mc_enable 0x20\n"
    )


def _answers(bmc: FakeBmc) -> bool:
    """Whether the BMC answers a session (ipmitool `mc info`), when ipmitool is installed; else UDP bound."""
    tool = shutil.which("ipmitool")
    if tool is None:
        return True
    args = [tool, "-I", "lanplus", "-C", "3", "-H", bmc.host, "-p", str(bmc.port), "-U", bmc.user]
    args += ["-f", str(bmc.password_file), "-N", "1", "-R", "1", "mc", "info"]
    try:
        return subprocess.run(args, capture_output=True, timeout=5, check=False).returncode == 0
    except subprocess.TimeoutExpired:
        return False


def start_bmc(
    workdir: str | Path, watts: float = 100.0, poll_ms: int = 1000, password: str = "fakebmc", port: int | None = None
) -> FakeBmc:
    """Start ipmi_sim in `workdir` on 127.0.0.1 and `port` (one attempt) or a free port, its sensor at `watts`;
    waits until it answers."""
    binary = ipmi_sim_binary()
    if binary is None:
        raise HostError("ipmi_sim not installed (Debian package openipmi): no fake BMC", permanent=True)
    root = Path(workdir)
    root.mkdir(parents=True, exist_ok=True)
    for _attempt in range(1 if port else 3):  # a free port can be taken between probe and bind: retry on another
        udp = port or free_udp_port()
        _write_config(root, udp, password, poll_ms, watts)
        log = (root / "ipmi_sim.log").open("wb")
        proc = subprocess.Popen(
            [binary, "-c", str(root / "lan.conf"), "-f", str(root / "bmc.emu"), "-s", str(root / "state"), "-n"],
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=log,
        )
        log.close()
        bmc = FakeBmc(root, proc, udp, poll_ms)
        deadline = time.monotonic() + START_DEADLINE_S
        while proc.poll() is None and time.monotonic() < deadline:
            if _answers(bmc):
                return bmc
            time.sleep(0.05)  # poll interval of a bounded wait for the BMC to answer
        bmc.stop()
    raise HostError(f"ipmi_sim did not answer on 127.0.0.1 (see {root / 'ipmi_sim.log'})")
