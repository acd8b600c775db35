"""Hostile requests for every RPC of `tuner.v1.Tuner`, and one call's outcome: what the gRPC input tests and
`bench/fuzz.py --targets rpc` share.

Each request is drawn field by field from values a careless or hostile client sends: NaN, infinities, signed
zeros, subnormals, huge and negative numbers, the percentiles the daemon knows and ones it does not; strings
empty, unicode (right-to-left marks, emoji), with NUL and newlines, 200 characters around the limits, 100 kB;
counts at 0, the limits and 2**32 - 1. `call` makes one call on a real channel and returns its status code
and the time it took; `ALLOWED` are the codes a bad request may get (never UNKNOWN / INTERNAL: those are a
crash in a handler, nor DEADLINE_EXCEEDED: an input the daemon could not answer in bounded time, nor
RESOURCE_EXHAUSTED but for a stream past the limit: a message too long for the client's metadata limit).
"""

from __future__ import annotations

import math
import time
from typing import Any

import grpc
from hypothesis import strategies as st

#: every RPC of `tuner.v1.Tuner` (tuner/proto/tuner/v1/tuner.proto)
RPCS = (
    "GetStatus",
    "GetOperatingPoint",
    "ListTrials",
    "Retune",
    "SetPolicy",
    "WatchDecisions",
    "GetPowerCurve",
    "GetFleetView",
)
#: status codes a request may get; anything else is a defect of the daemon
ALLOWED = frozenset(
    {
        grpc.StatusCode.OK,
        grpc.StatusCode.INVALID_ARGUMENT,
        grpc.StatusCode.OUT_OF_RANGE,
        grpc.StatusCode.FAILED_PRECONDITION,
        grpc.StatusCode.UNAVAILABLE,
        grpc.StatusCode.NOT_FOUND,
    }
)
#: and per RPC, the codes only it may get: `WatchDecisions` refuses streams past the daemon's limit
ALLOWED_ALSO = {"WatchDecisions": frozenset({grpc.StatusCode.RESOURCE_EXHAUSTED})}
#: a refusal's message: one line of at most this many characters (`tuner.daemon.service.MAX_DETAIL_CHARS`)
MAX_DETAILS = 300
#: a call's deadline (s); an answer later than this is a failure
DEADLINE_S = 5.0

ODD_FLOATS = (
    0.0,
    -0.0,
    math.nan,
    -math.nan,
    math.inf,
    -math.inf,
    5e-324,
    -5e-324,
    2.2250738585072014e-308,
    1e-300,
    1e-15,
    0.05,
    0.1,
    1.0,
    -1.0,
    50.0,
    90.0,
    95.0,
    97.0,
    99.0,
    99.9,
    99.99,
    100.0,
    500.0,
    1000.0,
    1000.5,
    1e5,
    1e9,
    1e10,
    1e12,
    1e300,
    1.7976931348623157e308,
    -1.7976931348623157e308,
)
FLOATS = st.one_of(
    st.sampled_from(ODD_FLOATS),
    st.floats(allow_nan=True, allow_infinity=True),
    st.floats(-1e-10, 1e-10),  # tiny and subnormal: ratios that round to 1, divisions that overflow
)
ODD_STRINGS = (
    "",
    "\x00",
    "a\x00b",
    "line\nforged: retune requested",
    "\r\n\t",
    "\u202eevil\u202c",
    "\U0001f600" * 50,
    "é" * 199,
    "x" * 200,
    "x" * 201,
    "%s%n%x",
    "${jndi:ldap://x}",
    "../../etc/passwd",
    "0123456789abcdef",
    "x" * 100_000,
    "\u00e9" * 50_000,
)
STRINGS = st.one_of(st.sampled_from(ODD_STRINGS), st.text(max_size=300))
UINT32 = st.one_of(
    st.sampled_from((0, 1, 2, 199, 200, 201, 10_000, 2**31 - 1, 2**31, 2**32 - 1)), st.integers(0, 2**32 - 1)
)
PERCENT = st.one_of(st.sampled_from((0.0, 50.0, 90.0, 95.0, 99.0, 99.9)), FLOATS)


def _maybe(s: st.SearchStrategy) -> st.SearchStrategy:
    return st.one_of(st.none(), s)


def _fields(spec: dict[str, tuple[st.SearchStrategy, st.SearchStrategy]]) -> st.SearchStrategy[dict[str, Any]]:
    """A request's fields from `spec` = {name: (valid, hostile)}: a non-empty set of fields hostile, the rest
    valid -- so a hostile field is reached past the fields the daemon checks before it."""
    names = sorted(spec)
    return st.sets(st.sampled_from(names), min_size=1).flatmap(
        lambda bad: st.fixed_dictionaries({n: spec[n][1] if n in bad else spec[n][0] for n in names})
    )


_PCTS = st.sampled_from((0.0, 50.0, 90.0, 95.0, 99.0, 99.9))
_LOAD = st.floats(1.0, 1e6)
_SLA = (st.one_of(st.just(0.0), st.floats(1.0, 1e6)), FLOATS)
_PCT = (_PCTS, PERCENT)
_REWARDS = ("constrained", "edp", "latency", "sla-linear")

