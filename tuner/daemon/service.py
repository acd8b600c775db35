"""gRPC API `tuner.v1.Tuner` over the daemon, with health checking, reflection, TLS and bearer tokens.

The .proto ships as package data and is compiled at run time (`grpc.protos_and_services`); no generated
code is committed. Every handler validates its input and maps errors to status codes -- a bad request
gets INVALID_ARGUMENT with a message, never a crash.
"""

from __future__ import annotations

import hmac
import logging
import os
import queue
import sys
import threading
from collections.abc import Iterator
from concurrent import futures
from functools import lru_cache
from pathlib import Path
from typing import Any, Protocol

import grpc

from core.errors import InputError, TunerError
from tuner.config import GrpcConfig, read_token
from tuner.daemon.grpc_messages import (
    decision_msg,
    finite,
    fleet_msg,
    point_msg,
    policy_msg,
    status_msg,
    trial_msg,
)
from tuner.daemon.powercurve import Curve
from tuner.daemon.status_reader import DaemonStatus, PointAnswer

log = logging.getLogger(__name__)

SERVICE_NAME = "tuner.v1.Tuner"
PROTO_ROOT = Path(__file__).resolve().parents[1] / "proto" / "tuner"
MAX_WATCHERS = 8
MAX_WORKERS = MAX_WATCHERS + 8
#: The longest free-text field a request may carry (`Retune.reason`, `ListTrials.retune_id`, `SetPolicy.reward`).
MAX_TEXT_CHARS = 200
#: A refusal's message is one line of at most this many characters: an error that echoes a 100 kB input
#: would exceed the client's metadata limit (16 kB) and arrive as RESOURCE_EXHAUSTED without its message.
MAX_DETAIL_CHARS = 300


def refuse(context: Any, code: grpc.StatusCode, message: str) -> None:
    """Abort the call with `code` and `message` made one line of at most `MAX_DETAIL_CHARS` characters."""
    line = " ".join(message.split())
    if len(line) > MAX_DETAIL_CHARS:
        line = line[: MAX_DETAIL_CHARS - 1] + "…"
    context.abort(code, line)


def check_text(context: Any, name: str, value: str) -> None:
    """INVALID_ARGUMENT unless `value` is at most `MAX_TEXT_CHARS` printable characters (no NUL, newline or
    other control character: free text goes to the log, where a newline would forge a line)."""
    if len(value) > MAX_TEXT_CHARS or not value.isprintable():
        refuse(
            context,
            grpc.StatusCode.INVALID_ARGUMENT,
            f"{name}: expected at most {MAX_TEXT_CHARS} printable characters, got {len(value)} characters"
            + ("" if value.isprintable() else " with control or format characters"),
        )


@lru_cache(maxsize=1)
def protos() -> tuple[Any, Any]:
    """(messages module, services module) compiled from `tuner/proto/tuner/v1/tuner.proto`.

    The import root is `tuner/proto/tuner` (module `v1.tuner_pb2`): rooting it at `tuner/proto` would
    name the module `tuner.v1.tuner_pb2`, which collides with this `tuner` package.
    """
    root = str(PROTO_ROOT)
    if root not in sys.path:
        sys.path.append(root)
    return grpc.protos_and_services("v1/tuner.proto")


# ------------------------------------------------------------------------------------------------- servicer


class DaemonApi(Protocol):
    """What the servicer calls on the daemon (`tuner.daemon.loop.Daemon`)."""

    @property
    def stopping(self) -> bool: ...

    def status(self) -> DaemonStatus: ...

    def operating_point(self, qps: Any, sla_us: Any = 0.0, percentile: Any = 0.0) -> PointAnswer: ...

    def power_curve(
        self, sla_us: Any = 0.0, percentile: Any = 0.0, qps_min: Any = 0.0, qps_max: Any = 0.0, points: Any = 0
    ) -> Curve: ...

    def fleet_view(self, sla_us: Any = 0.0, percentile: Any = 0.0, band_pct: Any = 0.0, hw_class: str = "") -> Any: ...

    def trials(self, limit: int = 0, retune_id: str = "") -> list[dict[str, Any]]: ...

    def request_retune(self, reason: str = "rpc") -> tuple[bool, str]: ...

    def set_policy(self, sla_us: float | None, percentile: float | None, reward: str | None) -> Any: ...

    def subscribe(self) -> tuple[queue.Queue, dict[str, Any] | None]: ...

    def unsubscribe(self, q: queue.Queue) -> None: ...


