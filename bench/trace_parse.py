"""Benchmark the trace parser: lines/s for plain and zstd input, and peak RSS (JSON on stdout).

Generates a synthetic cluster52 trace with N lines (`traces.synth`), writes it plain and zstd (level 3), then
times, each in a fresh subprocess (so peak RSS is the parser's own): the vectorised parser alone (`parse`), the
full per-second/per-bin statistics pass (`stats`, what `tuner trace stats` and the replay use), and the
reference one-row-at-a-time pure-Python parser on a prefix (`reference`) for comparison. Each measurement is
the median of --repeat runs. Peak RSS is also measured at N/5 lines to show that memory does not grow with the
trace (streaming, constant memory).

    .venv/bin/python bench/trace_parse.py [--lines 5000000] [--repeat 3] [--file TRACE]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def _vm_hwm_mb() -> float:
    """Peak RSS of this process image (VmHWM; unlike ru_maxrss it is not inherited from the parent on exec)."""
    with open("/proc/self/status") as fh:
        for line in fh:
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def measure(path: str, mode: str, limit: int) -> dict:
    """Run in a child process: parse `path` once and report lines, seconds and peak RSS."""
    sys.path.insert(0, str(ROOT))
    import numpy  # noqa: F401  (import cost is not parse time)

    from traces.format import RowError, parse_row
    from traces.parser import TraceParser
    from traces.series import trace_stats

    base_rss = _vm_hwm_mb()
    t0 = time.perf_counter()
    if mode == "parse":
        parser = TraceParser(path, chunk_bytes=1 << 20)
        checksum = 0
        for block in parser.blocks():
            checksum += int(block.value_size.sum())
        lines = parser.lines
    elif mode == "stats":
        st = trace_stats(path)
        lines, checksum = st.lines, int(st.per_second.sum())
    else:  # reference: pure Python, one row at a time, on the first `limit` lines of a plain file
        lines = checksum = 0
        with open(path, "rb") as fh:
            for line in fh:
                try:
                    checksum += parse_row(line.rstrip(b"\n")).value_size
                except RowError:
                    pass
                lines += 1
                if lines >= limit:
                    break
    seconds = time.perf_counter() - t0
    return {
        "lines": lines,
        "seconds": seconds,
        "checksum": checksum,
        "peak_rss_mb": _vm_hwm_mb(),
        "rss_before_parse_mb": base_rss,
    }


def child(path: Path, mode: str, limit: int = 0) -> dict:
    out = subprocess.run(
        [sys.executable, __file__, "--measure", str(path), "--mode", mode, "--limit", str(limit)],
        check=True,
        capture_output=True,
        text=True,
    )
    return json.loads(out.stdout)


def run_mode(path: Path, mode: str, repeat: int, limit: int = 0) -> dict:
    runs = [child(path, mode, limit) for _ in range(repeat)]
    secs = statistics.median(r["seconds"] for r in runs)
    lines = runs[0]["lines"]
    return {
        "file": path.name,
        "bytes": path.stat().st_size,
        "lines": lines,
        "seconds_median": round(secs, 4),
        "lines_per_s": round(lines / secs),
        "mb_per_s_decompressed": None,
        "peak_rss_mb": round(max(r["peak_rss_mb"] for r in runs), 1),
        "rss_before_parse_mb": round(runs[0]["rss_before_parse_mb"], 1),
        "runs": len(runs),
    }


def make_traces(lines: int, workdir: Path) -> tuple[Path, Path]:
    sys.path.insert(0, str(ROOT))
    import zstandard

    from traces.clusters import cluster_stats
    from traces.synth import synthesize

    plain = workdir / f"bench-{lines}.csv"
    synthesize(cluster_stats(52), plain, hours=24, mean_qps=lines / 86400, seed=1)
    zst = workdir / f"bench-{lines}.csv.zst"
    with open(plain, "rb") as src, open(zst, "wb") as dst:
        zstandard.ZstdCompressor(level=3).copy_stream(src, dst)
    return plain, zst


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--lines", type=int, default=5_000_000, help="approximate lines of the generated trace")
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--file", type=Path, default=None, help="benchmark this trace instead (plain or zst)")
    ap.add_argument("--reference-lines", type=int, default=300_000)
    ap.add_argument("--measure", help=argparse.SUPPRESS)
    ap.add_argument("--mode", default="parse", help=argparse.SUPPRESS)
    ap.add_argument("--limit", type=int, default=0, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.measure:
        json.dump(measure(args.measure, args.mode, args.limit), sys.stdout)
        return 0

    report: dict = {
        "benchmark": "trace_parse",
        "python": platform.python_version(),
        "machine": platform.machine(),
        "cpus": os.cpu_count(),
        "target_lines_per_s": 1_000_000,
    }
    with tempfile.TemporaryDirectory(prefix="trace-bench-") as tmp:
        workdir = Path(tmp)
        if args.file:
            files = {"given": args.file}
        else:
            plain, zst = make_traces(args.lines, workdir)
            small_plain, _ = make_traces(args.lines // 5, workdir)
            files = {"plain": plain, "zst": zst}
        results = {}
        for name, path in files.items():
            results[f"{name}_parse"] = run_mode(path, "parse", args.repeat)
            results[f"{name}_stats"] = run_mode(path, "stats", args.repeat)
        if not args.file:
            results["plain_parse_fifth"] = run_mode(small_plain, "parse", args.repeat)
            results["reference_pure_python"] = run_mode(plain, "reference", 1, args.reference_lines)
        if not args.file:
            raw_bytes = plain.stat().st_size
            for key in ("plain_parse", "plain_stats", "zst_parse", "zst_stats"):
                r = results[key]
                r["mb_per_s_decompressed"] = round(raw_bytes / r["seconds_median"] / 1e6, 1)
            report["rss_growth_mb_5x_lines"] = round(
                results["plain_parse"]["peak_rss_mb"] - results["plain_parse_fifth"]["peak_rss_mb"], 1
            )
        report["results"] = results
        report["meets_target"] = {
            k: v["lines_per_s"] >= 1_000_000 for k, v in results.items() if not k.startswith("reference")
        }
    json.dump(report, sys.stdout, indent=1)
    sys.stdout.write("\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
