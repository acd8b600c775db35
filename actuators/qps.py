"""Offered-load readers (`QpsSource`): memcached's own `stats` counters, Redis's or Valkey's own `INFO`
counters, or NIC rx packets (psutil).

All expose a monotonically increasing `total_requests()`; the rate is the difference of two reads
over their time apart (`counter_rate`, `RateMeter`).

Counter resets are treated as a restart, not an error: when memcached restarts (its `pid` or start
time changes, or a counter goes down) or a NIC counter goes down (interface re-created), counting
continues from the new value, so `total_requests()` never decreases. The requests between the last
read before the restart and the restart are lost -- the rate over that one interval is a lower bound
(`Rate.reset` says so).

Which memcached counters count requests (verified against memcached 1.6.18, see tests/actuators/test_qps.py):

* `cmd_get`  -- one per *key* of `get`/`gets`/`mg` (a multi-get `get a b c` adds 3). `get_hits +
  get_misses` counts the same keys again, so adding them would double count.
* `cmd_set`  -- `set`, `add`, `replace`, `append`, `prepend`, `cas` (even when it fails), `ms`.
* `cmd_touch` -- `touch`, and one per key of `gat`/`gats` (which do not count in `cmd_get`).
* `cmd_flush` -- `flush_all`.
* `delete_hits + delete_misses` (`delete`, `md`), `incr_*`, `decr_*` (`incr`, `decr`, `ma`).

Not counted by memcached at all: `version`, `stats`, `mn`, `verbosity`, `quit`. `cmd_meta` is not used
(meta commands already count in the classic counters above). The unit is therefore *key
operations per second*, which equals requests/s for single-key traffic.

Redis and Valkey (`RedisInfoQps`, verified against Debian's redis-server 7.0.15, see
tests/actuators/test_qps_redis.py): the count is `total_commands_processed` (INFO stats) less the calls of the
commands that ask the server about itself rather than read or write the cache (`NOT_REQUESTS`, from INFO commandstats): `INFO` -- this source's own
reads, and any monitoring's --, the connection handshake (`HELLO`, `AUTH`, `CLIENT ...`), `PING`, `CONFIG`,
`COMMAND`, `SLOWLOG`, `LATENCY`, `MEMORY`. So reading does not inflate the load, as memcached's `stats` does not
count itself. Every data command counts once, whatever its keys (`MGET a b c` is 1, where memcached counts 3 keys
for `get a b c`): for single-key traffic, commands are requests. Commands the server rejects (unknown, wrong
arity) count nowhere. The prober's own GETs and SETs do count, and `actuators.real` subtracts them when both name
the same server.

A restart (INFO server's `run_id` changes, or the count goes down, e.g. after `CONFIG RESETSTAT`) is counted
from the new value, so `total_requests()` never decreases (`MonotonicTotal`).

Why redis-py here: a read once a second needs no timing control, and redis-py parses INFO's sections and
commandstats' fields and reconnects after a restart; its handshake commands (HELLO, CLIENT SETINFO) are among
those not counted. Raw RESP is for the prober and `tuner load` (`actuators.latency.resp`). Valkey answers the same
INFO, naming itself in `server_name:valkey` and `valkey_version`.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from actuators.latency.memcached import MemcachedAddress, MemcachedClient, as_address
from actuators.latency.resp import redis_address
from actuators.sensors import QpsSource
from core.errors import HostError

#: memcached `stats` counters whose sum is the number of key operations served.
MEMCACHED_REQUEST_COUNTERS: tuple[str, ...] = (
    "cmd_get",
    "cmd_set",
    "cmd_touch",
    "cmd_flush",
    "delete_hits",
    "delete_misses",
    "incr_hits",
    "incr_misses",
    "decr_hits",
    "decr_misses",
)


# -- pure rate math ---------------------------------------------------------------------------------
@dataclass(frozen=True)
class CounterReading:
    """One read of a cumulative counter at monotonic time `t_s`; `epoch` changes when the counter restarts."""

    t_s: float
    value: float
    epoch: str = ""


@dataclass(frozen=True)
class Rate:
    """Counter increase over an interval. `reset` means a restart happened and `increase` is a lower bound."""

    per_second: float
    increase: float
    seconds: float
    reset: bool


def counter_increase(before: float, after: float, restarted: bool = False) -> tuple[float, bool]:
    """(increase, reset): a counter that went down, or a known restart, counts from 0 again."""
    if restarted or after < before:
        return max(after, 0.0), True
    return after - before, False


def counter_rate(before: CounterReading, after: CounterReading) -> Rate:
    """Rate between two reads; a restart (epoch change or decrease) is treated as a reset, not an error."""
    seconds = after.t_s - before.t_s
    if not seconds > 0:
        raise ValueError(f"reads must be in time order (got {seconds:g} s apart)")
    increase, reset = counter_increase(before.value, after.value, after.epoch != before.epoch)
    return Rate(increase / seconds, increase, seconds, reset)


class MonotonicTotal:
    """Folds raw counter reads (that may reset) into a total that never decreases."""

    def __init__(self) -> None:
        self._last: CounterReading | None = None
        self.total = 0.0
        self.resets = 0

    def update(self, value: float, epoch: str = "") -> float:
        """Add the increase since the previous read; the first read sets the baseline (returns its value)."""
        if self._last is None:
            self.total = float(value)
        else:
            inc, reset = counter_increase(self._last.value, value, epoch != self._last.epoch)
            self.total += inc
            self.resets += reset
        self._last = CounterReading(0.0, float(value), epoch)
        return self.total


class RateMeter:
    """Two reads of a `QpsSource` over time -> requests/s. The first `sample()` only sets the baseline."""

    def __init__(self, source: QpsSource, clock: Callable[[], float] = time.monotonic) -> None:
        self.source = source
        self._clock = clock
        self._last: CounterReading | None = None

    def sample(self) -> Rate | None:
        """Rate since the previous call (None on the first call)."""
        now = CounterReading(self._clock(), float(self.source.total_requests()))
        last, self._last = self._last, now
        return None if last is None else counter_rate(last, now)


# -- memcached stats --------------------------------------------------------------------------------
@dataclass(frozen=True)
class MemcachedStats:
    """The parts of `stats` the tuner uses. `requests` is the sum of the configured counters."""

    requests: int
    counters: dict[str, int]
    curr_connections: int
    total_connections: int
    get_hits: int
    get_misses: int
    pid: int
    uptime_s: int
    started_unix: int
    version: str

    @classmethod
    def parse(cls, raw: Mapping[str, str], counters: tuple[str, ...], origin: str) -> MemcachedStats:
        """Build from a raw `stats` dict; HostError naming `origin` when a field is missing or not a number."""

        def num(name: str) -> int:
            if name not in raw:
                raise HostError(f"memcached {origin}: stats has no {name!r} (memcached too old, or not memcached?)")
            try:
                return int(raw[name])
            except ValueError:
                raise HostError(f"memcached {origin}: stats {name}={raw[name]!r} is not an integer") from None

        values = {c: num(c) for c in counters}
        return cls(
            requests=sum(values.values()),
            counters=values,
            curr_connections=num("curr_connections"),
            total_connections=num("total_connections"),
            get_hits=num("get_hits"),
            get_misses=num("get_misses"),
            pid=num("pid"),
            uptime_s=num("uptime"),
            started_unix=num("time") - num("uptime"),
            version=raw.get("version", "?"),
        )

    @property
    def epoch(self) -> str:
        """Changes when memcached restarts (pid and start time)."""
        return f"{self.pid}@{self.started_unix}"


class MemcachedStatsQps:
    """`QpsSource` from memcached's `stats` over TCP or a unix socket (one persistent connection).

    Its own connection adds 1 to `curr_connections` (and each reconnect 1 to `total_connections`);
    `stats` itself is not counted in any `cmd_*` counter, so reading does not inflate the load.
    Requests sent by a prober against the same memcached *are* counted (subtract its rate if needed).
    """

    def __init__(
        self,
        address: str | MemcachedAddress,
        counters: tuple[str, ...] = MEMCACHED_REQUEST_COUNTERS,
        timeout_s: float = 1.0,
    ) -> None:
        if not counters:
            raise ValueError("need at least one counter")
        self.address = as_address(address)
        self.counters = tuple(counters)
        self._client = MemcachedClient(self.address, timeout_s)
        self._total = MonotonicTotal()
        self._lock = threading.Lock()
        self.last: MemcachedStats | None = None

    def snapshot(self) -> MemcachedStats:
        """Read `stats` now (reconnects once if the connection was dropped, e.g. by a restart)."""
        with self._lock:
            was_open = self._client.connected
            try:
                raw = self._client.stats()
            except HostError:
                if not was_open:
                    raise
                self._client.close()  # a stale connection (e.g. memcached restarted): one fresh try
                raw = self._client.stats()
            self.last = MemcachedStats.parse(raw, self.counters, str(self.address))
            return self.last

    def total_requests(self) -> float:
        """Sum of the request counters, monotonic across memcached restarts (see module docstring)."""
        snap = self.snapshot()
        with self._lock:
            return self._total.update(snap.requests, snap.epoch)

    @property
    def resets(self) -> int:
        """How many restarts / counter decreases were seen."""
        return self._total.resets

    def close(self) -> None:
        """Close the stats connection."""
        with self._lock:
            self._client.close()


# -- Redis / Valkey INFO ---------------------------------------------------------------------------
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
    pid: int
    run_id: str
    uptime_s: int
    version: str
    server_time_us: int = 0  # the server's clock when it answered (`server_time_usec`, Redis 5+; 0 if absent)

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
            pid=num("process_id"),
            run_id=str(info.get("run_id", "")),
            uptime_s=num("uptime_in_seconds"),
            version=server_version(info),
            server_time_us=int(info.get("server_time_usec", 0) or 0),
        )

    @property
    def epoch(self) -> str:
        """Changes when the server restarts (`run_id`: a fresh random id at every start)."""
        return self.run_id or f"{self.pid}"


class RedisInfoQps:
    """`QpsSource` from a Redis/Valkey server's `INFO` over TCP or a unix socket (one redis-py connection)."""

    def __init__(self, address: str | MemcachedAddress, timeout_s: float = 1.0) -> None:
        self.address = redis_address(address)
        self.timeout_s = timeout_s
        self._client: Any = None
        self._sections: tuple[str, ...] = ("server", "stats", "commandstats")
        self._total = MonotonicTotal()
        self._lock = threading.Lock()
        self.last: RedisStats | None = None

    def _connect(self) -> Any:
        import redis
        from redis.backoff import NoBackoff
        from redis.retry import Retry

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
        """INFO's server, stats and commandstats sections (`INFO all` before Redis 7, which takes one section) as
        redis-py parses them; HostError naming the address. The three sections are a tenth of `INFO all`: a quick
        read, taken close to the time the caller stamps it."""
        try:
            import redis
        except ImportError:
            raise HostError("the redis QPS source needs redis-py: pip install 'tuner[redis]'") from None

        with self._lock:
            try:
                if self._client is None:
                    self._client = self._connect()  # connects now (one connection, no pool)
                if self._sections:
                    try:
                        return dict(self._client.info(*self._sections))
                    except redis.ResponseError:  # before Redis 7: one section per INFO
                        self._sections = ()
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