def _operating_point(pb: Any, daemon: DaemonApi, request: Any, context: Any) -> Any:
    try:
        a = daemon.operating_point(request.qps, request.sla_us, request.percentile)
    except TunerError as exc:
        refuse(context, grpc.StatusCode.INVALID_ARGUMENT, str(exc))
    return pb.OperatingPointResponse(
        point=point_msg(pb, a.point),
        predicted_latency_us=finite(a.latency_us),
        latency_sem_us=finite(a.latency_sem_us),
        predicted_power_w=finite(a.power_w),
        power_sem_w=finite(a.power_sem_w),
        from_measured=a.from_measured,
        meets_sla=a.meets_sla,
        tuned_qps=finite(a.tuned_qps),
        source=a.source,
        note=a.note,
    )


def _power_curve(pb: Any, daemon: DaemonApi, request: Any, context: Any) -> Any:
    try:
        c = daemon.power_curve(
            request.sla_us, request.percentile, request.qps_min, request.qps_max, int(request.points)
        )
    except TunerError as exc:
        refuse(context, grpc.StatusCode.INVALID_ARGUMENT, str(exc))
    lo, hi = c.measured_qps or (0.0, 0.0)
    return pb.PowerCurve(
        sla_us=c.sla_us,
        percentile=c.percentile,
        note=c.note,
        measured_qps_min=finite(lo),
        measured_qps_max=finite(hi),
        points=[
            pb.PowerCurvePoint(
                qps=finite(p.qps),
                point=point_msg(pb, p.point) if p.point is not None else None,
                predicted_power_w=finite(p.power_w),
                power_sem_w=finite(p.power_sem_w),
                predicted_latency_us=finite(p.latency_us),
                latency_sem_us=finite(p.latency_sem_us),
                meets_sla=p.meets_sla,
                source=p.source,
                extrapolated=p.extrapolated,
            )
            for p in c.points
        ],
    )


def _fleet_view(pb: Any, daemon: DaemonApi, request: Any, context: Any) -> Any:
    try:
        report = daemon.fleet_view(request.sla_us, request.percentile, request.band_pct, request.hw_class)
    except InputError as exc:
        refuse(context, grpc.StatusCode.INVALID_ARGUMENT, str(exc))
    except TunerError as exc:  # the store cannot be read (e.g. a fleet database down, no spool yet)
        refuse(context, grpc.StatusCode.UNAVAILABLE, str(exc))
    return fleet_msg(pb, report)


def _retune(pb: Any, daemon: DaemonApi, request: Any, context: Any) -> Any:
    check_text(context, "reason", request.reason)
    ok, message = daemon.request_retune("rpc")
    if ok:
        log.info("retune requested over gRPC%s", f": {request.reason}" if request.reason else "")
    return pb.RetuneResponse(accepted=ok, message=message)


def _set_policy(pb: Any, daemon: DaemonApi, request: Any, context: Any) -> Any:
    if request.HasField("reward"):
        check_text(context, "reward", request.reward)
    try:
        p = daemon.set_policy(
            request.sla_us if request.HasField("sla_us") else None,
            request.percentile if request.HasField("percentile") else None,
            request.reward if request.HasField("reward") else None,
        )
    except TunerError as exc:
        refuse(context, grpc.StatusCode.INVALID_ARGUMENT, str(exc))
    return policy_msg(pb, p)


class _Watchers:
    """At most `MAX_WATCHERS` `WatchDecisions` streams at once."""

    def __init__(self) -> None:
        self._n = 0
        self._lock = threading.Lock()

    def enter(self, context: Any) -> None:
        with self._lock:
            if self._n >= MAX_WATCHERS:
                context.abort(
                    grpc.StatusCode.RESOURCE_EXHAUSTED, f"at most {MAX_WATCHERS} WatchDecisions streams at once"
                )
            self._n += 1

    def leave(self) -> None:
        with self._lock:
            self._n -= 1


def _wake(q: queue.Queue) -> None:
    """Wake a stream's wait on its queue (None: no decision, look at the call again)."""
    try:
        q.put_nowait(None)
    except queue.Full:  # a full queue wakes it anyway
        pass


