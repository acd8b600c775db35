"""Per-second request series and per-bin statistics (op mix, key/value sizes) of a trace, in one streaming pass.

Time is measured from the first row's timestamp (the trace origin). Rows that are earlier than the origin by at
most the order tolerance (real traces are only roughly sorted) count in second 0. With `start_s`, the series
and the bins begin `start_s` seconds after the origin (e.g. the second day of a week-long trace) and earlier
rows are read but not counted. The series ends at the last second that holds a request (or at `max_seconds`);
bins are `bin_s` seconds long, and a last bin shorter than `bin_s` is marked partial (`seconds < bin_s`).
A trace may be split over several files (as the public traces are): they are read as one, in the order given.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np

from core.errors import InputError
from traces.format import OPS
from traces.parser import DEFAULT_MAX_SPAN_S, DEFAULT_TOLERANCE_S, TraceParser

_NOPS = len(OPS)


@dataclass(frozen=True)
class SizeStats:
    mean: float
    min: int
    max: int


@dataclass(frozen=True)
class BinStats:
    index: int
    start_s: int  # seconds from the trace origin
    seconds: int  # bin length; < bin_s only for a partial last bin
    requests: int
    qps: float  # requests / seconds
    ops: dict[str, int]  # request count per operation (only operations that occur)
    key_size: SizeStats | None  # None for a bin without requests
    value_size: SizeStats | None

    @property
    def op_mix(self) -> dict[str, float]:
        return {op: n / self.requests for op, n in self.ops.items()} if self.requests else {}


@dataclass(frozen=True)
class TraceStats:
    path: str  # the file, or the files joined with ' + '
    origin: int  # timestamp of the first row
    bin_s: int
    per_second: np.ndarray  # int64 requests in each second from the origin
    bins: tuple[BinStats, ...]
    lines: int
    rows: int  # requests counted (rows within `max_seconds` when that was given)
    skipped: dict[str, int] = field(default_factory=dict)
    truncated_at_s: int | None = None  # the `max_seconds` limit, when reading stopped there
    start_s: int = 0  # where the series begins, in seconds after the origin

    @property
    def seconds(self) -> int:
        return int(self.per_second.size)

    @property
    def full_bins(self) -> tuple[BinStats, ...]:
        return tuple(b for b in self.bins if b.seconds == self.bin_s)


class _Grow:
    """A 1-D or 2-D numpy accumulator indexed by bin/second that grows by doubling."""

    def __init__(self, width: int | None, dtype: type[np.generic], fill: float) -> None:
        shape = (64,) if width is None else (64, width)
        self.a = np.full(shape, fill, dtype)
        self.fill = fill

    def ensure(self, n: int) -> np.ndarray:
        if n > self.a.shape[0]:
            size = max(n, 2 * self.a.shape[0])
            grown = np.full((size,) + self.a.shape[1:], self.fill, self.a.dtype)
            grown[: self.a.shape[0]] = self.a
            self.a = grown
        return self.a


def _check_bin(bin_s: float) -> int:
    if not (bin_s >= 1 and float(bin_s).is_integer()):
        raise InputError(f"bin length must be a whole number of seconds >= 1, got {bin_s!r}")
    return int(bin_s)


class _Counts:
    """The per-second request counts and per-bin operation counts and key/value size sums, minima and maxima."""

    def __init__(self, width: int) -> None:
        self.width = width
        self.per_sec = _Grow(None, np.int64, 0)
        self.ops = _Grow(_NOPS, np.int64, 0)
        self.ksum, self.vsum = _Grow(None, np.float64, 0.0), _Grow(None, np.float64, 0.0)
        big = np.iinfo(np.int64).max
        self.kmin, self.vmin = _Grow(None, np.int64, big), _Grow(None, np.int64, big)
        self.kmax, self.vmax = _Grow(None, np.int64, -1), _Grow(None, np.int64, -1)

    def add(self, rel: np.ndarray, op: np.ndarray, ks: np.ndarray, vs: np.ndarray) -> None:
        """Count rows at `rel` seconds (>= 0) with these operations and key/value sizes."""
        lo, hi = int(rel.min()), int(rel.max())
        self.per_sec.ensure(hi + 1)[lo : hi + 1] += np.bincount(rel - lo, minlength=hi - lo + 1)
        b = rel // self.width
        nb = int(b.max()) + 1
        np.add.at(self.ops.ensure(nb), (b, op), 1)
        self.ksum.ensure(nb)
        self.ksum.a[:nb] += np.bincount(b, weights=ks, minlength=nb)
        self.vsum.ensure(nb)
        self.vsum.a[:nb] += np.bincount(b, weights=vs, minlength=nb)
        np.minimum.at(self.kmin.ensure(nb), b, ks)
        np.maximum.at(self.kmax.ensure(nb), b, ks)
        np.minimum.at(self.vmin.ensure(nb), b, vs)
        np.maximum.at(self.vmax.ensure(nb), b, vs)

    def bins(self, series: np.ndarray) -> tuple[BinStats, ...]:
        """The bins of the first `series.size` seconds (`series`: their request counts)."""
        width, seconds = self.width, int(series.size)
        out = []
        for i in range(-(-seconds // width)):
            n_req = int(series[i * width : (i + 1) * width].sum())
            length = min(width, seconds - i * width)
            counts = {OPS[j]: int(c) for j, c in enumerate(self.ops.a[i]) if i < self.ops.a.shape[0] and c}
            has = n_req > 0
            k = SizeStats(float(self.ksum.a[i] / n_req), int(self.kmin.a[i]), int(self.kmax.a[i])) if has else None
            v = SizeStats(float(self.vsum.a[i] / n_req), int(self.vmin.a[i]), int(self.vmax.a[i])) if has else None
            out.append(
                BinStats(
                    index=i,
                    start_s=i * width,
                    seconds=length,
                    requests=n_req,
                    qps=n_req / length,
                    ops=counts,
                    key_size=k,
                    value_size=v,
                )
            )
        return tuple(out)


def _no_rows(parser: TraceParser, start: int) -> InputError:
    """Why a trace gave no request to count: all before `start`, all rows bad, or no rows at all."""
    if parser.rows:
        return InputError(
            f"{parser.name}: no requests {start} s or more after the first row "
            f"(the trace has {parser.rows} rows before that)"
        )
    if parser.skipped:
        detail = ", ".join(f"{n} {r}" for r, n in sorted(parser.skipped.items()))
        return InputError(
            f"{parser.name}: empty trace: no valid rows ({sum(parser.skipped.values())} skipped: {detail})"
        )
    return InputError(
        f"{parser.name}: empty trace: no request rows; expected CSV rows "
        "'timestamp,key,key size,value size,client id,operation,TTL'"
    )


def trace_stats(
    path: str | os.PathLike[str] | Sequence[str | os.PathLike[str]],
    *,
    bin_s: float = 3600,
    skip_bad: bool = False,
    tolerance_s: float = DEFAULT_TOLERANCE_S,
    max_seconds: float | None = None,
    max_span_s: int = DEFAULT_MAX_SPAN_S,
    start_s: float = 0,
) -> TraceStats:
    """Stream the trace once, counting from `start_s` after its origin; with `max_seconds`, count only that many
    seconds and stop reading after them.

    A row more than `max_span_s` after the first row is an error (or skipped), which bounds memory."""
    width = _check_bin(bin_s)
    if not (start_s >= 0 and np.isfinite(start_s) and float(start_s).is_integer()):
        raise InputError(f"start must be a whole number of seconds >= 0, got {start_s!r}")
    start = int(start_s)
    parser = TraceParser(path, skip_bad=skip_bad, tolerance_s=tolerance_s, max_span_s=max_span_s)
    if max_seconds is not None and not (max_seconds > 0 and np.isfinite(max_seconds)):
        raise InputError(f"length must be finite and > 0 seconds, got {max_seconds!r}")
    limit = None if max_seconds is None else int(np.ceil(max_seconds))
    counts = _Counts(width)
    origin: int | None = None
    rows = 0
    stopped = False
    for block in parser.blocks():
        if origin is None:
            origin = int(block.timestamp[0])
        rel = np.maximum(block.timestamp - origin, 0) - start
        keep = rel >= 0
        if limit is not None:
            keep &= rel < limit
            # rows up to `tolerance` s late may still follow; past that nothing can fall inside the limit
            stopped = int(rel.max()) >= limit + tolerance_s
        if keep.all():
            block_op, ks, vs = block.op, block.key_size, block.value_size
        else:
            rel = rel[keep]
            block_op, ks, vs = block.op[keep], block.key_size[keep], block.value_size[keep]
        if rel.size:
            rows += int(rel.size)
            counts.add(rel, block_op, ks, vs)
        if stopped:
            break
    if rows == 0:
        raise _no_rows(parser, start)
    series = counts.per_sec.a
    seconds = int(np.flatnonzero(series)[-1]) + 1
    if limit is not None:
        seconds = min(seconds, limit)
    series = series[:seconds].copy()
    return TraceStats(
        path=parser.name,
        origin=origin if origin is not None else 0,
        bin_s=width,
        per_second=series,
        bins=counts.bins(series),
        lines=parser.lines,
        rows=rows,
        skipped=dict(parser.skipped),
        truncated_at_s=limit if stopped else None,
        start_s=start,
    )


def bin_series(per_second: np.ndarray, bin_s: int, *, partial: bool = False) -> np.ndarray:
    """Mean rate (requests/s) of each `bin_s`-second bin of a per-second series; a short tail only if `partial`."""
    per_second = np.asarray(per_second, dtype=np.float64)
    full = per_second.size // bin_s
    rates: np.ndarray = per_second[: full * bin_s].reshape(full, bin_s).mean(axis=1)
    if partial and per_second.size > full * bin_s:
        rates = np.append(rates, per_second[full * bin_s :].mean())
    return rates
