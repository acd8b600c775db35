"""Streaming trace parser: numpy over blocks of complete lines, constant memory, one row per request.

Each block of decompressed bytes is split into lines and fields with vectorised byte searches (newlines, commas,
first comma and last five commas per line), integers are decoded column by column, and operations are matched as
packed 8-byte codes. Rows the vectorised pass rejects are re-read by the reference `format.parse_row`, which names
the field and what was expected; without `skip_bad` the first bad row raises `InputError("FILE:LINE: ...")`.
"""

from __future__ import annotations

import os
from collections import Counter
from collections.abc import Iterator, Sequence
from dataclasses import dataclass

import numpy as np

from core.errors import InputError
from traces.compression import open_chunks
from traces.format import MAX_DIGITS, OPS, RowError, parse_row

#: Default tolerance for out-of-order timestamps: real traces are only roughly sorted.
DEFAULT_TOLERANCE_S = 5.0
#: Default longest trace (s after the first row): the public traces span a week; this bounds the per-second
#: series (8 bytes per second) so that one bogus far-future timestamp cannot exhaust memory.
DEFAULT_MAX_SPAN_S = 31 * 86400
#: A line longer than this is not a trace row (keeps memory bounded on garbage input).
MAX_LINE_BYTES = 1 << 20
_NL, _COMMA, _CR, _ZERO = 10, 44, 13, 48
_OUT_OF_ORDER = "timestamp out of order"
_BEYOND_SPAN = "timestamp beyond trace span"
_TOO_LONG = "line too long"
_LONG_MESSAGE = f"line longer than {MAX_LINE_BYTES} bytes; expected a trace row (is this a trace file?)"

# Operation codes: the op's bytes packed little-endian into 7 bytes, its length in the top byte.
_OP_CODES = np.array([int.from_bytes(op.encode(), "little") | (len(op) << 56) for op in OPS], dtype=np.uint64)
_OP_SORT = np.argsort(_OP_CODES)
_OP_SORTED = _OP_CODES[_OP_SORT]
_OP_MIN_LEN, _OP_MAX_LEN = min(map(len, OPS)), max(map(len, OPS))


@dataclass(frozen=True)
class Block:
    """The good rows of one block, in file order (keys and client ids are checked, not kept)."""

    first_line: int  # 1-based number of the block's first line in its file
    timestamp: np.ndarray  # int64 seconds
    op: np.ndarray  # uint8 index into OPS
    key_size: np.ndarray  # int64 bytes
    value_size: np.ndarray  # int64 bytes
    ttl: np.ndarray  # int64 seconds

    def __len__(self) -> int:
        return int(self.timestamp.size)


