"""Mergeable latency distributions: CI coverage on a known distribution, merging, Measurement pooling."""

from __future__ import annotations

import math
import pickle

import numpy as np
import pytest

from actuators.host import PERCENTILES, Measurement, OperatingPoint
from actuators.latency.dist import HdrDist, LatencyDist, SampleDist, merge_dists
from actuators.latency.prober import ProberConfig, ThreadProber, new_histogram, record_ns
from actuators.latency.sources import hook_json, parse_hook_json
from actuators.sim.host import SimHost
from core.errors import HostError, TunerError
from core.stats import quantile_with_ci

MEAN_US = 100.0


def _truth(q: float) -> float:
    """Exact q-quantile of an exponential with mean MEAN_US."""
    return -MEAN_US * math.log1p(-q)


def _coverage(make, q: float, n: int, reps: int, seed: int) -> float:
    rng = np.random.default_rng(seed)
    hits = 0
    for _ in range(reps):
        _, lo, hi = make(rng.exponential(MEAN_US, size=n)).quantile_ci(q, 0.95)
        hits += lo <= _truth(q) <= hi
    return hits / reps


def _exact_coverage(q: float, n: int) -> float:
    """What the order-statistic interval promises: P(lo < #samples below the quantile <= hi), >= 95 %."""
    from scipy.stats import binom

    from core.stats import quantile_ci_ranks

    lo, hi = quantile_ci_ranks(n, q, 0.95)
    return float(binom.cdf(hi, n, q) - binom.cdf(lo, n, q))


@pytest.mark.parametrize("q,n", [(0.99, 1200), (0.5, 200), (0.9, 400)])
def test_sample_ci_covers_the_true_quantile_about_95_percent(q, n):
    reps = 1500
    cov = _coverage(SampleDist, q, n, reps=reps, seed=11)
    exact = _exact_coverage(q, n)
    assert 0.92 <= cov <= 0.98, cov
    assert abs(cov - exact) <= 4.0 * math.sqrt(exact * (1 - exact) / reps), (cov, exact)


@pytest.mark.parametrize("q,n", [(0.99, 1500), (0.5, 200)])
def test_hdr_ci_covers_the_true_quantile_about_95_percent(q, n):
    # bucket edges only widen the interval: coverage at least the exact-sample one, still in the band
    cov = _coverage(lambda x: SampleDist(x).to_hdr(), q, n, reps=500, seed=12)
    assert 0.92 <= cov <= 0.98, cov
    assert cov >= _exact_coverage(q, n) - 4.0 * math.sqrt(0.05 * 0.95 / 500)


def test_a_too_narrow_interval_fails_the_coverage_band():
    # the same check catches a CI that is too narrow (80 % confidence passed off as 95 %)
    rng = np.random.default_rng(11)
    hits = sum(
        lo <= _truth(0.99) <= hi
        for lo, hi in (SampleDist(rng.exponential(MEAN_US, 1200)).quantile_ci(0.99, 0.80)[1:] for _ in range(600))
    )
    assert hits / 600 < 0.92


def test_sample_dist_matches_stats_module():
    x = np.random.default_rng(1).exponential(MEAN_US, 5000)
    d = SampleDist(x)
    for pct in PERCENTILES:
        assert d.quantile_ci(pct / 100) == pytest.approx(quantile_with_ci(x, pct / 100), rel=1e-6)
    assert d.count == 5000 and isinstance(d, LatencyDist)


def test_hdr_ci_contains_the_exact_ci_and_is_at_most_one_bucket_wider():
    x = np.random.default_rng(2).exponential(MEAN_US, 3000) + 5.0
    exact, hdr = SampleDist(x), SampleDist(x).to_hdr()
    for pct in PERCENTILES:
        e, lo, hi = exact.quantile_ci(pct / 100)
        he, hlo, hhi = hdr.quantile_ci(pct / 100)
        assert hlo <= lo * 1.000001 and hi <= hhi * 1.000001
        assert hlo >= lo * 0.998 and hhi <= hi * 1.002
        assert he == pytest.approx(e, rel=2e-3)


def test_merge_pools_observations_without_changing_inputs():
    rng = np.random.default_rng(3)
    a, b = rng.exponential(MEAN_US, 700), rng.exponential(2 * MEAN_US, 500)
    da, db = SampleDist(a), SampleDist(b)
    both = da.merge(db)
    assert both.count == 1200 and da.count == 700 and db.count == 500
    assert both.quantile_ci(0.99) == SampleDist(np.concatenate([a, b])).quantile_ci(0.99)
    ha, hb = da.to_hdr(), db.to_hdr()
    hboth = ha.merge(hb)
    assert hboth.count == 1200 and ha.count == 700
    assert hboth.quantile_ci(0.99) == SampleDist(np.concatenate([a, b])).to_hdr().quantile_ci(0.99)
    mixed = da.merge(hb)  # exact samples join a histogram as histogram counts
    assert isinstance(mixed, HdrDist) and mixed.quantile_ci(0.99) == hboth.quantile_ci(0.99)
    assert merge_dists([da, db, da]).count == 1900
    with pytest.raises(ValueError):
        merge_dists([])


