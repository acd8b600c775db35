"""`tuner ctl`: talk to a running daemon over its gRPC API (status, point, curve, trials, retune, policy, watch)."""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

from core.errors import TunerError

DEFAULT_ADDRESS = "unix:///run/tuner/tuner.sock"


def register(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser(
        "ctl",
        help="query or steer a running daemon over gRPC",
        description="Client for the daemon's tuner.v1 gRPC API.",
    )
    p.add_argument(
        "--address",
        "-a",
        default=DEFAULT_ADDRESS,
        help="daemon address: unix:///path.sock or HOST:PORT (default: %(default)s)",
    )
    p.add_argument("--token-file", help="file with the bearer token (grpc.token_file of the daemon)")
    p.add_argument("--tls-ca", help="CA certificate to verify the daemon's TLS certificate (enables TLS)")
    p.add_argument("--tls-cert", help="client certificate (with --tls-key) for daemons that require one")
    p.add_argument("--tls-key", help="client private key")
    p.add_argument("--timeout", type=float, default=10.0, help="seconds per call (default: %(default)s)")
    p.add_argument("--json", action="store_true", help="print the raw response as JSON")
    sub = p.add_subparsers(dest="action", metavar="ACTION", required=True)
    sub.add_parser("status", help="current point, load, last measurement, loop state")
    pt = sub.add_parser("point", help="recommended ITR/DVFS for a load and SLA")
    pt.add_argument("--qps", type=float, required=True, help="offered load (requests/s)")
    pt.add_argument("--sla-us", type=float, default=0.0, help="SLA in µs (default: the daemon's policy)")
    pt.add_argument("--percentile", type=float, default=0.0, help="50, 90, 95, 99 or 99.9 (default: policy)")
    cv = sub.add_parser(
        "curve",
        help="predicted power and latency of the best point by load (for schedulers)",
        description="GetPowerCurve: the best point's predicted power and latency at each load, with standard "
        "errors. Without --qps-min/--qps-max/--points: at the loads of the daemon's recent retunes; with any of "
        "them: over that range from the newest retune's model (0 = the model's own loads).",
    )
    cv.add_argument("--sla-us", type=float, default=0.0, help="SLA in µs (default: the daemon's policy)")
    cv.add_argument("--percentile", type=float, default=0.0, help="50, 90, 95, 99 or 99.9 (default: policy)")
    cv.add_argument("--qps-min", type=float, default=0.0, help="lowest load, requests/s (0: the model's lowest)")
    cv.add_argument("--qps-max", type=float, default=0.0, help="highest load, requests/s (0: the model's highest)")
    cv.add_argument("--points", type=int, default=0, help="loads in the range, at most 200 (0: 20)")
    tr = sub.add_parser("trials", help="trials measured so far")
    tr.add_argument("--limit", type=int, default=0, help="only the newest N")
    tr.add_argument("--retune", default="", help="only this retune id")
    rt = sub.add_parser("retune", help="ask for a retune now")
    rt.add_argument("--reason", default="", help="free text for the daemon's log")
    po = sub.add_parser("policy", help="show or change SLA / percentile / reward at run time")
    po.add_argument("--sla-us", type=float)
    po.add_argument("--percentile", type=float)
    po.add_argument("--reward")
    w = sub.add_parser("watch", help="stream decisions as they happen")
    w.add_argument("--count", type=int, default=0, help="stop after N decisions (0 = until interrupted)")
    p.set_defaults(func=run)


def _read(path: str | None, what: str) -> bytes | None:
    if not path:
        return None
    try:
        return open(path, "rb").read()
    except OSError as exc:
        raise TunerError(f"{path}: cannot read {what}: {exc.strerror or exc}") from None


def _channel(args: argparse.Namespace) -> Any:
    import grpc

    ca, cert, key = _read(args.tls_ca, "CA"), _read(args.tls_cert, "certificate"), _read(args.tls_key, "key")
    if ca or cert:
        creds = grpc.ssl_channel_credentials(root_certificates=ca, private_key=key, certificate_chain=cert)
        return grpc.secure_channel(args.address, creds)
    return grpc.insecure_channel(args.address)


def _metadata(args: argparse.Namespace) -> list[tuple[str, str]]:
    token = _read(args.token_file, "token file")
    if token is None:
        return []
    text = token.decode(errors="replace").strip()
    if not text:
        raise TunerError(f"{args.token_file}:1: expected a non-empty token")
    return [("authorization", f"Bearer {text}")]


def run(args: argparse.Namespace) -> int:
    import grpc
    from google.protobuf import json_format

    from tuner.daemon.service import protos

    pb, services = protos()
    md = _metadata(args)
    with _channel(args) as channel:
        stub = services.TunerStub(channel)
        kw = {"timeout": args.timeout, "metadata": md}
        try:
            if args.action == "status":
                resp = stub.GetStatus(pb.GetStatusRequest(), **kw)
            elif args.action == "point":
                resp = stub.GetOperatingPoint(
                    pb.GetOperatingPointRequest(qps=args.qps, sla_us=args.sla_us, percentile=args.percentile), **kw
                )
            elif args.action == "curve":
                if args.points < 0:
                    raise TunerError(f"--points: expected a count >= 0, got {args.points}")
                req = pb.GetPowerCurveRequest(
                    sla_us=args.sla_us,
                    percentile=args.percentile,
                    qps_min=args.qps_min,
                    qps_max=args.qps_max,
                    points=min(args.points, 2**32 - 1),
                )
                resp = stub.GetPowerCurve(req, **kw)
            elif args.action == "trials":
                if args.limit < 0:
                    raise TunerError("--limit: expected a count >= 0")
                resp = stub.ListTrials(pb.ListTrialsRequest(limit=args.limit, retune_id=args.retune), **kw)
            elif args.action == "retune":
                resp = stub.Retune(pb.RetuneRequest(reason=args.reason), **kw)
            elif args.action == "policy":
                req = pb.SetPolicyRequest()
                if args.sla_us is not None:
                    req.sla_us = args.sla_us
                if args.percentile is not None:
                    req.percentile = args.percentile
                if args.reward is not None:
                    req.reward = args.reward
                resp = stub.SetPolicy(req, **kw)
            else:
                n = 0
                for d in stub.WatchDecisions(pb.WatchDecisionsRequest(), metadata=md):
                    print(json.dumps(json_format.MessageToDict(d)) if args.json else _decision_line(d), flush=True)
                    n += 1
                    if args.count and n >= args.count:
                        break
                return 0
        except grpc.RpcError as exc:
            raise TunerError(f"{args.address}: {exc.code().name}: {exc.details()}") from None
    if args.json:
        print(json.dumps(json_format.MessageToDict(resp, always_print_fields_with_no_presence=True), indent=2))
    else:
        print(_human(args.action, resp))
    return 0


def _pt(msg: Any) -> str:
    from tuner.daemon.grpc_messages import point_from_msg

    p = point_from_msg(msg)
    return f"ITR {p.itr_us} µs @ {p.dvfs_ghz:g} GHz"


def _decision_line(d: Any) -> str:
    return f"{d.retune_id} {d.reason}: {_pt(d.point)} met_sla={d.met_sla} qps={d.qps:.0f} -- {d.detail}"


def _human(action: str, r: Any) -> str:
    if action == "status":
        point = _pt(r.point) if r.HasField("point") else "none (the OS's own policy is in charge)"
        lines = [
            f"state: {r.state}   mode: {r.mode or 'tune'}   host: {r.host}   version: {r.version}   "
            f"uptime: {r.uptime_s:.0f} s",
            f"point: {point}",
            f"load: {r.offered_qps:.0f} QPS (tuned for {r.tuned_qps:.0f}, band "
            f"{r.band_low_qps:.0f}..{r.band_high_qps:.0f})",
            f"policy: p{r.policy.percentile:g} <= {r.policy.sla_us:g} µs, reward {r.policy.reward}",
            f"retune: {r.retune_id or '-'} ({r.retune_trials_done}/{r.retune_trials_planned} trials); "
            f"trials total {r.trials_total}",
            f"SLA violations: {r.sla_violations_total}   guardrail reverts: {r.guardrail_reverts_total}",
        ]
        if r.HasField("last_measurement"):
            m = r.last_measurement
            lat = ", ".join(f"p{k} {v:.0f} µs" for k, v in sorted(m.latency_us.items(), key=lambda kv: float(kv[0])))
            power = f"{m.power_w:.1f} W" if m.HasField("power_w") else "power unknown (no energy counter)"
            lines.append(f"last window: {m.offered_qps:.0f} QPS, {lat}, {power}")
            if m.power_by_source_w:
                side = ", ".join(f"{k} {v:.1f} W" for k, v in sorted(m.power_by_source_w.items()))
                lines.append(f"power by energy source: {side}")
        if r.HasField("energy_saved_ratio"):
            lines.append(
                f"energy saved vs the OS's policy: {100 * r.energy_saved_ratio:.1f} % "
                f"(95 % CI {100 * r.energy_saved_ratio_lower:.1f} .. {100 * r.energy_saved_ratio_upper:.1f} %)"
            )
        lines += [f"warning: {w}" for w in r.warnings]
        return "\n".join(lines)
    if action == "point":
        src = "measured" if r.from_measured else "model"
        return (
            f"{_pt(r.point)}  ({src}: {r.source}; meets SLA: {r.meets_sla})\n"
            f"predicted latency {r.predicted_latency_us:.1f} ± {r.latency_sem_us:.1f} µs, "
            f"power {r.predicted_power_w:.1f} ± {r.power_sem_w:.1f} W" + (f"\nnote: {r.note}" if r.note else "")
        )
    if action == "curve":
        return _curve_text(r)
    if action == "trials":
        rows = [
            f"{'retune':8} {'#':>3} {'ITR µs':>6} {'GHz':>5} {'QPS':>9} {'p99 µs':>8} {'W':>7} {'reward':>10} status"
        ]
        for t in r.trials:
            m = t.measurement
            p99 = m.latency_us.get("99", float("nan")) if t.HasField("measurement") else float("nan")
            rows.append(
                f"{t.retune_id:8} {t.index:3d} {t.point.itr_us:6d} {t.point.dvfs_ghz:5.2f} "
                f"{t.qps:9.0f} {p99:8.1f} {m.power_w:7.1f} "
                f"{(f'{t.reward:.4g}' if t.has_reward else '-'):>10} {t.status}" + (f" ({t.error})" if t.error else "")
            )
        return "\n".join(rows)
    if action == "retune":
        return ("accepted: " if r.accepted else "refused: ") + r.message
    if action == "policy":
        return f"policy: p{r.percentile:g} <= {r.sla_us:g} µs, reward {r.reward}"
    return str(r)


def _curve_text(r: Any) -> str:
    head = f"p{r.percentile:g} <= {r.sla_us:g} µs"
    if r.measured_qps_max:
        head += f"; this host measured {r.measured_qps_min:.0f}..{r.measured_qps_max:.0f} QPS"
    rows = [
        head,
        f"{'QPS':>9} {'ITR µs':>6} {'GHz':>5} {'power W':>12} {'p' + format(r.percentile, 'g') + ' µs':>14}  source",
    ]
    for c in r.points:
        flag = "  [extrapolated]" if c.extrapolated else ""
        if not c.meets_sla:
            rows.append(f"{c.qps:9.0f} {'no point meets the SLA':>40}  {c.source}{flag}")
            continue
        rows.append(
            f"{c.qps:9.0f} {c.point.itr_us:6d} {c.point.dvfs_ghz:5.2f} "
            f"{c.predicted_power_w:6.1f} ± {c.power_sem_w:3.1f} {c.predicted_latency_us:7.1f} ± {c.latency_sem_us:4.1f}"
            f"  {c.source}{flag}"
        )
    if r.note:
        rows.append(f"note: {r.note}")
    return "\n".join(rows)


if __name__ == "__main__":  # pragma: no cover
    sys.exit(0)
