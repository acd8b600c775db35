"""`SimHost`: a simulated 16-core E5-2690 + 82599 memcached server (the dissertation's Linux host).

The mechanisms are in `actuators.sim_model` (ITR batching per fig. 2.4, fixed interrupt work, frequency-
scaled + memory-bound service, per-core FIFO queueing, menu-governor C-states with exit latencies, package
power = static + uncore + f V^2 while busy + C-state power while idle); this module holds the host state
(knobs, offered load, simulated clock, RAPL-like counters) and turns a simulated run into a `Measurement`.

Modes: the host starts in **Linux default mode** -- ixgbe adaptive ITR and an ondemand governor -- and
`point()` is None.  `set_itr` / `set_dvfs` make that knob static; `point()` is the `OperatingPoint` once
both are.  `restore()` goes back to Linux default mode.

Noise and cost (honest about the bounding): `measure(seconds)` never sleeps and never simulates every
request of a long window.  It draws the window's request count (Poisson), then simulates a bounded sample
of min(requests, `SAMPLE_CAP`) requests (at least `SAMPLE_MIN`) on 4 independent cores (carrying 1 -/+ the
RSS imbalance of the mean load) and scales their busy time and C-state residency to all cores and the whole
window (energy therefore carries the sample's small noise too, ~1 % at the cap).  Latency percentiles and their order-statistic CIs come from
that sample, so their noise falls like 1/sqrt(requests) until the cap (≈ 0.3 s at 200K QPS, 0.1 s at 600K)
and stays at the cap's level for longer windows.  On top of that the offered load of each window carries
client burstiness: a relative error of `BURST_SIGMA` / sqrt(seconds) (independent 1 s epochs averaged),
which keeps shrinking with window length and also moves energy.  Overloaded points (utilisation >= 1)
report the latency of the simulated sample, a lower bound of what an unbounded queue would reach.
In Linux default mode the ondemand governor is stepped every 10 ms for at most 2000 periods (longer windows
use those 2000 as a sample of their frequency occupancy).  The RAPL-like 32-bit counters (one per package,
15.3 µJ units) are read every `COUNTER_READ_S` simulated seconds so an hour-long window sees every wrap.
Deterministic: the same seed and the same call sequence give the same results; `expected*()` use their own
fixed random stream and never disturb it.
"""

from __future__ import annotations

import bisect
import math
from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from actuators.energy import counter_delta
from actuators.host import PERCENTILES, KnobSpace, Measurement, OperatingPoint
from actuators.sim_model import (
    SimParams,
    adaptive_itr_us,
    lock_utilisation,
    ondemand_occupancy,
    package_power_w,
    simulate,
)
from tuner.errors import TunerError
from tuner.stats import quantile_with_ci

SAMPLE_CAP = 60_000  # simulated requests per measure() at most
SAMPLE_MIN = 200  # and at least (tiny windows still get a latency estimate; `requests` stays the true count)
CHAINS = 4  # independent cores simulated per run
BURST_SIGMA = 0.02  # relative offered-load fluctuation of a 1 s epoch
MIN_MODEL_QPS = 1.0  # the model runs an idle (0 QPS) server at this rate
QPS_READ_SIGMA = 0.002  # relative noise of offered_qps() readings
ENERGY_UNIT_J = 1.0 / 2**16  # RAPL energy-status unit of the E5-2690 (15.3 µJ)
ENERGY_WRAP = 2**32  # 32-bit MSR_PKG_ENERGY_STATUS
COUNTER_READ_S = 60.0  # the simulated reader polls the counters this often (never misses a wrap)
EXPECTED_REQUESTS = 40_000  # sample behind expected() (common random numbers)
EXPECTED_SEED = 20230501


@dataclass(frozen=True)
class Expected:
    """Noise-free long-run latency percentiles (µs) and package power (W) of one operating point."""

    latency_us: dict[float, float]
    power_w: float


