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


def _seg_cumsum_and_sum(x: np.ndarray, starts: np.ndarray, counts: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Per segment of `x` (last axis; segments of lengths `counts` from `starts`, back to back): the inclusive
    running sum restarted at each segment's start, and the segment's total (0 if empty) -- from one cumulative
    sum, each segment's base spread over its items by index."""
    c0 = _cumsum0(x)
    base = c0[..., starts]
    run: np.ndarray = c0[..., 1:] - np.take(base, _segment_ids(starts, x.shape[-1]), axis=-1)
    tot: np.ndarray = c0[..., starts + counts] - base
    return run, tot


def _segment_ids(starts: np.ndarray, size: int) -> np.ndarray:
    """(size,) the segment of each item, for segments back to back from `starts` (ascending; empty segments
    share their successor's start): `np.repeat(np.arange(len(starts)), counts)`, from a count of the segments
    starting at or before each item."""
    return np.cumsum(np.bincount(starts, minlength=size + 1)[:size]) - 1


def _cumsum0(x: np.ndarray) -> np.ndarray:
    """The running sum of `x` along its last axis with a leading 0 (one buffer, the same sequential sums)."""
    c0 = np.empty(x.shape[:-1] + (x.shape[-1] + 1,))
    c0[..., 0] = 0.0
    np.cumsum(x, axis=-1, out=c0[..., 1:])
    return c0


def tx_only_periods(empty: np.ndarray) -> np.ndarray:
    """Which empty interrupt periods end with a TX-completion-only interrupt, per chain (last axis).

    Part of why Linux default costs "over 2X in energy" at 400K (ch. 5.2.2, seed text line ~1154): at its
    16 µs adaptive ITR the cores wake for nearly every request and again for its reply's completion.

    ixgbe's queue vector serves the RX and TX rings of its core and one throttle (EITR) gates both causes:
    the replies sent after a batch complete on the wire and raise a TX cause, so an interrupt fires at
    T + ITR even when no request arrived (it only cleans TX descriptors, `ixgbe_poll` -> `ixgbe_clean_tx_irq`).
    The period after it has nothing pending, so an empty one ends at the next arrival.  In a run of
    consecutive empty periods they therefore alternate TX-only, arrival, TX-only, ... starting with TX-only
    (the period before the run produced replies).
    """
    k = empty.shape[-1]
    pos = np.arange(k, dtype=np.int32 if k < 2**31 - 1 else np.int64)
    # index of the last non-empty period at or before each position (-1 if none)
    last_full = np.maximum.accumulate(np.where(empty, np.array(-1, dtype=pos.dtype), pos), axis=-1)
    since: np.ndarray = pos - last_full  # periods since the last non-empty one (0 at it)
    out: np.ndarray = empty & (np.bitwise_and(since, 1) == 1)  # odd: an even count of empty ones before this one
    return out


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
    empty = ev == 0
    tx_only = tx_only_periods(empty) if p.tx_irq else np.zeros_like(empty)
    ev = np.where(empty, 1, ev)  # an empty period ends with the event that fires the next interrupt
    ev = np.where(tx_only, 0, ev)  # ... unless a TX completion fires it at T + ITR (no request)
    exp_gap = rng.exponential(size=(chains, k)) / ev_rate
    gaps = itr + np.where(empty & ~tx_only, exp_gap, 0.0)
    t = np.cumsum(gaps, axis=1)
    evf = ev.ravel()
    kk = evf.size
    ev_ends = np.cumsum(evf)
    n_ev = int(ev_ends[-1])
    ev_starts = ev_ends - evf
    ev_idx = _segment_ids(ev_starts, n_ev)  # the period of each event
    # sorted uniform event positions per period via normalised exponential spacings
    e = rng.exponential(size=n_ev)
    extra = rng.exponential(size=kk)
    ce0 = _cumsum0(e)
    base = ce0[ev_starts]
    tot = ce0[ev_ends] - base
    tot = tot + extra
    u_ev = (ce0[1:] - base[ev_idx]) / tot[ev_idx]
    if burst > 1.0:
        size = rng.geometric(1.0 / burst, size=n_ev)
        n = np.bincount(ev_idx, weights=size, minlength=kk).astype(np.int64).reshape(chains, k)
        idx, u = np.repeat(ev_idx, size), np.repeat(u_ev, size)
    else:  # one request per event
        n, idx, u = evf.reshape(chains, k), ev_idx, u_ev
    nf = n.ravel()
    ends = np.cumsum(nf)
    r = int(ends[-1])
    starts = ends - nf
    x = rng.gamma(p.app_shape, 1.0 / p.app_shape, size=r)
    coin = rng.random(r)
    lock_e = rng.exponential(size=r)
    # the measured requests only (each chain's periods from w0 on, one contiguous range of requests per chain):
    # their values, formed as for all
    ranges = [(int(starts[c * k + w0]), int(ends[c * k + k - 1])) for c in range(chains)]
    kept_period = np.concatenate([idx[lo:hi] for lo, hi in ranges])
    kept_start = starts[kept_period]
    u = np.concatenate([u[lo:hi] for lo, hi in ranges])
    wait = np.where(empty.ravel()[kept_period], 0.0, itr * (1.0 - u))
    c0 = _cumsum0(x)
    cx = np.concatenate([c0[lo + 1 : hi + 1] for lo, hi in ranges]) - c0[kept_start]
    sx = (c0[ends] - c0[starts]).reshape(chains, k)
    pos = kept_period % k - w0
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
        kept_ranges=tuple(ranges),
        kept_period=kept_period,
        kept_start=kept_start,
        wait=wait,
        cx=cx,
        pos=pos,
    )
