"""SimHost: Host/LoadControl conformance, knob refusal, modes, determinism, noise vs window, counters, CIs."""

from __future__ import annotations

import statistics

import pytest

from actuators.host import PERCENTILES, Host, LoadControl, Measurement, OperatingPoint, apply_point
from actuators.sim import ENERGY_UNIT_J, ENERGY_WRAP, Expected, SimHost, make_sim_host
from tuner.errors import KnobRangeError, TunerError
from tuner.hosts import make_host


def test_make_host_sim_builds_a_host_with_load_control():
    host = make_host("sim", seed=3, cores=16, qps=250_000)
    assert isinstance(host, Host) and isinstance(host, LoadControl)
    assert host.name == "sim"
    assert abs(host.offered_qps() - 250_000) < 250_000 * 0.01  # small reading noise only


def test_unknown_factory_option_is_one_line_error():
    with pytest.raises(TunerError, match="unknown option"):
        make_sim_host(turbo=True)
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
    assert min(lo.latency_us[99.0], hi.latency_us[99.0]) <= mid.latency_us[99.0] <= max(lo.latency_us[99.0],
                                                                                          hi.latency_us[99.0])
    with pytest.raises(KnobRangeError):
        host.expected([OperatingPoint(3, 1.5)], 400_000)
    d = host.expected_default(400_000)
    assert d.latency_us[99.0] < 250 and d.power_w > exp[0].power_w
