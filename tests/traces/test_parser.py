"""Trace parser: fields, commas in keys, compression by magic bytes, every bad-input rule, --skip-bad counting."""

from __future__ import annotations

import gzip

import numpy as np
import pytest
import zstandard

from core.errors import InputError
from traces.compression import detect
from traces.format import OPS, RowError, parse_row
from traces.parser import MAX_LINE_BYTES, TraceParser
from traces.series import trace_stats

ROWS = [
    b"0,nz:u:eeW511W3dcH3de3d15ec,24,273,7,get,0",
    b"0,a,b,c,1,1,2,set,3600",  # key 'a,b,c'
    b"1,k2,20,0,3,delete,0",
    b"2,,,,,5,6,7,incr,60",  # key ',,,'
    b"2,x,1,2,3,gets,0",
]


def write(tmp_path, name: str, body: bytes, kind: str = "plain"):
    path = tmp_path / name
    if kind == "zstd":
        body = zstandard.ZstdCompressor().compress(body)
    elif kind == "gzip":
        body = gzip.compress(body)
    path.write_bytes(body)
    return path


def parse_all(path, **kw):
    parser = TraceParser(path, **kw)
    blocks = list(parser.blocks())
    cat = {
        k: np.concatenate([getattr(b, k) for b in blocks]) if blocks else np.array([])
        for k in ("timestamp", "op", "key_size", "value_size", "ttl")
    }
    return parser, cat


def test_fields_and_commas_in_keys(tmp_path):
    path = write(tmp_path, "t.csv", b"\n".join(ROWS) + b"\n")
    parser, f = parse_all(path)
    assert parser.lines == parser.rows == 5
    assert f["timestamp"].tolist() == [0, 0, 1, 2, 2]
    assert [OPS[i] for i in f["op"]] == ["get", "set", "delete", "incr", "gets"]
    assert f["key_size"].tolist() == [24, 1, 20, 5, 1]
    assert f["value_size"].tolist() == [273, 1, 0, 6, 2]
    assert [parse_row(r).client_id for r in ROWS] == [b"7", b"2", b"3", b"7", b"3"]
    assert f["ttl"].tolist() == [0, 3600, 0, 60, 0]
    assert parse_row(ROWS[1]).key == b"a,b,c"
    assert parse_row(ROWS[3]).key == b",,,"


def test_every_operation_and_crlf_and_no_final_newline(tmp_path):
    body = b"\r\n".join(b"%d,k%d,1,2,3,%s,0" % (i, i, op.encode()) for i, op in enumerate(OPS))
    parser, f = parse_all(write(tmp_path, "t.csv", body))
    assert [OPS[i] for i in f["op"]] == list(OPS)
    assert parser.lines == len(OPS)


@pytest.mark.parametrize("chunk", [7, 64, 1 << 20])
def test_result_independent_of_chunk_boundaries(tmp_path, chunk):
    rng = np.random.default_rng(3)
    rows = [
        b"%d,k,%d,%d,%d,1,%d,%s,%d"
        % (
            t,
            rng.integers(9),
            rng.integers(99),
            rng.integers(9999),
            5,
            OPS[rng.integers(11)].encode(),
            rng.integers(100),
        )
        for t in range(500)
    ]
    path = write(tmp_path, "t.csv", b"\n".join(rows) + b"\n")
    _, ref = parse_all(path)
    _, got = parse_all(path, chunk_bytes=chunk)
    for k in ref:
        assert np.array_equal(ref[k], got[k]), k
    assert ref["timestamp"].size == 500


@pytest.mark.parametrize(
    "kind,name", [("plain", "t.csv"), ("gzip", "t.csv.gz"), ("zstd", "t.csv.zst"), ("gzip", "t.dat"), ("zstd", "t.bin")]
)
def test_compression_by_magic_bytes(tmp_path, kind, name):
    path = write(tmp_path, name, b"\n".join(ROWS) + b"\n", kind)
    assert detect(path) == kind
    parser, f = parse_all(path)
    assert parser.rows == 5 and f["ttl"].tolist() == [0, 3600, 0, 60, 0]


def test_multi_frame_zstd(tmp_path):
    c = zstandard.ZstdCompressor()
    path = tmp_path / "t.zst"
    path.write_bytes(c.compress(b"\n".join(ROWS[:2]) + b"\n") + c.compress(b"\n".join(ROWS[2:]) + b"\n"))
    parser, _ = parse_all(path)
    assert parser.rows == 5


def expect_error(path, *fragments, **kw):
    with pytest.raises(InputError) as exc:
        parse_all(path, **kw)
    msg = str(exc.value)
    assert "\n" not in msg
    for fragment in fragments:
        assert fragment in msg, msg
    return msg