#: ITR values (µs) at which `expected()` simulates; other values are interpolated linearly between them.
ITR_ANCHORS: tuple[int, ...] = (2, 4, 6, 8, 10, 12, 16, 20, 26, 32, 40, 50, 60, 70, 80, 100) + tuple(
    range(120, 1000, 24)) + (1022,)


def _bracket(itr: int) -> tuple[int, int, float]:
    """Anchors around `itr` and the interpolation weight of the upper one."""
    i = bisect.bisect_left(ITR_ANCHORS, itr)
    if i < len(ITR_ANCHORS) and ITR_ANCHORS[i] == itr:
        return itr, itr, 0.0
    i = min(max(i, 1), len(ITR_ANCHORS) - 1)
    lo, hi = ITR_ANCHORS[i - 1], ITR_ANCHORS[i]
    return lo, hi, (itr - lo) / (hi - lo)


def dvfs_steps(lo: float = 1.2, hi: float = 2.9, step: float = 0.1) -> tuple[float, ...]:
    """The E5-2690's P-states in GHz."""
    n = int(round((hi - lo) / step)) + 1
    return tuple(round(lo + i * step, 1) for i in range(n))


class SimHost:
    """A simulated memcached host implementing `actuators.host.Host` and `LoadControl`."""

    name = "sim"

    def __init__(self, seed: int = 0, cores: int = 16, qps: float = 200_000.0,
                 params: SimParams | None = None) -> None:
        if isinstance(cores, bool) or not isinstance(cores, int) or cores < 1:
            raise TunerError(f"sim: cores {cores!r}: expected a positive integer")
        self._p = params or SimParams()
        self._cores = cores
        self._seed = int(seed)
        self._rng = np.random.default_rng(self._seed)
        self._knobs = KnobSpace.ixgbe(dvfs_steps(self._p.f_min, self._p.f_max))
        self._freqs = np.array(self._knobs.dvfs_ghz)
        self._qps = self._check_qps(qps)
        self._itr: int | None = None
        self._dvfs: float | None = None
        self._clock_s = 0.0
        self._zones = ("package-0", "package-1") if cores >= 2 else ("package-0",)
        # counters start at arbitrary (seeded) values, like a machine that has been up for a while
        self._counters = {z: int(self._rng.integers(0, ENERGY_WRAP)) for z in self._zones}
        self._cache: OrderedDict[tuple, tuple[np.ndarray, np.ndarray]] = OrderedDict()
        self._default_cache: dict[tuple, Expected] = {}

    # --- Host protocol -----------------------------------------------------------------------------------
    def knobs(self) -> KnobSpace:
        return self._knobs

    def set_itr(self, itr_us: int) -> None:
        self._itr = self._knobs.check_itr(itr_us)

    def set_dvfs(self, ghz: float) -> None:
        self._dvfs = self._knobs.check_dvfs(ghz)

    def point(self) -> OperatingPoint | None:
        if self._itr is None or self._dvfs is None:
            return None
        return OperatingPoint(self._itr, self._dvfs)

    def restore(self) -> None:
        self._itr = None
        self._dvfs = None

    def offered_qps(self) -> float:
        return float(self._qps * (1.0 + QPS_READ_SIGMA * self._rng.standard_normal()))

    def set_offered_qps(self, qps: float) -> None:
        self._qps = self._check_qps(qps)

    # --- extras ---------------------------------------------------------------------------------------------
    @property
    def cores(self) -> int:
        return self._cores

    @property
    def params(self) -> SimParams:
        return self._p

    def clock_s(self) -> float:
        """Simulated seconds measured so far."""
        return self._clock_s

    def energy_counters(self) -> dict[str, int]:
        """Raw RAPL-like counters (energy-status units, wrapping at 2**32) per zone."""
        return dict(self._counters)

    def measure(self, seconds: float) -> Measurement:
        try:
            seconds = float(seconds)
        except (TypeError, ValueError):
            raise TunerError(f"sim: window {seconds!r}: expected seconds > 0") from None
        if not math.isfinite(seconds) or seconds <= 0:
            raise TunerError(f"sim: window {seconds!r}: expected seconds > 0")
        rng = self._rng
        point = self.point()
        burst = BURST_SIGMA / math.sqrt(max(seconds, 1e-3))
        qps_eff = self._qps * max(1.0 + burst * rng.standard_normal(), 0.05)
        offered = float(rng.poisson(qps_eff * seconds))
        qps_eff = max(qps_eff, MIN_MODEL_QPS)  # an idle server still wakes now and then
        lam = qps_eff / self._cores / 1e6
        itr = float(self._itr) if self._itr is not None else adaptive_itr_us(self._p, qps_eff, self._cores)
        if self._dvfs is not None:
            freqs = np.array([self._dvfs])
            occ = np.ones(1)
        else:
            steps = int(min(max(seconds / self._p.ondemand_period_s, 1), 2000))
            occ_all = ondemand_occupancy(self._p, lam, itr, self._freqs, steps, rng)
            keep = occ_all > 0
            freqs, occ = self._freqs[keep], occ_all[keep]
        n_sample = int(min(max(offered, SAMPLE_MIN), SAMPLE_CAP))
        sim = simulate(self._p, lam, itr, freqs, n_sample, CHAINS, rng, self._cores)
        power = package_power_w(self._p, sim, self._cores, qps_eff)
        if freqs.size == 1:
            lat = sim.latency_us[0]
        else:
            rows = rng.choice(freqs.size, size=sim.latency_us.shape[1], p=occ)
            lat = sim.latency_us[rows, np.arange(sim.latency_us.shape[1])]
        mean_power = float(np.dot(occ, power))
        lock_u = float(np.dot(occ, lock_utilisation(self._p, qps_eff / 1e6, freqs)))
        served = float(round(offered * min(float(np.dot(occ, sim.served)), 1.0 / max(lock_u, 1.0))))
        energy_j, by_zone = self._advance_counters(mean_power, seconds)
        self._clock_s += seconds
        lat.sort()
        latency, ci = {}, {}
        for pct in PERCENTILES:
            est, lo, hi = quantile_with_ci(lat, pct / 100.0, presorted=True)
            latency[pct] = est
            ci[pct] = (lo, hi)
        return Measurement(
            seconds=seconds, offered_qps=offered / seconds, achieved_qps=served / seconds,
            requests=int(served), latency_us=latency, latency_ci_us=ci, energy_j=energy_j, point=point,
            energy_by_zone_j=by_zone, latency_dist=lat,
        )

    def expected(self, points: Sequence[OperatingPoint], qps: float) -> list[Expected]:
        """Noise-free long-run values at `points` under `qps` (what `measure` converges to).

        Computed from one large common-random-numbers run per ITR anchor (all 18 frequencies at once) and
        interpolated linearly in ITR between anchors (`ITR_ANCHORS`: every value up to 12 µs, then coarser),
        cached per (anchor, qps) -- so a whole 511 x 18 grid costs about 50 runs.
        """
        qps = max(self._check_qps(qps), MIN_MODEL_QPS)
        pts = [self._knobs.check(pt) for pt in points]
        out: list[Expected] = []
        for pt in pts:
            lo, hi, w = _bracket(pt.itr_us)
            fi = int(np.searchsorted(self._freqs, pt.dvfs_ghz - 1e-6))
            lat_lo, pw_lo = self._expected_itr(lo, qps)
            if w > 0.0:
                lat_hi, pw_hi = self._expected_itr(hi, qps)
                lat = (1.0 - w) * lat_lo[:, fi] + w * lat_hi[:, fi]
                power = (1.0 - w) * pw_lo[fi] + w * pw_hi[fi]
            else:
                lat, power = lat_lo[:, fi], pw_lo[fi]
            out.append(Expected({pct: float(lat[k]) for k, pct in enumerate(PERCENTILES)}, float(power)))
        return out

    def expected_default(self, qps: float) -> Expected:
        """Noise-free long-run values in Linux default mode (adaptive ITR + ondemand) at `qps`."""
        qps = max(self._check_qps(qps), MIN_MODEL_QPS)
        key = ("default", round(qps, 3))
        hit = self._default_cache.get(key)
        if hit is not None:
            return hit
        lam = qps / self._cores / 1e6
        itr = adaptive_itr_us(self._p, qps, self._cores)
        occ = ondemand_occupancy(self._p, lam, itr, self._freqs, 20_000, np.random.default_rng(EXPECTED_SEED))
        sim = simulate(self._p, lam, itr, self._freqs, EXPECTED_REQUESTS, CHAINS,
                       np.random.default_rng(EXPECTED_SEED), self._cores)
        power = package_power_w(self._p, sim, self._cores, qps)
        lat = sim.latency_us
        # mixture over frequencies: the pooled latency distribution weighted by occupancy
        weights = np.repeat(occ[:, None], lat.shape[1], axis=1).ravel()
        order = np.argsort(lat.ravel())
        cw = np.cumsum(weights[order])
        cw /= cw[-1]
        flat = lat.ravel()[order]
        latency = {pct: float(flat[min(np.searchsorted(cw, pct / 100.0), flat.size - 1)]) for pct in PERCENTILES}
        result = Expected(latency, float(np.dot(occ, power)))
        self._default_cache[key] = result
        return result

    # --- internals ------------------------------------------------------------------------------------------
    def _expected_itr(self, itr: float, qps: float) -> tuple[np.ndarray, np.ndarray]:
        key = (round(itr, 3), round(qps, 3))
        hit = self._cache.get(key)
        if hit is not None:
            self._cache.move_to_end(key)
            return hit
        lam = qps / self._cores / 1e6
        sim = simulate(self._p, lam, itr, self._freqs, EXPECTED_REQUESTS, CHAINS,
                       np.random.default_rng(EXPECTED_SEED), self._cores)
        lat = np.percentile(sim.latency_us, PERCENTILES, axis=1)  # (P, F)
        power = package_power_w(self._p, sim, self._cores, qps)
        self._cache[key] = (lat, power)
        if len(self._cache) > 4096:
            self._cache.popitem(last=False)
        return lat, power

    def _advance_counters(self, power_w: float, seconds: float) -> tuple[float, dict[str, float]]:
        """Advance each zone's wrapping counter, reading it every COUNTER_READ_S; return the energy read."""
        zones = self._zones
        share = {z: 1.0 / len(zones) for z in zones}
        by_zone: dict[str, float] = {}
        chunks = max(int(math.ceil(seconds / COUNTER_READ_S)), 1)
        for z in zones:
            total_units = 0
            per_chunk_j = power_w * share[z] * seconds / chunks
            carry = 0.0
            for _ in range(chunks):
                before = self._counters[z]
                exact = per_chunk_j / ENERGY_UNIT_J + carry
                units = int(exact)
                carry = exact - units
                after = (before + units) % ENERGY_WRAP
                self._counters[z] = after
                total_units += counter_delta(before, after, ENERGY_WRAP)
            by_zone[z] = total_units * ENERGY_UNIT_J
        return sum(by_zone.values()), by_zone

    @staticmethod
    def _check_qps(qps: float) -> float:
        try:
            value = float(qps)
        except (TypeError, ValueError):
            raise TunerError(f"sim: offered load {qps!r}: expected requests/s >= 0") from None
        if not math.isfinite(value) or value < 0:
            raise TunerError(f"sim: offered load {qps!r}: expected requests/s >= 0")
        return value


def make_sim_host(seed: int = 0, cores: int = 16, qps: float = 200_000.0, **options) -> SimHost:
    """Factory for `tuner.hosts.make_host("sim", ...)`. Unknown options are refused with one line."""
    if options:
        raise TunerError(f"sim: unknown option(s) {', '.join(sorted(options))}: expected seed, cores, qps")
    return SimHost(seed=int(seed), cores=int(cores), qps=qps)
