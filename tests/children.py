"""Children left behind: SIGKILL a process and list its descendants still running a bounded time later."""

from __future__ import annotations

import subprocess
import time

import psutil


def running(procs: list[psutil.Process]) -> list[psutil.Process]:
    """Those of `procs` still running (a zombie nobody reaped yet has ended)."""
    out = []
    for p in procs:
        try:
            if p.is_running() and p.status() != psutil.STATUS_ZOMBIE:
                out.append(p)
        except psutil.NoSuchProcess:
            continue
    return out


def kill_and_find_orphans(proc: subprocess.Popen, within_s: float = 1.0) -> list[str]:
    """SIGKILL `proc`, then poll its descendants for up to `within_s`: the command lines of those still running
    (killed afterwards, so nothing leaks into the next test)."""
    kids = psutil.Process(proc.pid).children(recursive=True)
    proc.kill()
    proc.wait(timeout=10)
    deadline = time.monotonic() + within_s
    while (alive := running(kids)) and time.monotonic() < deadline:
        time.sleep(0.02)  # poll interval of a bounded wait
    lines = []
    for p in alive:
        try:
            lines.append(" ".join(p.cmdline())[:200])
            p.kill()
        except psutil.NoSuchProcess:
            continue
    return lines
