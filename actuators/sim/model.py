"""Pure model math of the simulated memcached host (no state, no I/O): see `actuators.sim.host`.

Per core (RSS spreads connections over the queues, unevenly: simulated cores carry 1 -/+ `rss_spread` of the
mean load), open-loop Poisson arrivals meet the NIC's interrupt throttle (fig. 2.4 of the dissertation):
after an interrupt at T the next one fires at T + ITR if any packet arrived in (T, T + ITR], else at once
on the next arrival.  By memorylessness the interrupt *periods* are i.i.d. -- gap = ITR (+ Exp when the
period was empty), packet count Poisson(lam * ITR) (1 when empty), arrival positions uniform -- so a run of
K periods is one vectorised draw.  Each interrupt costs fixed work H(f); a batch that finds the core still
busy raises no interrupt (NAPI keeps polling) but costs a poll round.  The driver/stack processes the whole
batch (n * s_stack(f)), then memcached serves the requests run-to-completion in arrival order (gamma-
distributed app work + a global critical section whose hold time is cache-line traffic plus cycles under
the lock, whose M/M/1 wait caps the server near 1 / hold and -- as the hold grows when f falls -- makes
high load strongly DVFS-dependent; waiters block in C1).  Every work item is cycles / f + a memory-bound part.
Batches queue FIFO per core (Lindley recursion).  An idle gap puts the core in the C-state the menu governor
picks (deepest state whose target residency fits the predicted idle = the shortest of the last few gaps it
really slept: it records an interval only on idle exit, so a batch that found the core busy leaves its history
untouched); its exit latency delays the waking batch, and entering idle costs OS bookkeeping (energy only: a
pending interrupt aborts it).  The replies' TX completions share the queue vector's throttle, so a batch is
followed by an interrupt ITR later even if nothing arrived (`actuators.sim.kernel.period_events`).  Every run
discards a warm-up (`warmup_periods`): queues start empty.  Power = static + uncore + per core (busy:
C f V(f)^2 + leakage V; idle: C-state power) + per-request package energy.  The walk over the periods is
compiled (`actuators.sim.kernel`); this module keeps the model's parameters per frequency, the sums and the
closed forms the simulation is calibrated and checked against (eq. 6.3, adaptive ITR, P-state occupancy).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from actuators.sim.arrivals import Arrivals, draw_arrivals
from actuators.sim.kernel import latencies, lock_segments, serve_periods
from actuators.sim.params import SimParams


@dataclass
class SimResult:
    """One simulated run on `chains` independent cores, for each frequency in `f`."""

    f: np.ndarray  # (F,)
    latency_us: np.ndarray  # (F, R) per-request latency
    busy: np.ndarray  # (F,) fraction of time executing (incl. wake-up transitions)
    residency: np.ndarray  # (F, S) fraction of time in each C-state
    interrupts_per_us: np.ndarray  # (F,) per core
    served: np.ndarray  # (F,) fraction of the offered requests the cores keep up with (< 1 when saturated)
    requests_per_us: float  # per core
    period: np.ndarray  # (R,) interrupt period of each request within its core's measured run (0..periods-1)
    periods: int  # measured periods per core (after the warm-up)


def lock_hold_us(p: SimParams, f: np.ndarray | float) -> np.ndarray:
    """Hold time (µs) of the global critical section at `f` GHz: cache-line traffic + cycles under the lock."""
    return p.lock_us + p.lock_cyc / np.asarray(f, float)


def lock_utilisation(p: SimParams, total_per_us: float, f: np.ndarray | float | None = None) -> np.ndarray:
    """Utilisation of the global critical section at `total_per_us` requests/µs over all cores, at `f` GHz
    (default f_max)."""
    return total_per_us * lock_hold_us(p, p.f_max if f is None else f)


def lock_wait_params(p: SimParams, total_per_us: float, f: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(F,) hold time and utilisation U(f) of the global critical section at `total_per_us` requests/µs over all
    cores; a request's time there is the hold plus its M/M/1 wait (0 w.p. 1-U, else Exp(hold / (1 - U))),
    drawn per request with common random numbers across `f` (`actuators.sim.kernel.lock_segments`).

    memcached's shared LRU/stats cache lines: the hold is coherence traffic plus the cycles executed under
    the lock, so it grows as f falls.  A waiter blocks (futex) rather than spins, so the wait delays its core's
    queue but is spent in C1, not executing.  It caps the whole server's throughput at 1 / hold (Linux's ~800K
    QPS peak at f_max, sec. 5.3.1.1) and, because U rises as the clock slows, makes high load strongly
    DVFS-dependent (table 6.1: alpha 1.34 at 600K QPS).
    """
    hold = np.atleast_1d(lock_hold_us(p, f)).astype(float)
    return hold, np.minimum(total_per_us * hold, 0.999)


