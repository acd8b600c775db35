"""`tuner` command line: subcommands live in `tuner.cli.*`; heavy imports (Ax, torch) happen inside them."""

from __future__ import annotations

import argparse
import importlib
import sys

from core.errors import TunerError

#: Subcommand modules, in the order `tuner --help` lists them.
COMMANDS = ("replay", "replay_grid", "sweep", "trace", "load", "daemon", "ctl", "set", "restore", "doctor", "trials")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="tuner",
        description="Tune NIC interrupt throttling (ITR) and CPU frequency (DVFS) of a latency-critical "
        "server for minimum energy under a tail-latency SLA.",
    )
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    for name in COMMANDS:
        try:
            module = importlib.import_module(f"tuner.cli.{name}")
        except ModuleNotFoundError as exc:
            if exc.name == f"tuner.cli.{name}":
                continue  # not built yet
            raise
        module.register(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    args._argv = list(sys.argv[1:] if argv is None else argv)  # the command as given (the replay's report shows it)
    try:
        return int(args.func(args) or 0)
    except TunerError as exc:
        print(f"tuner: error: {exc}", file=sys.stderr)
        return int(getattr(exc, "exit_status", 2))
    except KeyboardInterrupt:
        print("tuner: interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:
        return 0


if __name__ == "__main__":
    sys.exit(main())
