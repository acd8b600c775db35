"""`tuner load`: an open-loop memcached or Redis/Valkey load generator (Poisson or a replayed cache trace);
`tuner load merge`."""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

from actuators.latency.servers import SERVER_KINDS


def register(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser(
        "load",
        help="open-loop memcached or Redis load (Poisson or a cache trace) with HdrHistogram latency",
        description="Send memcached (or, with --protocol redis, Redis/Valkey) requests open-loop: every send time is fixed in advance (Poisson arrivals "
        "for --qps, the trace's timestamps scaled for --trace) and latency is measured from the scheduled time, "
        "so a stall in the server or in the generator shows up in the tail instead of being hidden "
        "(no coordinated omission). Prints achieved QPS and p50/p99/p99.9 each second, the generator's own send "
        "lag, and writes an HdrHistogram interval log. Only the --server you name is contacted; runs are "
        "bounded by --duration. `tuner load merge A.hlog B.hlog` adds the logs of shards run on several clients.",
    )
    p.add_argument("--server", metavar="HOST:PORT", help="the server to load (host:port, [v6]:port, unix:/path)")
    p.add_argument(
        "--protocol",
        choices=SERVER_KINDS,
        default=SERVER_KINDS[0],
        help="the server's protocol: memcached (default) or redis (RESP GET/SET/DEL: Redis, Valkey)",
    )
    src = p.add_mutually_exclusive_group()
    src.add_argument("--qps", type=float, help="Poisson arrivals at this rate (requests/s)")
    src.add_argument(
        "--trace", metavar="FILE", help="replay a Twitter cache trace (.csv, .gz, .zst; 'sample' = bundled)"
    )
    rate = p.add_mutually_exclusive_group()
    rate.add_argument("--peak-qps", type=float, help="--trace: play it faster so its busiest window averages Q req/s")
    rate.add_argument("--time-scale", type=float, help="--trace: play it X times faster than recorded (default 1)")
    p.add_argument(
        "--peak-window",
        type=float,
        default=3600.0,
        metavar="S",
        help="--peak-qps: window (trace seconds) whose mean rate is the peak (default 3600, as replay)",
    )
    p.add_argument("--start", type=float, default=0.0, metavar="S", help="--trace: begin S trace seconds in")
    p.add_argument("--shard", default="0/1", metavar="I/N", help="--trace: send only clients hashing to shard I of N")
    p.add_argument("--duration", type=float, metavar="S", help="run length in seconds (required)")
    p.add_argument("--processes", type=int, default=1, help="generator processes (default 1)")
    p.add_argument("--connections", type=int, default=4, help="connections per process (default 4)")
    p.add_argument("--keys", type=int, default=10_000, help="--qps: key population (uniform; default 10000)")
    p.add_argument("--key-size", type=int, default=30, help="--qps: key bytes (default 30)")
    p.add_argument("--value-size", type=int, default=200, help="--qps: value bytes (default 200)")
    p.add_argument("--set-ratio", type=float, default=0.03, help="--qps: fraction of sets (default 0.03)")
    p.add_argument("--no-warm", action="store_true", help="--qps: do not store the key set before the run")
    p.add_argument("--seed", type=int, default=0, help="random seed of the schedule (default 0)")
    p.add_argument("--drain", type=float, default=1.0, metavar="S", help="wait for late replies (default 1 s)")
    p.add_argument(
        "--batch-us",
        type=float,
        default=0.0,
        help="hold due requests until the oldest waited this long, then send them in one write (default 0)",
    )
    p.add_argument("--spin-us", type=float, default=200.0, help="spin (not sleep) this close to a send (default 200)")
    p.add_argument(
        "--hlog",
        metavar="FILE",
        help="write an HdrHistogram interval log (ns; send lag tagged send_lag, response time from the actual send tagged response)",
    )
    p.add_argument("--json", metavar="FILE", help="write the summary (with per-second rows) as JSON ('-' = stdout)")
    p.add_argument("--quiet", action="store_true", help="no per-second lines")
    p.set_defaults(func=run)
    sub = p.add_subparsers(dest="load_command", metavar="merge")
    m = sub.add_parser(
        "merge",
        help="add the .hlog files of shards second by second",
        description="Add HdrHistogram interval logs written at the same time (e.g. one per --shard "
        "client) second by second into one log, and print the merged percentiles.",
    )
    m.add_argument("logs", nargs="+", metavar="LOG", help=".hlog files written by tuner load")
    m.add_argument("-o", "--output", metavar="FILE", help="merged log (default: stdout)")
    m.set_defaults(func=run_merge)


def _line(sec: Any) -> str:
    lat = sec.row()
    pct = lat["latency_us"] or {}
    ratio = lat["achieved_ratio"]
    return (
        f"{sec.second:5d} s  sched {sec.scheduled:7d}  sent {sec.sent:7d}  done {sec.completed:7d}"
        f"  ({'-' if ratio is None else f'{100 * ratio:6.2f} %'})"
        f"  p50 {pct.get('p50', float('nan')):8.1f}  p99 {pct.get('p99', float('nan')):8.1f}"
        f"  p99.9 {pct.get('p99.9', float('nan')):8.1f} µs  lag p99 {lat['send_lag_p99_us'] or 0:7.1f} µs"
    )


def run(args: argparse.Namespace) -> int:
    from core.errors import TunerError
    from tuner.load.coordinator import LoadSettings, address_of, run_load, warm
    from tuner.load.plan import Shard, poisson_plan, trace_plan, warm_requests

    if args.server is None or args.duration is None or (args.qps is None and args.trace is None):
        raise TunerError("tuner load: give --server HOST:PORT, --qps Q or --trace FILE, and --duration S")
    if args.trace is None and (args.peak_qps is not None or args.time_scale is not None or args.start):
        raise TunerError("tuner load: --peak-qps, --time-scale and --start apply to --trace only")
    settings = LoadSettings(
        address_of(args.server, args.protocol),
        args.duration,
        args.processes,
        args.connections,
        args.drain,
        args.spin_us,
        args.batch_us,
    )
    if args.qps is not None:
        plan = poisson_plan(
            args.qps,
            args.duration,
            seed=args.seed,
            keys=args.keys,
            key_bytes=args.key_size,
            value_bytes=args.value_size,
            set_ratio=args.set_ratio,
            protocol=args.protocol,
        )
    else:
        path, scale = _trace_scale(args)
        plan = trace_plan(
            path,
            time_scale=scale,
            duration_s=args.duration,
            start_s=args.start,
            shard=Shard.parse(args.shard),
            seed=args.seed,
            protocol=args.protocol,
        )
    if args.qps is not None and not args.no_warm:
        warm(settings.address, warm_requests(plan), protocol=args.protocol)
    note = "" if settings.address.is_loopback() else ""
    if settings.address.is_loopback():
        note = " (loopback: no NIC between client and server, so NIC interrupt settings have no effect here)"
    print(
        f"tuner load: {len(plan):,} requests from {plan.source} over {args.duration:g} s to {settings.address}"
        f" with {args.processes} x {args.connections} connections{note}",
        file=sys.stderr,
    )
    on_second = None if args.quiet else (lambda s: print(_line(s), flush=True))
    hlog = open(args.hlog, "w", encoding="utf-8") if args.hlog else None
    try:
        result = run_load(plan, settings, on_second=on_second, hlog=hlog)
    finally:
        if hlog is not None:
            hlog.close()
    summary = result.summary()
    _print_summary(summary)
    if args.json:
        text = json.dumps(summary, indent=1)
        if args.json == "-":
            print(text)
        else:
            with open(args.json, "w", encoding="utf-8") as fh:
                fh.write(text + "\n")
    return 130 if result.interrupted else 0


def _trace_scale(args: argparse.Namespace) -> tuple[str, float]:
    from traces.schedule import load_schedule, sample_trace_path

    path = str(sample_trace_path()) if args.trace == "sample" else args.trace
    if args.peak_qps is not None:
        sched = load_schedule(path, bin_s=args.peak_window, peak_qps=args.peak_qps)
        return path, sched.scale
    return path, 1.0 if args.time_scale is None else args.time_scale


def _print_summary(s: dict[str, Any]) -> None:
    lat = s["latency_us"] or {}
    lag = s["send_lag_us"] or {}
    worst = s["worst_second_achieved_error"]

    def fmt(p: str) -> str:
        v = lat.get(p)
        return "-" if v is None else f"{v['us']:.1f} [{v['ci_low_us']:.1f}, {v['ci_high_us']:.1f}]"

    print(
        f"tuner load: scheduled {s['scheduled_qps']:,.0f}/s, achieved {s['achieved_qps']:,.0f}/s"
        f" (worst second {'-' if worst is None else f'{100 * worst:.2f} %'} off), sent {s['sent']:,} of"
        f" {s['planned']:,}, unanswered {s['unanswered']}, errors {s['errors']}"
        + (f" (interrupted after {s['run_s']:g} s)" if s["interrupted"] else ""),
        file=sys.stderr,
    )
    print(f"tuner load: latency µs p50 {fmt('p50')}  p99 {fmt('p99')}  p99.9 {fmt('p99.9')} (95 % CI)", file=sys.stderr)
    resp = {k: v["us"] for k, v in (s.get("response_us") or {}).items()}
    svc = {k: v["us"] for k, v in (s.get("service_us") or {}).items()}
    print(
        f"tuner load: response time (from the actual send) µs p50 {resp.get('p50', 0):.1f}  p99 {resp.get('p99', 0):.1f}"
        f"  p99.9 {resp.get('p99.9', 0):.1f}; service time (to the kernel's receive stamp, {s.get('service_samples', 0):,}"
        f" requests sent on time onto an idle connection) p50 {svc.get('p50', 0):.1f}  p99 {svc.get('p99', 0):.1f}",
        file=sys.stderr,
    )
    print(
        f"tuner load: send lag µs p50 {lag.get('p50', 0):.1f}  p99 {lag.get('p99', 0):.1f}"
        f"  p99.9 {lag.get('p99.9', 0):.1f}  max {s['send_lag_max_us'] or 0:.1f}",
        file=sys.stderr,
    )


def run_merge(args: argparse.Namespace) -> int:
    from actuators.latency.hlog import LAG_TAG
    from tuner.load.hist import percentiles_us
    from tuner.load.hlog_merge import merge_logs

    out = open(args.output, "w", encoding="utf-8") if args.output else sys.stdout
    try:
        totals = merge_logs(args.logs, out)
    finally:
        if args.output:
            out.close()
    for tag, hist in totals.items():
        pct = percentiles_us(hist)
        name = (
            "latency"
            if tag is None
            else ("send lag" if tag == LAG_TAG else "response time" if tag == "response" else tag)
        )
        text = "empty" if pct is None else "  ".join(f"{k} {v['us']:.1f} µs" for k, v in pct.items())
        print(f"tuner load merge: {name}: {hist.get_total_count():,} requests  {text}", file=sys.stderr)
    return 0


def add_load_arguments(p: argparse.ArgumentParser) -> None:
    """--load-command / --load-server: drive a real testbed's load with a generator process."""
    p.add_argument(
        "--load-command",
        metavar="TEMPLATE",
        help="give the host load control with a generator run per load level: 'tuner' (= tuner load, Poisson) or a "
        "command template with {qps}, {seconds} and {server}, e.g. 'mutilate -s {server} -q {qps} -t {seconds}'",
    )
    p.add_argument("--load-server", default="127.0.0.1:11211", metavar="HOST:PORT", help="{server} of --load-command")
    p.add_argument(
        "--host-options",
        metavar="TABLE",
        help="options for the host factory as a TOML inline table (the daemon config's [host.options]), e.g. "
        '\'{qps="memcached:10.0.0.2:11211", latency={kind="prober", rate_hz=500}}\'',
    )


def host_options_from_args(args: argparse.Namespace) -> dict:
    """--host-options as a dict ({} when not given); a one-line TunerError when it is not a TOML inline table."""
    from tuner.hosts import parse_inline_table

    text = getattr(args, "host_options", None)
    if not text:
        return {}
    return parse_inline_table(text, "--host-options", '{root="/tmp/hw", qps="memcached:127.0.0.1:11211"}')


def load_from_args(args: argparse.Namespace):
    """The `CommandLoad` for --load-command, or None."""
    if not getattr(args, "load_command", None):
        return None
    from tuner.hosts import load_controller

    return load_controller(args.load_command, server=args.load_server)
