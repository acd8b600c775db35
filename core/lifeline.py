"""Child processes that die with their parent, quietly.

A child started by a long-running process (the daemon's latency prober, its optimiser worker) must not outlive
it: after a SIGKILL of the parent nobody reads the child's answers, restores what it touches or reaps it. Two
mechanisms, both set up by the child itself right after it starts:

* a lifeline pipe: the parent creates it (`new_lifeline`), keeps the write end and never writes to it; the child
  watches the read end in a thread and exits (`os._exit`, no traceback, no cleanup) on EOF, which the kernel
  delivers the moment the parent's last copy of the write end closes -- however the parent died;
* Linux's parent-death signal (prctl PR_SET_PDEATHSIG, SIGKILL), armed only when the parent started the child
  from its main thread: the kernel sends it when the *thread* that created the child ends, and the daemon starts
  children from short-lived threads, where the signal would kill a healthy child. After arming, the child
  compares `getppid()` with the pid it was given: a parent that died before the signal was armed is noticed.

A broken pipe, EOF or a connection reset on the child's control pipe means the same thing (`PARENT_GONE`): the
child exits quietly instead of reporting an error to nobody.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import os
import signal
import sys
import threading
from dataclasses import dataclass
from typing import Any

#: What a read or write on a child's control pipe raises once the parent is gone.
PARENT_GONE: tuple[type[BaseException], ...] = (EOFError, OSError)

PR_SET_PDEATHSIG = 1


@dataclass(frozen=True)
class Lifeline:
    """What a child needs to follow its parent: the parent's pid, the lifeline's read end (a file descriptor
    open in the child), and whether to arm the parent-death signal."""

    parent_pid: int
    fd: int
    pdeathsig: bool


def new_lifeline() -> tuple[int, int]:
    """A lifeline pipe (read end, write end), both non-inheritable: pass the read end to one child explicitly
    (`pass_fds`, or a `multiprocessing` connection), keep the write end open for the child's life, then close it."""
    return os.pipe()


def spawned_from_main_thread() -> bool:
    """Whether the calling thread may be the parent-death signal's reference (the process's main thread)."""
    return threading.current_thread() is threading.main_thread()


def follow_parent(line: Lifeline) -> None:
    """In the child: exit now if the parent is already gone, else exit as soon as it goes."""
    if line.pdeathsig:
        _arm_pdeathsig()
    if os.getppid() != line.parent_pid:
        os._exit(0)  # the parent died before we were watching (we were re-parented)
    threading.Thread(target=_watch, args=(line.fd,), name="lifeline", daemon=True).start()


def _watch(fd: int) -> None:
    while True:
        try:
            if not os.read(fd, 64):
                break  # EOF: the parent's write end is closed
        except InterruptedError:
            continue
        except OSError:
            break
    os._exit(0)


def _arm_pdeathsig() -> None:
    if not sys.platform.startswith("linux"):
        return
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)
        libc.prctl(PR_SET_PDEATHSIG, int(signal.SIGKILL), 0, 0, 0)
    except (OSError, AttributeError):
        pass  # the lifeline pipe still ends us


def send_to_parent(conn: Any, message: tuple[str, Any], who: str = "") -> bool:
    """Send `message` on the child's reply pipe; False when the parent is gone (`PARENT_GONE`). A message that
    cannot be sent (e.g. a payload that cannot be pickled) is replaced by an ("err", ...) saying so, `who`
    prefixed."""
    try:
        conn.send(message)
    except PARENT_GONE:
        return False
    except Exception as exc:  # noqa: BLE001 - say so instead of dying with the request unanswered
        return send_to_parent(conn, ("err", f"{who}cannot send the answer: {type(exc).__name__}: {exc}"), who)
    return True
