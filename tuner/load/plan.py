"""What `tuner load` sends and when: a plan of scheduled send times and pre-encoded requests, fixed in advance.

Two sources:

* `poisson_plan` -- open-loop Poisson arrivals at a fixed rate (mutilate's default), uniform key popularity over
  `keys` keys, a get/set mix and fixed key/value sizes;
* `trace_plan` -- the rows of a Twitter cache trace, in order: each row's operation, key and value size, sent at
  the row's timestamp scaled by `time_scale` (the trace's second-resolution timestamps are spread uniformly
  at random within their second, which is what a Poisson process looks like given its count per second).

Requests are pre-encoded in the server's protocol (`tuner.load.wire`): memcached text-protocol commands, each
followed by a meta no-op (`mn`), so a reply stream is split into per-request replies by counting `MN\\r\\n` without
parsing it (values are ours, filled with `x`, so they never contain it); or RESP for Redis and Valkey. Read
operations (get, gets) become a get (`get` / `GET`), writes (set, add, replace, cas, append, prepend, incr, decr) a
set of the row's value size (`set` / `SET`), delete a delete (`delete` / `DEL`): the trace's mix, either way.

A plan stores 12 bytes per request (int64 time, int32 template index) plus its distinct templates; sharing
between worker processes is by fork (copy-on-write).
"""

from __future__ import annotations

import math
import os
import zlib
from collections.abc import Iterator
from dataclasses import dataclass

import numpy as np

from core.errors import InputError, TunerError
from traces.compression import open_chunks
from traces.format import OPS, Row, RowError, parse_row
from tuner.load.wire import MEMCACHED, MN, WIRES, Wire

__all__ = ["MN", "Plan", "Shard", "poisson_plan", "trace_plan", "warm_requests"]
#: Most requests one run may plan (12 bytes each: 30 M = 360 MB): bounded runs, bounded memory.
MAX_REQUESTS = 30_000_000
#: Largest value a set carries (memcached's default item limit is 1 MiB including the item header).
MAX_VALUE_BYTES = 1_000_000 - 1024
KEY_PREFIX = b"tl:"

_READS = frozenset({"get", "gets"})
_DELETE = "delete"


@dataclass(frozen=True)
class Shard:
    """Which part of a trace this generator sends: clients whose id hashes to `index` modulo `count`."""

    index: int = 0
    count: int = 1

    @classmethod
    def parse(cls, text: str) -> Shard:
        """`i/n` with 0 <= i < n."""
        i, sep, n = text.partition("/")
        try:
            shard = cls(int(i), int(n)) if sep else None
        except ValueError:
            shard = None
        if shard is None or not 0 <= shard.index < shard.count:
            raise TunerError(f"--shard {text!r}: expected i/n with 0 <= i < n, e.g. 0/2")
        return shard

    def takes(self, client_id: bytes) -> bool:
        """Whether this shard sends the requests of `client_id` (a stable hash: every shard agrees)."""
        return self.count == 1 or zlib.crc32(client_id) % self.count == self.index


