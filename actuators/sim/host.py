"""`SimHost`: a simulated 16-core E5-2690 + 82599 memcached server (the dissertation's Linux host).

The mechanisms are in `actuators.sim.model` (ITR batching per fig. 2.4, fixed interrupt work, frequency-
scaled + memory-bound service, per-core FIFO queueing, menu-governor C-states with exit latencies, package
power = static + uncore + f V^2 while busy + C-state power while idle); this module holds the host state
(knobs, offered load, simulated clock, RAPL-like counters) and turns a simulated run into a `Measurement`.

Modes: the host starts in **Linux default mode** -- ixgbe's adaptive ITR as in Linux 5.4 and the
intel_pstate "powersave" governor (`sim_model.adaptive_itr_us`, `sim_model.pstate_occupancy`) -- and
`point()` is None.  `set_itr` / `set_dvfs` make that knob static; `point()` is the `OperatingPoint` once
both are.  `restore()` goes back to Linux default mode.

Noise and cost (honest about the bounding): `measure(seconds)` never sleeps and never simulates every
request of a long window.  It draws the window's request count n (Poisson), then simulates a bounded
sample of n_s = min(n, `SAMPLE_CAP`) requests (at least `SAMPLE_MIN`; each run after a discarded warm-up,
so queues are not measured empty) on 4 independent cores (carrying 1 -/+ the RSS imbalance of the mean
load) and scales their busy time and C-state residency to all cores and the whole window (energy
therefore carries the sample's small noise too, ~1 % at the cap).  Latency percentiles and their
order-statistic CIs come from that sample.  When n > n_s (at 600K QPS any window over 0.1 s), the
sample's deviation from the long-run value -- `expected()` for a static point, `expected_default()` in
Linux default mode -- is shrunk by sqrt(n_s / n), and so are its CI half-widths: a quantile estimate is
asymptotically normal with variance proportional to 1/n (order statistics; for the autocorrelated
latencies of a queue with a larger constant, which the simulated sample already carries), so a window of
n requests deviates sqrt(n_s / n) times as much as the sample does.  The noise therefore keeps falling
like 1/sqrt(requests) with window length, and long windows converge to `expected()` by construction
(which is why `expected()` itself is computed from a large sample, see there).  Not shrunk: saturated
points (utilisation >= 1: the sample's latency is a lower bound of an unbounded queue) and windows with
one knob static and the other governed (no long-run model is kept for them).  On top of that the offered
load of each window carries client burstiness: a relative error of `BURST_SIGMA` / sqrt(seconds)
(independent 1 s epochs averaged), which moves energy and served QPS fully and latency through the
sample -- beyond the cap shrunk with it, an under-statement of about dp99/dload x BURST_SIGMA / sqrt(s)
(at 600K, (246, 1.6): ~19 µs per 1 % load, so ~8 µs at 20 s, ~1 µs at 3600 s).  Overloaded points
report the latency of the simulated sample, a lower bound of what an unbounded queue would reach.
In Linux default mode the governor is stepped every 10 ms for at most 2000 samples (longer windows use
those 2000 as a sample of their frequency occupancy).  The RAPL-like 32-bit counters (one per package,
15.3 µJ units) are read every `COUNTER_READ_S` simulated seconds so an hour-long window sees every wrap.
Deterministic: the same seed and the same call sequence give the same results; `expected*()` use their own
fixed random streams and never disturb it.

Over ~500 lines on purpose: one class, `SimHost`, whose measured windows, `expected()` and Linux-default mode share
the host's state (knobs, load, clock, counters); the model math it calls is in `actuators.sim.model`.
"""

from __future__ import annotations

import bisect
import hashlib
import math
import time
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from typing import Any

import numpy as np