BAD = [
    # (row, what the message must say after FILE:LINE:)
    (b"1,k,1,2,3,get", "expected 7 comma-separated fields"),
    (b"", "got an empty line"),
    (b"x,k,1,2,3,get,0", "field 'timestamp': expected a non-negative integer number of seconds, got 'x'"),
    (b"-1,k,1,2,3,get,0", "field 'timestamp': expected a non-negative integer number of seconds, got '-1'"),
    (b"1.5,k,1,2,3,get,0", "field 'timestamp'"),
    (b"1,,1,2,3,get,0", "field 'anonymized key': expected a non-empty key"),
    (b"1,k,x,2,3,get,0", "field 'key size': expected a non-negative integer, got 'x'"),
    (b"1,k,1, 2,3,get,0", "field 'value size': expected a non-negative integer, got ' 2'"),
    (b"1,k,1,2,,get,0", "field 'client id': expected a non-empty client id, got ''"),
    (b"1,k,1,2,3,GET,0", "field 'operation': expected one of get, gets, set"),
    (b"1,k,1,2,3,get\x00,0", "field 'operation'"),
    (b"1,k,1,2,3,get,ttl", "field 'TTL': expected a non-negative integer, got 'ttl'"),
    (b"1,k,1,2,3,get,1234567890123456789", "field 'TTL': expected a non-negative integer of at most 18 digits"),
]


@pytest.mark.parametrize("row,expected", BAD)
def test_bad_row_names_file_line_and_expectation(tmp_path, row, expected):
    path = write(tmp_path, "trace.csv", b"0,k,1,2,3,get,0\n1,k,1,2,3,set,5\n" + row + b"\n2,k,1,2,3,get,0\n")
    expect_error(path, f"{path}:3: ", expected)
    with pytest.raises(RowError) as exc:  # the reference parser agrees
        parse_row(row)
    assert expected in exc.value.message


def test_key_size_example_from_spec(tmp_path):
    rows = [b"%d,k,1,2,3,get,0" % i for i in range(16)] + [b"16,k,x,2,3,get,0"]
    path = write(tmp_path, "trace.csv", b"\n".join(rows))
    expect_error(path, f"{path}:17: field 'key size': expected a non-negative integer, got 'x'")


def test_empty_trace(tmp_path):
    path = write(tmp_path, "empty.csv", b"")
    with pytest.raises(InputError, match=r"empty\.csv: empty trace"):
        trace_stats(path)
    zpath = write(tmp_path, "empty.csv.zst", b"", "zstd")
    with pytest.raises(InputError, match="empty trace"):
        trace_stats(zpath)


def test_all_rows_skipped_is_an_empty_trace(tmp_path):
    path = write(tmp_path, "bad.csv", b"junk\nmore junk\n")
    with pytest.raises(InputError, match=r"empty trace: no valid rows \(2 skipped: 2 field count\)"):
        trace_stats(path, skip_bad=True)


def test_non_monotonic_timestamp_beyond_tolerance(tmp_path):
    path = write(tmp_path, "t.csv", b"100,k,1,2,3,get,0\n110,k,1,2,3,get,0\n103,k,1,2,3,get,0\n")
    expect_error(path, f"{path}:3: timestamp 103 is 7 s earlier than 110", "tolerance 5 s", "sorted by time")


def test_non_monotonic_within_tolerance_is_accepted(tmp_path):
    path = write(tmp_path, "t.csv", b"100,k,1,2,3,get,0\n110,k,1,2,3,get,0\n105,k,1,2,3,get,0\n")
    parser, f = parse_all(path)
    assert f["timestamp"].tolist() == [100, 110, 105]
    # a tighter tolerance turns the same file into an error; the tolerance is a parameter
    expect_error(path, f"{path}:3: timestamp 105 is 5 s earlier", "tolerance 2 s", tolerance_s=2)


def test_order_checked_across_blocks(tmp_path):
    rows = [b"%d,k,1,2,3,get,0" % (1000 + i) for i in range(200)] + [b"10,k,1,2,3,get,0"]
    path = write(tmp_path, "t.csv", b"\n".join(rows) + b"\n")
    expect_error(path, f"{path}:201: timestamp 10 is 1189 s earlier", chunk_bytes=64)


def test_skip_bad_counts_by_reason(tmp_path):
    body = (
        b"\n".join(
            [
                b"0,k,1,2,3,get,0",
                b"garbage",
                b"1,k,x,2,3,get,0",
                b"2,k,1,2,3,fetch,0",
                b"3,k,1,2,3,get,0",
                b"",
                b"4,k,1,y,3,set,0",
                b"50,k,1,2,3,get,0",
                b"5,k,1,2,3,get,0",
                b"51,k,1,2,3,get,0",
            ]
        )
        + b"\n"
    )
    path = write(tmp_path, "t.csv", body)
    parser, f = parse_all(path, skip_bad=True)
    assert parser.lines == 10
    assert f["timestamp"].tolist() == [0, 3, 50, 51]
    assert dict(parser.skipped) == {
        "field count": 2,
        "field 'key size'": 1,
        "field 'operation'": 1,
        "field 'value size'": 1,
        "timestamp out of order": 1,
    }
    st = trace_stats(path, skip_bad=True)
    assert st.rows == 4 and sum(st.skipped.values()) == 6