@dataclass
class Plan:
    """Requests in send order: `times_ns[i]` after the run's start, `template[i]` indexes `templates`."""

    times_ns: np.ndarray  # int64, non-decreasing
    template: np.ndarray  # int32
    templates: list[bytes]
    ops: dict[str, int]  # requests per protocol operation (get/set/delete)
    source: str
    protocol: str = "memcached"  # the server's (`tuner.load.wire.WIRES`)

    def __len__(self) -> int:
        return int(self.times_ns.size)

    def part(self, index: int, count: int) -> Plan:
        """Every `count`-th request from `index` (how requests are dealt to processes and connections)."""
        return Plan(
            self.times_ns[index::count], self.template[index::count], self.templates, {}, self.source, self.protocol
        )

    def per_second(self, seconds: int) -> np.ndarray:
        """Scheduled requests in each second of the run."""
        sec = (self.times_ns // 1_000_000_000).astype(np.int64)
        return np.bincount(sec[sec < seconds], minlength=seconds)[:seconds]


def wire_of(protocol: str) -> Wire:
    """The `Wire` of `protocol` (memcached or redis); a one-line error otherwise."""
    if protocol not in WIRES:
        raise TunerError(f"--protocol {protocol!r}: expected one of {', '.join(WIRES)}")
    return WIRES[protocol]


def _check_count(n: float) -> None:
    if n > MAX_REQUESTS:
        raise TunerError(
            f"the run would send ~{n:,.0f} requests, more than the {MAX_REQUESTS:,} one run plans in memory: "
            "shorten --duration or lower the rate (runs are bounded)"
        )


def poisson_plan(
    qps: float,
    duration_s: float,
    *,
    seed: int = 0,
    keys: int = 10_000,
    key_bytes: int = 30,
    value_bytes: int = 200,
    set_ratio: float = 0.03,
    protocol: str = "memcached",
) -> Plan:
    """Poisson arrivals at `qps` for `duration_s`; each request a get (or a set, with probability `set_ratio`)
    of a key drawn uniformly from `keys` keys of `key_bytes` bytes, sets carrying `value_bytes` bytes, in the
    server's `protocol`."""
    wire = wire_of(protocol)
    if not (qps > 0 and math.isfinite(qps)):
        raise TunerError(f"--qps must be finite and > 0, got {qps!r}")
    if not (duration_s > 0 and math.isfinite(duration_s)):
        raise TunerError(f"--duration must be finite and > 0, got {duration_s!r}")
    if not 1 <= keys <= 10_000_000:
        raise TunerError(f"--keys must be in 1..10000000, got {keys}")
    if not len(KEY_PREFIX) + 8 <= key_bytes <= 250:
        raise TunerError(f"--key-size must be in {len(KEY_PREFIX) + 8}..250 bytes, got {key_bytes}")
    if not 0 <= value_bytes <= MAX_VALUE_BYTES:
        raise TunerError(f"--value-size must be in 0..{MAX_VALUE_BYTES} bytes, got {value_bytes}")
    if not 0.0 <= set_ratio <= 1.0:
        raise TunerError(f"--set-ratio must be in [0, 1], got {set_ratio}")
    _check_count(qps * duration_s * 1.01)
    rng = np.random.default_rng(seed)
    expect = qps * duration_s
    gaps = rng.exponential(1e9 / qps, size=int(expect + 6 * math.sqrt(expect) + 16))
    times = np.cumsum(gaps)
    while times[-1] < duration_s * 1e9:  # the +6 sigma margin ran out (p ~ 1e-9): draw more
        times = np.concatenate([times, times[-1] + np.cumsum(rng.exponential(1e9 / qps, size=times.size))])
    times = times[times < duration_s * 1e9].astype(np.int64)
    key_index = rng.integers(0, keys, size=times.size)
    is_set = rng.random(times.size) < set_ratio
    templates: list[bytes] = []
    for k in range(keys):
        key = KEY_PREFIX + b"%0*d" % (key_bytes - len(KEY_PREFIX), k)
        templates += [wire.get(key), wire.set(key, value_bytes)]
    n_set = int(is_set.sum())
    return Plan(
        times,
        (2 * key_index + is_set).astype(np.int32),
        templates,
        {"get": int(times.size) - n_set, "set": n_set},
        f"poisson {qps:g}/s",
        protocol,
    )


def warm_requests(plan: Plan) -> list[bytes]:
    """The sets that store every key a Poisson plan reads (so its gets hit, as mutilate's load phase does)."""
    wire = wire_of(plan.protocol)
    return [t for t in plan.templates if wire.stores(t)]


def trace_key(anonymized: bytes, key_size: int) -> bytes:
    """A valid memcached key for a trace row: the anonymised key (spaces and control bytes replaced), padded
    with `_` to the row's key size, at most 250 bytes."""
    key = bytes(c if 32 < c < 127 else 95 for c in anonymized)
    key = KEY_PREFIX + key
    if len(key) < key_size:
        key += b"_" * (key_size - len(key))
    return key[:250]


def _trace_rows(name: str) -> Iterator[tuple[int, Row]]:
    """The rows of a trace file with their line numbers (blank lines skipped; a last line without a newline is not
    read); a malformed row is a one-line `InputError` naming FILE:LINE."""
    line_no = 0
    rest = b""
    for chunk in open_chunks(name):
        lines = (rest + chunk).split(b"\n")
        rest = lines.pop()
        for line in lines:
            line_no += 1
            if not line.strip():
                continue
            try:
                row = parse_row(line)
            except RowError as exc:
                raise InputError(f"{name}:{line_no}: {exc.message}") from None
            yield line_no, row


class _Requests:
    """A plan's requests as they are read: trace second and template per request, the distinct request templates
    and the count per kind."""

    def __init__(self, max_value_bytes: int, wire: Wire = MEMCACHED) -> None:
        self.max_value_bytes = max_value_bytes
        self.wire = wire
        self.stamps: list[int] = []
        self.tpl: list[int] = []
        self.index: dict[bytes, int] = {}
        self.templates: list[bytes] = []
        self.ops = {"get": 0, "set": 0, "delete": 0}

    def add(self, stamp: int, row: Row) -> None:
        op = OPS[row.op]
        key = trace_key(row.key, row.key_size)
        if op in _READS:
            kind, req = "get", self.wire.get(key)
        elif op == _DELETE:
            kind, req = "delete", self.wire.delete(key)
        else:
            kind, req = "set", self.wire.set(key, min(row.value_size, self.max_value_bytes))
        j = self.index.get(req)
        if j is None:
            j = self.index[req] = len(self.templates)
            self.templates.append(req)
        self.stamps.append(stamp)
        self.tpl.append(j)
        self.ops[kind] += 1
        if len(self.stamps) > MAX_REQUESTS:
            _check_count(len(self.stamps))


def trace_plan(
    path: str | os.PathLike[str],
    *,
    time_scale: float,
    duration_s: float,
    start_s: float = 0.0,
    shard: Shard = Shard(),
    seed: int = 0,
    max_value_bytes: int = MAX_VALUE_BYTES,
    protocol: str = "memcached",
) -> Plan:
    """The trace rows from `start_s` (trace seconds after its first row) that fall in the first `duration_s`
    seconds of the run when the trace is played `time_scale` times faster than recorded.

    A row's send time is `(timestamp - first - start_s + u) / time_scale` with u ~ U[0, 1) per row. Rows must
    be in time order (within a second); a malformed row is a one-line `InputError` naming FILE:LINE.
    """
    if not (time_scale > 0 and math.isfinite(time_scale)):
        raise TunerError(f"trace time scale must be finite and > 0, got {time_scale!r}")
    if not (duration_s > 0 and math.isfinite(duration_s)):
        raise TunerError(f"--duration must be finite and > 0, got {duration_s!r}")
    if not (start_s >= 0 and math.isfinite(start_s)):
        raise TunerError(f"--start must be finite and >= 0, got {start_s!r}")
    name = os.fspath(path)
    span = duration_s * time_scale  # trace seconds the run covers
    rng = np.random.default_rng(seed)
    requests = _Requests(max_value_bytes, wire_of(protocol))
    first: int | None = None
    last = -1
    for line_no, row in _trace_rows(name):
        if first is None:
            first = row.timestamp
        if row.timestamp < last:
            raise InputError(
                f"{name}:{line_no}: timestamp {row.timestamp} is before the previous row's {last}: "
                "the generator replays a trace in time order (sort it first)"
            )
        last = row.timestamp
        offset = row.timestamp - first - start_s
        if offset < -1:
            continue
        if offset >= span:
            break
        if shard.takes(row.client_id):
            requests.add(row.timestamp - first, row)
    if first is None:
        raise InputError(f"{name}: no trace rows")
    ts = np.asarray(requests.stamps, dtype=np.float64)
    times = (ts - start_s + rng.random(ts.size)) / time_scale * 1e9
    order = np.argsort(times, kind="stable")
    times, template = times[order], np.asarray(requests.tpl, dtype=np.int32)[order]
    keep = (times >= 0) & (times < duration_s * 1e9)
    if not keep.any():
        raise InputError(
            f"{name}: no rows{'' if shard.count == 1 else f' of shard {shard.index}/{shard.count}'} in the "
            f"{duration_s:g} s run from trace second {start_s:g} (trace ends at second {last - first})"
        )
    return Plan(
        times[keep].astype(np.int64),
        template[keep],
        requests.templates,
        requests.ops,
        f"{name} x{time_scale:g}",
        protocol,
    )
