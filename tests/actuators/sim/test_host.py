"""SimHost: Host/LoadControl conformance, knob refusal, modes, determinism, noise vs window, counters, CIs."""

from __future__ import annotations

import math
import statistics

import pytest

from actuators.host import PERCENTILES, Host, LoadControl, Measurement, OperatingPoint, apply_point
from actuators.sim.host import ENERGY_UNIT_J, ENERGY_WRAP, Expected, SimHost
from core.errors import KnobRangeError, TunerError
from tuner.hosts import make_host


def test_make_host_sim_builds_a_host_with_load_control():
    host = make_host("sim", seed=3, cores=16, qps=250_000)
    assert isinstance(host, Host) and isinstance(host, LoadControl)
    assert host.name == "sim"
    assert abs(host.offered_qps() - 250_000) < 250_000 * 0.01  # small reading noise only


def test_unknown_factory_option_is_one_line_error():
    with pytest.raises(
        TunerError,
        match=r"^--host 'sim': option turbo: not an option of host 'sim' \(accepted: seed, cores, qps, cache, load_schedule, plant\)$",
    ):
        make_host("sim", turbo=True)
    with pytest.raises(TunerError, match="cores"):
        SimHost(cores=0)
    with pytest.raises(TunerError, match="offered load"):
        SimHost().set_offered_qps(-5)


def test_knob_space_is_ixgbe_and_e5_2690():
    k = SimHost().knobs()
    assert k.itr_us[0] == 2 and k.itr_us[-1] == 1022 and len(k.itr_us) == 511
    assert k.dvfs_ghz == tuple(round(1.2 + 0.1 * i, 1) for i in range(18))


def test_starts_in_linux_default_mode_and_restore_returns_to_it():
    host = SimHost(seed=1)
    assert host.point() is None
    assert host.measure(0.05).point is None
    host.set_itr(300)
    assert host.point() is None  # DVFS still governed by ondemand
    host.set_dvfs(1.3)
    assert host.point() == OperatingPoint(300, 1.3)
    assert host.measure(0.05).point == OperatingPoint(300, 1.3)
    host.restore()
    host.restore()  # idempotent
    assert host.point() is None
    assert apply_point(host, OperatingPoint(250, 1.7)) == OperatingPoint(250, 1.7)
    assert host.point() == OperatingPoint(250, 1.7)


@pytest.mark.parametrize("itr", [0, 1, 3, 1024, 2000, -2, 2.0, True, "300", None])
def test_bad_itr_refused_before_anything_changes(itr):
    host = SimHost(seed=1)
    host.set_itr(100)
    host.set_dvfs(2.0)
    with pytest.raises(KnobRangeError):
        host.set_itr(itr)
    assert host.point() == OperatingPoint(100, 2.0)


@pytest.mark.parametrize("ghz", [1.1, 1.25, 3.0, 0, -1, "fast", None, float("nan")])
def test_bad_dvfs_refused_before_anything_changes(ghz):
    host = SimHost(seed=1)
    with pytest.raises(KnobRangeError):
        host.set_dvfs(ghz)
    assert host.point() is None
    host.set_itr(100)
    with pytest.raises(KnobRangeError):
        host.set_dvfs(ghz)
    assert host.point() is None  # still in default DVFS mode


def _run(seed: int, with_expected: bool = False) -> list[Measurement]:
    host = SimHost(seed=seed, qps=300_000)
    out = [host.measure(0.2)]
    host.set_itr(200)
    host.set_dvfs(1.5)
    if with_expected:
        host.expected([OperatingPoint(300, 1.3)], 300_000)
        host.expected_default(300_000)
    out.append(host.measure(0.5))
    host.set_offered_qps(500_000)
    out.append(host.measure(1.0))
    return out


def test_deterministic_for_a_seed_and_expected_does_not_disturb_it():
    a, b, c = _run(7), _run(7), _run(7, with_expected=True)
    assert a == b == c
    assert _run(8) != a