from actuators.abilities import (
    ExpectedAnchors,
    ExpectedCacheShared,
    ExpectedDrawsKept,
    ExpectedModel,
    HardwareClassified,
)
from actuators.energy import counter_delta
from actuators.host import PERCENTILES, Host, KnobSpace, LoadControl, Measurement, OperatingPoint
from actuators.hwclass import HardwareClass
from actuators.sim.cells import Cell, Expected, ExpectedCache
from actuators.sim.load import LoadSchedule, parse_load
from actuators.sim.longrun import (
    CHAINS,
    EXPECTED_REQUESTS,
    EXPECTED_SEED,
    REFINED_MEMO_BYTES,
    Draws,
    compute_cells,
    draws_memo,
)
from actuators.sim.model import (
    adaptive_itr_us,
    lock_utilisation,
    package_power_w,
    pstate_occupancy,
    simulate,
)
from actuators.sim.params import SimParams
from actuators.sim.plants import BUNDLED, plant_host_kwargs
from core.errors import TunerError
from core.stats import quantile_with_ci

SAMPLE_CAP = 60_000  # simulated requests per measure() at most
SAMPLE_MIN = 200  # and at least (tiny windows still get a latency estimate; `requests` stays the true count)
BURST_SIGMA = 0.02  # relative offered-load fluctuation of a 1 s epoch
MIN_MODEL_QPS = 1.0  # the model runs an idle (0 QPS) server at this rate
QPS_READ_SIGMA = 0.002  # relative noise of offered_qps() readings
ENERGY_UNIT_J = 1.0 / 2**16  # RAPL energy-status unit of the E5-2690 (15.3 µJ)
ENERGY_WRAP = 2**32  # 32-bit MSR_PKG_ENERGY_STATUS
COUNTER_READ_S = 60.0  # the simulated reader polls the counters this often (never misses a wrap)
DEFAULT_GOVERNOR_STEPS = 6000  # 10 ms governor samples behind expected_default() (60 s of occupancy)


#: ITR values (µs) at which `expected()` simulates; other values are interpolated linearly between them.
ITR_ANCHORS: tuple[int, ...] = (
    (2, 4, 6, 8, 10, 12, 16, 20, 26, 32, 40, 50, 60, 70, 80, 100) + tuple(range(120, 1000, 24)) + (1022,)
)


def _bracket(itr: int) -> tuple[int, int, float]:
    """Anchors around `itr` and the interpolation weight of the upper one."""
    i = bisect.bisect_left(ITR_ANCHORS, itr)
    if i < len(ITR_ANCHORS) and ITR_ANCHORS[i] == itr:
        return itr, itr, 0.0
    i = min(max(i, 1), len(ITR_ANCHORS) - 1)
    lo, hi = ITR_ANCHORS[i - 1], ITR_ANCHORS[i]
    return lo, hi, (itr - lo) / (hi - lo)


def _shrink(
    lat: np.ndarray,
    latency: dict[float, float],
    ci: dict[float, tuple[float, float]],
    ref: dict[float, float],
    a: float,
) -> np.ndarray:
    """Shrink a window's sample towards the long-run percentiles `ref` by factor `a` (in place for the dicts).

    Each percentile becomes ref + a (est - ref) and its CI half-widths scale by `a`: a quantile estimate is
    asymptotically normal with variance proportional to 1/n (also for the autocorrelated latencies of a
    queue, with a larger constant), so a window of n requests deviates from the long-run value by
    sqrt(n_sample / n) times what a sample of n_sample does.  The returned samples (the window's
    `latency_dist`) are quantile-mapped the same way -- each sample moved by (1 - a) times the deviation
    interpolated at its rank -- so pooled windows report about the shrunk percentiles.
    """
    levels, devs = [], []
    for pct in PERCENTILES:
        est = latency[pct]
        lo, hi = ci[pct]
        new = ref[pct] + a * (est - ref[pct])
        latency[pct] = new
        ci[pct] = (new - a * (est - lo), new + a * (hi - est))
        levels.append(pct / 100.0)
        devs.append(est - ref[pct])
    n = lat.size
    u = (np.arange(n) + 0.5) / n
    out = lat - (1.0 - a) * np.interp(u, levels, devs)
    out = np.maximum(out, 0.0)
    out.sort()
    return out