def _uints(b: np.ndarray, s: np.ndarray, e: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Decode the decimal fields b[s:e] (1..MAX_DIGITS ASCII digits) -> (values, valid)."""
    length = e - s
    valid = (length >= 1) & (length <= MAX_DIGITS)
    val = np.zeros(s.size, np.int64)
    if not valid.any():
        return val, valid
    last = b.size - 1
    for j in range(int(length[valid].max())):
        m = valid & (length > j)
        d = (b[np.minimum(s + j, last)] - np.uint8(_ZERO)).astype(np.int64)  # wraps for non-digits: > 9
        valid &= ~m | (d <= 9)
        val = np.where(m, val * 10 + d, val)
    return val, valid


def _ops(b: np.ndarray, s: np.ndarray, e: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    length = e - s
    valid = (length >= _OP_MIN_LEN) & (length <= _OP_MAX_LEN)
    code = np.zeros(s.size, np.uint64)
    last = b.size - 1
    for j in range(_OP_MAX_LEN):
        col = b[np.minimum(s + j, last)].astype(np.uint64)
        code |= np.where(length > j, col, np.uint64(0)) << np.uint64(8 * j)
    code |= np.clip(length, 0, 255).astype(np.uint64) << np.uint64(56)
    pos = np.minimum(np.searchsorted(_OP_SORTED, code), len(OPS) - 1)
    valid &= _OP_SORTED[pos] == code
    return _OP_SORT[pos].astype(np.uint8), valid


def scan_block(data: bytes) -> tuple[np.ndarray, np.ndarray, dict[str, np.ndarray], np.ndarray]:
    """Vectorised pass over `data` (complete lines, ending in a newline).

    Returns (line starts, newline positions, fields, well-formed mask); `fields` holds timestamp, op, key_size,
    value_size, ttl for every line (meaningless where the mask is False). A line's text is
    data[start:newline] (a trailing CR is ignored by the checks, as by `parse_row`).
    """
    b = np.frombuffer(data, np.uint8)
    nl = np.flatnonzero(b == _NL)
    n = nl.size
    starts = np.empty(n, np.int64)
    starts[:1] = 0
    starts[1:] = nl[:-1] + 1
    ends = nl.astype(np.int64)
    nonempty = ends > starts
    cr = np.zeros(n, bool)
    cr[nonempty] = b[ends[nonempty] - 1] == _CR
    ends -= cr
    commas = np.flatnonzero(b == _COMMA)
    if commas.size == 0:
        commas = np.zeros(1, np.int64)  # every line then fails the field-count check below
        lo = hi = np.zeros(n, np.int64)
    else:
        lo = np.searchsorted(commas, starts)
        hi = np.searchsorted(commas, ends)
    ok = (hi - lo) >= 6
    last_comma = commas.size - 1

    def comma(i: np.ndarray) -> np.ndarray:
        out: np.ndarray = commas[np.clip(i, 0, last_comma)]
        return out

    c0, c1, c2, c3, c4, c5 = comma(lo), comma(hi - 5), comma(hi - 4), comma(hi - 3), comma(hi - 2), comma(hi - 1)
    ts, v0 = _uints(b, starts, c0)
    ks, v2 = _uints(b, c1 + 1, c2)
    vs, v3 = _uints(b, c2 + 1, c3)
    op, v5 = _ops(b, c4 + 1, c5)
    ttl, v6 = _uints(b, c5 + 1, ends)
    good = ok & v0 & (c1 > c0 + 1) & v2 & v3 & (c4 > c3 + 1) & v5 & v6
    fields = {"timestamp": ts, "op": op, "key_size": ks, "value_size": vs, "ttl": ttl}
    return starts, nl, fields, good


class TraceParser:
    """Iterate over the good rows of a trace, block by block; counts lines, rows and skipped rows by reason."""

    def __init__(
        self,
        path: str | os.PathLike[str] | Sequence[str | os.PathLike[str]],
        *,
        skip_bad: bool = False,
        tolerance_s: float = DEFAULT_TOLERANCE_S,
        max_span_s: int = DEFAULT_MAX_SPAN_S,
        chunk_bytes: int = 1 << 20,
    ) -> None:
        if not tolerance_s >= 0:
            raise ValueError(f"tolerance_s must be >= 0, got {tolerance_s}")
        if not max_span_s >= 0:
            raise ValueError(f"max_span_s must be >= 0, got {max_span_s}")
        self.paths: tuple[str, ...] = (
            (os.fspath(path),) if isinstance(path, (str, bytes, os.PathLike)) else tuple(os.fspath(p) for p in path)
        )
        if not self.paths:
            raise ValueError("no trace file given")
        self.path = self.paths[0]  # the file being read (error messages name it)
        self.file_lines = 0  # lines read so far in the current file
        self.skip_bad = skip_bad
        self.tolerance_s = float(tolerance_s)
        self.chunk_bytes = chunk_bytes
        self.lines = 0  # lines read so far, all files
        self.rows = 0  # good rows yielded so far
        self.skipped: Counter[str] = Counter()
        self.max_span_s = int(max_span_s)
        self.origin: int | None = None  # timestamp of the first good row
        self._tmax: int | None = None  # running maximum timestamp of good rows

    @property
    def name(self) -> str:
        """The trace's name in messages: its path, or its paths joined with ' + '."""
        return " + ".join(self.paths)

    def _fail(self, line: int, message: str) -> InputError:
        return InputError(f"{self.path}:{line}: {message}")

    def _count_lines(self, n: int) -> None:
        self.lines += n
        self.file_lines += n

    def blocks(self) -> Iterator[Block]:
        """The good rows of every file in order (one trace split over files, as published)."""
        for path in self.paths:
            self.path, self.file_lines = path, 0
            yield from self._file_blocks()

    def _file_blocks(self) -> Iterator[Block]:
        carry = b""
        discarding = False  # inside an over-long line that is being skipped
        for chunk in open_chunks(self.path, self.chunk_bytes):
            if discarding:
                cut = chunk.find(b"\n")
                if cut < 0:
                    continue
                chunk, discarding = chunk[cut + 1 :], False
                self._count_lines(1)
                self.skipped[_TOO_LONG] += 1
            data = carry + chunk if carry else chunk
            cut = data.rfind(b"\n")
            if cut < 0:
                carry = data
            else:
                carry = data[cut + 1 :]
                if block := self._block(data[: cut + 1]):
                    yield block
            if len(carry) > MAX_LINE_BYTES:
                line = self.file_lines + 1
                if not self.skip_bad:
                    raise self._fail(line, _LONG_MESSAGE)
                carry, discarding = b"", True
        if discarding:  # the over-long line ran to the end of the file
            self._count_lines(1)
            self.skipped[_TOO_LONG] += 1
        elif carry:
            if block := self._block(carry + b"\n"):
                yield block

    def _block(self, data: bytes) -> Block | None:
        starts, ends, f, good = scan_block(data)
        long = (ends - starts) > MAX_LINE_BYTES
        good &= ~long
        base = self.file_lines
        n = starts.size
        self._count_lines(n)
        ts = f["timestamp"]
        # Span: no row more than max_span_s after the first good row (the trace origin).
        beyond = np.zeros(n, bool)
        if self.origin is None and good.any():
            self.origin = int(ts[np.argmax(good)])
        if self.origin is not None:
            beyond = good & (ts > self.origin + self.max_span_s)
            good &= ~beyond
        # Order: each good row against the running maximum of the good rows before it.
        idx = np.flatnonzero(good)
        late = np.zeros(n, bool)
        before_all = np.zeros(n, np.int64)
        if idx.size:
            tg = ts[idx]
            prev = np.maximum.accumulate(tg)
            before = np.empty_like(prev)
            before[0] = self._tmax if self._tmax is not None else tg[0]
            before[1:] = prev[:-1]
            if self._tmax is not None:
                np.maximum(before, self._tmax, out=before)
            late_g = tg + self.tolerance_s < before
            before_all[idx] = before
            late[idx[late_g]] = True
            self._tmax = int(max(prev[-1], self._tmax if self._tmax is not None else prev[-1]))
        bad = ~good | late
        if bad.any():
            bad_idx = np.flatnonzero(bad)
            if not self.skip_bad:
                i = int(bad_idx[0])
                if long[i]:
                    raise self._fail(base + i + 1, _LONG_MESSAGE)
                if beyond[i] and self.origin is not None:  # beyond is set only once the origin is known
                    raise self._fail(
                        base + i + 1,
                        (
                            f"timestamp {int(ts[i])} is {int(ts[i]) - self.origin} s after the first row's "
                            f"{self.origin}; expected a trace spanning at most {self.max_span_s} s"
                        ),
                    )
                raise self._fail(
                    base + i + 1, self._describe(data, starts[i], ends[i], late[i], int(ts[i]), int(before_all[i]))
                )
            for i in bad_idx.tolist():
                if long[i]:
                    reason = _TOO_LONG
                elif beyond[i]:
                    reason = _BEYOND_SPAN
                elif late[i]:
                    reason = _OUT_OF_ORDER
                else:
                    reason = self._reason(data[starts[i] : ends[i]])
                self.skipped[reason] += 1
            keep = ~bad
        else:
            keep = None
        rows = {k: (v[keep] if keep is not None else v) for k, v in f.items()}
        count = int(rows["timestamp"].size)
        self.rows += count
        if count == 0:
            return None
        return Block(first_line=base + 1, **rows)

    @staticmethod
    def _reason(line: bytes) -> str:
        try:
            parse_row(line)
        except RowError as exc:
            return exc.reason
        return "malformed row"  # the vectorised pass and the reference disagree (a bug): still counted

    def _describe(self, data: bytes, s: int, e: int, late: bool, ts: int, before: int) -> str:
        if late:
            return (
                f"timestamp {ts} is {before - ts} s earlier than {before} on an earlier line "
                f"(tolerance {self.tolerance_s:g} s); expected a trace sorted by time"
            )
        try:
            parse_row(data[s:e])
        except RowError as exc:
            return exc.message
        return "malformed row"
