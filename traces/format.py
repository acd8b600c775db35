"""The public Twitter cache-trace row format and a reference (one row at a time) parser.

A row is `timestamp,anonymized key,key size,value size,client id,operation,TTL` (no header). The key may itself
contain commas, so a row is split at its first comma (timestamp) and its last five commas (the five trailing
fields); everything in between is the key. The fast block parser (`traces.parser`) must accept exactly the rows
this reference accepts; `parse_row` is also what produces its error messages.

Timestamp, key size, value size and TTL are non-negative integers; the operation is one of `OPS`; the key and the
client id are opaque non-empty tokens (the public README only says clients are anonymised, so no integer is
assumed). Value size may be 0 (a miss, or a delete).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

#: Operations of the public trace, in the order the README lists them; an op is stored as its index here.
OPS: tuple[str, ...] = ("get", "gets", "set", "add", "replace", "cas", "append", "prepend", "delete", "incr", "decr")
OP_INDEX: dict[str, int] = {op: i for i, op in enumerate(OPS)}
#: Operations that store a value and so carry a TTL in the trace.
WRITE_OPS: frozenset[str] = frozenset({"set", "add", "replace", "cas", "append", "prepend", "incr", "decr"})

FIELDS: tuple[str, ...] = ("timestamp", "anonymized key", "key size", "value size", "client id", "operation", "TTL")
N_FIELDS = len(FIELDS)
#: Integers are at most 18 decimal digits so that they always fit an int64.
MAX_DIGITS = 18

_UINT = re.compile(rb"[0-9]{1,%d}" % MAX_DIGITS)


@dataclass(frozen=True)
class Row:
    timestamp: int
    key: bytes
    key_size: int
    value_size: int
    client_id: bytes  # anonymised client: an opaque non-empty token
    op: int  # index into OPS
    ttl: int


class RowError(ValueError):
    """A malformed row: `reason` is a short class used to count skipped rows, `message` says what was expected."""

    def __init__(self, reason: str, message: str) -> None:
        super().__init__(message)
        self.reason = reason
        self.message = message


def show(field: bytes, limit: int = 40) -> str:
    """A field as it appears in an error message: decoded, escaped, quoted and truncated."""
    text = field[:limit].decode("utf-8", "backslashreplace")
    return repr(text + ("..." if len(field) > limit else ""))


def _uint(field: bytes, name: str, what: str = "a non-negative integer") -> int:
    if _UINT.fullmatch(field) is None:
        if field and field.isdigit():
            what = f"{what} of at most {MAX_DIGITS} digits"
        raise RowError(f"field '{name}'", f"field '{name}': expected {what}, got {show(field)}")
    return int(field)


def parse_row(line: bytes) -> Row:
    """Parse one row (without its newline; one trailing CR is ignored) or raise `RowError`."""
    if line.endswith(b"\r"):
        line = line[:-1]
    head, sep, rest = line.partition(b",")
    tail = rest.rsplit(b",", N_FIELDS - 2) if sep else []
    if len(tail) < N_FIELDS - 1:
        got = "an empty line" if not line else f"{line.count(b',') + 1} field(s) in {show(line)}"
        raise RowError(
            "field count",
            f"expected {N_FIELDS} comma-separated fields ({', '.join(FIELDS)}), got {got}",
        )
    key, ksize, vsize, client, op, ttl = tail
    timestamp = _uint(head, "timestamp", "a non-negative integer number of seconds")
    if not key:
        raise RowError("field 'anonymized key'", "field 'anonymized key': expected a non-empty key, got ''")
    key_size = _uint(ksize, "key size")
    value_size = _uint(vsize, "value size")
    if not client:
        raise RowError("field 'client id'", "field 'client id': expected a non-empty client id, got ''")
    try:
        op_index = OP_INDEX[op.decode("ascii")]
    except (UnicodeDecodeError, KeyError):
        raise RowError(
            "field 'operation'", f"field 'operation': expected one of {', '.join(OPS)}, got {show(op)}"
        ) from None
    return Row(timestamp, key, key_size, value_size, client, op_index, _uint(ttl, "TTL"))


def format_row(row: Row) -> bytes:
    """The inverse of `parse_row` (without the newline)."""
    return b"%d,%s,%d,%d,%s,%s,%d" % (
        row.timestamp,
        row.key,
        row.key_size,
        row.value_size,
        row.client_id,
        OPS[row.op].encode(),
        row.ttl,
    )
