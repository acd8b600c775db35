"""The zoo's plants: each builds, is deterministic per seed, and differs from the bundled plant in the way it
states (`actuators.sim.plants.PLANTS`); the bundled plant is the simulator unchanged."""

from __future__ import annotations

import numpy as np
import pytest

from actuators.host import OperatingPoint
from actuators.sim.host import SimHost, make_sim_host
from actuators.sim.model import lock_hold_us
from actuators.sim.params import SimParams
from actuators.sim.plants import BUNDLED, PLANTS, plant
from core.errors import TunerError

P = OperatingPoint(300, 1.3)


def _window(name: str, seed: int) -> tuple[float, float]:
    host = make_sim_host(seed=seed, qps=20_000.0, plant=name)  # under the sample cap: no long-run cells
    host.set_itr(300)
    host.set_dvfs(1.3)
    m = host.measure(1.0)
    return m.energy_j, m.latency_us[99.0]


@pytest.mark.parametrize("name", list(PLANTS))
def test_each_plant_builds_and_is_deterministic_per_seed(name):
    assert _window(name, 3) == _window(name, 3)
    assert _window(name, 3) != _window(name, 4)
    assert plant(name).source and plant(name).differs


def test_the_bundled_plant_is_the_simulator_unchanged():
    a = make_sim_host(seed=5, qps=100_000.0, plant=BUNDLED)
    b = SimHost(seed=5, qps=100_000.0)
    for h in (a, b):
        h.set_itr(200)
        h.set_dvfs(2.0)
    assert a.measure(3.0) == b.measure(3.0)
    assert a.params == SimParams() and a.cores == 16


def test_an_unknown_plant_is_one_line_naming_the_known_ones():
    with pytest.raises(TunerError, match="plant 'nope': expected one of bundled, e5-2650"):
        make_sim_host(plant="nope")


def test_e5_2650_tops_out_at_2_6_ghz_with_0_71x_the_busy_power():
    b, e = PLANTS[BUNDLED].params, PLANTS["e5-2650"].params
    assert make_sim_host(plant="e5-2650").knobs().dvfs_ghz[-1] == 2.6
    ratio = float(e.busy_power_w(2.6)) / float(b.busy_power_w(2.9))
    assert ratio == pytest.approx(95 / 135, abs=0.02)


def test_ebbrt_halves_the_os_path_and_its_tail_is_lower():
    b, e = PLANTS[BUNDLED].params, PLANTS["ebbrt"].params
    assert (e.irq_cyc, e.stack_cyc, e.idle_cyc) == (b.irq_cyc / 2, b.stack_cyc / 2, b.idle_cyc / 2)
    assert e.app_cyc == b.app_cyc


def test_the_cliff_plant_holds_the_lock_longer_so_it_saturates_at_a_higher_frequency():
    b, c = PLANTS[BUNDLED].params, PLANTS["cliff-x1.5"].params
    assert c.lock_cyc == pytest.approx(1.5 * b.lock_cyc)
    # 600K: the frequency at which the lock reaches 80 % utilisation moves up
    f = [x / 10 for x in range(12, 30)]
    first_ok = [next(x for x in f if 0.6 * float(lock_hold_us(p, x)) <= 0.8) for p in (b, c)]
    assert first_ok[1] > first_ok[0]


def test_silo_has_4x_the_app_work_an_exponential_service_time_and_a_200k_day():
    b, s = PLANTS[BUNDLED], PLANTS["silo"]
    assert s.params.app_cyc == pytest.approx(4 * b.params.app_cyc) and s.params.app_shape == 1.0
    assert s.peak_qps == 200_000.0


def test_cores_32_has_twice_the_cores():
    assert make_sim_host(plant="cores-32").cores == 32
    assert make_sim_host(plant="cores-32", cores=8).cores == 8  # an explicit core count wins


def test_tail_heavy_has_a_higher_p99_at_the_same_point():
    lat = [make_sim_host(plant=n).expected([P], 200_000.0)[0].latency_us[99.0] for n in (BUNDLED, "tail-heavy")]
    assert lat[1] > lat[0] * 1.02