def simulate(
    p: SimParams,
    lam: float,
    itr_us: float,
    f: np.ndarray,
    requests: int,
    chains: int,
    rng: np.random.Generator,
    cores: int = 16,
    warmup: int | None = None,
) -> SimResult:
    """Simulate about `requests` requests on `chains` cores at per-core rate `lam` (1/µs).

    The same random draws serve every frequency in `f` (common random numbers), so curves over f are smooth:
    `serve(p, draw_arrivals(...), f)` gives the same values, and lets a caller keep the draws for other f.
    Each chain first runs `warmup` interrupt periods (default `warmup_periods`) whose requests, busy time
    and idle time are discarded: the queues start empty, and without a warm-up a short sample would
    under-state the tail of a loaded core (its backlog has not built up yet).
    """
    return serve(p, draw_arrivals(p, lam, itr_us, requests, chains, rng, warmup), f, cores)


def serve(p: SimParams, a: Arrivals, f: np.ndarray, cores: int = 16) -> SimResult:
    """Serve the drawn arrivals `a` at each frequency in `f` (the frequency-dependent half of `simulate`)."""
    f = np.atleast_1d(np.asarray(f, float))
    chains, k, w0, kk = a.chains, a.k, a.w0, a.n.size
    n, t, gaps = a.n, a.t, a.gaps
    hold, util = lock_wait_params(p, a.lam * cores, f)
    ranges = np.array(a.kept_ranges, np.int64).reshape(-1, 2)
    slock, clock, kept_wait = lock_segments(hold, util, a.coin, a.lock_e, a.starts, a.ends, ranges, a.kept_start)
    slock = slock.reshape(f.size, chains, k)
    # summed column by column, as numpy sums the (F, R) array a gather by column index makes (F-ordered)
    blocked = np.asfortranarray(kept_wait).sum(axis=1)  # (F,) blocked on the lock: C1, not executing
    del kept_wait

    h, ss, sa = p.work_us(f)
    targets = np.array([c.target_residency_us for c in p.cstates])
    exits = np.array([c.exit_latency_us for c in p.cstates])
    # the periods in order, compiled (`actuators.sim.kernel`): batch work (stack + app + lock), a first FIFO
    # pass (Lindley) telling which batches find the core busy (NAPI polls: one poll round, no interrupt), the
    # menu governor's C-state from the last `menu_history` actual idle gaps (its typical-interval detection
    # discards the long outliers of irregular traffic; regular ITR-paced gaps predict well), the second pass
    # with the interrupt or poll and the wake-up latency, and the idle gaps less the idle-entry bookkeeping
    # (aborted by a pending interrupt, so it costs energy but never delays a batch)
    offset, w2, bookkeeping, res, not_busy = serve_periods(
        n, t, gaps, a.sx, slock, (h, ss, sa), p.poll_cyc / f, p.idle_cyc / f, targets, exits, p.menu_history, w0
    )
    # the measured requests' latencies: ((wait + offset) + app work) + lock, as one expression over all would
    lat = latencies(offset.reshape(f.size, kk), a.kept_period, a.wait, sa, a.cx, clock, float(p.net_us))

    # drop the warm-up periods from the time accounting
    w2, bookkeeping, gaps = w2[..., w0:], bookkeeping[..., w0:], gaps[:, w0:]
    total_time = gaps.sum(axis=1)  # (C,)
    span = total_time.sum()
    res[:, [c.name for c in p.cstates].index("C1")] += blocked
    work_time = w2.sum(axis=(1, 2)) + bookkeeping.sum(axis=(1, 2)) - blocked
    idle_time = res.sum(axis=1)
    span_f = np.maximum(span, work_time + idle_time)
    busy = work_time / span_f
    res = res / span_f[:, None]
    intr = not_busy / span_f
    # share of the offered requests a saturated core can serve (work demanded per unit time > 1)
    demand = w2.sum(axis=2) / total_time[None, :]  # (F, C)
    rates = a.lam_c
    served = (np.minimum(1.0, 1.0 / np.maximum(demand, 1e-12)) * rates[None, :]).sum(axis=1) / rates.sum()
    return SimResult(
        f=f,
        latency_us=lat,
        busy=busy,
        residency=res,
        interrupts_per_us=intr,
        served=served,
        requests_per_us=float(lat.shape[1] / span),
        period=a.pos,
        periods=a.k_run,
    )


