"""A child that follows its parent ends within a second of the parent's SIGKILL -- also when the thread that
started it is long gone -- and at once when its parent died before it was watching."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from tests.children import kill_and_find_orphans

REPO = Path(__file__).resolve().parents[2]

#: A parent that starts one following child from a thread that then ends, prints the child's pid, and waits.
PARENT = r"""
import json, os, subprocess, sys, threading
from dataclasses import asdict
from core.lifeline import Lifeline, new_lifeline, spawned_from_main_thread
keep = []
def start():
    r, w = new_lifeline()
    line = Lifeline(os.getpid(), r, spawned_from_main_thread())
    child = subprocess.Popen([sys.executable, "-c", CHILD, json.dumps(asdict(line))], pass_fds=(r,))
    os.close(r)
    keep.append(w)
    print(child.pid, flush=True)
CHILD = "import json, sys, threading; from core.lifeline import Lifeline, follow_parent; " \
        "follow_parent(Lifeline(**json.loads(sys.argv[1]))); print('following', flush=True); threading.Event().wait()"
t = threading.Thread(target=start)
t.start(); t.join()
sys.stdin.read()
"""


def test_a_child_started_from_an_ended_thread_lives_with_its_parent_and_dies_with_it():
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    parent = subprocess.Popen(
        [sys.executable, "-c", PARENT], env=env, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
    )
    try:
        assert parent.stdout is not None
        int(parent.stdout.readline())
        assert parent.stdout.readline().strip() == "following"  # the starting thread has ended: still alive
        assert kill_and_find_orphans(parent, within_s=1.0) == []
    finally:
        if parent.poll() is None:
            parent.kill()
            parent.wait()


def test_a_child_whose_parent_is_already_gone_exits_at_once():
    r, w = os.pipe()
    code = subprocess.run(
        [
            sys.executable,
            "-c",
            "import sys; from core.lifeline import Lifeline, follow_parent; "
            "follow_parent(Lifeline(int(sys.argv[1]), int(sys.argv[2]), True)); print('not reached')",
            str(os.getpid() + 1_000_000),  # not its parent: as if re-parented after its parent died
            str(r),
        ],
        env={**os.environ, "PYTHONPATH": str(REPO)},
        pass_fds=(r,),
        capture_output=True,
        text=True,
        timeout=30,
    )
    os.close(r)
    os.close(w)
    assert code.returncode == 0 and code.stdout == "" and code.stderr == ""


def test_the_lifeline_closing_ends_the_follower():
    r, w = os.pipe()
    child = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import sys, threading; from core.lifeline import Lifeline, follow_parent; "
            "follow_parent(Lifeline(int(sys.argv[1]), int(sys.argv[2]), False)); print('ok', flush=True); "
            "threading.Event().wait()",
            str(os.getpid()),
            str(r),
        ],
        env={**os.environ, "PYTHONPATH": str(REPO)},
        pass_fds=(r,),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    os.close(r)
    try:
        assert child.stdout is not None and child.stdout.readline().strip() == "ok"
        os.close(w)  # what the kernel does for a parent that dies
        assert child.wait(timeout=5) == 0
        assert child.stderr is not None and child.stderr.read() == ""
    finally:
        if child.poll() is None:
            child.kill()
            child.wait()