def test_measure_fills_every_field_consistently():
    host = SimHost(seed=2, qps=400_000)
    host.set_itr(300)
    host.set_dvfs(1.3)
    m = host.measure(2.0)
    assert set(m.latency_us) == set(PERCENTILES) == set(m.latency_ci_us)
    values = [m.latency_us[p] for p in PERCENTILES]
    assert values == sorted(values) and values[0] > 0
    for p in PERCENTILES:
        lo, hi = m.latency_ci_us[p]
        assert lo <= m.latency_us[p] <= hi  # CI brackets the estimate
        assert hi > lo
    assert m.seconds == 2.0 and m.point == OperatingPoint(300, 1.3)
    assert abs(m.requests - 800_000) < 800_000 * 0.05  # Poisson count of 2 s at 400K (+ burstiness)
    assert abs(m.achieved_qps - m.offered_qps) < 1e-6  # below saturation everything offered is served
    assert set(m.energy_by_zone_j) == {"package-0", "package-1"}
    assert sum(m.energy_by_zone_j.values()) == pytest.approx(m.energy_j)
    assert 40 < m.power_w < 90
    assert host.clock_s() == 2.0


def test_overload_serves_less_than_offered_and_blows_the_tail():
    host = SimHost(seed=2, qps=1_300_000)
    host.set_itr(2)
    host.set_dvfs(2.9)
    m = host.measure(1.0)
    assert m.achieved_qps < 0.9 * m.offered_qps
    assert m.latency_us[99.0] > 1000


def test_idle_server_measures_zero_requests_at_idle_power():
    host = SimHost(seed=4, qps=0)
    m = host.measure(1.0)
    assert m.requests == 0 and m.achieved_qps == 0.0
    assert 20.0 <= m.power_w <= 35.0
    assert all(v > 0 for v in m.latency_us.values())  # the model's sample of a near-idle core


def test_core_saturation_at_low_clock_serves_less_than_offered():
    host = SimHost(seed=2, qps=700_000)
    apply_point(host, OperatingPoint(300, 1.2))
    m = host.measure(1.0)
    assert m.achieved_qps < 0.97 * m.offered_qps
    assert m.latency_us[99.0] > 1000


def test_bad_window_refused():
    host = SimHost()
    for bad in (0, -1, float("inf"), float("nan"), "x"):
        with pytest.raises(TunerError, match="window"):
            host.measure(bad)


def _p99_spread(host: SimHost, seconds: float, n: int) -> float:
    vals = [host.measure(seconds).latency_us[99.0] for _ in range(n)]
    return statistics.pstdev(vals) / statistics.fmean(vals)


def test_short_windows_at_low_qps_are_noisier_than_long_ones():
    host = SimHost(seed=11, qps=100_000)
    host.set_itr(300)
    host.set_dvfs(1.5)
    short = _p99_spread(host, 0.01, 12)  # ~1000 requests each
    long = _p99_spread(host, 2.0, 12)  # sample capped, load burstiness averaged
    assert short > 2 * long
    ci_short = host.measure(0.01).latency_ci_us[99.0]
    ci_long = host.measure(2.0).latency_ci_us[99.0]
    assert ci_short[1] - ci_short[0] > 2 * (ci_long[1] - ci_long[0])


def test_long_windows_converge_to_expected():
    host = SimHost(seed=5, qps=400_000)
    pt = OperatingPoint(300, 1.3)
    apply_point(host, pt)
    exp = host.expected([pt], 400_000)[0]
    m = host.measure(60.0)
    assert m.latency_us[99.0] == pytest.approx(exp.latency_us[99.0], rel=0.05)
    assert m.latency_us[50.0] == pytest.approx(exp.latency_us[50.0], rel=0.05)
    assert m.power_w == pytest.approx(exp.power_w, rel=0.02)


def test_default_mode_converges_to_expected_default():
    host = SimHost(seed=5, qps=200_000)
    exp = host.expected_default(200_000)
    m = host.measure(20.0)
    assert m.power_w == pytest.approx(exp.power_w, rel=0.03)
    assert m.latency_us[99.0] == pytest.approx(exp.latency_us[99.0], rel=0.10)


