"""SimHost against the dissertation's measurements; each tolerance is written next to its
assert and defined in `actuators.sim.calibration`.  Uses noise-free `expected()` (the replay oracle's view)."""

from __future__ import annotations

import pytest

from actuators.host import OperatingPoint
from actuators.sim import calibration as cal
from actuators.sim.host import SimHost


@pytest.fixture(scope="module")
def host() -> SimHost:
    return SimHost()


@pytest.fixture(scope="module")
def optima(host):
    return {qps: cal.optimal_static(host, qps) for qps in (200_000.0, 400_000.0, 600_000.0)}


def test_eq63_units_reading():
    # DVFS in GHz, Z in µs: table 5.1's (350, 1.3) at 200K sits just under the 500 µs SLA
    assert cal.eq63_p99_us(200_000, 350, 1.3) == pytest.approx(456.8, abs=0.5)
    assert cal.eq63_p99_us(600_000, 300, 1.7) == pytest.approx(504.8, abs=0.5)


@pytest.mark.parametrize("qps", [200_000.0, 400_000.0])
def test_energy_optimal_point_low_and_mid_load(optima, qps):
    pt, e = optima[qps]
    assert 250 <= pt.itr_us <= 450  # tolerance: ITR 250-450 µs (table 5.1: 350 / 300)
    assert pt.dvfs_ghz <= 1.4 + 1e-9  # tolerance: DVFS <= 1.4 GHz (table 5.1: 1.3)
    assert e.latency_us[99.0] <= cal.SLA_US


def test_energy_optimal_point_600k(optima):
    pt, e = optima[600_000.0]
    assert 200 <= pt.itr_us <= 400  # tolerance: ITR 200-400 µs (table 5.1: 300)
    assert 1.5 - 1e-9 <= pt.dvfs_ghz <= 1.9 + 1e-9  # tolerance: DVFS 1.5-1.9 GHz (table 5.1: 1.7)
    assert e.latency_us[99.0] <= cal.SLA_US


@pytest.mark.parametrize("qps", [200_000.0, 400_000.0, 600_000.0])
def test_power_at_the_energy_optimal_points(optima, qps):
    _, e = optima[qps]
    assert 45.0 <= e.power_w <= 80.0  # tolerance: 45-80 W (table 5.1: 1050-1471 J per 20 s = 52-74 W)


def test_idle_power(host):
    assert 20.0 <= cal.idle_power_w(host) <= 35.0  # tolerance: idle package power ~20-35 W


def test_linux_default_wastes_energy_400k(host, optima):
    _, e = optima[400_000.0]
    d = host.expected_default(400_000.0)
    assert 2.0 <= d.power_w / e.power_w <= 2.5  # tolerance: 2.0-2.5x ("over 2X in energy", ch. 5.2.2)
    assert d.latency_us[99.0] <= 500.0  # tolerance: Linux default meets the 500 µs SLA (fig. 7.6)


def test_linux_default_wastes_energy_200k(host, optima):
    _, e = optima[200_000.0]
    d = host.expected_default(200_000.0)
    assert 1.7 <= d.power_w / e.power_w <= 2.5  # tolerance: 1.7-2.5x (24 h trace saves ~50 %, ch. 7)
    assert d.latency_us[99.0] <= 500.0  # tolerance: Linux default meets the 500 µs SLA (fig. 7.6)


def test_max_qps_at_fastest_settings(host):
    q = cal.max_qps_meeting_sla(host, OperatingPoint(2, 2.9), step=10_000)
    assert 700_000 <= q <= 900_000  # tolerance: 700K-900K QPS (dissertation: Linux peaks near 800K)


@pytest.mark.xfail(
    strict=True,
    reason="known miss (docs/simulator.md): 600K <= 1.5 GHz violates the SLA where the fit "
    "does not (1.3 GHz saturates), 24/40 within; short ITR (2-10 µs, TX-completion interrupts double "
    "the wake-ups) runs high: 400K 37/44 ((2, 1.3) 263 vs 163 µs), 200K 42/44 ((2, 1.3) 102 vs 77)",
)
@pytest.mark.parametrize("qps", [200_000.0, 400_000.0, 600_000.0])
def test_p99_follows_eq63(host, qps):
    rows = cal.eq63_rows(host, qps)  # sampled ITR x DVFS points where the fit predicts <= 600 µs
    assert len(rows) >= 30
    bad = [
        (r.itr_us, r.dvfs_ghz, round(r.sim_p99_us), round(r.fit_p99_us))
        for r in rows
        if abs(r.rel_error) > cal.EQ63_TOLERANCE
    ]
    assert not bad  # tolerance: ±20 % of eq. 6.3 with table 6.1's Linux parameters


@pytest.mark.xfail(
    strict=True,
    reason="known miss (docs/simulator.md): even on SLA-meeting points, 600K ITR 2 at "
    ">= 2.1 GHz +42..+60 %; 400K (2, 1.3) +61 %, (2, 2.9) +40 % (60 vs 43 µs); 200K (2, 1.3) +31 %",
)
@pytest.mark.parametrize("qps", [200_000.0, 400_000.0, 600_000.0])
def test_p99_follows_eq63_on_sla_meeting_points(host, qps):
    # Comparison domain restricted to the fit's own data set: the dissertation fitted eq. 6.3 only on
    # configurations that met the SLA ("we filter out ITR and DVFS settings which violate the SLA in our data
    # set", ch. 6.1), so points where the simulated p99 exceeds 500 µs are outside what the fit describes.
    rows = cal.eq63_rows(host, qps, sla_us=cal.SLA_US)
    assert len(rows) >= 20
    bad = [
        (r.itr_us, r.dvfs_ghz, round(r.sim_p99_us), round(r.fit_p99_us))
        for r in rows
        if abs(r.rel_error) > cal.EQ63_TOLERANCE
    ]
    assert not bad  # tolerance: ±20 % of eq. 6.3 with table 6.1's Linux parameters


@pytest.mark.parametrize("qps", [200_000.0, 400_000.0, 600_000.0])
def test_p99_follows_eq63_where_batching_dominates(host, qps):
    # regression guard for what the model does reproduce (NOT the full eq. 6.3 target, see the xfails above):
    # wherever ITR >= 200 µs (batching sets the tail, phi * ITR), the p99 stays within ±20 % of eq. 6.3 at
    # every sampled point the fit puts <= 600 µs, SLA met or not.  Excluded at 600K: <= 1.5 GHz, where the
    # simulated core saturates (the fit: 470-576 µs), the price of the 600K optimum at >= 1.5 GHz.
    rows = [r for r in cal.eq63_rows(host, qps) if r.itr_us >= 200 and not (qps == 600_000.0 and r.dvfs_ghz <= 1.5)]
    assert len(rows) >= 12
    assert max(abs(r.rel_error) for r in rows) <= 0.20  # tolerance: ±20 % of eq. 6.3


@pytest.mark.parametrize("qps", [200_000.0, 400_000.0])
def test_sla_filter_only_drops_points_the_fit_also_puts_near_the_sla(host, qps):
    # the SLA filter must not hide disagreements at 200K/400K: every point it drops is one where the fit
    # itself predicts >= 450 µs
    dropped = [r for r in cal.eq63_rows(host, qps) if r.sim_p99_us > cal.SLA_US]
    assert all(r.fit_p99_us >= 450.0 for r in dropped)
