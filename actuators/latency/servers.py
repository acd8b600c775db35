"""The cache servers the tuner measures, and how a server is named: `KIND:ADDRESS`.

`memcached` (text protocol) and `redis` (RESP: Redis, and Valkey by protocol compatibility). A QPS spec
`memcached:HOST:PORT` or `redis:unix:/path` names the kind and the address; the prober, `tuner load` and
`tuner doctor` speak the kind's protocol. Addresses: `host:port`, `[v6]:port`, `host` (the kind's default port),
`unix:/path`.
"""

from __future__ import annotations

from actuators.latency.memcached import MemcachedAddress
from core.errors import HostError

#: The server kinds, the first the default (the `[host] server` row, `tuner load --protocol`).
SERVER_KINDS: tuple[str, ...] = ("memcached", "redis")
#: Each kind's default port.
DEFAULT_PORTS = {"memcached": 11211, "redis": 6379}


def parse_address(kind: str, text: str | MemcachedAddress) -> MemcachedAddress:
    """`text` as an address of a `kind` server (its default port when none is given); HostError naming it."""
    if kind not in DEFAULT_PORTS:
        raise HostError(f"server kind {kind!r}: expected one of {', '.join(SERVER_KINDS)}")
    if isinstance(text, MemcachedAddress):
        return text
    return MemcachedAddress.parse(text, kind, DEFAULT_PORTS[kind])


def server_of(spec: object) -> tuple[str, str] | None:
    """(kind, address text) of a `memcached:ADDR` / `redis:ADDR` spec; None for anything else (`nic:...`, a
    source object)."""
    if not isinstance(spec, str):
        return None
    kind, sep, rest = spec.partition(":")
    return (kind, rest) if sep and rest and kind in SERVER_KINDS else None


def default_spec(kind: str) -> str:
    """The QPS spec of a `kind` server on this machine's loopback at its default port."""
    return f"{kind}:127.0.0.1:{DEFAULT_PORTS[kind]}"
