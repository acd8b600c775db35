"""Reading typed values out of parsed TOML with one `file:line: key: expected ...` message per problem
(`tomllib` gives no line numbers, so keys are located by scanning the source), and the value checks the
config's fields share."""

from __future__ import annotations

import datetime
import ipaddress
import math
import re
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from tuner.optimize.table import Setting

#: Percentiles a policy may target (must be one of `actuators.host.PERCENTILES`).
ALLOWED_PERCENTILES: tuple[float, ...] = (50.0, 90.0, 95.0, 99.0, 99.9)
#: Reward functions used when the optimiser does not publish its own list.
DEFAULT_REWARDS: tuple[str, ...] = ("constrained", "edp", "latency", "sla-linear")


def known_rewards() -> tuple[str, ...]:
    """Reward names the optimiser accepts (`reward.REWARDS` if that module publishes them)."""
    try:
        import reward

        names = getattr(reward, "REWARDS", None) or getattr(reward, "REWARD_NAMES", None)
        if names:
            return tuple(sorted(str(n) for n in names))
    except Exception:  # noqa: BLE001 - fall back to the documented names
        pass
    return DEFAULT_REWARDS


_TABLE_RE = re.compile(r"^\s*\[\[?\s*([A-Za-z0-9_.\"' -]+?)\s*\]\]?\s*(#.*)?$")


def _header(line: str) -> str | None:
    """The name of a `[table]` or `[[array]]` header line (quotes and spaces dropped), None for any other line."""
    m = _TABLE_RE.match(line)
    if not m:
        return None
    return m.group(1).replace('"', "").replace("'", "").replace(" ", "")


def locate(lines: list[str], table: str, key: str | None) -> int:
    """1-based line of `key` inside `[table]`, or of `table.key =` at the top level (the table header when key is
    None or not found; 1 if neither is there). The key may be bare or quoted; a key that is itself a table
    (`[table.key]`, `[table.key.sub]`, `[[table.key]]`) is found at its first header."""
    current = ""
    header_line = 0
    quoted = rf"""(?:{re.escape(key)}|"{re.escape(key)}"|'{re.escape(key)}')""" if key else ""
    key_re = re.compile(rf"^\s*{quoted}\s*[=.]") if key else None
    dotted_re = re.compile(rf"^\s*{re.escape(table.split('.')[-1])}\s*\.\s*{quoted}\s*[=.]") if key and table else None
    whole = f"{table}.{key}" if table and key else (key or "")
    for number, line in enumerate(lines, start=1):
        name = _header(line)
        if name is not None:
            current = name
            if current == table and not header_line:
                header_line = number
            if key and (current == whole or current.startswith(whole + ".")):
                return number  # the key is itself a table: [table.key], [table.key.sub] or [[table.key]]
            continue
        if current == table and key_re and key_re.match(line):
            return number
        if dotted_re and current == "" and dotted_re.match(line):
            return number
    return header_line or 1


def as_written(value: Any) -> str:
    """`value` as an error line echoes it: its repr, except TOML's dates and times, which read as ISO text
    (inside arrays and inline tables too)."""
    if isinstance(value, datetime.date | datetime.time):
        return value.isoformat()
    if isinstance(value, list):
        return "[" + ", ".join(as_written(v) for v in value) + "]"
    if isinstance(value, dict):
        return "{" + ", ".join(f"{k!r}: {as_written(v)}" for k, v in value.items()) + "}"
    return repr(value)


def shown(value: Any) -> str:
    """`value` for an error line: as written (`as_written`) when short, else its ends and length (a line stays a
    line)."""
    text = as_written(value)
    if len(text) <= 80:
        return text
    return f"{text[:40]}...{text[-20:]} ({len(value) if isinstance(value, str | list | dict) else len(text)} long)"


class Checker:
    """Collects one message per problem while reading typed values out of the parsed TOML."""

    def __init__(self, path: Path, text: str) -> None:
        self.path = path
        self.lines = text.splitlines()
        self.errors: list[str] = []

    def error(self, table: str, key: str | None, message: str) -> None:
        line = locate(self.lines, table, key)
        name = f"{table}.{key}" if key and table else (key or table)
        self.errors.append(f"{self.path}:{line}: {name}: {message}")

    def table(self, data: dict, name: str, allowed: set[str]) -> dict:
        value = data.get(name, {})
        if not isinstance(value, dict):
            self.error("", name, f"expected a table [{name}], got {type(value).__name__}")
            return {}
        for key in sorted(set(value) - allowed):
            self.error(name, key, f"unknown key: expected one of {', '.join(sorted(allowed))}")
        return value

    def get(
        self,
        table: dict,
        tname: str,
        key: str,
        default: Any,
        kind: str,
        check: Callable[[Any], str | None] | None = None,
    ) -> Any:
        if key not in table:
            return default
        value = table[key]
        converted = _convert(value, kind)
        if converted is None:
            self.error(tname, key, f"expected {_KIND_TEXT[kind]}, got {shown(value)}")
            return default
        if check is not None:
            problem = check(converted)
            if problem:
                self.error(tname, key, f"expected {problem}, got {shown(value)}")
                return default
        return converted


