"""`tuner doctor`'s check of a Redis or Valkey server (`--redis HOST:PORT`), beside its memcached check: connect,
`PING`, and read the version from `INFO server` (Valkey names itself there). Read-only: two commands on one
connection, nothing stored."""

from __future__ import annotations

from actuators.latency.resp import RespClient, redis_address
from actuators.linux.findings import FAIL, OK, Finding
from actuators.qps import server_version
from core.errors import HostError


def check_redis(address: str, timeout_s: float = 1.0) -> Finding:
    """The `redis` finding: reachable and answering PING (TCP `host:port`, `[v6]:port` or `unix:/path`)."""
    try:
        parsed = redis_address(address)
    except HostError as exc:
        return Finding("redis", FAIL, str(exc), "pass --redis HOST:PORT (port 1..65535) or unix:/path")
    try:
        with RespClient(parsed, timeout_s) as client:
            if not client.ping():
                return Finding(
                    "redis", FAIL, f"{parsed} did not answer PING with PONG, not Redis?", "check the address"
                )
            version = server_version(client.info("server"))
    except HostError as exc:
        return Finding(
            "redis",
            FAIL,
            f"redis at {parsed} not reachable: {exc}",
            "start redis-server (or valkey-server) or pass --redis HOST:PORT / unix:/path",
        )
    return Finding("redis", OK, f"{parsed}: {version}")
