"""Bounded caches never fail a caller: every value asked for comes back even when the bound evicts it
between the compute and the read (tiny bounds force that), and the byte bound and hit counters hold."""

from __future__ import annotations

import pytest

from actuators.host import OperatingPoint
from actuators.latency import dist
from actuators.sim.host import ExpectedCache, SimHost
from core.cache import BoundedCache


def test_get_many_returns_every_value_when_the_bound_holds_one_entry():
    cache: BoundedCache[int, int] = BoundedCache(0, sizeof=lambda k, v: 8, name="tiny")
    calls: list[list[int]] = []

    def square(keys: list[int]) -> dict[int, int]:
        calls.append(list(keys))
        return {k: k * k for k in keys}

    assert cache.get_many([1, 2, 3, 2], square) == {1: 1, 2: 4, 3: 9}
    assert calls == [[1, 2, 3]]  # one compute for the missing keys, duplicates asked once
    assert len(cache) == 1  # only the newest survives a zero bound
    assert cache.get_many([3, 1], square) == {3: 9, 1: 1}
    assert calls[-1] == [1]
    st = cache.stats()
    assert (st.hits, st.misses) == (1, 4)
    assert st.hit_rate == pytest.approx(0.2)
    assert st.evictions == 3


def test_eviction_during_compute_does_not_lose_the_hits_already_read():
    # the compute of a missing key fills the same cache (a nested lookup), evicting the key that was a hit
    cache: BoundedCache[str, str] = BoundedCache(2 * 120, sizeof=lambda k, v: 20, name="nested")
    cache.get("a", lambda: "A")

    def compute(keys: list[str]) -> dict[str, str]:
        for other in ("x", "y", "z"):
            cache.get(other, lambda other=other: other.upper())
        assert "a" not in cache  # evicted before get_many hands its values back
        return {k: k.upper() for k in keys}

    assert cache.get_many(["a", "b"], compute) == {"a": "A", "b": "B"}


def test_byte_bound_is_kept_and_stated():
    cache: BoundedCache[int, bytes] = BoundedCache(10_000, sizeof=lambda k, v: len(v), name="bytes")
    for i in range(100):
        cache.get(i, lambda: b"x" * 500)
    st = cache.stats()
    assert st.bytes <= st.max_bytes == 10_000
    assert st.entries == len(cache) < 100
    assert st.as_dict()["hit_rate"] == 0.0


def test_compute_must_return_every_missing_key():
    cache: BoundedCache[int, int] = BoundedCache(1000)
    with pytest.raises(KeyError, match="no value for 2"):
        cache.get_many([1, 2], lambda keys: {1: 1})


def test_bad_bound_is_refused():
    with pytest.raises(ValueError, match="max_bytes"):
        BoundedCache(-1)


def test_sim_expected_with_a_one_cell_cache_matches_a_roomy_one():
    # interpolated points need two anchor cells each: with room for one cell, computing the upper anchor
    # evicts the lower one before it is read -- the fault that crashed long replays
    pts = [OperatingPoint(110, 2.0), OperatingPoint(130, 1.6), OperatingPoint(246, 1.6), OperatingPoint(110, 1.6)]
    tiny = SimHost(cache=ExpectedCache(cell_bytes=1, default_bytes=1))
    roomy = SimHost()
    for qps in (300_000.0, 600_000.0, 300_000.0):
        a, b = tiny.expected(pts, qps), roomy.expected(pts, qps)
        assert [e.latency_us for e in a] == [e.latency_us for e in b]
        assert [e.power_w for e in a] == [e.power_w for e in b]
    cells = tiny.expected_cache.cells.stats()
    assert cells.entries == 1 and cells.evictions > 0
    assert roomy.expected_cache.cells.stats().hit_rate > 0.3  # the repeated load is served from the memo
    assert tiny.expected_default(400_000).latency_us == roomy.expected_default(400_000).latency_us
    assert tiny.expected_default(500_000).power_w == roomy.expected_default(500_000).power_w


def test_sim_measure_with_a_one_cell_cache_runs_a_changing_load():
    host = SimHost(seed=3, cache=ExpectedCache(cell_bytes=1, default_bytes=1))
    host.set_itr(130)
    host.set_dvfs(1.6)
    for qps in (100_000, 350_000, 600_000, 250_000):
        host.set_offered_qps(qps)
        assert host.measure(5.0).latency_us[99.0] > 0
    host.restore()
    assert host.measure(1.0).energy_j > 0


def test_ci_rank_memo_survives_a_tiny_bound(monkeypatch):
    monkeypatch.setattr(dist, "RANKS_CACHE", BoundedCache(0, name="ranks"))
    want = {n: dist.quantile_ci_ranks(n, 0.99, 0.95) for n in (100, 1000, 5000)}
    for n in (100, 1000, 1000, 5000, 100):
        assert dist._ranks(n, 0.99, 0.95) == want[n]
    assert dist.RANKS_CACHE.stats().hits == 1  # a zero bound keeps the newest entry only
