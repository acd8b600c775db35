"""Start the Debian `redis-server` binary for tests and benches: 127.0.0.1 on a free port, or a unix socket, with no
persistence (`--save "" --appendonly no`).

Test modules take the fixtures `redis_server` and `redis_unix` (tests/conftest.py) as arguments; the server is
polled until it answers PING (deadline, no fixed sleeps) and killed at teardown. Tests that use it are skipped, with
the reason, when the `redis-server` binary is not installed.
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
from functools import partial

from tests.memcached_server import START_DEADLINE_S, MemcachedServer, answers, await_answer, free_port

#: A running redis-server: the memcached fixture's record (process, `address` as `host:port` or `unix:/path`).
RedisServer = MemcachedServer


def redis_binary() -> str | None:
    """Path of the redis-server binary, or None."""
    return shutil.which("redis-server") or (
        "/usr/bin/redis-server" if os.access("/usr/bin/redis-server", os.X_OK) else None
    )


def start_redis(
    socket_path: str | None = None, extra_args: tuple[str, ...] = (), port: int | None = None
) -> RedisServer:
    """Start redis-server (TCP on 127.0.0.1 and `port`, default a free one, or only `socket_path`) and wait until it
    answers."""
    binary = redis_binary()
    if binary is None:
        raise FileNotFoundError("redis-server binary not found (apt-get install redis-server)")
    for _attempt in range(3):  # a free port can be taken between probe and bind: retry on another
        args = [binary, "--save", "", "--appendonly", "no", "--bind", "127.0.0.1", "--dir", "/tmp"]
        if socket_path:
            args += ["--port", "0", "--unixsocket", socket_path, "--unixsocketperm", "600"]
            family, addr, address, port = socket.AF_UNIX, socket_path, f"unix:{socket_path}", None
        else:
            port = port or free_port()
            args += ["--port", str(port)]
            family, addr, address = socket.AF_INET, ("127.0.0.1", port), f"127.0.0.1:{port}"
        proc = subprocess.Popen([*args, *extra_args], stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
        out = await_answer(proc, partial(answers, family, addr, b"*1\r\n$4\r\nPING\r\n", b"+PONG"), proc.stdout)
        if out is None:
            return RedisServer(proc, address, "127.0.0.1" if port else None, port, socket_path)
        if socket_path or b"address already in use" not in out.lower():
            raise RuntimeError(
                f"redis-server did not answer within {START_DEADLINE_S} s: {out.decode(errors='replace')[-300:]}"
            )
    raise RuntimeError("redis-server could not bind a free port after 3 attempts")
