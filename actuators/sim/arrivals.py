"""The frequency-independent half of a simulated run: arrivals, interrupt periods and per-request work draws.

`actuators.sim.model.simulate` is `serve(draw_arrivals(...), f)`: every random draw of a run (Poisson period
counts, gaps, arrival positions, burst sizes, app work, the lock's coin and wait) depends only on the load,
the ITR, the request count and the seed -- never on the frequencies -- which is what makes the model's
curves over f common-random-numbers smooth.  Drawing them once lets a caller that asks for the same (ITR,
load) at other frequencies later (the oracle's search walks one anchor's frequencies in several calls) skip
this half; `serve` gives bit-for-bit the values of one `simulate` call over all the frequencies.

Only the measured (post-warm-up) requests' per-request values are kept: the latencies of the warm-up are
never formed, and its periods only shape the queue the measured ones meet.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, fields

import numpy as np

from actuators.sim.kernel import event_positions, kept_requests, period_events, period_times
from actuators.sim.params import SimParams


@dataclass(frozen=True)
class Arrivals:
    """One run's draws on `chains` cores of `k` interrupt periods each (the first `w0` of them warm-up).

    Per period (C, K): requests `n`, interrupt times `t`, gaps `gaps`, summed app work `sx`.  Per request over
    all periods (R,): the lock's `coin` and `lock_e` draws, segment `starts`/`ends` per period (KK,).  Per
    measured request (R_kept,; each chain's are one range of R, `kept_ranges`): period `kept_period` into KK, the start of its
    period's segment `kept_start`, its wait from arrival to the interrupt `wait`, its running app work within
    the batch `cx`, and its period within its chain's measured run `pos`."""

    lam: float  # mean requests per µs per core
    itr: float
    chains: int
    k: int  # periods per chain, warm-up included
    k_run: int  # measured periods per chain
    w0: int  # warm-up periods per chain
    lam_c: np.ndarray  # (C,) per-core rates (RSS imbalance)
    n: np.ndarray  # (C, K) requests per period
    t: np.ndarray  # (C, K) interrupt times
    gaps: np.ndarray  # (C, K)
    sx: np.ndarray  # (C, K) app work (gamma units) per period
    starts: np.ndarray  # (KK,) first request of each period
    ends: np.ndarray  # (KK,) one past its last
    coin: np.ndarray  # (R,) lock: waits iff coin < utilisation
    lock_e: np.ndarray  # (R,) lock: Exp(1) wait draw
    kept_ranges: tuple[tuple[int, int], ...]  # per chain, its measured requests: R[lo:hi]
    kept_period: np.ndarray  # (Rk,) their period, indices into KK
    kept_start: np.ndarray  # (Rk,) starts[kept_period]
    wait: np.ndarray  # (Rk,) from arrival to the interrupt that picks the request up
    cx: np.ndarray  # (Rk,) app work (gamma units) of the batch up to and including the request
    pos: np.ndarray  # (Rk,) period within its chain's measured run (0..k_run-1)

    def __post_init__(self) -> None:
        for fl in fields(self):  # shared by every frequency served from them (a cache keeps them): read-only
            v = getattr(self, fl.name)
            if isinstance(v, np.ndarray):
                v.flags.writeable = False

    @property
    def nbytes(self) -> int:
        """Bytes held by the arrays (a cache's bound)."""
        return sum(v.nbytes for v in (getattr(self, fl.name) for fl in fields(self)) if isinstance(v, np.ndarray))

    def kept(self, x: np.ndarray) -> np.ndarray:
        """The measured requests' entries of a per-request array (last axis R), in one contiguous array."""
        return np.concatenate([x[..., lo:hi] for lo, hi in self.kept_ranges], axis=-1)


def rss_multipliers(spread: float, chains: int) -> np.ndarray:
    """Per-core load multipliers (mean 1) spanning 1 - spread .. 1 + spread: RSS hashes a finite number of
    client connections onto the queues, so some cores carry more than the mean and set the tail."""
    if chains == 1:
        return np.ones(1)
    return 1.0 + spread * np.linspace(-1.0, 1.0, chains)


def warmup_periods(p: SimParams, itr_us: float, run_periods: int) -> int:
    """Interrupt periods simulated and discarded before measuring: `warmup_us` of simulated time, at least
    32 periods and at most an eighth of the measured run (short ITRs: many near-empty periods, cost bound)."""
    return max(32, min(int(math.ceil(p.warmup_us / max(float(itr_us), 1e-3))), run_periods // 8))


def draw_arrivals(
    p: SimParams,
    lam: float,
    itr_us: float,
    requests: int,
    chains: int,
    rng: np.random.Generator,
    warmup: int | None = None,
) -> Arrivals:
    """Draw a run of about `requests` measured requests on `chains` cores at per-core rate `lam` (1/µs) (see
    `actuators.sim.model` for the arrival process): everything of `simulate` that does not depend on f."""
    itr = max(float(itr_us), 1e-3)
    lam_c = lam * rss_multipliers(p.rss_spread, chains)[:, None]  # (C, 1) requests/µs per core
    burst = max(p.burst_mean, 1.0)
    ev_rate = lam_c / burst  # arrival events (a client's pipelined burst) per µs
    m = ev_rate * itr
    pe = np.exp(-m)
    tx_share = pe / (1.0 + pe) if p.tx_irq else 0.0  # share of periods that are TX-only (runs alternate)
    per_period = float(np.mean((m + pe) * (1.0 - tx_share))) * burst
    k_run = max(int(math.ceil(requests / per_period / chains)), 2)
    w0 = warmup_periods(p, itr, k_run) if warmup is None else int(warmup)
    k = k_run + w0
    # one chain after another from the same stream: the values of one broadcast call over (chains, k), ~30 %
    # faster (numpy's scalar-mean path)
    ev = np.empty((chains, k), np.int64)
    for c in range(chains):
        ev[c] = rng.poisson(m[c, 0], size=k)
    # the bookkeeping between the draws is compiled (`actuators.sim.kernel`): the same values as numpy's
    # (cumulative sums left to right, the same expressions), in one pass each instead of a dozen
    empty, gap_on, ev = period_events(ev, bool(p.tx_irq))
    expo = rng.exponential(size=(chains, k))
    gaps, t = period_times(expo, np.ascontiguousarray(ev_rate[:, 0]), gap_on, itr)
    evf = ev.ravel()
    kk = evf.size
    n_ev = int(evf.sum())
    # sorted uniform event positions per period via normalised exponential spacings
    e = rng.exponential(size=n_ev)
    extra = rng.exponential(size=kk)
    u_ev = event_positions(evf, e, extra)
    if burst > 1.0:
        size = rng.geometric(1.0 / burst, size=n_ev)
        ev_idx = np.repeat(np.arange(kk), evf)  # the period of each event
        n = np.bincount(ev_idx, weights=size, minlength=kk).astype(np.int64).reshape(chains, k)
        u = np.repeat(u_ev, size)
    else:  # one request per event
        n, u = ev, u_ev
    nf = n.ravel()
    r = int(nf.sum())
    x = p.app_work(rng, r)
    coin = rng.random(r)
    lock_e = rng.exponential(size=r)
    # the measured requests only (each chain's periods from w0 on, one contiguous range of requests per chain):
    # their values, formed as for all
    starts, ends, ranges, kept_period, kept_start, wait, cx, pos, sx = kept_requests(
        u, nf, empty.ravel(), x, k, w0, itr
    )
    return Arrivals(
        lam=float(lam),
        itr=itr,
        chains=chains,
        k=k,
        k_run=k_run,
        w0=w0,
        lam_c=lam_c[:, 0],
        n=n,
        t=t,
        gaps=gaps,
        sx=sx,
        starts=starts,
        ends=ends,
        coin=coin,
        lock_e=lock_e,
        kept_ranges=tuple((int(lo), int(hi)) for lo, hi in ranges),
        kept_period=kept_period,
        kept_start=kept_start,
        wait=wait,
        cx=cx,
        pos=pos,
    )