def test_hdr_dist_pickles_and_encodes_compactly():
    h = SampleDist(np.random.default_rng(4).exponential(MEAN_US, 2000)).to_hdr()
    assert h.nbytes < 20_000  # the counts array would be ~220 kB
    back = pickle.loads(pickle.dumps(h))
    assert back.count == h.count and back.quantile_ci(0.99) == h.quantile_ci(0.99)
    text = HdrDist.from_encoded(h.encoded())
    assert text.quantile_ci(0.5) == h.quantile_ci(0.5)
    with pytest.raises(ValueError, match="HdrHistogram"):
        HdrDist.from_encoded("not a histogram")


def test_bad_samples_refused():
    for bad in ([], [1.0, math.nan], [-1.0]):
        with pytest.raises(ValueError):
            SampleDist(bad)
    with pytest.raises(ValueError):
        SampleDist([1.0, 2.0]).quantile_ci(1.0)


# -- Measurement pooling --------------------------------------------------------------------------
def _m(samples, seconds=2.0, energy=100.0, point=OperatingPoint(100, 2.0), **kw):
    d = SampleDist(samples)
    lat, ci = {}, {}
    for pct in PERCENTILES:
        e, lo, hi = d.quantile_ci(pct / 100)
        lat[pct], ci[pct] = e, (lo, hi)
    return Measurement(
        seconds=seconds,
        offered_qps=1000.0 * kw.pop("qps_scale", 1.0),
        achieved_qps=900.0,
        requests=len(samples),
        latency_us=lat,
        latency_ci_us=ci,
        energy_j=energy,
        point=point,
        energy_by_zone_j={"package-0": energy / 2, "package-1": energy / 2},
        latency_dist=d,
        **kw,
    )


def test_merge_all_sums_and_recomputes_percentiles():
    rng = np.random.default_rng(5)
    xs = [rng.exponential(MEAN_US, 2000) for _ in range(3)]
    ms = [_m(xs[0], 1.0, 50.0), _m(xs[1], 2.0, 90.0, qps_scale=2.0), _m(xs[2], 3.0, 160.0)]
    out = Measurement.merge_all(ms)
    pooled = SampleDist(np.concatenate(xs))
    assert out.seconds == 6.0 and out.energy_j == 300.0 and out.requests == 6000
    assert out.energy_by_zone_j == {"package-0": 150.0, "package-1": 150.0}
    assert out.offered_qps == pytest.approx((1000 * 1 + 2000 * 2 + 1000 * 3) / 6)
    assert out.achieved_qps == pytest.approx(900.0)
    for pct in PERCENTILES:
        e, lo, hi = pooled.quantile_ci(pct / 100)
        assert out.percentile(pct) == e and out.latency_ci_us[pct] == (lo, hi)
    assert out.latency_dist.count == 6000 and out.ci_known
    assert out.percentile_sem(99) < ms[0].percentile_sem(99)  # more samples: a tighter SEM for Ax
    assert Measurement.merge(ms[0], ms[1]).seconds == 3.0


def test_merge_refuses_windows_without_distribution_or_at_other_points():
    x = np.random.default_rng(6).exponential(MEAN_US, 500)
    a = _m(x)
    with pytest.raises(TunerError, match="no latency distribution"):
        Measurement.merge(a, Measurement.from_dict(a.to_dict()))
    with pytest.raises(TunerError, match="no latency distribution"):
        Measurement.merge(a, _m(x, ci_known=False))
    with pytest.raises(TunerError, match="same operating point"):
        Measurement.merge(a, _m(x, point=OperatingPoint(200, 2.0)))
    with pytest.raises(TunerError, match="no measurements"):
        Measurement.merge_all([])


def test_latency_dist_is_not_serialised_or_compared_and_raw_arrays_are_wrapped():
    x = np.random.default_rng(7).exponential(MEAN_US, 500)
    a = _m(x)
    d = a.to_dict()
    assert "latency_dist" not in d
    back = Measurement.from_dict(d)
    assert back.latency_dist is None and back == a
    raw = Measurement(
        **{
            **{
                k: getattr(a, k)
                for k in (
                    "seconds",
                    "offered_qps",
                    "achieved_qps",
                    "requests",
                    "latency_us",
                    "latency_ci_us",
                    "energy_j",
                    "point",
                )
            },
            "latency_dist": x,
        }
    )
    assert isinstance(raw.latency_dist, SampleDist) and raw.latency_dist.count == 500