def package_power_w(p: SimParams, sim: SimResult, cores: int, qps: float) -> np.ndarray:
    """(F,) mean package power (both sockets) for the simulated frequencies."""
    core = sim.busy * p.busy_power_w(sim.f) + (sim.residency * p.idle_power_w(sim.f)).sum(axis=1)
    out: np.ndarray = p.static_w + p.uncore_active_w + cores * core + p.request_j * qps
    return out


def _ixgbe_size_itr_us(avg_wire_bytes: float, latency_mode: bool) -> int:
    """ixgbe_update_itr's size-based delay (Linux >= 4.15, the dissertation's 5.4), 10 Gb/s link, in µs."""
    a = float(avg_wire_bytes)
    if a <= 60:
        w = 5120.0  # 50K ints/s
    elif a <= 316:
        w = a * 40 + 2720  # 50K .. 16K ints/s
    elif a <= 1084:
        w = a * 15 + 11452  # 16K .. 9.2K ints/s
    elif a < 1968:
        w = a * 5 + 22420
    else:
        w = 32256.0  # 8K ints/s
    if latency_mode:
        w = float(int(w) >> 1)  # low-latency mode halves the delay
    return int(math.ceil(w / (2 * 256))) * 2  # IXGBE_ITR_ADAPTIVE_MIN_INC = 2 µs


def adaptive_itr_us(p: SimParams, qps: float, cores: int) -> float:
    """ixgbe's adaptive ITR as in Linux 5.4 (`ixgbe_update_itr`, rewritten in 4.15), the dissertation's kernel
    ("integrated with the Linux 5.4 kernel", ch. 4, seed text line ~564; default Linux = "dynamic ITR and DVFS
    algorithms are enabled", ch. 7.3, line ~1533).

    Per ring, every interrupt: with 1-3 packets and < 9000 bytes since the last one the ring is in
    low-latency mode and its delay is the size-based value halved (for memcached's ~120 B requests
    (120 * 40 + 2720) / 2 -> 16 µs; for its ~420 B replies 36 µs); with 4-47 packets the delay grows by 2 µs
    per interrupt (up to 126 µs) until batches reach 48 packets (bulk mode).  The vector takes the smaller
    of its RX and TX delays (`ixgbe_set_itr`).  At memcached's rates (<= ~60K packets/s per queue) a 16 µs
    period holds < 1 packet, so the driver stays in low-latency mode at every load the dissertation ran --
    the old three-class algorithm (8K/20K/100K ints/s by bytes per interrupt) is not what 5.4 does.
    """
    lam = qps / cores / 1e6  # packets per µs per queue
    itr = min(_ixgbe_size_itr_us(p.rx_bytes, True), _ixgbe_size_itr_us(p.tx_bytes, True))
    if lam * itr * p.burst_mean < 4.0:
        return float(itr)
    # bulk regime (not reached by this workload): the delay climbs until a batch holds ~48 packets
    return float(min(126.0, max(itr, 48.0 / max(lam, 1e-12))))


