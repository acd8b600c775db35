"""Offered load of a Redis or Valkey server from its own `INFO` counters (`RedisInfoQps`, a `QpsSource`).

The count is `total_commands_processed` (INFO stats) less the calls of the commands that ask the server about
itself rather than read or write the cache (`NOT_REQUESTS`, from INFO commandstats): `INFO` -- this source's own
reads, and any monitoring's --, the connection handshake (`HELLO`, `AUTH`, `CLIENT ...`), `PING`, `CONFIG`,
`COMMAND`, `SLOWLOG`, `LATENCY`, `MEMORY`. So reading does not inflate the load, as memcached's `stats` does not
count itself. Every data command counts once, whatever its keys (`MGET a b c` is 1, where memcached counts 3 keys
for `get a b c`): for single-key traffic, commands are requests. Commands the server rejects (unknown, wrong
arity) count nowhere. The prober's own GETs and SETs do count, and `actuators.real` subtracts them when both name
the same server.

A restart (INFO server's `run_id` changes, or the count goes down, e.g. after `CONFIG RESETSTAT`) is counted
from the new value, so `total_requests()` never decreases (`actuators.qps.MonotonicTotal`).

Why redis-py here: a read once a second needs no timing control, and redis-py parses INFO's sections and
commandstats' fields and reconnects after a restart; its handshake commands (HELLO, CLIENT SETINFO) are among
those not counted. Raw RESP is for the prober and `tuner load` (`actuators.latency.resp`). Valkey answers the same
INFO, naming itself in `server_name:valkey` and `valkey_version`.
"""

from __future__ import annotations

import threading
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from actuators.latency.memcached import MemcachedAddress
from actuators.latency.resp import redis_address
from actuators.qps import MonotonicTotal
from core.errors import HostError

#: Commands (commandstats names before `|`) that are not cache requests: introspection and the handshake.
NOT_REQUESTS: frozenset[str] = frozenset(
    {"info", "hello", "auth", "client", "ping", "config", "command", "slowlog", "latency", "memory", "select"}
)


def server_version(server: Mapping[str, Any]) -> str:
    """`redis 7.0.15` or `valkey 8.0.1` from INFO server (Valkey names itself in `server_name`, and reports
    `valkey_version` beside the `redis_version` it keeps for compatibility)."""
    if str(server.get("server_name", "")).lower() == "valkey" or "valkey_version" in server:
        return f"valkey {server.get('valkey_version', server.get('redis_version', '?'))}"
    return f"redis {server.get('redis_version', '?')}"


@dataclass(frozen=True)
class RedisStats:
    """The parts of INFO the tuner uses. `requests` is `total_commands_processed` less `not_requests`."""

    requests: int
    total_commands: int
    not_requests: int
    connected_clients: int
    pid: int
    run_id: str
    uptime_s: int
    version: str

    @classmethod
    def parse(cls, info: Mapping[str, Any], origin: str) -> RedisStats:
        """Build from INFO as redis-py parses it (commandstats' `cmdstat_NAME` entries as dicts); HostError naming
        `origin` when a field is missing or not a number."""

        def num(name: str) -> int:
            if name not in info:
                raise HostError(f"redis {origin}: INFO has no {name!r} (not Redis or Valkey?)")
            try:
                return int(info[name])
            except (TypeError, ValueError):
                raise HostError(f"redis {origin}: INFO {name}={info[name]!r} is not an integer") from None

        total = num("total_commands_processed")
        skipped = 0
        for key, value in info.items():
            if isinstance(key, str) and key.startswith("cmdstat_") and isinstance(value, Mapping):
                if key[8:].split("|", 1)[0].lower() in NOT_REQUESTS:
                    skipped += int(value.get("calls", 0))
        return cls(
            requests=max(total - skipped, 0),
            total_commands=total,
            not_requests=skipped,
            connected_clients=num("connected_clients"),
            pid=num("process_id"),
            run_id=str(info.get("run_id", "")),
            uptime_s=num("uptime_in_seconds"),
            version=server_version(info),
        )

    @property
    def epoch(self) -> str:
        """Changes when the server restarts (`run_id`: a fresh random id at every start)."""
        return self.run_id or f"{self.pid}"


class RedisInfoQps:
    """`QpsSource` from a Redis/Valkey server's `INFO all` over TCP or a unix socket (one redis-py connection)."""

    def __init__(self, address: str | MemcachedAddress, timeout_s: float = 1.0) -> None:
        self.address = redis_address(address)
        self.timeout_s = timeout_s
        self._client: Any = None
        self._total = MonotonicTotal()
        self._lock = threading.Lock()
        self.last: RedisStats | None = None

    def _connect(self) -> Any:
        try:
            import redis
            from redis.backoff import NoBackoff
            from redis.retry import Retry
        except ImportError:
            raise HostError("the redis QPS source needs redis-py: pip install 'tuner[redis]'") from None
        a = self.address
        where: dict[str, Any] = {"unix_socket_path": a.path} if a.path is not None else {"host": a.host, "port": a.port}
        return redis.Redis(
            **where,
            socket_timeout=self.timeout_s,
            socket_connect_timeout=self.timeout_s,
            retry=Retry(NoBackoff(), 1),  # a stale connection (the server restarted): one fresh try, no backoff
            single_connection_client=True,
        )

    def info(self) -> dict[str, Any]:
        """`INFO all` (every section with commandstats) as redis-py parses it; HostError naming the address."""
        import redis

        with self._lock:
            if self._client is None:
                self._client = self._connect()
            try:
                return dict(self._client.info("all"))
            except redis.RedisError as exc:
                self._close()
                raise HostError(f"redis {self.address}: INFO failed: {' '.join(str(exc).split()) or exc}") from None

    def snapshot(self) -> RedisStats:
        """Read INFO now (redis-py reconnects after a dropped connection; a failure is one HostError)."""
        self.last = RedisStats.parse(self.info(), str(self.address))
        return self.last

    def total_requests(self) -> float:
        """Requests served (see the module docstring), monotonic across restarts."""
        snap = self.snapshot()
        with self._lock:
            return self._total.update(snap.requests, snap.epoch)

    @property
    def resets(self) -> int:
        """How many restarts / counter decreases were seen."""
        return self._total.resets

    def _close(self) -> None:
        if self._client is not None:
            try:
                self._client.close()
            finally:
                self._client = None

    def close(self) -> None:
        """Close the INFO connection."""
        with self._lock:
            self._close()