def test_first_bad_row_wins_between_format_and_order(tmp_path):
    path = write(tmp_path, "t.csv", b"100,k,1,2,3,get,0\n1,k,1,2,3,get,0\nzz\n")
    expect_error(path, f"{path}:2: timestamp 1 is 99 s earlier")
    path = write(tmp_path, "u.csv", b"100,k,1,2,3,get,0\nzz\n1,k,1,2,3,get,0\n")
    expect_error(path, f"{path}:2: expected 7 comma-separated fields")


def test_overlong_line(tmp_path):
    body = b"0,k,1,2,3,get,0\n" + b"a" * (MAX_LINE_BYTES + 10) + b"\n1,k,1,2,3,get,0\n"
    path = write(tmp_path, "t.csv", body)
    expect_error(path, f"{path}:2: line longer than", chunk_bytes=1 << 16)
    parser, f = parse_all(path, skip_bad=True, chunk_bytes=1 << 16)
    assert f["timestamp"].tolist() == [0, 1] and parser.skipped == {"line too long": 1} and parser.lines == 3


def test_truncated_zstd(tmp_path):
    blob = zstandard.ZstdCompressor().compress(b"0,k,1,2,3,get,0\n" * 50_000)
    path = tmp_path / "t.csv.zst"
    path.write_bytes(blob[: len(blob) // 2])
    expect_error(path, f"{path}: truncated zstd data")


def test_corrupt_zstd(tmp_path):
    blob = bytearray(zstandard.ZstdCompressor().compress(b"0,k,1,2,3,get,0\n" * 50_000))
    blob[12:40] = b"\xff" * 28
    path = tmp_path / "t.zst"
    path.write_bytes(bytes(blob))
    expect_error(path, f"{path}: corrupt zstd data")


def test_truncated_gzip(tmp_path):
    blob = gzip.compress(b"0,k,1,2,3,get,0\n" * 50_000)
    path = tmp_path / "t.csv.gz"
    path.write_bytes(blob[: len(blob) // 2])
    expect_error(path, f"{path}: truncated gzip data")


def test_corrupt_gzip(tmp_path):
    blob = bytearray(gzip.compress(b"0,k,1,2,3,get,0\n" * 50_000))
    blob[20:60] = b"\x00" * 40
    path = tmp_path / "t.gz"
    path.write_bytes(bytes(blob))
    expect_error(path, f"{path}: corrupt gzip data")


def test_suffix_without_magic(tmp_path):
    path = write(tmp_path, "t.csv.zst", b"0,k,1,2,3,get,0\n")
    expect_error(path, f"{path}: name says zstd but the file does not start with zstd magic bytes")


def test_missing_file(tmp_path):
    expect_error(tmp_path / "nope.csv", "nope.csv: cannot read trace")


def test_timestamp_beyond_trace_span(tmp_path):
    path = write(tmp_path, "t.csv", b"100,k,1,2,3,get,0\n200,k,1,2,3,get,0\n999999999999,k,1,2,3,get,0\n")
    expect_error(
        path,
        f"{path}:3: timestamp 999999999999 is 999999999899 s after the first row's 100",
        "expected a trace spanning at most 2678400 s",
    )
    parser, f = parse_all(path, skip_bad=True)
    assert f["timestamp"].tolist() == [100, 200] and parser.skipped == {"timestamp beyond trace span": 1}
    expect_error(path, f"{path}:2: timestamp 200 is 100 s after", max_span_s=50)


def test_trace_split_over_files(tmp_path):
    """Published traces are split (clusterN.0.zst, clusterN.1.zst, ...): files are read as one trace, in order."""
    rows = [b"%d,k%d,1,2,3,get,0" % (t, t) for t in range(10)]
    a = write(tmp_path, "c.0.zst", b"\n".join(rows[:6]) + b"\n", "zstd")
    b = write(tmp_path, "c.1.csv", b"\n".join(rows[6:]))  # no final newline: the file still ends the row
    parser, f = parse_all([a, b])
    assert f["timestamp"].tolist() == list(range(10)) and parser.lines == 10 and parser.name == f"{a} + {b}"
    # line numbers restart per file; order is checked across the boundary
    c = write(tmp_path, "c.2.csv", b"9,k,1,2,3,get,0\n1,k,1,2,3,get,0\n")
    expect_error([a, b, c], f"{c}:2: timestamp 1 is 8 s earlier than 9")
    d = write(tmp_path, "c.3.csv", b"9,k,1,2,3,get,0\n9,k,oops,2,3,get,0\n")
    expect_error([a, d], f"{d}:2: field 'key size'")