def analytic_busy(p: SimParams, lam: float, itr_us: float, f: np.ndarray) -> np.ndarray:
    """Fast C0-fraction estimate (the P-state governor's view): work rate per µs, capped at 1.

    Interrupts per µs: one per ITR period (period count lam / (m + e^-m)), plus the TX-completion-only
    interrupts that alternate with arrival-fired ones in runs of empty periods (`actuators.sim.kernel.period_events`).
    """
    f = np.asarray(f, float)
    h, ss, sa = p.work_us(f)
    m = lam * itr_us
    pe = math.exp(-m)
    tx = pe / (1.0 + pe) if p.tx_irq else 0.0
    periods = lam / ((m + pe) * (1.0 - tx))  # interrupt periods per µs
    wake = p.cstates[2].exit_latency_us  # typical shallow wake-up at short ITR
    out: np.ndarray = np.minimum(lam * (ss + sa + lock_hold_us(p, f)) + periods * (h + wake + p.idle_cyc / f), 1.0)
    return out


def pstate_occupancy(
    p: SimParams,
    lam: float,
    itr_us: float,
    freqs: np.ndarray,
    steps: int,
    rng: np.random.Generator,
    cores_per_package: int = 8,
) -> np.ndarray:
    """Fraction of `steps` 10 ms samples the package spends at each of `freqs` under intel_pstate "powersave".

    The dissertation's Linux default runs the powersave governor (ch. 7.3, seed text line ~1533: "the CPU is
    typically set into the lowest operating frequency while idle and dynamically adjusts as workload
    changes"); on a non-HWP Sandy Bridge-EP under Linux 5.4 that is intel_pstate's `get_target_pstate`: every
    sample (10 ms) each core asks for 1.25 x max P-state x busy (busy = C0 share, APERF/MPERF over TSC; turbo
    is disabled in the dissertation, ch. 3.1, line ~847: "hyperthreads and TurboBoost are disabled", so max =
    2.9 GHz), at least the minimum, and when the P-state it actually ran at
    was higher than that target it only comes down half the gap per sample.  Each core's busy carries the
    sampling noise of the requests a sample holds.  Sandy Bridge-EP cores share one P-state per package,
    so the package runs at the highest request of its cores.
    """
    busy = [float(b) for b in analytic_busy(p, lam, itr_us, freqs)]
    per_period = max(lam * p.pstate_period_s * 1e6, 1.0)
    # every per-core step below is monotone in the core's load, so the package's request (the highest of
    # its cores') is the request of the most loaded core: only the largest noise draw per sample matters
    zmax = (rng.standard_normal((steps, cores_per_package)) / math.sqrt(per_period)).max(axis=1).tolist()
    occ = np.zeros(freqs.size)
    fmin, fmax = float(freqs[0]), float(freqs[-1])
    step = float(freqs[1] - freqs[0]) if freqs.size > 1 else 0.1
    top = freqs.size - 1
    i = 0
    for z in zmax:
        occ[i] += 1
        cur = fmin + i * step
        load = min(max(busy[i] * (1.0 + z), 0.0), 1.0)
        target = max(1.25 * fmax * load, fmin)
        if cur > target:
            target += (cur - target) / 2.0
        # P-states are 100 MHz ratios (int truncation in the driver)
        i = min(max(int(math.floor((target - fmin) / step + 1e-9)), 0), top)
    out: np.ndarray = occ / occ.sum()
    return out


def eq63_p99_us(qps: float, itr_us: float, dvfs_ghz: float) -> float:
    """Dissertation eq. 6.3 with table 6.1's Linux fit, DVFS in GHz, result in µs (interpolated in QPS)."""
    table = {200e3: (86.3, -0.48, 1.09), 400e3: (251.67, 0.71, 1.08), 600e3: (687.97, 1.34, 1.02)}
    if qps not in table:
        raise ValueError("table 6.1 has 200K, 400K and 600K QPS")
    z, alpha, phi = table[qps]
    return float(z / dvfs_ghz ** (1.0 + alpha) + phi * itr_us)