def _watch_decisions(pb: Any, daemon: DaemonApi, watchers: _Watchers, context: Any) -> Iterator[Any]:
    watchers.enter(context)
    q, latest = daemon.subscribe()
    context.add_callback(lambda: _wake(q))  # a cancelled stream gives its place back at once
    try:
        if latest is not None:
            yield decision_msg(pb, latest)
        while context.is_active() and not daemon.stopping:
            try:
                d = q.get(timeout=0.25)
            except queue.Empty:
                continue
            if d is not None:
                yield decision_msg(pb, d)
    finally:
        daemon.unsubscribe(q)
        watchers.leave()


def make_servicer(daemon: DaemonApi) -> Any:
    """The `tuner.v1.Tuner` servicer over `daemon`: each RPC one function above, its errors as status codes."""
    pb, services = protos()
    watchers = _Watchers()

    class TunerServicer(services.TunerServicer):  # type: ignore[name-defined]  # generated from the .proto at run time
        """Adapts `tuner.daemon.loop.Daemon` to `tuner.v1.Tuner`."""

        def GetStatus(self, request: Any, context: Any) -> Any:
            return status_msg(pb, daemon.status())

        def GetOperatingPoint(self, request: Any, context: Any) -> Any:
            return _operating_point(pb, daemon, request, context)

        def GetPowerCurve(self, request: Any, context: Any) -> Any:
            return _power_curve(pb, daemon, request, context)

        def GetFleetView(self, request: Any, context: Any) -> Any:
            return _fleet_view(pb, daemon, request, context)

        def ListTrials(self, request: Any, context: Any) -> Any:
            check_text(context, "retune_id", request.retune_id)
            rows = daemon.trials(limit=int(request.limit), retune_id=request.retune_id)
            return pb.ListTrialsResponse(trials=[trial_msg(pb, t) for t in rows])

        def Retune(self, request: Any, context: Any) -> Any:
            return _retune(pb, daemon, request, context)

        def SetPolicy(self, request: Any, context: Any) -> Any:
            return _set_policy(pb, daemon, request, context)

        def WatchDecisions(self, request: Any, context: Any) -> Any:
            yield from _watch_decisions(pb, daemon, watchers, context)

    return TunerServicer()


#: Services open without a token: health probes, and reflection (it only serves the public .proto schema).
_OPEN_PREFIXES = (
    "/grpc.health.v1.Health/",
    "/grpc.reflection.v1alpha.ServerReflection/",
    "/grpc.reflection.v1.ServerReflection/",
)


class _TokenInterceptor(grpc.ServerInterceptor):
    """Requires exactly one `authorization: Bearer <token>` (constant-time compare) on the Tuner API: two or
    more `authorization` headers are refused even if one is right (a proxy that adds its own must not let a
    client's guess through, nor the other way round)."""

    def __init__(self, token: bytes) -> None:
        self._expected = b"Bearer " + token

        def deny(request: Any, context: Any) -> Any:
            context.abort(
                grpc.StatusCode.UNAUTHENTICATED, "expected exactly one metadata 'authorization: Bearer <token>'"
            )

        self._deny = grpc.unary_unary_rpc_method_handler(deny)
        self._deny_stream = grpc.unary_stream_rpc_method_handler(deny)
        self._deny_bidi = grpc.stream_stream_rpc_method_handler(deny)

    def intercept_service(self, continuation: Any, details: Any) -> Any:
        if details.method.startswith(_OPEN_PREFIXES):
            return continuation(details)
        given = [
            value.encode() if isinstance(value, str) else bytes(value)
            for key, value in details.invocation_metadata or ()
            if key.lower() == "authorization"
        ]
        if len(given) == 1 and hmac.compare_digest(given[0], self._expected):
            return continuation(details)
        handler = continuation(details)
        if handler is None:
            return None
        if handler.request_streaming and handler.response_streaming:
            return self._deny_bidi
        if handler.response_streaming:
            return self._deny_stream
        return self._deny


def check_listen_free(listen: str) -> None:
    """Refuse a gRPC address another process is serving -- called before the daemon touches its host, so a
    second daemon never restores or writes the first one's knobs on its way to finding the address taken."""
    import socket

    if listen.startswith("unix:"):
        path = listen[5:]
        path = path[2:] if path.startswith("//") else path
        if Path(path).is_socket() and _socket_alive(path):
            raise TunerError(f"grpc.listen: {path} is in use by a running process")
        return
    host, _, port = listen.rpartition(":")
    host = host.strip("[]")
    if not port.isdigit() or int(port) == 0:
        return
    try:
        infos = socket.getaddrinfo(host or None, int(port), type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)
    except OSError:
        return  # the server's own bind reports an address it cannot resolve
    family, _, _, _, sockaddr = infos[0]
    with socket.socket(family, socket.SOCK_STREAM) as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # only a listener makes the bind fail
        try:
            probe.bind(sockaddr)
        except OSError as exc:
            raise TunerError(f"grpc.listen: {listen} is in use ({exc.strerror or exc})") from None


