"""`tuner replay --config FILE`: the `[replay]` table of a TOML file as values of `tuner replay`'s own flags.

Each key is a flag's long name with `_` for `-` (`sla_us` = `--sla-us`, `preset` = `--preset`, `trace` = the
TRACE argument); values have the TOML type of the flag (numbers, strings, `true`/`false`; `policies` may be a
list). Relative paths are relative to the file. Precedence: the built-in defaults, then the preset, then the
file, then the command line. Every problem is one line naming the file, line and key: a value the file set is
checked by the same code as the flag, and its error is reported at the key's line (`attribute`).
"""

from __future__ import annotations

import argparse
import re
import tomllib
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from core.errors import InputError, TunerError
from tuner.config.checks import locate

TABLE = "replay"
#: dests that are not replay options (the file itself).
NOT_IN_FILE = frozenset({"config", "help"})
#: dests whose value is a path, resolved relative to the config file.
PATHS = frozenset({"trace", "out", "history", "save_trials"})


@dataclass(frozen=True)
class FileValue:
    value: Any  # in the form the flag's own parsing expects (str for most, bool, int, Path)
    line: int


def _kind(action: argparse.Action) -> str:
    if isinstance(action, argparse._StoreTrueAction | argparse.BooleanOptionalAction):
        return "bool"
    if action.type is int:
        return "int"
    if action.type is float:
        return "float"
    return "str"


def load(path: str | Path, actions: dict[str, argparse.Action]) -> dict[str, FileValue]:
    """The `[replay]` table of `path` as flag values keyed by dest (InputError: one line per problem)."""
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise InputError(f"{path}: cannot read config: {exc.strerror or exc}") from None
    except UnicodeDecodeError:
        raise InputError(f"{path}: not a UTF-8 text file") from None
    try:
        doc = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        m = re.search(r"\(at line (\d+), column \d+\)", str(exc))
        where = f"{path}:{m.group(1)}" if m else f"{path}"
        raise InputError(f"{where}: invalid TOML: {re.sub(r' [(]at line.*', '', str(exc))}") from None
    lines = text.splitlines()
    table = doc.get(TABLE)
    if table is None:
        raise InputError(f"{path}:1: no [{TABLE}] table")
    if not isinstance(table, dict):
        raise InputError(f"{path}:{locate(lines, TABLE, None)}: {TABLE}: expected a table")
    errors: list[str] = []
    out: dict[str, FileValue] = {}
    for key, value in table.items():
        line = locate(lines, TABLE, key)
        where = f"{path}:{line}: {TABLE}.{key}"
        action = actions.get(key)
        if action is None or key in NOT_IN_FILE:
            errors.append(f"{where}: unknown key (keys are tuner replay's flags, e.g. sla_us; see docs/replay.md)")
            continue
        problem, converted = _convert(value, _kind(action), key, path.parent)
        if problem:
            errors.append(f"{where}: {problem}")
        else:
            out[key] = FileValue(converted, line)
    if errors:
        raise InputError("\n".join(errors))
    return out


def _convert(value: Any, kind: str, key: str, base: Path) -> tuple[str | None, Any]:
    if kind == "bool":
        return (None, value) if isinstance(value, bool) else (f"expected true or false, got {value!r}", None)
    if isinstance(value, bool) or isinstance(value, dict):
        return f"expected {'an integer' if kind == 'int' else 'a number or a string'}, got {value!r}", None
    if kind == "int":
        return (None, value) if isinstance(value, int) else (f"expected an integer, got {value!r}", None)
    if kind == "float":
        ok = isinstance(value, int | float)
        return (None, float(value)) if ok else (f"expected a number, got {value!r}", None)
    if isinstance(value, list):
        if key != "policies" or not all(isinstance(v, str) for v in value):
            return f"expected a single value, got {value!r}", None
        return None, ",".join(value)
    if key in PATHS:
        if not isinstance(value, str) or not value or "\0" in value:
            return f"expected a path, got {value!r}", None
        p = Path(value).expanduser()
        return None, (p if p.is_absolute() else base / p)
    if isinstance(value, str | int | float):
        return None, str(value)
    return f"unsupported value {value!r}", None


def attribute(exc: TunerError, path: str | Path, from_file: dict[str, int], flags: dict[str, str]) -> TunerError:
    """`exc` about a flag whose value came from the file, re-worded as `FILE:LINE: replay.KEY...`."""
    msg = str(exc)
    m = re.match(r"^(--[a-z0-9-]+)(.*)$", msg, re.S)
    dest = flags.get(m.group(1)) if m else None
    if m is None or dest is None or dest not in from_file:
        return exc
    return InputError(f"{path}:{from_file[dest]}: {TABLE}.{dest}{m.group(2)}")
