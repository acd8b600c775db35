"""`tuner doctor`: what this host offers for tuning, what is missing, and the fix for each (read-only).

With `--config FILE` it also runs the daemon's start-up checks on that configuration (the host built in dry
run, nothing written) and exits by their verdict: what `tuner daemon` would refuse to start with."""

from __future__ import annotations

import argparse
from typing import Any


def register(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser(
        "doctor",
        help="check this host for what tuning needs (read-only)",
        description="Read-only checks: msr module, CAP_SYS_RAWIO / CAP_NET_ADMIN, HWP, cpufreq driver and "
        "governor, every DVFS backend with its frequencies and the one `--backend auto` takes (intel_pstate or "
        "amd-pstate in active mode: pinned through scaling_min/max, no reboot), RAPL domains, NIC driver and "
        "coalescing, memcached (or Redis/Valkey with --redis), the prober's own governor and C-states, and whether "
        "this is a VM. With --config, also the daemon's start-up checks "
        "of that file. Exit 0 when the tuner can run here (with --config: when the daemon would start), 1 when "
        "it cannot, 2 on bad arguments.",
    )
    p.add_argument("--root", default=None, help="prefix for /sys, /dev, /proc (a fake tree in tests; default /)")
    p.add_argument("--iface", metavar="IF[,IF...]", help="NIC(s) to check (default: all physical NICs)")
    p.add_argument(
        "--memcached", default=None, metavar="ADDR", help="HOST:PORT or unix:/path (default 127.0.0.1:11211)"
    )
    p.add_argument(
        "--redis",
        default=None,
        metavar="ADDR",
        help="check this Redis or Valkey (HOST:PORT or unix:/path) instead of memcached (both, with --memcached)",
    )
    p.add_argument("--cores", metavar="LIST", help="CPU list to check (default: all online)")
    p.add_argument("--config", "-c", metavar="FILE", help="also run the daemon's start-up checks on this config")
    p.add_argument("--json", action="store_true", help="print the findings as JSON")
    p.set_defaults(func=run)


def _from_config(args: argparse.Namespace, config: Any) -> None:
    """Take root, iface, cores and the server's address (memcached or redis) from a `real` host's options unless
    given."""
    if config.host.spec != "real":
        return
    from actuators.latency.servers import default_spec

    o = config.host.options
    qps = o.get("qps", default_spec(getattr(config.host, "server", "memcached")))
    if args.root is None and o.get("root"):
        args.root = str(o["root"])
    if args.iface is None and o.get("iface"):
        args.iface = o["iface"] if isinstance(o["iface"], str) else ",".join(o["iface"])
    if args.cores is None and o.get("cores") not in (None, "", "all"):
        args.cores = o["cores"] if isinstance(o["cores"], str) else ",".join(str(c) for c in o["cores"])
    if args.memcached is None and isinstance(qps, str) and qps.startswith("memcached:"):
        args.memcached = qps.split(":", 1)[1]
    if args.redis is None and args.memcached is None and isinstance(qps, str) and qps.startswith("redis:"):
        args.redis = qps.split(":", 1)[1]


def _energy_specs(config: Any) -> list[tuple[str, Any]] | None:
    """The configured energy sources of a `real` host, side by side, when a table or a comparison is set."""
    if config is None:
        return None
    o = config.host.options
    energy, compare = o.get("energy", "auto"), o.get("energy_compare") or []
    if isinstance(energy, str) and not compare:
        return None  # RAPL alone: the rapl finding says it all
    specs: list[tuple[str, Any]] = [("energy", energy)]
    if isinstance(compare, list):
        specs += [(f"energy_compare[{i}]", spec) for i, spec in enumerate(compare)]
    return specs


def run(args: argparse.Namespace) -> int:
    import json
    from pathlib import Path

    from actuators.abilities import Closable
    from actuators.fakehw import nic_under
    from actuators.latency.memcached import MemcachedAddress
    from actuators.latency.resp import redis_address
    from actuators.linux.doctor import format_report, run_checks
    from actuators.linux.doctor_redis import check_redis
    from actuators.linux.hwio import HardwareIO
    from actuators.real import _as_tuple, _cores

    config = None
    if args.config:
        from tuner.config import load_config

        config = load_config(args.config)  # an invalid file: one line per problem, exit 2
        _from_config(args, config)
    args.root = args.root or "/"
    if args.redis is None:
        args.memcached = args.memcached or "127.0.0.1:11211"
    else:
        redis_address(args.redis)  # a malformed address is a usage error (exit 2), not "cannot tune"
    if args.memcached is not None:
        MemcachedAddress.parse(args.memcached)
    cores = _cores(args.cores)
    root = Path(args.root)
    nic = nic_under(root)
    io = HardwareIO(root, nic, dry_run=True)  # doctor never writes; dry run makes sure of it
    try:
        servers = [check_redis(args.redis)] if args.redis is not None else []
        specs = _energy_specs(config)
        if specs:
            from actuators.linux.doctor_energy import check_energy_sources

            extra = check_energy_sources(io, specs)
        report = run_checks(io, _as_tuple(args.iface), args.memcached, cores, servers, extra if specs else None)
    finally:
        if isinstance(nic, Closable):
            nic.close()
    problems: list[str] = []
    if config is not None:
        from tuner.daemon.startup import check_startup

        problems = check_startup(config)
    if args.json:
        out = report.to_json()
        if config is not None:
            out["config"] = {"path": str(args.config), "mode": config.host.mode, "startup_problems": problems}
        print(json.dumps(out, indent=1))
    else:
        print(format_report(report))
        if config is not None:
            head = f"start-up checks of {args.config} ({config.host.spec} host, mode {config.host.mode})"
            print(f"{head}: OK, the daemon would start" if not problems else f"{head}: {len(problems)} problem(s)")
            for p in problems:
                print(f"  - {p}")
    if config is not None:
        return 0 if not problems else 1
    return 0 if report.can_tune else 1
