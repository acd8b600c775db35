"""`tuner replay`'s tuner flags, derived from the settings table (`tuner.optimize.table.TUNER_TABLE`): one flag per
row the replay exposes (`--NAME`, or the row's `flag`), and the `TunerSettings` the flags give (the preset, then
every flag given)."""

from __future__ import annotations

import argparse
import math
from typing import TYPE_CHECKING, Any

from core.errors import TunerError
from tuner.optimize.table import TUNER_TABLE, Setting

if TYPE_CHECKING:
    from tuner.optimize.settings import TunerSettings


def parse_number(
    text: str, flag: str, *, integer: bool = False, minimum: float | None = None, strict: bool = True
) -> float:
    try:
        value = int(text) if integer else float(text)
    except (TypeError, ValueError):
        raise TunerError(f"{flag} {text!r}: expected {'an integer' if integer else 'a number'}") from None
    if not math.isfinite(value) or (minimum is not None and (value <= minimum if strict else value < minimum)):
        raise TunerError(f"{flag} {text!r}: expected a number {'>' if strict else '>='} {minimum:g}")
    return value


def _help(row: Setting) -> str:
    unit = f", {row.unit}" if row.unit and row.kind is not bool else ""
    cold = "" if row.cold is None or row.cold == row.default else f"; cold: {_shown(row.cold)}"
    return f"{row.doc}{unit} (default {_shown(row.default)}{cold})".replace("%", "%%")


def _shown(value: Any) -> str:
    if isinstance(value, bool):
        return "on" if value else "off"
    return f"{value:g}".replace("e+0", "e").replace("e+", "e") if isinstance(value, float) else str(value)


def add_setting_flags(group: Any, table: tuple[Setting, ...] = TUNER_TABLE) -> set[str]:
    """One flag per row of `table` that `tuner replay` exposes, default None (= the preset's value); a bool is
    `--NAME/--no-NAME`, an integer is parsed by argparse, a number or a choice is checked by `settings_overrides`
    (so that its error names the value as given). Returns the dests of the rows not `shown` in `--help`."""
    hidden: set[str] = set()
    for row in table:
        if not row.replay:
            continue
        kw: dict[str, Any] = {"dest": row.cli_dest, "default": None, "help": _help(row)}
        if row.kind is bool:
            kw["action"] = argparse.BooleanOptionalAction
        else:
            kw["type"] = int if row.kind is int else str
            if row.choices:
                kw["metavar"] = "|".join(row.choices)
        if not row.shown:
            hidden.add(row.cli_dest)
        group.add_argument(row.cli_flag, **kw)
    return hidden


def settings_overrides(args: argparse.Namespace, table: tuple[Setting, ...] = TUNER_TABLE) -> dict[str, Any]:
    """The `TunerSettings` fields the flags of `table` set (those given), each checked by its row."""
    out: dict[str, Any] = {}
    for row in table:
        value = getattr(args, row.cli_dest, None) if row.replay else None
        if value is not None:
            out[row.name] = row.from_flag(value, row.cli_flag)
    return out


def tuner_settings(args: argparse.Namespace) -> TunerSettings:
    """TunerSettings from the flags: the `--preset` (default: the defaults), then every flag given."""
    from tuner.optimize.presets import DEFAULT_PRESET, TUNER_PRESETS, preset_settings

    explicit = settings_overrides(args)
    preset = args.preset if args.preset is not None else DEFAULT_PRESET
    if preset not in TUNER_PRESETS:
        raise TunerError(f"--preset {preset!r}: expected one of {', '.join(TUNER_PRESETS)}")
    return preset_settings(preset, **explicit)
