"""Output that fits its pipe: rich tables at the terminal's width, printed whole everywhere else.

At a terminal rich fits a table to the window. Into a pipe or a file rich would assume 80 columns and cut
headers and cells ("linu…"), which no script or log reader can undo, so there the console is wide
(`PIPE_WIDTH`): every table prints at its natural width, without colour codes. Commands whose tables someone
would script against also take `--json` (`print_json`).
"""

from __future__ import annotations

import json
import sys
from typing import Any

#: Console width when the stream is not a terminal: wide enough that no table is ever cut.
PIPE_WIDTH = 4096


def is_terminal(stream: Any) -> bool:
    isatty = getattr(stream, "isatty", None)
    try:
        return bool(isatty and isatty())
    except ValueError:  # a closed stream
        return False


def table_console(*, stderr: bool = False) -> Any:
    """A rich `Console` for tables on stdout (or stderr): the terminal's width, or wide and plain in a pipe."""
    from rich.console import Console

    if is_terminal(sys.stderr if stderr else sys.stdout):
        return Console(stderr=stderr)
    return Console(stderr=stderr, width=PIPE_WIDTH, no_color=True, highlight=False, soft_wrap=False)


def print_json(doc: Any) -> None:
    """`doc` as indented JSON on stdout (non-finite floats as null, other objects as their str)."""
    print(json.dumps(_finite(doc), indent=2, default=str))


def _finite(x: Any) -> Any:
    if isinstance(x, float) and (x != x or x in (float("inf"), float("-inf"))):
        return None
    if isinstance(x, dict):
        return {k: _finite(v) for k, v in x.items()}
    if isinstance(x, list | tuple):
        return [_finite(v) for v in x]
    return x
