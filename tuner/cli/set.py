"""`tuner set`: pin ITR and/or DVFS by hand (originals saved first; `tuner restore` undoes)."""

from __future__ import annotations

import argparse
import logging


def register(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser(
        "set",
        help="set ITR and/or DVFS by hand (saves the originals first)",
        description="Set NIC interrupt throttling and/or CPU frequency now. Out-of-range values are refused "
        "before any write; the values found before the first write are saved under the state dir so "
        "`tuner restore` can put them back; if any part fails, everything this command changed is undone.",
    )
    p.add_argument("--itr", type=int, metavar="US", help="static rx-usecs (adaptive moderation off)")
    p.add_argument("--dvfs", type=float, metavar="GHZ", help="CPU frequency in GHz for the tuned cores")
    p.add_argument("--iface", metavar="IF[,IF...]", help="NIC(s) to set (default: the only physical NIC)")
    p.add_argument(
        "--backend", choices=("auto", "cpufreq", "msr", "minmax", "hwp"), default="auto", help="DVFS backend"
    )
    p.add_argument("--cores", metavar="LIST", help="CPU list, e.g. 0-7,16 (default: all online)")
    p.add_argument("--root", default="/", help="prefix for /sys, /dev, /proc (a fake tree in tests)")
    p.add_argument("--state-dir", help="where originals are saved (default: ROOT/var/lib/tuner)")
    p.add_argument("--dry-run", action="store_true", help="print every write it would make, make none")
    p.add_argument(
        "--force",
        action="store_true",
        help="allow ITR below 8 µs on ixgbe with LRO on, and static rx-usecs on a driver without a verified profile",
    )
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from actuators.fakehw import nic_under
    from actuators.linux.hwio import describe
    from actuators.real import make_real_host
    from core.errors import TunerError

    if args.itr is None and args.dvfs is None:
        raise TunerError("tuner set: nothing to do: give --itr US and/or --dvfs GHZ")
    logging.basicConfig(level=logging.WARNING, format="tuner: %(message)s")
    parts = tuple(p for p, v in (("itr", args.itr), ("dvfs", args.dvfs)) if v is not None)
    host = make_real_host(
        root=args.root,
        state_dir=args.state_dir,
        iface=args.iface,
        backend=args.backend,
        cores=args.cores,
        dry_run=args.dry_run,
        force=args.force,
        parts=parts,
        nic=nic_under(args.root) if "itr" in parts else None,
    )
    try:
        warnings = host.apply(itr_us=args.itr, dvfs_ghz=args.dvfs)
        if args.dry_run:
            for setting in host.io.planned:
                print(f"would {describe(setting, host.io.root)}")
            print(f"dry run: {len(host.io.planned)} write(s) planned, none made")
            return 0
        if host.dvfs is not None:
            print(f"DVFS {args.dvfs:g} GHz on CPUs {','.join(map(str, host.dvfs.cores))} ({host.dvfs.name} backend)")
        if host.itr is not None:
            print(f"ITR {args.itr} µs, adaptive off, on {', '.join(host.itr.ifaces)}")
        for w in warnings:
            print(f"warning: {w}")
        print(
            f"originals saved in {host.store.path}; undo with: tuner restore --root {args.root}"
            + (f" --state-dir {args.state_dir}" if args.state_dir else "")
        )
        return 0
    finally:
        host.close()