# -- NIC counters -----------------------------------------------------------------------------------
NIC_COUNTERS = ("packets_recv", "packets_sent", "bytes_recv", "bytes_sent")


class NicRxQps:
    """`QpsSource` from NIC counters (psutil `net_io_counters(pernic=True)`), default rx packets.

    Packets are not requests: TCP ACKs, pipelined or multi-get requests in one packet, and large values
    split over packets all skew the ratio; GRO/LRO merge packets before the kernel counts them. Set
    `requests_per_packet` from a calibration against memcached `stats` if you need absolute numbers;
    the *rate change* is what the tuner's load-shift detection needs, and that survives a fixed ratio.
    """

    def __init__(
        self,
        interface: str,
        counter: str = "packets_recv",
        requests_per_packet: float = 1.0,
        counters_fn: Callable[[], Mapping[str, Any]] | None = None,
    ) -> None:
        if counter not in NIC_COUNTERS:
            raise HostError(f"NIC counter {counter!r}: expected one of {', '.join(NIC_COUNTERS)}")
        if not requests_per_packet > 0:
            raise HostError(f"requests_per_packet {requests_per_packet!r}: expected a positive number")
        if counters_fn is None:
            import psutil

            def counters_fn() -> Mapping[str, Any]:
                counters: Mapping[str, Any] = psutil.net_io_counters(pernic=True, nowrap=True)
                return counters

        self.interface = interface
        self.counter = counter
        self.requests_per_packet = requests_per_packet
        self._counters_fn = counters_fn
        self._total = MonotonicTotal()
        self._lock = threading.Lock()

    def read_raw(self) -> int:
        """The interface's raw counter now."""
        try:
            per_nic = self._counters_fn()
        except OSError as exc:
            raise HostError(f"NIC {self.interface}: cannot read counters: {exc}") from None
        if self.interface not in per_nic:
            have = ", ".join(sorted(per_nic)) or "none"
            raise HostError(f"NIC {self.interface!r} not found (interfaces: {have})")
        return int(getattr(per_nic[self.interface], self.counter))

    def total_requests(self) -> float:
        """Counter x `requests_per_packet`, monotonic across counter resets."""
        raw = self.read_raw()
        with self._lock:
            return self._total.update(raw) * self.requests_per_packet

    @property
    def resets(self) -> int:
        """How many counter decreases were seen."""
        return self._total.resets

    def close(self) -> None:
        """Nothing to release (for symmetry with `MemcachedStatsQps`)."""


def qps_source_from_spec(spec: str, timeout_s: float = 1.0) -> QpsSource:
    """`memcached:HOST:PORT`, `memcached:unix:/path`, `redis:HOST:PORT`, `redis:unix:/path` (Redis or Valkey:
    `actuators.qps_redis`), `nic:IFACE` or `nic:IFACE:COUNTER`."""
    kind, sep, rest = spec.partition(":")
    if kind == "memcached" and sep and rest:
        return MemcachedStatsQps(rest, timeout_s=timeout_s)
    if kind == "redis" and sep and rest:
        return RedisInfoQps(rest, timeout_s=timeout_s)
    if kind == "nic" and sep and rest:
        iface, _, counter = rest.partition(":")
        return NicRxQps(iface, counter or "packets_recv")
    raise HostError(
        f"QPS source {spec!r}: expected memcached:HOST:PORT, memcached:unix:/path, redis:HOST:PORT, "
        "redis:unix:/path or nic:IFACE[:COUNTER]"
    )