def _socket_alive(path: str) -> bool:
    """True if something accepts connections on the unix socket `path`."""
    import socket

    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as probe:
        probe.settimeout(1.0)
        try:
            probe.connect(path)
            return True
        except OSError:
            return False


class GrpcServer:
    """The daemon's gRPC server: Tuner + health + reflection, on a unix socket or TCP, optional TLS/token."""

    def __init__(self, daemon: DaemonApi, config: GrpcConfig) -> None:
        self.daemon = daemon
        self.config = config
        self._server: Any = None
        self._health: Any = None

    def start(self) -> str:
        """Bind and start; returns the address actually listened on (TCP port 0 resolved)."""
        from grpc_health.v1 import health, health_pb2, health_pb2_grpc
        from grpc_reflection.v1alpha import reflection

        pb, services = protos()
        cfg = self.config
        interceptors = [_TokenInterceptor(read_token(cfg.token_file))] if cfg.token_file else []
        server = grpc.server(
            futures.ThreadPoolExecutor(max_workers=MAX_WORKERS, thread_name_prefix="grpc"),
            interceptors=interceptors,
            maximum_concurrent_rpcs=64,
            options=[("grpc.max_receive_message_length", 1 << 20), ("grpc.so_reuseport", 0)],
        )  # a port in use is an error, not shared
        services.add_TunerServicer_to_server(make_servicer(self.daemon), server)
        self._health = health.HealthServicer(experimental_non_blocking=True)
        health_pb2_grpc.add_HealthServicer_to_server(self._health, server)
        for name in ("", SERVICE_NAME):
            self._health.set(name, health_pb2.HealthCheckResponse.NOT_SERVING)
        names = (
            pb.DESCRIPTOR.services_by_name["Tuner"].full_name,
            health_pb2.DESCRIPTOR.services_by_name["Health"].full_name,
            reflection.SERVICE_NAME,
        )
        reflection.enable_server_reflection(names, server)

        address = cfg.listen
        if address.startswith("unix:"):
            path = address[5:]
            path = path[2:] if path.startswith("//") else path
            try:
                Path(path).parent.mkdir(parents=True, exist_ok=True)
                if Path(path).is_socket():
                    check_listen_free(address)
                    os.unlink(path)  # a stale socket from a dead run
            except OSError as exc:
                raise TunerError(f"grpc.listen: cannot create {path}: {exc.strerror or exc}") from None
        try:
            if cfg.tls_cert:
                if cfg.tls_key is None:  # the config loader requires both
                    raise TunerError("grpc.tls_key: expected a key file next to tls_cert")
                creds = grpc.ssl_server_credentials(
                    [(cfg.tls_key.read_bytes(), cfg.tls_cert.read_bytes())],
                    root_certificates=cfg.tls_client_ca.read_bytes() if cfg.tls_client_ca else None,
                    require_client_auth=bool(cfg.tls_client_ca),
                )
                port = server.add_secure_port(address, creds)
            else:
                port = server.add_insecure_port(address)
        except (RuntimeError, OSError) as exc:
            raise TunerError(f"grpc.listen: cannot listen on {address!r}: {exc}") from None
        if port == 0:
            raise TunerError(f"grpc.listen: cannot listen on {address!r} (in use, or no such local address?)")
        server.start()
        self._server = server
        if address.startswith("unix:"):
            return address
        host = address.rpartition(":")[0]
        return f"{host}:{port}"

    def set_serving(self, serving: bool) -> None:
        from grpc_health.v1 import health_pb2

        if self._health is None:
            return
        status = health_pb2.HealthCheckResponse.SERVING if serving else health_pb2.HealthCheckResponse.NOT_SERVING
        for name in ("", SERVICE_NAME):
            self._health.set(name, status)

    def stop(self, grace: float = 1.0) -> None:
        if self._server is not None:
            self._server.stop(grace).wait(grace + 1)
            self._server = None