#: per RPC, the request's fields (None: an `optional` field left unset)
FIELDS: dict[str, st.SearchStrategy[dict[str, Any]]] = {
    "GetStatus": st.just({}),
    "GetOperatingPoint": _fields({"qps": (_LOAD, FLOATS), "sla_us": _SLA, "percentile": _PCT}),
    "ListTrials": _fields({"limit": (st.integers(0, 10), UINT32), "retune_id": (st.just(""), STRINGS)}),
    "Retune": _fields({"reason": (st.just("fuzz"), STRINGS)}),
    "SetPolicy": _fields(
        {
            "sla_us": (_maybe(st.floats(1.0, 1e9)), _maybe(FLOATS)),
            "percentile": (_maybe(_PCTS.filter(bool)), _maybe(PERCENT)),
            "reward": (_maybe(st.sampled_from(_REWARDS)), _maybe(st.one_of(st.sampled_from(("energy", "")), STRINGS))),
        }
    ),
    "WatchDecisions": st.just({}),
    "GetPowerCurve": _fields(
        {
            "sla_us": _SLA,
            "percentile": _PCT,
            "qps_min": (st.one_of(st.just(0.0), _LOAD), FLOATS),
            "qps_max": (st.one_of(st.just(0.0), _LOAD), FLOATS),
            "points": (st.integers(0, 200), UINT32),
        }
    ),
    "GetFleetView": _fields(
        {
            "sla_us": _SLA,
            "percentile": _PCT,
            "band_pct": (st.one_of(st.just(0.0), st.floats(0.1, 1000.0)), FLOATS),
            "hw_class": (st.sampled_from(("", "c1")), STRINGS),
        }
    ),
}

#: request message of each RPC
REQUESTS = {
    "GetStatus": "GetStatusRequest",
    "GetOperatingPoint": "GetOperatingPointRequest",
    "ListTrials": "ListTrialsRequest",
    "Retune": "RetuneRequest",
    "SetPolicy": "SetPolicyRequest",
    "WatchDecisions": "WatchDecisionsRequest",
    "GetPowerCurve": "GetPowerCurveRequest",
    "GetFleetView": "GetFleetViewRequest",
}


def request(pb: Any, rpc: str, fields: dict[str, Any]) -> Any:
    """The request message of `rpc` with `fields` set (None left unset)."""
    return getattr(pb, REQUESTS[rpc])(**{k: v for k, v in fields.items() if v is not None})


def outcome_problems(rpc: str, code: grpc.StatusCode, details: str, took: float) -> list[str]:
    """What is wrong with a call's outcome (see the module docstring); [] when nothing is."""
    bad = []
    if code not in ALLOWED | ALLOWED_ALSO.get(rpc, frozenset()):
        bad.append(f"status {code.name}: {details[:200]!r}")
    if code != grpc.StatusCode.OK and (len(details) > MAX_DETAILS or "\n" in details or not details.strip()):
        bad.append(f"message not one line of at most {MAX_DETAILS} characters: {details[:200]!r}")
    if took >= DEADLINE_S:
        bad.append(f"answered after {took:.1f} s")
    return bad


def call(stub: Any, rpc: str, req: Any, metadata: Any = None) -> tuple[grpc.StatusCode, Any, float, str]:
    """One call of `rpc` on `stub` (a `TunerStub`): (status code, response or None, seconds, the refusal's
    message). A stream (`WatchDecisions`) is read to its first message and cancelled."""
    t0 = time.monotonic()
    try:
        if rpc == "WatchDecisions":
            stream = stub.WatchDecisions(req, timeout=DEADLINE_S, metadata=metadata)
            try:
                resp = next(stream)
            finally:
                stream.cancel()
        else:
            resp = getattr(stub, rpc)(req, timeout=DEADLINE_S, metadata=metadata)
        return grpc.StatusCode.OK, resp, time.monotonic() - t0, ""
    except grpc.RpcError as exc:
        return exc.code(), None, time.monotonic() - t0, exc.details() or ""


def non_finite(msg: Any, path: str = "") -> list[str]:
    """The double fields of `msg` (recursively) that hold NaN or an infinity: an answer must not."""
    bad = []
    for fd, value in msg.ListFields():
        name = f"{path}{fd.name}"
        values = value.values() if fd.message_type is not None and fd.message_type.GetOptions().map_entry else None
        items = list(values) if values is not None else (list(value) if fd.is_repeated else [value])
        for v in items:
            if isinstance(v, float) and not math.isfinite(v):
                bad.append(f"{name}={v}")
            elif hasattr(v, "ListFields"):
                bad.extend(non_finite(v, name + "."))
    return bad


def policy_of(status: Any) -> tuple[float, float, str]:
    p = status.policy
    return (p.sla_us, p.percentile, p.reward)


def policy_asked(before: tuple[float, float, str], fields: dict[str, Any]) -> tuple[float, float, str]:
    """The policy a `SetPolicy` with `fields` asks for over `before` (unset fields keep their value)."""
    sla, pct, reward = (fields.get(k) for k in ("sla_us", "percentile", "reward"))
    return (
        before[0] if sla is None else float(sla),
        before[1] if pct is None else float(pct),
        before[2] if reward is None else str(reward),
    )


def same_policy(a: tuple[float, float, str], b: tuple[float, float, str]) -> bool:
    """Equal policies (a percentile within 1e-9: the daemon snaps it to the one it knows)."""
    return a[0] == b[0] and math.isclose(a[1], b[1], abs_tol=1e-9) and a[2] == b[2]
