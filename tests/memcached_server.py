"""Start the Debian `memcached` binary for tests: 127.0.0.1 on a free port, or a unix socket.

Test modules take the fixtures `memcached` and `memcached_unix` (tests/conftest.py) as arguments::

    def test_x(memcached):            # MemcachedServer, answering on memcached.address
        ...

The server is polled until it answers `version` (deadline, no fixed sleeps) and killed at teardown.
Tests that use it are skipped, with the reason, when the `memcached` binary is not installed.
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import time
from collections.abc import Callable
from dataclasses import dataclass
from functools import partial
from typing import IO

START_DEADLINE_S = 10.0


@dataclass
class MemcachedServer:
    """A running memcached: `address` is `host:port` or `unix:/path`."""

    process: subprocess.Popen
    address: str
    host: str | None = None
    port: int | None = None
    socket_path: str | None = None

    def stop(self) -> None:
        """Kill the server and wait for it (idempotent)."""
        if self.process.poll() is None:
            self.process.kill()
        self.process.wait(timeout=5)


def memcached_binary() -> str | None:
    """Path of the memcached binary, or None."""
    return shutil.which("memcached") or ("/usr/bin/memcached" if os.access("/usr/bin/memcached", os.X_OK) else None)


def free_port() -> int:
    """A TCP port on 127.0.0.1 that was free a moment ago (memcached then binds it)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def answers(family: int, addr: object, request: bytes = b"version\r\n", reply: bytes = b"VERSION") -> bool:
    """True when a server at `addr` answers `request` with a line starting `reply` (memcached's `version`)."""
    try:
        with socket.socket(family, socket.SOCK_STREAM) as s:
            s.settimeout(0.5)
            s.connect(addr)
            s.sendall(request)
            return s.recv(64).startswith(reply)
    except OSError:
        return False


def await_answer(proc: subprocess.Popen, answered: Callable[[], bool], output: IO[bytes] | None) -> bytes | None:
    """Wait up to `START_DEADLINE_S` for `answered()`: None once it is true, else what the process wrote to
    `output` (the process killed if still running, and reaped)."""
    deadline = time.monotonic() + START_DEADLINE_S
    while time.monotonic() < deadline and proc.poll() is None:
        if answered():
            return None
        time.sleep(0.01)  # poll interval, not synchronisation: the loop waits for an answer
    out = b""
    if proc.poll() is None:
        proc.kill()
    else:
        out = output.read() if output else b""
    proc.wait(timeout=5)
    return out


def start_memcached(socket_path: str | None = None, extra_args: tuple[str, ...] = ()) -> MemcachedServer:
    """Start memcached (TCP on 127.0.0.1:free port, or `socket_path`) and wait until it answers."""
    binary = memcached_binary()
    if binary is None:
        raise FileNotFoundError("memcached binary not found (apt-get install memcached)")
    for _attempt in range(3):  # a free port can be taken between probe and bind: retry on another
        if socket_path:
            args = [binary, "-s", socket_path, "-a", "0600"]
            family, addr, address, port = socket.AF_UNIX, socket_path, f"unix:{socket_path}", None
        else:
            port = free_port()
            args = [binary, "-l", "127.0.0.1", "-p", str(port), "-U", "0"]
            family, addr, address = socket.AF_INET, ("127.0.0.1", port), f"127.0.0.1:{port}"
        args += ["-m", "16", "-t", "1", "-c", "64", *extra_args]
        if os.geteuid() == 0:
            args += ["-u", "nobody"] if not socket_path else ["-u", "root"]
        proc = subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        err = await_answer(proc, partial(answers, family, addr), proc.stderr)
        if err is None:
            return MemcachedServer(proc, address, "127.0.0.1" if port else None, port, socket_path)
        if socket_path or b"bind" not in err.lower():
            raise RuntimeError(
                f"memcached did not answer within {START_DEADLINE_S} s: {err.decode(errors='replace').strip()}"
            )
    raise RuntimeError("memcached could not bind a free port after 3 attempts")
