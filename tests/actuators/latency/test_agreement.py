"""Comparing two clients' tails over the same seconds (block-bootstrap CIs) and the prober's sample log."""

from __future__ import annotations

import io

import numpy as np

from actuators.latency.agreement import compare, effective_samples
from actuators.latency.dist import record_many
from actuators.latency.engine import new_histogram
from actuators.latency.hlog import LAG_TAG, RESPONSE_TAG, SERVICE_TAG, read_log, write_sample_log


def _seconds(rng: np.random.Generator, n_sec: int, per_sec: int, scale_us: float, burst: int | None = None) -> dict:
    out = {}
    for s in range(n_sec):
        values = rng.exponential(scale_us * 1000, per_sec).astype(np.int64) + 1000
        if burst is not None and s == burst:  # one stalled second holds the whole tail
            values[: per_sec * 3 // 10] += 20_000_000
        h = new_histogram()
        record_many(h, values)
        out[1_000_000 + s] = h
    return out


def test_same_distribution_agrees_and_a_3x_slower_one_does_not() -> None:
    rng = np.random.default_rng(1)
    a, b = _seconds(rng, 20, 2000, 50.0), _seconds(rng, 20, 500, 50.0)
    same = compare(a, b, 99.0, resamples=500)
    assert same.seconds == 20 and same.cis_overlap and same.diff_contains_zero
    slow = compare(a, _seconds(rng, 20, 500, 150.0), 99.0, resamples=500)
    assert not slow.cis_overlap and slow.diff_ci_us[1] < 0


def test_a_bursty_tail_widens_the_block_ci_beyond_the_iid_one() -> None:
    """One stalled second out of 20 holds the p99: resampling seconds shows how uncertain that is, while the
    order-statistic CI (as if 40,000 samples were independent) stays narrow."""
    rng = np.random.default_rng(2)
    a = _seconds(rng, 20, 2000, 50.0, burst=7)
    r = compare(a, a, 99.0, resamples=500)
    block, iid = r.a.ci_us, r.a.iid_ci_us
    assert (block[1] - block[0]) > 10 * (iid[1] - iid[0])
    assert effective_samples(r.a.count, iid, block) < r.a.count / 100


def test_compare_needs_common_seconds() -> None:
    rng = np.random.default_rng(3)
    a = _seconds(rng, 5, 100, 50.0)
    b = {s + 100: h for s, h in a.items()}
    try:
        compare(a, b)
    except ValueError as exc:
        assert "3 seconds" in str(exc)
    else:  # pragma: no cover
        raise AssertionError("no common seconds must be refused")


def test_sample_log_bins_latency_response_service_and_lag_per_second(tmp_path) -> None:
    base = 1_700_000_000.0
    ns = int(base * 1e9)
    # (intended, sent, done, received): two probes in second 0, one in second 1 sent 2 ms late
    rows = [
        (ns + 100_000_000, ns + 100_010_000, ns + 100_300_000, ns + 100_090_000),
        (ns + 600_000_000, ns + 600_005_000, ns + 600_200_000, ns + 600_060_000),
        (ns + 1_100_000_000, ns + 1_102_000_000, ns + 1_102_500_000, ns + 1_102_100_000),
    ]
    out = io.StringIO()
    assert write_sample_log(out, rows, base) == 2
    path = tmp_path / "p.hlog"
    path.write_text(out.getvalue())
    log = read_log(path)
    lat, resp, svc, lag = (log.by_tag[t] for t in (None, RESPONSE_TAG, SERVICE_TAG, LAG_TAG))
    s0, s1 = int(base), int(base) + 1
    assert lat[s0].get_total_count() == 2 and lat[s1].get_total_count() == 1
    assert abs(lat[s1].get_max_value() - 2_500_000) <= 2_500  # from the intended time (3 significant digits)
    assert abs(resp[s1].get_max_value() - 500_000) <= 500  # from the actual send
    assert abs(svc[s0].get_max_value() - 80_000) <= 80  # to the kernel's receive stamp, probes sent on time only
    assert svc[s0].get_total_count() == 2 and svc[s1].get_total_count() == 0  # the 2 ms late one is left out
    assert abs(lag[s1].get_max_value() - 2_000_000) <= 2_000