def test_energy_counter_wraps_are_read_correctly_over_a_long_hold():
    host = SimHost(seed=9, qps=600_000)
    apply_point(host, OperatingPoint(300, 1.7))
    before = host.energy_counters()
    m = host.measure(3600.0)
    after = host.energy_counters()
    # each zone moves by far more than one wrap (2**32 units = 65.5 kJ) in an hour at ~35 W per package
    per_zone_units = {z: round(e / ENERGY_UNIT_J) for z, e in m.energy_by_zone_j.items()}
    for z, units in per_zone_units.items():
        assert units > ENERGY_WRAP  # would be lost by a single before/after read
        assert (before[z] + units) % ENERGY_WRAP == after[z]
    exp = host.expected([OperatingPoint(300, 1.7)], 600_000)[0]
    assert m.energy_j == pytest.approx(exp.power_w * 3600.0, rel=0.02)


def test_expected_is_consistent_interpolated_and_monotone():
    host = SimHost()
    pts = [OperatingPoint(300, f) for f in (1.3, 1.7, 2.9)] + [OperatingPoint(110, 1.5)]
    exp = host.expected(pts, 400_000)
    assert all(isinstance(e, Expected) and set(e.latency_us) == set(PERCENTILES) for e in exp)
    for e in exp:
        v = [e.latency_us[p] for p in PERCENTILES]
        assert v == sorted(v)
    assert exp[0].power_w < exp[1].power_w < exp[2].power_w  # faster clock, more power
    assert exp[0].latency_us[99.0] > exp[2].latency_us[99.0]  # ... and lower tail
    lo, hi = host.expected([OperatingPoint(100, 1.5), OperatingPoint(120, 1.5)], 400_000)
    mid = exp[3]
    assert (
        min(lo.latency_us[99.0], hi.latency_us[99.0])
        <= mid.latency_us[99.0]
        <= max(lo.latency_us[99.0], hi.latency_us[99.0])
    )
    with pytest.raises(KnobRangeError):
        host.expected([OperatingPoint(3, 1.5)], 400_000)
    d = host.expected_default(400_000)
    assert d.latency_us[99.0] < 250 and d.power_w > exp[0].power_w


def test_adaptive_itr_is_linux_5_4_low_latency_mode():
    from actuators.sim.model import SimParams, _ixgbe_size_itr_us, adaptive_itr_us

    p = SimParams()
    # ixgbe_update_itr size table, latency mode halves: 120 B -> (120*40+2720)/2 = 3760 -> 16 µs; 420 B -> 36 µs
    assert _ixgbe_size_itr_us(120, True) == 16 and _ixgbe_size_itr_us(420, True) == 36
    assert _ixgbe_size_itr_us(60, False) == 20 and _ixgbe_size_itr_us(3000, False) == 126
    for qps in (50_000, 200_000, 400_000, 800_000):  # < 4 packets per 16 µs period: stays in latency mode
        assert adaptive_itr_us(p, qps, 16) == 16.0
    assert adaptive_itr_us(p, 20_000_000, 16) > 16.0  # bulk regime only at absurd per-queue rates


def test_tx_only_interrupts_alternate_in_runs_of_empty_periods():
    import numpy as np

    from actuators.sim.kernel import period_events

    counts = np.array([[2, 0, 0, 0, 1, 0, 3, 0, 0]])
    empty, arrival_ends, events = period_events(counts, True)
    assert empty.tolist() == [[False, True, True, True, False, True, False, True, True]]
    # in each run of empty periods: TX-only first, then one ending on an arrival, alternating
    assert (empty & ~arrival_ends).tolist() == [[False, True, False, True, False, True, False, True, False]]
    assert events.tolist() == [[2, 0, 1, 0, 1, 0, 3, 0, 1]]
    # without TX interrupts every empty period ends on the arrival that fires the next interrupt
    empty, arrival_ends, events = period_events(counts, False)
    assert arrival_ends.tolist() == empty.tolist()
    assert events.tolist() == [[2, 1, 1, 1, 1, 1, 3, 1, 1]]


def test_pstate_governor_runs_faster_under_more_load_and_idles_at_minimum():
    import numpy as np

    from actuators.sim.model import SimParams, pstate_occupancy

    p = SimParams()
    freqs = np.array(SimHost().knobs().dvfs_ghz)
    mean_f = {
        q: float(np.dot(pstate_occupancy(p, q / 16e6, 16.0, freqs, 400, np.random.default_rng(1)), freqs))
        for q in (1.0, 200_000.0, 400_000.0)
    }
    assert mean_f[1.0] == pytest.approx(1.2)  # idle: lowest P-state
    assert 1.2 < mean_f[200_000.0] < mean_f[400_000.0] <= 2.9


