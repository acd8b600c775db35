"""`python -m tuner.cli.docs_reference [--check]`: regenerate the generated sections of the docs -- the daemon's
configuration reference in docs/daemon.md (`tuner.config.daemon_reference`, from the declared rows) and `tuner replay`'s
options reference in docs/replay.md (from the replay parser, whose tuner flags come from the settings table).
`--check`: exit 1 if a page differs from what would be generated."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from tuner.config.daemon_reference import daemon_reference, splice, toml_value
from tuner.optimize.table import TUNER_TABLE

DOCS = Path(__file__).resolve().parents[2] / "docs"


def replay_parser() -> argparse.ArgumentParser:
    """`tuner replay`'s parser, as the CLI builds it."""
    from tuner.cli import replay

    subparsers = argparse.ArgumentParser(prog="tuner").add_subparsers()
    replay.register(subparsers)
    sub: argparse.ArgumentParser = subparsers.choices["replay"]
    return sub


def replay_reference(parser: argparse.ArgumentParser | None = None, table: tuple = TUNER_TABLE) -> str:
    """The options table of `tuner replay` (Markdown): flag, `[replay]` key, default, in `--help`, meaning."""
    p = parser if parser is not None else replay_parser()
    deferred = p.get_default("_replay")
    rows = {row.cli_dest: row for row in table if row.replay}
    lines = ["| flag | `[replay]` key | default | in `--help` | meaning |", "|---|---|---|---|---|"]
    for action in p._actions:
        if action.dest in ("help", "_replay", "func"):
            continue
        flag = ", ".join(f"`{s}`" for s in action.option_strings) or f"`{action.dest.upper()}`"
        if isinstance(action, argparse.BooleanOptionalAction):
            flag = f"`{action.option_strings[0]}` / `{action.option_strings[1]}`"
        key = "-- (the file itself)" if action.dest == "config" else f"`{action.dest}`"
        row = rows.get(action.dest)
        if row is not None:
            cold = "" if row.cold is None or row.cold == row.default else f" (cold: `{toml_value(row.cold)}`)"
            default = f"`{toml_value(row.default)}`{cold}"
        else:
            value = deferred.defaults.get(action.dest)
            default = "--" if value is None else f"`{value}`"
        shown = "no" if action.help == argparse.SUPPRESS else "yes"
        meaning = deferred.helps.get(action.dest, "").replace("%%", "%").replace("|", "\\|")
        lines.append(f"| {flag} | {key} | {default} | {shown} | {meaning} |")
    return "\n".join(lines) + "\n"


def pages(docs: Path = DOCS) -> dict[Path, str]:
    """Each generated page's path and its text as generated."""
    daemon, replay = docs / "daemon.md", docs / "replay.md"
    return {
        daemon: splice(daemon.read_text(encoding="utf-8"), "configuration reference", daemon_reference()),
        replay: splice(replay.read_text(encoding="utf-8"), "replay options", replay_reference()),
    }


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m tuner.cli.docs_reference", description=__doc__)
    p.add_argument("--check", action="store_true", help="exit 1 if a page differs from the generated text")
    args = p.parse_args(argv)
    stale = []
    for path, text in pages().items():
        if path.read_text(encoding="utf-8") == text:
            continue
        stale.append(path)
        if not args.check:
            path.write_text(text, encoding="utf-8")
    for path in stale:
        print(f"{path}: {'differs from the generated text' if args.check else 'regenerated'}", file=sys.stderr)
    return 1 if args.check and stale else 0


if __name__ == "__main__":
    sys.exit(main())
