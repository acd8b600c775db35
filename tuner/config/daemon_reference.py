"""The configuration reference in docs/daemon.md, generated from the declared rows (`tuner.config.tables.SECTIONS`):
one table row per key, with its default, what it accepts and its doc line. `splice` puts generated text between
the markers of a docs page; `python -m tuner.cli.docs_reference` rewrites the pages, and a test fails when the committed
text differs from the generated one."""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from tuner.config.tables import SECTIONS
from tuner.optimize.table import Setting


def toml_value(value: Any) -> str:
    """`value` as written in TOML: true, "log", 0.05, [0, 100000], {}."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, str):
        return f'"{value}"'
    if isinstance(value, float):
        return f"{value:g}".replace("e+0", "e").replace("e+", "e")
    if isinstance(value, tuple | list):
        return "[" + ", ".join(toml_value(v) for v in value) + "]"
    if isinstance(value, dict):
        return "{}" if not value else "{...}"
    return str(value)


def _cell(text: str) -> str:
    return text.replace("|", "\\|")


def default_text(row: Setting) -> str:
    return row.doc_default or f"`{toml_value(row.daemon_value)}`"


def daemon_reference(sections: Mapping[str, tuple[Setting, ...]] = SECTIONS) -> str:
    """The reference table of every key of `sections` (Markdown)."""
    lines = ["| key | default | accepts | meaning |", "|---|---|---|---|"]
    for name, rows in sections.items():
        for row in rows:
            lines.append(
                f"| `{name}.{row.name}` | {_cell(default_text(row))} | {_cell(row.expected)} | {_cell(row.doc)} |"
            )
    return "\n".join(lines) + "\n"


def markers(name: str) -> tuple[str, str]:
    """The lines around a generated section of a docs page."""
    return (
        f"<!-- generated: {name} (python -m tuner.cli.docs_reference); do not edit by hand -->",
        f"<!-- end of generated: {name} -->",
    )


def splice(page: str, name: str, generated: str) -> str:
    """`page` with the text between `name`'s markers replaced by `generated` (ValueError if they are missing)."""
    begin, end = markers(name)
    pattern = re.compile(re.escape(begin) + r"\n.*?" + re.escape(end), re.S)
    if not pattern.search(page):
        raise ValueError(f"no generated section {name!r} (markers {begin!r} ... {end!r})")
    return pattern.sub(lambda _m: f"{begin}\n{generated}{end}", page, count=1)


def section(page: str, name: str) -> str:
    """The text between `name`'s markers in `page` ("" if they are missing)."""
    begin, end = markers(name)
    m = re.search(re.escape(begin) + r"\n(.*?)" + re.escape(end), page, re.S)
    return m.group(1) if m else ""