def _sample_p99s(qps: float, pt: OperatingPoint, n: int, requests: int = 60_000) -> list[float]:
    import numpy as np

    from actuators.sim.host import CHAINS
    from actuators.sim.model import SimParams, simulate

    p = SimParams()
    return [
        float(
            np.percentile(
                simulate(
                    p, qps / 16e6, pt.itr_us, np.array([pt.dvfs_ghz]), requests, CHAINS, np.random.default_rng(1000 + s)
                ).latency_us[0],
                99.0,
            )
        )
        for s in range(n)
    ]


@pytest.mark.parametrize(
    "qps,pt",
    [
        (600_000.0, OperatingPoint(246, 1.6)),
        (600_000.0, OperatingPoint(100, 1.7)),
        (400_000.0, OperatingPoint(318, 1.2)),
        (200_000.0, OperatingPoint(384, 1.2)),
    ],
)
def test_expected_is_the_long_run_value_of_independent_samples(qps, pt):
    # bias check without the shrink: independent 60K-request samples (what one measure() simulates, warm-up
    # included) at the nominal load; their mean p99 must lie within 3 standard errors of expected(), counting
    # expected()'s own standard error too (a 60K-sample p99 is itself biased by ~+0.5 % near saturation)
    exp = SimHost().expected([pt], qps)[0]
    vals = _sample_p99s(qps, pt, 12)
    se = math.hypot(statistics.stdev(vals) / math.sqrt(len(vals)), exp.p99_se_us)
    assert abs(statistics.fmean(vals) - exp.latency_us[99.0]) <= 3 * se + 0.005 * exp.latency_us[99.0]


@pytest.mark.parametrize(
    "qps,pt",
    [
        (600_000.0, OperatingPoint(246, 1.6)),
        (600_000.0, OperatingPoint(100, 1.7)),
        (400_000.0, OperatingPoint(318, 1.2)),
        (200_000.0, OperatingPoint(384, 1.2)),
    ],
)
def test_mean_of_20s_windows_matches_expected(qps, pt):
    host = SimHost(seed=21, qps=qps)
    apply_point(host, pt)
    exp = host.expected([pt], qps)[0]
    vals = [host.measure(20.0).latency_us[99.0] for _ in range(16)]
    se = statistics.stdev(vals) / math.sqrt(len(vals))
    assert abs(statistics.fmean(vals) - exp.latency_us[99.0]) <= 3 * se + 0.5  # 3 SE (+0.5 µs: burst convexity)


def test_long_windows_keep_getting_less_noisy():
    sd, width = {}, {}
    for seconds in (20.0, 3600.0):
        host = SimHost(seed=31, qps=600_000)
        apply_point(host, OperatingPoint(246, 1.6))
        ms = [host.measure(seconds) for _ in range(8)]
        sd[seconds] = statistics.stdev(m.latency_us[99.0] for m in ms)
        width[seconds] = statistics.fmean(m.latency_ci_us[99.0][1] - m.latency_ci_us[99.0][0] for m in ms)
        assert all(m.latency_ci_us[99.0][0] <= m.latency_us[99.0] <= m.latency_ci_us[99.0][1] for m in ms)
    ratio = math.sqrt(20.0 / 3600.0)  # 1/sqrt(requests)
    assert width[3600.0] == pytest.approx(width[20.0] * ratio, rel=0.35)
    assert sd[3600.0] < sd[20.0] * 3 * ratio


def test_expected_cells_do_not_depend_on_what_else_is_asked():
    pts = [OperatingPoint(246, 1.6), OperatingPoint(110, 2.0)]
    alone = SimHost().expected(pts, 600_000)
    host = SimHost(seed=9)  # another host (its own cache), another seed: same long-run model
    host.expected([OperatingPoint(i, f) for i in (240, 100) for f in (1.3, 1.6, 2.0, 2.9)], 600_000)
    together = host.expected(pts, 600_000)
    assert [e.latency_us for e in alone] == [e.latency_us for e in together]
    assert [e.power_w for e in alone] == pytest.approx([e.power_w for e in together], rel=1e-12)
    assert alone[0].p99_se_us > 0
