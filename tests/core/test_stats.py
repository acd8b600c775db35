"""Order-statistic quantile CIs: coverage against known distributions, edge cases."""

import math

import numpy as np
import pytest

from core.stats import (
    percentiles_inplace,
    quantile_ci_achievable,
    quantile_ci_ranks,
    quantile_with_ci,
    relative_half_width,
)


@pytest.mark.parametrize("q,n", [(0.99, 2000), (0.5, 200), (0.9, 500)])
def test_ci_covers_true_quantile_at_least_nominal_rate(q, n):
    # Exponential(1): true q-quantile is -ln(1-q). Over 400 independent samples of size n, a 95 % CI
    # must cover it in at least ~92 % of cases (binomial noise of the coverage estimate itself).
    rng = np.random.default_rng(7)
    truth = -math.log(1 - q)
    covered = 0
    runs = 400
    for _ in range(runs):
        _, lo, hi = quantile_with_ci(rng.exponential(size=n), q)
        covered += lo <= truth <= hi
    assert covered / runs >= 0.92


def test_ci_is_not_absurdly_wide():
    # Conservative but not vacuous: coverage should also be below ~99.5 % for a large sample.
    rng = np.random.default_rng(11)
    truth = -math.log(1 - 0.99)
    covered = sum(
        lo <= truth <= hi for _, lo, hi in (quantile_with_ci(rng.exponential(size=5000), 0.99) for _ in range(400))
    )
    assert covered / 400 <= 0.995


def test_ranks_bracket_the_point_estimate_and_shrink_with_n():
    lo1, hi1 = quantile_ci_ranks(1000, 0.99)
    lo2, hi2 = quantile_ci_ranks(100000, 0.99)
    assert lo1 < 990 < hi1
    assert (hi2 - lo2) / 100000 < (hi1 - lo1) / 1000


def test_small_samples_flagged_not_achievable():
    # p99 needs ~ln(0.025)/ln(0.99) = 367 samples before a two-sided 95 % CI exists.
    assert not quantile_ci_achievable(300, 0.99)
    assert quantile_ci_achievable(400, 0.99)
    # With 10 samples the upper rank runs off the end and is clamped to the maximum.
    assert quantile_ci_ranks(10, 0.99) == (8, 9)


def test_known_values_uniform():
    x = np.arange(1, 1001, dtype=float)  # sorted 1..1000
    est, lo, hi = quantile_with_ci(x, 0.5, presorted=True)
    assert est == 500.0
    assert 460 <= lo < 500 < hi <= 540


def test_bad_arguments():
    with pytest.raises(ValueError):
        quantile_ci_ranks(0, 0.5)
    with pytest.raises(ValueError):
        quantile_ci_ranks(10, 1.0)
    assert relative_half_width(0.0, 1, 2) == math.inf
    assert relative_half_width(100.0, 90, 110) == pytest.approx(0.1)


@pytest.mark.parametrize("n", [1, 2, 3, 7, 100, 101, 1001, 40_000, 240_001])
@pytest.mark.parametrize("qs", [(50.0, 90.0, 95.0, 99.0, 99.9), (0.0, 100.0, 37.5), (99.99,)])
def test_percentiles_inplace_equal_numpys_bit_for_bit(n: int, qs: tuple[float, ...]) -> None:
    rng = np.random.default_rng(n)
    for x in (rng.exponential(size=n) * 100.0, np.round(rng.exponential(size=n) * 3.0)):  # ties too
        want = np.percentile(x, qs)
        work = x.copy()
        assert np.array_equal(percentiles_inplace(work, qs), want)
        assert np.array_equal(np.sort(work), np.sort(x))  # reordered, nothing lost


def test_percentiles_inplace_refuses_an_empty_sample() -> None:
    with pytest.raises(ValueError, match="empty"):
        percentiles_inplace(np.array([]), (99.0,))


def test_describe_is_mean_count_and_range_without_nones() -> None:
    from core.stats import describe

    assert describe([3.0, None, 1.0, 2.0]) == {"mean": 2.0, "n": 3, "min": 1.0, "max": 3.0}
    assert describe(iter([5])) == {"mean": 5.0, "n": 1, "min": 5.0, "max": 5.0}  # any iterable, ints taken
    assert describe([None]) is None and describe([]) is None
