"""Fuzz the trace parser: on any input only success or InputError, and the vectorised parser agrees exactly
with the one-row-at-a-time reference parser (same rows accepted, same skip reasons, same first error line)."""

from __future__ import annotations

import gzip
from collections import Counter

import pytest
import zstandard
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from core.errors import InputError
from traces.compression import detect
from traces.format import OPS, RowError, parse_row
from traces.parser import TraceParser
from traces.series import trace_stats

FUZZ = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
TOL = 3
SPAN = 5000


def reference(body: bytes, skip_bad: bool):
    """(rows, skipped reasons, first error line) by the reference parser and a plain running maximum."""
    lines = body.split(b"\n")
    if lines and lines[-1] == b"":
        lines.pop()
    rows, skipped, tmax, origin = [], Counter(), None, None
    for number, line in enumerate(lines, start=1):
        try:
            row = parse_row(line)
        except RowError as exc:
            if not skip_bad:
                return rows, skipped, number
            skipped[exc.reason] += 1
            continue
        origin = row.timestamp if origin is None else origin
        if row.timestamp > origin + SPAN:
            if not skip_bad:
                return rows, skipped, number
            skipped["timestamp beyond trace span"] += 1
            continue
        if tmax is not None and row.timestamp + TOL < tmax:
            if not skip_bad:
                return rows, skipped, number
            skipped["timestamp out of order"] += 1
            continue
        tmax = row.timestamp if tmax is None else max(tmax, row.timestamp)
        rows.append((row.timestamp, row.op, row.key_size, row.value_size, row.ttl))
    return rows, skipped, None


def fast(path, skip_bad: bool, chunk: int):
    parser = TraceParser(path, skip_bad=skip_bad, tolerance_s=TOL, max_span_s=SPAN, chunk_bytes=chunk)
    rows = []
    try:
        for b in parser.blocks():
            rows += list(
                zip(b.timestamp.tolist(), b.op.tolist(), b.key_size.tolist(), b.value_size.tolist(), b.ttl.tolist())
            )
    except InputError as exc:
        return rows, parser.skipped, str(exc)
    return rows, parser.skipped, None


def check_agreement(tmp_path, body: bytes, chunk: int) -> None:
    path = tmp_path / "fuzz.csv"
    path.write_bytes(body)
    if detect(path) != "plain":  # random bytes that happen to start with a compression magic
        for skip_bad in (False, True):
            rows, skipped, err = fast(path, skip_bad, chunk)
            assert err is None or "\n" not in err
        return
    for skip_bad in (False, True):
        ref_rows, ref_skipped, ref_err = reference(body, skip_bad)
        rows, skipped, err = fast(path, skip_bad, chunk)
        if ref_err is None:
            assert err is None, err
            assert rows == ref_rows
            assert dict(skipped) == dict(ref_skipped)
        else:
            assert err is not None and err.startswith(f"{path}:{ref_err}: "), (err, ref_err)
            assert "\n" not in err


# near-valid rows: valid pieces, mutated pieces, and field separators in odd places
_digits = st.integers(0, 10**6).map(lambda n: str(n).encode())
_field = st.one_of(_digits, _digits, st.sampled_from([b"", b"-1", b"1.5", b" 3", b"x", b"9" * 19, b"\xff", b"\r"]))
_op = st.one_of(st.sampled_from([o.encode() for o in OPS]), st.sampled_from([b"GET", b"get ", b"ge", b"", b"gett"]))
_key = st.one_of(
    st.sampled_from([b"k", b"a,b", b"nz:u:eeW5", b",", b"", b"\xe2\x82\xac,x"]),
    st.binary(max_size=6).filter(lambda b: b"\n" not in b),
)
_row = st.builds(
    lambda t, k, ks, vs, c, o, ttl: b",".join([t, k, ks, vs, c, o, ttl]),
    _field,
    _key,
    _field,
    _field,
    _field,
    _op,
    _field,
)
_line = st.one_of(_row, _row, _row, st.binary(max_size=20).filter(lambda b: b"\n" not in b))
_body = st.lists(_line, max_size=25).flatmap(
    lambda ls: st.sampled_from([b"\n".join(ls), b"\n".join(ls) + b"\n", b"\r\n".join(ls)])
)


@FUZZ
@given(body=_body, chunk=st.integers(1, 80))
def test_near_valid_rows_agree_with_reference(tmp_path, body, chunk):
    check_agreement(tmp_path, body, chunk)


@FUZZ
@given(body=st.binary(max_size=300), chunk=st.integers(1, 64))
def test_arbitrary_bytes_agree_with_reference(tmp_path, body, chunk):
    check_agreement(tmp_path, body, chunk)


@FUZZ
@given(
    payload=st.binary(max_size=200),
    magic=st.sampled_from([b"\x28\xb5\x2f\xfd", b"\x1f\x8b", b"\x5a\x2a\x4d\x18"]),
    suffix=st.sampled_from([".csv", ".zst", ".gz"]),
)
def test_garbage_after_magic_is_input_error_or_success(tmp_path, payload, magic, suffix):
    path = tmp_path / f"fuzz{suffix}"
    path.write_bytes(magic + payload)
    try:
        trace_stats(path, skip_bad=True)
    except InputError as exc:
        assert "\n" not in str(exc) and str(exc).startswith(str(path))


@FUZZ
@given(body=_body, cut=st.floats(0, 1), kind=st.sampled_from(["gz", "zst"]))
def test_truncated_compressed_rows(tmp_path, body, cut, kind):
    blob = gzip.compress(body) if kind == "gz" else zstandard.ZstdCompressor().compress(body)
    path = tmp_path / f"fuzz.{kind}"
    path.write_bytes(blob[: int(len(blob) * cut)])
    try:
        trace_stats(path, skip_bad=True)
    except InputError as exc:
        assert "\n" not in str(exc) and str(exc).startswith(str(path))


@pytest.mark.parametrize("body", [b"\n", b"\r", b",,,,,,", b"0,k,1,2,3,get,0,", b"\x00" * 10])
def test_edge_bodies(tmp_path, body):
    check_agreement(tmp_path, body, 4)


@FUZZ
@given(body=_body, bin_s=st.integers(1, 5000), skip_bad=st.booleans())
def test_stats_on_near_valid_rows(tmp_path, body, bin_s, skip_bad):
    path = tmp_path / "fuzz.csv"
    path.write_bytes(body)
    try:
        st_ = trace_stats(path, bin_s=bin_s, skip_bad=skip_bad)
    except InputError as exc:
        assert "\n" not in str(exc) and str(exc).startswith(str(path))
        return
    assert st_.per_second.sum() == st_.rows == sum(b.requests for b in st_.bins)
    assert st_.rows + sum(st_.skipped.values()) == st_.lines
