"""`tuner doctor`: what this host offers for tuning, what is missing, and the fix for each (read-only)."""

from __future__ import annotations

import argparse


def register(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser(
        "doctor",
        help="check this host for what tuning needs (read-only)",
        description="Read-only checks: msr module, CAP_SYS_RAWIO / CAP_NET_ADMIN, HWP, cpufreq driver and "
        "governor, available frequencies, RAPL domains, NIC driver and coalescing, memcached, the prober's "
        "own governor and C-states, and whether this is a VM. Exit 0 when the tuner can run here, 1 when it "
        "cannot, 2 on bad arguments.",
    )
    p.add_argument("--root", default="/", help="prefix for /sys, /dev, /proc (a fake tree in tests)")
    p.add_argument("--iface", metavar="IF[,IF...]", help="NIC(s) to check (default: all physical NICs)")
    p.add_argument("--memcached", default="127.0.0.1:11211", metavar="ADDR", help="HOST:PORT or unix:/path")
    p.add_argument("--cores", metavar="LIST", help="CPU list to check (default: all online)")
    p.add_argument("--json", action="store_true", help="print the findings as JSON")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    import json
    from pathlib import Path

    from actuators.latency.memcached import MemcachedAddress
    from actuators.linux.doctor import format_report, run_checks
    from actuators.linux.hwio import HardwareIO
    from actuators.real import _as_tuple, _cores, default_nic

    MemcachedAddress.parse(args.memcached)  # a malformed address is a usage error (exit 2), not "cannot tune"
    cores = _cores(args.cores)
    root = Path(args.root)
    nic = default_nic(root)
    io = HardwareIO(root, nic, dry_run=True)  # doctor never writes; dry run makes sure of it
    try:
        report = run_checks(io, _as_tuple(args.iface), args.memcached, cores)
    finally:
        closer = getattr(nic, "close", None)
        if callable(closer):
            closer()
    print(json.dumps(report.to_json(), indent=1) if args.json else format_report(report))
    return 0 if report.can_tune else 1
