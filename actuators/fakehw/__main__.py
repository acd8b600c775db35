"""`python -m actuators.fakehw DIR`: create the fake-hardware kit in DIR (if needed) and play its hardware until
SIGTERM/SIGINT (`--create-only` just builds the tree)."""

from __future__ import annotations

import argparse
import json
import signal
import sys
from pathlib import Path
from typing import Any

from actuators.fakehw.drivers import DRIVERS
from actuators.fakehw.kit import KINDS, HardwareModel, create, is_kit, kit_kind
from core.errors import TunerError


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m actuators.fakehw", description=__doc__)
    p.add_argument("dir", help="kit directory (created; an existing kit is reused)")
    p.add_argument("--cpus", type=int, default=2, help="fake CPUs (default 2)")
    p.add_argument("--nic", choices=sorted(DRIVERS), default="ixgbe", help="the driver eth1 plays (default ixgbe)")
    p.add_argument("--memcached", metavar="HOST:PORT", help="load for the power model from this memcached's stats")
    p.add_argument(
        "--kind",
        choices=KINDS,
        help="the CPUs: acpi (acpi-cpufreq, userspace governor; the default for a new kit), hwp (intel_pstate "
        "active, HWP on) or amd (amd-pstate active, EPP); another kind than an existing kit's needs --reset",
    )
    p.add_argument("--reset", action="store_true", help="rebuild an existing kit (knobs back to boot values)")
    p.add_argument("--create-only", action="store_true", help="build the tree and exit")
    p.add_argument(
        "--bmc",
        metavar="follow|WATTS",
        help="also start a fake BMC (ipmi_sim, Debian openipmi) whose power sensor follows the model's power plus "
        "the platform's (follow) or stays at WATTS; its [host.options.energy] table is printed",
    )
    args = p.parse_args(argv)
    try:
        if is_kit(args.dir) and not args.reset and args.kind not in (None, kit_kind(args.dir)):
            raise TunerError(f"{args.dir}: the kit is {kit_kind(args.dir)}, not {args.kind}: add --reset to rebuild it")
        if args.reset or not is_kit(args.dir):
            create(args.dir, args.cpus, args.kind or (kit_kind(args.dir) if is_kit(args.dir) else "acpi"), args.nic)
        print(f"fakehw: kit ({kit_kind(args.dir)}) in {args.dir}", file=sys.stderr)
        if args.create_only:
            return 0
        qps = None
        if args.memcached:
            from actuators.qps import qps_source_from_spec

            qps = qps_source_from_spec(f"memcached:{args.memcached}")
        model = HardwareModel(args.dir, qps)
        if not model.claim():
            raise TunerError(f"{args.dir}: another process already plays this kit's hardware")
        bmc = _bmc(args.dir, args.bmc, model) if args.bmc else None
        signal.signal(signal.SIGTERM, lambda *_: model.stop())
        print("fakehw: playing the hardware (Ctrl-C or SIGTERM to stop)", file=sys.stderr)
        try:
            model.run()
        except KeyboardInterrupt:
            pass
        finally:
            if bmc is not None:
                bmc.stop()
        return 0
    except TunerError as exc:
        print(f"fakehw: error: {exc}", file=sys.stderr)
        return 2


def _bmc(root: str, how: str, model: HardwareModel) -> Any:
    """Start the kit's fake BMC (following the model, or fixed) and print its energy table."""
    from actuators.fakehw.bmc import start_bmc
    from actuators.fakehw.kit import PLATFORM_W

    try:
        watts = PLATFORM_W if how == "follow" else float(how)
    except ValueError:
        raise TunerError(f"--bmc {how!r}: expected follow or a power in watts") from None
    bmc = start_bmc(Path(root) / "fakehw/bmc", watts=watts)
    if how == "follow":
        model.bmc = bmc
    table = "".join(f"{k} = {json.dumps(v)}\n" for k, v in bmc.reader_options().items())
    print(f"fakehw: BMC on 127.0.0.1:{bmc.port} (UDP); [host.options.energy]\n{table}", file=sys.stderr)
    return bmc


if __name__ == "__main__":
    sys.exit(main())
