"""Cluster statistics table and the synthetic trace generator."""

from __future__ import annotations

import gzip
from collections import Counter

import numpy as np
import pytest

from core.errors import InputError
from traces.clusters import cluster_stats, load_table
from traces.format import OPS, WRITE_OPS, parse_row
from traces.synth import diurnal_shape, rate_series, synthesize


def test_cluster52_from_bundled_table():
    s = cluster_stats(52)
    assert (s.key_size, s.value_size, s.rate_kqps, s.zipf_alpha) == (20.0, 273.0, 24.25, 1.2117)
    assert sum(s.ops.values()) == pytest.approx(1.0)
    assert s.ops["get"] == pytest.approx(0.91 / 0.99)
    assert dict(s.ttls).keys() == {86400.0, 14 * 86400.0, 43200.0}
    assert sum(share for _, share in s.ttls) == pytest.approx(1.0)
    assert len(load_table()) == 54


def test_fractional_ttl_units():
    ttls = dict(cluster_stats(27).ttls)  # 92.6d:0.28, 1d, 1h, 4h, 6h, 12h
    assert any(t == pytest.approx(92.6 * 86400) for t in ttls) and 3600.0 in ttls


@pytest.mark.parametrize(
    "cluster,missing", [(5, "key size, value size"), (43, "zipf alpha is N/A"), (46, "zipf alpha is N/A")]
)
def test_clusters_with_na_fields_are_refused_by_name(cluster, missing):
    with pytest.raises(InputError, match=f"cluster{cluster}: {missing}"):
        cluster_stats(cluster)


def test_unknown_cluster():
    with pytest.raises(InputError, match="no cluster99; expected one of 1..54"):
        cluster_stats(99)


def test_malformed_stats_file(tmp_path):
    path = tmp_path / "stats.md"
    path.write_text("| cluster | key size |\n|:-:|:-:|\n| cluster1 | 3 |\n")
    with pytest.raises(InputError, match=r"stats\.md:1: expected a column 'production miss ratio'"):
        cluster_stats(1, path)
    head = (
        "| cluster | production miss ratio | key size | value size | request rate (kqps) | common TTL "
        "| operation | Zipf alpha |\n|-|-|-|-|-|-|-|-|\n"
    )
    path.write_text(head + "| cluster1 | 0.1 | 3 | 4 | 1.0 | 60s:1.0, | get:0.5 fetch:0.5 | 1.0 |\n")
    with pytest.raises(InputError, match="cluster1: operation: unknown operation 'fetch'"):
        cluster_stats(1, path)
    path.write_text(head + "| cluster1 | 0.1 | 3 | 4 | 1.0 | 60x:1.0, | get:1.0 | 1.0 |\n")
    with pytest.raises(InputError, match="common TTL: expected TTL items like"):
        cluster_stats(1, path)


def test_diurnal_shape_realistic():
    h = np.arange(0, 24, 1 / 60)
    f = diurnal_shape(h)
    assert f.mean() == pytest.approx(1.0, abs=1e-9)
    assert 2 <= h[f.argmin()] <= 6  # trough at night
    assert 15 <= h[f.argmax()] <= 21  # peak in the afternoon / evening
    assert 2.0 <= f.max() / f.min() <= 4.0


def test_rate_series_minute_noise_deterministic():
    a = rate_series(7200, 100.0, np.random.default_rng(1))
    b = rate_series(7200, 100.0, np.random.default_rng(1))
    c = rate_series(7200, 100.0, np.random.default_rng(2))
    assert np.array_equal(a, b) and not np.array_equal(a, c)
    noise = a / (100.0 * diurnal_shape(np.arange(7200) / 3600))
    per_minute = noise.reshape(120, 60)
    assert np.allclose(per_minute, per_minute[:, :1])  # constant within a minute
    assert 0.02 < np.std(np.log(per_minute[:, 0])) < 0.2  # but it moves from minute to minute


@pytest.fixture(scope="module")
def synth52(tmp_path_factory):
    path = tmp_path_factory.mktemp("synth") / "c52.csv"
    result = synthesize(cluster_stats(52), path, hours=2, mean_qps=20, seed=7, keys=5000)
    return path, result, [parse_row(line) for line in path.read_bytes().splitlines()]