def test_flat_voltage_saves_less_at_low_frequency_and_matches_at_the_top():
    b, v = PLANTS[BUNDLED].params, PLANTS["flat-voltage"].params
    assert float(v.busy_power_w(1.2)) > 1.4 * float(b.busy_power_w(1.2))
    assert float(v.busy_power_w(2.9)) == pytest.approx(float(b.busy_power_w(2.9)), rel=0.06)


def _drifting_host(name: str) -> SimHost:
    host = make_sim_host(seed=0, qps=100_000.0, plant=name)
    host.set_itr(300)
    host.set_dvfs(1.3)
    return host


def _params_at(host: SimHost, clock_s: float) -> SimParams:
    """The host's constants in a 1 s window measured once its simulated clock has reached `clock_s`."""
    host.measure(clock_s - host.clock_s())
    host.measure(1.0)
    return host.params


def test_the_drifting_plant_changes_its_constants_with_the_simulated_clock():
    host = _drifting_host("drift")
    before = host.params
    assert before == SimParams()
    assert _params_at(host, 4 * 3600.0 + 1).app_cyc == pytest.approx(before.app_cyc * 1.06)
    assert _params_at(host, 24 * 3600.0 + 2).app_cyc == pytest.approx(before.app_cyc * 1.30)


def test_the_release_plant_steps_its_app_work_up_at_8h_and_back_at_16h():
    host = _drifting_host("release")
    before = host.params
    assert _params_at(host, 8 * 3600.0 - 2) == before  # 07:59:59
    during = _params_at(host, 8 * 3600.0 + 1)
    assert during.app_cyc == pytest.approx(before.app_cyc * 1.25)
    assert during.app_mem == pytest.approx(before.app_mem * 1.25)
    assert _params_at(host, 16 * 3600.0 + 2) == before


def test_lognormal_app_work_keeps_the_mean_and_cv_and_a_heavier_far_tail_than_the_gamma():
    rng = np.random.default_rng(0)
    logn = SimParams(app_shape=1.0, app_dist="lognormal").app_work(rng, 400_000)
    gam = SimParams(app_shape=1.0).app_work(np.random.default_rng(0), 400_000)
    assert logn.mean() == pytest.approx(1.0, rel=0.01)
    assert logn.std() == pytest.approx(1.0, rel=0.05)  # CV 1/sqrt(shape)
    q_l, q_g = np.quantile(logn, [0.99, 0.999]), np.quantile(gam, [0.99, 0.999])
    assert q_l[1] / q_l[0] > 1.2 * q_g[1] / q_g[0]  # p99.9 / p99 at the same CV: 1.9 vs 1.5


def test_an_unknown_app_work_family_is_refused():
    with pytest.raises(ValueError, match="app_dist 'pareto': expected gamma or lognormal"):
        SimParams(app_dist="pareto").app_work(np.random.default_rng(0), 3)


def test_the_lognormal_plant_has_a_higher_tail_than_the_bundled_and_the_same_mean_work():
    b, n = PLANTS[BUNDLED].params, PLANTS["lognormal"].params
    assert (n.app_dist, n.app_cyc, n.app_mem) == ("lognormal", b.app_cyc, b.app_mem)
    at = OperatingPoint(100, 1.5)
    lat = [make_sim_host(plant=x).expected([at], 200_000.0)[0].latency_us for x in (BUNDLED, "lognormal")]
    assert lat[1][99.0] > lat[0][99.0] * 1.02
    assert lat[1][99.9] > lat[0][99.9] * 1.05


def test_the_steal_plant_slows_every_cycle_count_in_three_steps_that_stay():
    host = _drifting_host("steal")
    before = host.params
    assert _params_at(host, 6 * 3600.0 - 2) == before  # 05:59:59
    for until_s, share in ((6 * 3600.0 + 1, 0.05), (12 * 3600.0 + 1, 0.10), (24 * 3600.0, 0.15)):
        now = _params_at(host, until_s)
        for name in ("irq_cyc", "stack_cyc", "app_cyc", "poll_cyc", "idle_cyc", "lock_cyc"):
            assert getattr(now, name) == pytest.approx(getattr(before, name) / (1 - share)), name
        assert (now.app_mem, now.irq_mem) == (before.app_mem, before.irq_mem)
