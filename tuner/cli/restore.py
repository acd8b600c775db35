"""`tuner restore`: put back the values saved before the tuner's first write (any process's)."""

from __future__ import annotations

import argparse


def register(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser(
        "restore",
        help="put back the ITR/DVFS values saved before the tuner's first write",
        description="Write back every original value the tuner (daemon, `tuner set`, a crashed process) "
        "saved under the state dir, newest first, then forget them. Safe to run twice.",
    )
    p.add_argument(
        "--root",
        default="/",
        help="prefix for /sys, /dev, /proc (a fake tree in tests; a fake-hardware kit, NIC included)",
    )
    p.add_argument("--state-dir", help="where originals were saved (default: ROOT/var/lib/tuner)")
    p.add_argument("--dry-run", action="store_true", help="print the writes it would make, make none")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from pathlib import Path

    from actuators.abilities import Closable
    from actuators.fakehw import nic_under
    from actuators.linux.hwio import COALESCE, HardwareIO, describe
    from actuators.linux.originals import OriginalsStore, default_state_dir, restore_originals

    root = Path(args.root)
    store = OriginalsStore(Path(args.state_dir) if args.state_dir else default_state_dir(root), root)
    entries = store.entries()
    if not entries:
        print(f"nothing to restore: no saved originals in {store.path}")
        return 0
    nic = nic_under(root) if any(e.kind == COALESCE for e in entries) else None
    io = HardwareIO(root, nic, dry_run=args.dry_run)
    try:
        report = restore_originals(io, store)
    finally:
        if isinstance(nic, Closable):
            nic.close()
    for setting in report.restored:
        print(f"{'would ' if args.dry_run else 'restored: '}{describe(setting, root)}")
    if args.dry_run:
        print(f"dry run: {len(report.restored)} write(s) planned, none made; originals kept in {store.path}")
    return 0
