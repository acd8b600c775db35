"""`tuner trace stats|synth`: inspect a Twitter-format cache trace, or generate a synthetic one."""

from __future__ import annotations

import argparse
import json
import math
import sys

from core.errors import TunerError


def _positive(kind):
    def parse(text: str):
        try:
            value = kind(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected a {kind.__name__} > 0, got {text!r}") from None
        if not (value > 0 and math.isfinite(value)):
            raise argparse.ArgumentTypeError(f"expected a finite {kind.__name__} > 0, got {text!r}")
        return value

    return parse


def _non_negative_float(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number >= 0, got {text!r}") from None
    if not (value >= 0 and math.isfinite(value)):
        raise argparse.ArgumentTypeError(f"expected a finite number >= 0, got {text!r}")
    return value


def register(subparsers) -> None:
    parser = subparsers.add_parser(
        "trace",
        help="inspect or synthesise Twitter cache traces",
        description="Twitter cache-trace tools (CSV rows 'timestamp,key,key size,value size,client id,operation,"
        "TTL'; plain, .gz or .zst).",
    )
    sub = parser.add_subparsers(dest="trace_command", metavar="SUBCOMMAND", required=True)
    _register_stats(sub)
    _register_synth(sub)


def _register_stats(sub) -> None:
    stats = sub.add_parser(
        "stats",
        help="per-bin QPS, op mix and key/value sizes of a trace",
        description="Stream a trace once and print per-bin request rate, op mix and sizes.",
    )
    stats.add_argument(
        "files",
        metavar="FILE",
        nargs="+",
        help="trace file (plain, .gz or .zst); several files are read as one trace, in order",
    )
    stats.add_argument(
        "--bin",
        dest="bin_s",
        type=_positive(int),
        default=3600,
        metavar="SECONDS",
        help="bin length in seconds (default 3600: 24 hourly bins per day)",
    )
    stats.add_argument(
        "--start-hours",
        type=_non_negative_float,
        default=0.0,
        metavar="H",
        help="begin H hours after the first row (e.g. 24 for the second day)",
    )
    stats.add_argument(
        "--hours", type=_positive(float), default=None, help="only HOURS of the trace (from --start-hours)"
    )
    scaling = stats.add_mutually_exclusive_group()
    scaling.add_argument(
        "--peak-qps",
        type=_positive(float),
        default=None,
        help="also show the rate scaled so that the busiest full bin has this mean QPS",
    )
    scaling.add_argument(
        "--scale", type=_positive(float), default=None, help="also show the rate multiplied by this factor"
    )
    stats.add_argument("--skip-bad", action="store_true", help="skip malformed rows (counted by reason)")
    stats.add_argument(
        "--tolerance",
        type=_non_negative_float,
        default=None,
        metavar="SECONDS",
        help="how far (s) a timestamp may go back before it is an error (default 5)",
    )
    stats.add_argument(
        "--max-span-days",
        type=_positive(float),
        default=31.0,
        metavar="DAYS",
        help="a row this long after the first one is an error (default 31; bounds memory)",
    )
    stats.add_argument("--json", action="store_true", help="print JSON instead of a table")
    stats.add_argument(
        "--series-out",
        metavar="CSV",
        default=None,
        help="also write the per-second request series as CSV 'second,requests'",
    )
    stats.set_defaults(func=run_stats)


def _register_synth(sub) -> None:
    synth = sub.add_parser(
        "synth",
        help="generate a synthetic trace for a Twitter cluster",
        description="Generate a synthetic trace in the public format: diurnal rate, and the "
        "cluster's op mix, key/value sizes, Zipf key popularity and TTLs.",
    )
    synth.add_argument("--cluster", type=int, required=True, help="Twitter cluster number (1..54)")
    synth.add_argument("--hours", type=_positive(float), default=24.0, help="trace length in hours (default 24)")
    synth.add_argument("--out", required=True, metavar="FILE", help="output (.zst / .gz compressed by suffix)")
    synth.add_argument("--seed", type=int, default=0, help="random seed (default 0)")
    synth.add_argument(
        "--mean-qps",
        type=_positive(float),
        default=None,
        help="mean request rate (default: the cluster's rate from the statistics table)",
    )
    synth.add_argument("--keys", type=_positive(int), default=100_000, help="key population (default 100000)")
    synth.add_argument("--zstd-level", type=int, default=12, help="zstd level for .zst output (default 12)")
    synth.add_argument(
        "--stats", default=None, metavar="FILE", help="cluster statistics table (default: the bundled 2020Mar table)"
    )
    synth.set_defaults(func=run_synth)


def stats_json(st, scale: float | None) -> dict:
    def size(s):
        return None if s is None else {"mean": s.mean, "min": s.min, "max": s.max}

    full = st.full_bins or st.bins
    return {
        "path": st.path,
        "lines": st.lines,
        "rows": st.rows,
        "skipped": st.skipped,
        "origin_timestamp": st.origin,
        "start_s": st.start_s,
        "seconds": st.seconds,
        "bin_s": st.bin_s,
        "full_bins": len(st.full_bins),
        "peak_qps": max(b.qps for b in full),
        "trough_qps": min(b.qps for b in full),
        "mean_qps": st.rows / st.seconds,
        "scale": scale,
        "bins": [
            {
                "index": b.index,
                "start_s": b.start_s,
                "seconds": b.seconds,
                "partial": b.seconds < st.bin_s,
                "requests": b.requests,
                "qps": b.qps,
                **({"scaled_qps": b.qps * scale} if scale is not None else {}),
                "ops": b.ops,
                "op_mix": b.op_mix,
                "key_size": size(b.key_size),
                "value_size": size(b.value_size),
            }
            for b in st.bins
        ],
    }


def _clock(seconds: int) -> str:
    return f"{seconds // 3600:02d}:{seconds % 3600 // 60:02d}:{seconds % 60:02d}"


def _print_table(doc: dict) -> None:
    from rich.markup import escape
    from rich.table import Table

    from tuner.cli.output import table_console

    scaled = doc["scale"] is not None
    table = Table(
        title=f"{escape(doc['path'])}: {doc['rows']:,} requests over {doc['seconds']:,} s "
        f"({doc['full_bins']} full {doc['bin_s']} s bins)",
        caption=escape("op mix: % of requests; sizes: mean [min-max] bytes"),
    )
    for name in (
        "bin",
        "start",
        "requests",
        "QPS",
        *(("scaled QPS",) if scaled else ()),
        "op mix %",
        "key B",
        "value B",
    ):
        table.add_column(name, justify="left" if name in ("op mix %", "start") else "right")
    for b in doc["bins"]:
        mix = " ".join(
            f"{op} {100 * share:.0f}" if share >= 0.01 else f"{op} {100 * share:.1f}"
            for op, share in sorted(b["op_mix"].items(), key=lambda kv: -kv[1])
        )
        ks, vs = b["key_size"], b["value_size"]
        table.add_row(
            f"{b['index']}" + ("*" if b["partial"] else ""),
            _clock(b["start_s"]) if doc["bin_s"] % 60 else _clock(b["start_s"])[:5],
            f"{b['requests']:,}",
            f"{b['qps']:,.2f}",
            *((f"{b['scaled_qps']:,.0f}",) if scaled else ()),
            mix,
            escape(f"{ks['mean']:.1f} [{ks['min']}-{ks['max']}]") if ks else "-",
            escape(f"{vs['mean']:.1f} [{vs['min']}-{vs['max']}]") if vs else "-",
        )
    console = table_console()
    console.print(table)
    notes = [
        f"peak {doc['peak_qps']:,.2f} QPS, trough {doc['trough_qps']:,.2f} QPS "
        f"(ratio {doc['peak_qps'] / doc['trough_qps']:.2f})"
        if doc["trough_qps"] > 0
        else f"peak {doc['peak_qps']:,.2f} QPS"
    ]
    if scaled:
        notes.append(f"scale factor {doc['scale']:.6g}")
    if any(b["partial"] for b in doc["bins"]):
        notes.append("* partial last bin (not used by replay)")
    if doc["skipped"]:
        total = sum(doc["skipped"].values())
        notes.append(
            f"skipped {total:,} malformed row(s): "
            + ", ".join(f"{n:,} {reason}" for reason, n in sorted(doc["skipped"].items()))
        )
    for note in notes:
        console.print(escape(note))


def _write_series(path: str, per_second) -> None:
    try:
        with open(path, "w", encoding="ascii") as fh:
            fh.write("second,requests\n")
            fh.writelines(f"{i},{n}\n" for i, n in enumerate(per_second.tolist()))
    except OSError as exc:
        raise TunerError(f"{path}: cannot write series: {exc.strerror or exc}") from None


def run_stats(args: argparse.Namespace) -> int:
    from traces.parser import DEFAULT_TOLERANCE_S
    from traces.schedule import scale_factor
    from traces.series import trace_stats

    scale_factor(1.0, peak_qps=args.peak_qps, scale=args.scale)
    tolerance = DEFAULT_TOLERANCE_S if args.tolerance is None else args.tolerance
    max_s = None if args.hours is None else args.hours * 3600
    files = args.files[0] if len(args.files) == 1 else args.files
    st = trace_stats(
        files,
        start_s=round(args.start_hours * 3600),
        bin_s=args.bin_s,
        skip_bad=args.skip_bad,
        tolerance_s=tolerance,
        max_seconds=max_s,
        max_span_s=int(args.max_span_days * 86400),
    )
    full = st.full_bins or st.bins
    scale = None
    if args.peak_qps is not None or args.scale is not None:
        scale = scale_factor(max(b.qps for b in full), peak_qps=args.peak_qps, scale=args.scale)
    if args.series_out:
        _write_series(args.series_out, st.per_second)
    doc = stats_json(st, scale)
    if args.json:
        json.dump(doc, sys.stdout, indent=1)
        sys.stdout.write("\n")
    else:
        _print_table(doc)
    return 0


def run_synth(args: argparse.Namespace) -> int:
    from traces.clusters import cluster_stats
    from traces.synth import synthesize

    if not 1 <= args.zstd_level <= 22:
        raise TunerError(f"--zstd-level must be in 1..22, got {args.zstd_level}")
    stats = cluster_stats(args.cluster, args.stats)
    qps = stats.rate_kqps * 1000 if args.mean_qps is None else args.mean_qps
    if qps * args.hours * 3600 > 1e7:
        print(
            f"generating about {qps * args.hours * 3600:,.0f} requests (mean {qps:g} QPS for {args.hours:g} h); "
            "use --mean-qps for a smaller trace",
            file=sys.stderr,
        )
    result = synthesize(
        stats,
        args.out,
        hours=args.hours,
        seed=args.seed,
        mean_qps=args.mean_qps,
        keys=args.keys,
        zstd_level=args.zstd_level,
    )
    print(
        f"wrote {result.path}: {result.rows:,} requests over {result.seconds:,} s "
        f"(cluster{args.cluster}, mean {result.mean_qps:g} QPS target, seed {args.seed})"
    )
    return 0