def dvfs_steps(lo: float = 1.2, hi: float = 2.9, step: float = 0.1) -> tuple[float, ...]:
    """The E5-2690's P-states in GHz."""
    n = int(round((hi - lo) / step)) + 1
    return tuple(round(lo + i * step, 1) for i in range(n))


class SimHost(
    Host,
    LoadControl,
    ExpectedModel,
    ExpectedAnchors,
    ExpectedDrawsKept,
    ExpectedCacheShared,
    HardwareClassified,
):
    """A simulated memcached host: `actuators.host.Host`, `LoadControl`, the noise-free model's abilities
    (`actuators.abilities`: `ExpectedModel`, `ExpectedAnchors`, `ExpectedDrawsKept`, `ExpectedCacheShared`) and
    `HardwareClassified`."""

    name = "sim"

    def __init__(
        self,
        seed: int = 0,
        cores: int = 16,
        qps: float = 200_000.0,
        params: SimParams | None = None,
        cache: ExpectedCache | None = None,
        load_schedule: LoadSchedule | Mapping[str, Any] | None = None,
        drift: Sequence[tuple[float, SimParams]] = (),
    ) -> None:
        if isinstance(cores, bool) or not isinstance(cores, int) or cores < 1:
            raise TunerError(f"sim: cores {cores!r}: expected a positive integer")
        self._p = self._p0 = params or SimParams()
        # (simulated seconds from which, constants): a plant that drifts (`actuators.sim.plants`); draws nothing
        self._drift = tuple(sorted(drift, key=lambda stage: stage[0]))
        self._cores = cores
        self._seed = int(seed)
        self._rng = np.random.default_rng(self._seed)
        self._knobs = KnobSpace.ixgbe(dvfs_steps(self._p.f_min, self._p.f_max))
        self._freqs = np.array(self._knobs.dvfs_ghz)
        self._load = None if load_schedule is None else parse_load(load_schedule)
        self._t0 = time.monotonic()
        self._qps = self._check_qps(qps) if self._load is None else self._load.qps_at(0.0)
        self._itr: int | None = None
        self._dvfs: float | None = None
        self._clock_s = 0.0
        self._zones = ("package-0", "package-1") if cores >= 2 else ("package-0",)
        # counters start at arbitrary (seeded) values, like a machine that has been up for a while
        self._counters = {z: int(self._rng.integers(0, ENERGY_WRAP)) for z in self._zones}
        # long-run memo: this host's own unless one is shared (keys hold params and cores, so any host may)
        if cache is not None and not isinstance(cache, ExpectedCache):
            raise TunerError(f"sim: cache {cache!r}: expected an ExpectedCache shared in-process (not a config value)")
        self._cache = cache if cache is not None else ExpectedCache()
        self._draws: tuple[Draws, Draws] | None = None  # a search's first-run, refinement-run draws memos

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
        self._follow_load()
        return float(self._qps * (1.0 + QPS_READ_SIGMA * self._rng.standard_normal()))

    def set_offered_qps(self, qps: float) -> None:
        if self._load is not None:
            raise TunerError(
                "sim: the offered load follows the host's load_schedule; a fixed load needs a host without one"
            )
        self._qps = self._check_qps(qps)

    # --- extras ---------------------------------------------------------------------------------------------
    @property
    def cores(self) -> int:
        return self._cores

    @property
    def params(self) -> SimParams:
        return self._p

    @property
    def load_schedule(self) -> LoadSchedule | None:
        """The load schedule the offered load follows, or None (a fixed load, `set_offered_qps`)."""
        return self._load

    def expected_itr_anchors(self) -> tuple[int, ...]:
        """The ITRs (µs) `expected()` simulates; between two of them its values are linear in ITR (the
        oracle's search relies on it)."""
        return ITR_ANCHORS

    @property
    def expected_cache(self) -> ExpectedCache:
        """The long-run memo; pass it as `cache=` to another host to share the cells."""
        return self._cache

    def hardware_class(self) -> HardwareClass:
        """A sim class from the model: hosts with the same `SimParams` and cores are one class (the seed,
        i.e. the noise, is not part of it)."""
        digest = hashlib.sha256(repr(self._p).encode()).hexdigest()[:8]
        return HardwareClass(
            cpu_model=f"sim E5-2690 model {digest}",
            cores=self._cores,
            nic_driver="sim-ixgbe",
            memcached_version="sim",
            kernel="sim",
        )

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
        self._follow_load()
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
            steps = int(min(max(seconds / self._p.pstate_period_s, 1), 2000))
            occ_all = pstate_occupancy(self._p, lam, itr, self._freqs, steps, rng)
            keep = occ_all > 0
            freqs, occ = self._freqs[keep], occ_all[keep]
        n_sample = int(min(max(offered, SAMPLE_MIN), SAMPLE_CAP))
        if freqs.size == 1:
            sim = simulate(self._p, lam, itr, freqs, n_sample, CHAINS, rng, self._cores)
            power, served_f, lat = package_power_w(self._p, sim, self._cores, qps_eff), sim.served, sim.latency_us[0]
        else:
            # governed DVFS: each frequency's share of the sample is simulated at that frequency (multinomial
            # split of the requests by occupancy; shares under SAMPLE_MIN requests are folded into the others)
            alloc = rng.multinomial(n_sample, occ)
            use = alloc >= SAMPLE_MIN
            if not use.any():
                use = alloc == alloc.max()
            freqs, occ, alloc = freqs[use], occ[use] / occ[use].sum(), alloc[use]
            runs = [
                simulate(self._p, lam, itr, freqs[j : j + 1], int(alloc[j]), CHAINS, rng, self._cores)
                for j in range(freqs.size)
            ]
            power = np.array([package_power_w(self._p, r, self._cores, qps_eff)[0] for r in runs])
            served_f = np.array([r.served[0] for r in runs])
            lat = np.concatenate([r.latency_us[0] for r in runs])
        mean_power = float(np.dot(occ, power))
        lock_u = float(np.dot(occ, lock_utilisation(self._p, qps_eff / 1e6, freqs)))
        served = float(round(offered * min(float(np.dot(occ, served_f)), 1.0 / max(lock_u, 1.0))))
        energy_j, by_zone = self._advance_counters(mean_power, seconds)
        self._clock_s += seconds
        lat.sort()
        latency, ci = {}, {}
        for pct in PERCENTILES:
            est, lo, hi = quantile_with_ci(lat, pct / 100.0, presorted=True)
            latency[pct] = est
            ci[pct] = (lo, hi)
        saturated = lock_u >= 1.0 or float(np.dot(occ, served_f)) < 0.999
        if offered > lat.size and not saturated:
            # the window held more requests than were simulated: shrink the sample's deviation from the
            # long-run value by sqrt(n_sample / n_window) (see the module docstring)
            ref = self._long_run_latency(point)
            if ref is not None:
                lat = _shrink(lat, latency, ci, ref, math.sqrt(lat.size / offered))
        return Measurement(
            seconds=seconds,
            offered_qps=offered / seconds,
            achieved_qps=served / seconds,
            requests=int(served),
            latency_us=latency,
            latency_ci_us=ci,
            energy_j=energy_j,
            point=point,
            energy_by_zone_j=by_zone,
            latency_dist=lat,
        )

    def expected(self, points: Sequence[OperatingPoint], qps: float) -> list[Expected]:
        """Long-run values at `points` under `qps` -- what `measure` converges to (it shrinks towards them).

        Each (ITR anchor, frequency, load) cell is one common-random-numbers run of `EXPECTED_REQUESTS`
        requests (after the warm-up); a cell whose p99 standard error (batch means over `SE_BLOCKS` blocks
        of consecutive periods) is still above `REFINE_REL_SE` of it, and whose p99 is below
        `REFINE_MAX_US`, is re-estimated from `EXPECTED_REFINED` requests (one more independent run, pooled):
        near saturation 40,000 requests leave a p99 standard error of ~7 % (600K, (246, 1.6): 37 µs), which
        an optimum picked "just under the SLA" turns into a bias (the winner's curse).  A cell depends only
        on its own (anchor, frequency, load) -- the same random streams serve any subset of frequencies --
        so computing one point or a whole grid gives the same numbers.  Values between anchors
        (`ITR_ANCHORS`) are interpolated linearly in ITR; cells are cached.
        """
        self._follow_drift()
        qps = max(self._check_qps(qps), MIN_MODEL_QPS)
        pts = [self._knobs.check(pt) for pt in points]
        plan = [(_bracket(pt.itr_us), int(np.searchsorted(self._freqs, pt.dvfs_ghz - 1e-6))) for pt in pts]
        need: dict[int, set[int]] = {}
        for (lo, hi, w), fi in plan:
            need.setdefault(lo, set()).add(fi)
            if w > 0.0:
                need.setdefault(hi, set()).add(fi)
        cells: dict[tuple[int, int], Cell] = {}
        for anchor, fis in need.items():
            for fi, cell in self._expected_cells(anchor, qps, sorted(fis)).items():
                cells[(anchor, fi)] = cell
        out: list[Expected] = []
        for (lo, hi, w), fi in plan:
            lat, power, se = cells[(lo, fi)]
            if w > 0.0:
                lat_hi, pw_hi, se_hi = cells[(hi, fi)]
                lat = (1.0 - w) * lat + w * lat_hi
                power = (1.0 - w) * power + w * pw_hi
                se = math.hypot((1.0 - w) * se, w * se_hi)
            out.append(Expected({pct: float(lat[k]) for k, pct in enumerate(PERCENTILES)}, float(power), float(se)))
        return out

    @contextmanager
    def expected_draws_kept(self) -> Iterator[None]:
        """Within this block `expected()` keeps each (anchor, load)'s first-run and refinement-run draws
        (bounded), so asking for the same anchor at other frequencies in a later call only serves them -- a
        search over one load does (`tuner.replay.oracle_search`); the values are the same.  Dropped on exit:
        outside a search the draws of a new load are not asked for again."""
        outer = self._draws
        self._draws = outer or (draws_memo(), draws_memo(REFINED_MEMO_BYTES, "sim.refined_draws"))
        try:
            yield
        finally:
            self._draws = outer

    def expected_default(self, qps: float) -> Expected:
        """Long-run values in Linux default mode (5.4 adaptive ITR + intel_pstate powersave) at `qps`."""
        self._follow_drift()
        qps = max(self._check_qps(qps), MIN_MODEL_QPS)
        key = (self._p, self._cores, round(qps, 3))
        return self._cache.defaults.get(key, lambda: self._compute_default(qps))

    def _compute_default(self, qps: float) -> Expected:
        lam = qps / self._cores / 1e6
        itr = adaptive_itr_us(self._p, qps, self._cores)
        occ = pstate_occupancy(
            self._p, lam, itr, self._freqs, DEFAULT_GOVERNOR_STEPS, np.random.default_rng(EXPECTED_SEED)
        )
        on = occ > 0
        occ = occ[on]
        sim = simulate(
            self._p,
            lam,
            itr,
            self._freqs[on],
            EXPECTED_REQUESTS,
            CHAINS,
            np.random.default_rng(EXPECTED_SEED),
            self._cores,
        )
        power = package_power_w(self._p, sim, self._cores, qps)
        lat = sim.latency_us
        # mixture over frequencies: the pooled latency distribution weighted by occupancy
        weights = np.repeat(occ[:, None], lat.shape[1], axis=1).ravel()
        order = np.argsort(lat.ravel())
        cw = np.cumsum(weights[order])
        cw /= cw[-1]
        flat = lat.ravel()[order]
        latency = {pct: float(flat[min(int(np.searchsorted(cw, pct / 100.0)), flat.size - 1)]) for pct in PERCENTILES}
        return Expected(latency, float(np.dot(occ, power)))

    # --- internals ------------------------------------------------------------------------------------------
    def _follow_drift(self) -> None:
        """The constants of the drift stage the simulated clock is in (a window runs at those of its start)."""
        if self._drift:
            self._p = self._p0
            for start_s, params in self._drift:
                if self._clock_s >= start_s:
                    self._p = params

    def _follow_load(self) -> None:
        """Move the nominal load to the schedule's value now (a window runs at the load of its start)."""
        self._follow_drift()
        if self._load is not None:
            t = time.monotonic() - self._t0 if self._load.clock == "wall" else self._clock_s
            self._qps = self._load.qps_at(t)

    def _long_run_latency(self, point: OperatingPoint | None) -> dict[float, float] | None:
        """Long-run percentiles at the current nominal load: `expected` (static point) or `expected_default`
        (both knobs governed); None with one knob static and the other governed (no long-run model kept)."""
        qps = max(self._qps, MIN_MODEL_QPS)
        if point is not None:
            return self.expected([point], qps)[0].latency_us
        if self._itr is None and self._dvfs is None:
            return self.expected_default(qps).latency_us
        return None

    def _expected_cells(self, itr: int, qps: float, fis: list[int]) -> dict[int, Cell]:
        """The cells (itr, qps, f) for frequency indices `fis`: cached ones as held, the others computed (one
        run for all of them) and cached; the returned values never depend on what the bound evicts."""
        base = (self._p, self._cores, itr, round(qps, 3))

        def compute(missing: list[tuple[Any, ...]]) -> dict[tuple[Any, ...], Cell]:
            todo = [key[-1] for key in missing]
            return {base + (fi,): cell for fi, cell in zip(todo, self._compute_cells(itr, qps, todo), strict=True)}

        got = self._cache.cells.get_many([base + (fi,) for fi in fis], compute)
        return {key[-1]: cell for key, cell in got.items()}

    def _compute_cells(self, itr: int, qps: float, todo: list[int]) -> list[Cell]:
        """Simulate the cells (itr, qps, f) for frequency indices `todo` (see `expected`)."""
        draws, refined = self._draws or (None, None)
        return compute_cells(self._p, self._cores, itr, qps, self._freqs[todo], draws, refined)

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


def make_sim_host(
    seed: int = 0,
    cores: int = 16,
    qps: float | None = None,
    cache: ExpectedCache | None = None,
    load_schedule: LoadSchedule | Mapping[str, Any] | None = None,
    plant: str = BUNDLED,
) -> SimHost:
    """Factory for `tuner.hosts.make_host("sim", ...)` (its signature is what `[host.options]` may hold).

    `cache`: an `ExpectedCache` to share with other hosts of the same process (a replay's policies).
    `load_schedule`: a load schedule (`actuators.sim.load`) the offered load follows instead of `qps`.
    `plant`: a plant of `actuators.sim.plants.PLANTS` (its constants, drift and, unless `cores` differs from
    16, its core count); the bundled one is the simulator as calibrated."""
    if load_schedule is not None and qps is not None:
        raise TunerError("sim: give qps (a fixed load) or load_schedule, not both")
    kw = dict(plant_host_kwargs(plant)) if plant != BUNDLED else {}
    if int(cores) != 16:
        kw["cores"] = int(cores)
    return SimHost(
        seed=int(seed),
        cores=int(kw.pop("cores", cores)),
        qps=200_000.0 if qps is None else qps,
        cache=cache,
        load_schedule=load_schedule,
        **kw,
    )