#: A setting's type as `Checker.get` reads it (a `tuple` setting: `range_` + its item type).
_KIND_OF = {bool: "bool", int: "int", float: "float", str: "str", dict: "table"}


def _kind(row: Setting) -> str:
    return f"range_{_KIND_OF[row.item]}" if row.kind is tuple else _KIND_OF[row.kind]


def read_rows(c: Checker, data: dict, section: str, rows: Sequence[Setting]) -> dict[str, Any]:
    """Every row's value in `[section]` of `data` (its daemon default when absent), each problem one error line;
    a key no row declares is an unknown key."""
    t = c.table(data, section, {row.name for row in rows})
    return {row.name: c.get(t, section, row.name, row.daemon_value, _kind(row), row.check) for row in rows}


_KIND_TEXT = {
    "int": "an integer",
    "float": "a number",
    "str": "a string",
    "range_int": "[low, high] integers",
    "range_float": "[low, high] numbers",
    "bool": "true or false",
    "table": "a table",
}


def _convert(value: Any, kind: str) -> Any:
    if kind == "int":
        return value if isinstance(value, int) and not isinstance(value, bool) else None
    if kind == "float":
        if isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value):
            return float(value)
        return None
    if kind == "str":
        return value if isinstance(value, str) else None
    if kind == "bool":
        return value if isinstance(value, bool) else None
    if kind in ("range_int", "range_float"):
        inner = "int" if kind == "range_int" else "float"
        if isinstance(value, list) and len(value) == 2:
            lo, hi = (_convert(v, inner) for v in value)
            if lo is not None and hi is not None and lo <= hi:
                return (lo, hi)
        return None
    if kind == "table":
        return dict(value) if isinstance(value, dict) else None
    raise ValueError(kind)


def positive(value: float) -> str | None:
    return None if value > 0 else "a value > 0"


def non_negative(value: float) -> str | None:
    return None if value >= 0 else "a value >= 0"


#: Characters a gRPC client's target URI gives a meaning of its own (list separator, query, fragment, escapes).
URI_SPECIAL = frozenset(",?#%")


def check_grpc_address(address: str) -> str | None:
    """None if `address` is `unix:PATH` or `HOST:PORT`; else what was expected."""
    if address.startswith("unix:"):
        path = address[len("unix:") :]
        path = path[2:] if path.startswith("//") else path
        if not path:
            return "unix:///absolute/path.sock"
        if len(path.encode()) > 107:
            return "a unix socket path of at most 107 bytes"
        if any(c in URI_SPECIAL or not c.isprintable() for c in path):
            # a gRPC client reads the target as a URI: "a,b" is two addresses, "?" starts a query -- the daemon
            # would serve on a path no client can name
            return "a unix socket path without ',', '?', '#', '%' or control characters"
        return None
    return check_host_port(address)


def check_host_port(address: str) -> str | None:
    """None if `address` is `HOST:PORT` (IPv6 in brackets) with port 0..65535; else what was expected."""
    host, sep, port = address.rpartition(":")
    if not sep or not host or not port.isdigit() or not 0 <= int(port) <= 65535:
        return "HOST:PORT (port 0..65535) or unix:///path.sock"
    return None


def is_loopback(address: str) -> bool:
    """True for unix sockets and loopback IPs / `localhost`."""
    if address.startswith("unix:"):
        return True
    host = address.rpartition(":")[0].strip("[]")
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def check_percentile(value: float) -> str | None:
    return (
        None
        if any(abs(value - p) < 1e-9 for p in ALLOWED_PERCENTILES)
        else "one of " + ", ".join(f"{p:g}" for p in ALLOWED_PERCENTILES)
    )


def check_reward(value: str) -> str | None:
    names = known_rewards()
    return None if value in names else "one of " + ", ".join(repr(n) for n in names)


def check_host_spec(value: str) -> str | None:
    if value in ("sim", "real"):
        return None
    module, sep, attr = value.partition(":")
    return None if sep and module and attr else "'sim', 'real' or 'module:factory'"


def check_store_url(v: str) -> str | None:
    if v == "" or v.startswith(("postgresql://", "postgres://")) or (v.startswith("sqlite:///") and len(v) > 10):
        return None
    return '"" (SQLite in the state directory), "postgresql://..." or "sqlite:///absolute/path"'