def test_synth_rows_follow_cluster_statistics(synth52):
    path, result, rows = synth52
    s = cluster_stats(52)
    assert result.rows == len(rows) and result.seconds == 7200
    assert 0.9 * 20 * 7200 * 0.45 < len(rows) < 20 * 7200  # 00:00-02:00 is below the daily mean
    assert rows[0].timestamp == 0 and rows[-1].timestamp == 7199
    assert all(a.timestamp <= b.timestamp for a, b in zip(rows, rows[1:]))
    mix = Counter(OPS[r.op] for r in rows)
    for op, share in s.ops.items():
        assert mix[op] / len(rows) == pytest.approx(share, abs=0.01), op
    assert set(mix) == set(s.ops)
    assert np.mean([r.key_size for r in rows]) == pytest.approx(20, rel=0.15)
    assert all(r.ttl > 0 for r in rows if OPS[r.op] in WRITE_OPS)
    assert all(r.ttl == 0 for r in rows if OPS[r.op] not in WRITE_OPS)
    assert {r.ttl for r in rows if r.ttl} <= {86400, 14 * 86400, 43200}
    assert sum(b"," in r.key for r in rows) > 0  # keys with commas exercise the parser


def test_synth_key_popularity_is_zipf(synth52):
    _, _, rows = synth52
    alpha, n_keys = cluster_stats(52).zipf_alpha, 5000
    p = np.arange(1, n_keys + 1, dtype=float) ** -alpha
    p /= p.sum()
    top = Counter(r.key for r in rows).most_common(3)
    for (_, count), expect in zip(top, p[:3]):
        assert count / len(rows) == pytest.approx(expect, rel=0.1)


def test_synth_deterministic_for_seed(tmp_path):
    s = cluster_stats(18)
    a, b, c = tmp_path / "a.csv.gz", tmp_path / "b.csv.gz", tmp_path / "c.csv.gz"
    for path, seed in ((a, 1), (b, 1), (c, 2)):
        synthesize(s, path, hours=0.25, mean_qps=10, seed=seed, keys=1000)
    assert a.read_bytes() == b.read_bytes() != c.read_bytes()
    assert gzip.decompress(a.read_bytes()).count(b"\n") > 1000
    assert not list(tmp_path.glob("*.tmp"))


def test_synth_read_misses_carry_no_value(tmp_path):
    s = cluster_stats(10)  # miss ratio 0.9925, add:0.50 get:0.50
    path = tmp_path / "c10.csv"
    synthesize(s, path, hours=0.2, mean_qps=20, keys=500)
    rows = [parse_row(line) for line in path.read_bytes().splitlines()]
    gets = [r for r in rows if OPS[r.op] == "get"]
    assert len(gets) > 1000
    assert sum(r.value_size == 0 for r in gets) / len(gets) == pytest.approx(s.miss_ratio, abs=0.01)
    assert all(r.value_size > 0 for r in rows if OPS[r.op] == "add")


def test_miss_ratio_na_is_fine_without_reads():
    s = cluster_stats(21)  # production miss ratio N/A, add:1.00
    assert s.miss_ratio == 0.0 and s.ops == {"add": 1.0}


def test_synth_deletes_carry_no_value(tmp_path):
    path = tmp_path / "c14.csv"
    synthesize(cluster_stats(14), path, hours=0.1, mean_qps=50, keys=500)
    rows = [parse_row(line) for line in path.read_bytes().splitlines()]
    deletes = [r for r in rows if OPS[r.op] == "delete"]
    assert deletes and all(r.value_size == 0 for r in deletes)


def test_synth_bad_arguments(tmp_path):
    with pytest.raises(InputError, match="mean QPS must be finite and > 0"):
        synthesize(cluster_stats(52), tmp_path / "x.csv", mean_qps=0)
    with pytest.raises(InputError, match="seed must be >= 0"):
        synthesize(cluster_stats(52), tmp_path / "x.csv", seed=-1)
    with pytest.raises(InputError, match="key population must be in 1..10000000"):
        synthesize(cluster_stats(52), tmp_path / "x.csv", keys=10**9)
    with pytest.raises(InputError, match="cannot write trace"):
        synthesize(cluster_stats(52), tmp_path / "missing-dir" / "x.csv", hours=0.01, mean_qps=1)


def test_bundled_sample_is_reproducible_from_recorded_command(tmp_path):
    """traces/data/README.md records the command; its rows (before compression) must come out identical."""
    import zstandard

    from traces.schedule import sample_trace_path

    path = tmp_path / "again.csv"
    synthesize(cluster_stats(52), path, hours=24, mean_qps=5, seed=2020)
    bundled = zstandard.ZstdDecompressor().stream_reader(sample_trace_path().open("rb")).read()
    assert bundled == path.read_bytes()