# -- hosts populate it ----------------------------------------------------------------------------
def test_sim_measurements_carry_their_samples_and_merge():
    host = SimHost(seed=2, qps=300_000)
    host.set_itr(100)
    host.set_dvfs(2.0)
    a, b = host.measure(1.0), host.measure(1.0)
    assert isinstance(a.latency_dist, SampleDist) and a.latency_dist.count >= 1000
    assert a.latency_dist.quantile_ci(0.99)[0] == pytest.approx(a.percentile(99), rel=1e-5)
    both = Measurement.merge(a, b)
    assert both.latency_dist.count == a.latency_dist.count + b.latency_dist.count
    assert both.energy_j == pytest.approx(a.energy_j + b.energy_j)
    lo, hi = both.latency_ci_us[99.0]
    assert (hi - lo) < (a.latency_ci_us[99.0][1] - a.latency_ci_us[99.0][0])


def test_prober_window_carries_a_picklable_histogram():
    engine = ThreadProber(ProberConfig(isolation="thread"))  # not started: no thread, no socket
    hist, lag = new_histogram(), new_histogram()
    for v in np.random.default_rng(8).exponential(80_000, 3000):
        record_ns(hist, int(v) + 1)
    record_ns(lag, 1000)
    window = engine._summarise(hist, lag, 1.0, 3000, 0, 0, 0)
    assert isinstance(window.latency_dist, HdrDist) and window.latency_dist.count == 3000
    assert window.latency_dist.quantile_ci(0.99)[0] == pytest.approx(window.latency_us[99.0])
    back = pickle.loads(pickle.dumps(window))  # crosses the ProcessProber pipe like this
    assert back.latency_dist.quantile_ci(0.99) == window.latency_dist.quantile_ci(0.99)
    # a remote prober's hook JSON carries the histogram too
    parsed = parse_hook_json(__import__("json").dumps(hook_json(window)), "hook test")
    assert parsed.ci_known and parsed.latency_dist.count == 3000
    with pytest.raises(HostError, match="'hdr'"):
        parse_hook_json(__import__("json").dumps({**hook_json(window), "hdr": "garbage"}), "hook test")


def test_vectorised_histogram_recording_matches_record_value():
    from actuators.latency.dist import record_many

    rng = np.random.default_rng(9)
    values = np.concatenate(
        [
            rng.integers(1, 3000, 500),
            (rng.exponential(1e5, 5000) + 1).astype(np.int64),
            [1, 2047, 2048, 4095, 4096, 10**9, 60_000_000_000],
        ]
    )
    one, many = new_histogram(), new_histogram()
    for v in values.tolist():
        one.record_value(v)
    record_many(many, values)
    assert one.encode() == many.encode()
    assert (one.total_count, one.min_value, one.max_value) == (many.total_count, many.min_value, many.max_value)
    with pytest.raises(ValueError, match="range"):
        record_many(many, np.array([-1]))


def test_weighted_samples_behave_like_repeated_ones():
    # a sample standing for k requests is k equal observations: same estimate and CI as repeating it
    rng = np.random.default_rng(10)
    a, b = rng.exponential(MEAN_US, 400), rng.exponential(MEAN_US, 300)
    rep_a, rep_b = np.repeat(a, 3), np.repeat(b, 5)
    assert SampleDist(a, weight=3).count == 1200
    for q in (0.5, 0.9, 0.99):
        assert SampleDist(a, weight=3).quantile_ci(q) == SampleDist(rep_a).quantile_ci(q)
        pooled = SampleDist(a, weight=3).merge(SampleDist(b, weight=5))
        assert pooled.count == 2700
        assert pooled.quantile_ci(q) == SampleDist(np.concatenate([rep_a, rep_b])).quantile_ci(q)
        assert pooled.to_hdr().quantile_ci(q) == SampleDist(np.concatenate([rep_a, rep_b])).to_hdr().quantile_ci(q)
    with pytest.raises(ValueError, match="weight"):
        SampleDist(a, weight=0.5)


def test_raw_samples_in_a_measurement_stand_for_its_requests():
    x = np.random.default_rng(11).exponential(MEAN_US, 1000)
    base = _m(x)
    kw = {
        k: getattr(base, k)
        for k in ("seconds", "offered_qps", "achieved_qps", "latency_us", "latency_ci_us", "energy_j", "point")
    }
    many = Measurement(**kw, requests=50_000, latency_dist=x)
    few = Measurement(**kw, requests=100, latency_dist=x)  # fewer requests than samples: weight 1
    assert many.latency_dist.count == 50_000 and few.latency_dist.count == 1000
    lo, hi = many.latency_dist.quantile_ci(0.99)[1:]
    flo, fhi = few.latency_dist.quantile_ci(0.99)[1:]
    assert (hi - lo) < (fhi - flo) / 3  # ~sqrt(50) narrower
