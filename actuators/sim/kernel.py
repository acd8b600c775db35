"""The simulator's per-period recursion, compiled (numba): one pass per core and frequency instead of ~40 numpy
passes over the (F, C, K) periods.

`serve_periods` is the part of `actuators.sim.model.serve` that walks the interrupt periods in order: the batch
work, the first FIFO pass (Lindley) that tells which batches find the core busy, the menu governor's C-state
choice from the idle gaps before each batch, the second FIFO pass with the interrupt or poll cost and the wake-up
latency, the idle gaps with the idle-entry bookkeeping taken out, and the residency per C-state over the measured
periods.  Every value is formed by the same IEEE operations in the same order as the numpy expressions it
replaces (running sums added left to right, `np.maximum`/`np.minimum` as numpy defines them, the residency summed
in `np.bincount`'s order), so every model value is unchanged bit for bit
(tests/actuators/sim/test_model_outputs.py pins them);
the whole-array sums numpy forms pairwise stay in numpy, on the arrays this returns.  No fast-math: that would
let LLVM reorder or fuse the arithmetic.

Compiled on first use and cached next to this file (numba's `cache=True`; it falls back to its user-wide
cache directory, or `NUMBA_CACHE_DIR`, when that is not writable): the first process of an installation compiles
(~10 s), later ones load the machine code (~1 s at the first call).  Where no cache directory is writable (a
read-only root filesystem) every process compiles instead of failing.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
from numba import njit


def _compiled(fn: Callable[..., Any]) -> Any:
    """`fn` compiled in nopython mode, releasing the GIL, cached on disk where numba can write a cache."""
    try:
        return njit(cache=True, nogil=True)(fn)
    except RuntimeError:  # "cannot cache function ...: no locator available": no writable cache directory
        return njit(cache=False, nogil=True)(fn)


@njit(inline="always")
def _fifo_start(run: float, top: float, w: float, tk: float, first: bool) -> tuple[float, float, float]:
    """One step of a FIFO pass (Lindley) as numpy formed it over a row: the running sum of the work (np.cumsum),
    the running maximum of t - (work before) (np.maximum.accumulate) and the start, max + work before."""
    run = run + w
    before = run - w
    x = tk - before
    if first or not top >= x:
        top = x
    return run, top, top + before


@njit(inline="always")
def _idle_gap(tk: float, fin: float) -> float:
    """The idle gap before a batch at `tk` after the previous one finished at `fin`: np.maximum(tk - fin, 0.0)."""
    gap = tk - fin
    return 0.0 if gap < 0.0 else gap


@njit(inline="always")
def _menu_state(ring: np.ndarray, history: int, targets: np.ndarray) -> int:
    """The menu governor's C-state: the last of `targets` (ascending target residencies) that the shortest of the
    last `history` idle gaps reaches, -1 for none."""
    pred = ring[0]
    for i in range(1, history):
        if not pred <= ring[i]:
            pred = ring[i]
    state = -1
    for i in range(targets.size):
        if pred >= targets[i]:
            state += 1
    return state


@njit(inline="always")
def _remember_gap(ring: np.ndarray, slot: int, gap: float) -> int:
    """Write an idle gap into the governor's history ring at `slot`; returns the next slot."""
    ring[slot] = gap
    slot += 1
    return 0 if slot == ring.size else slot


@njit(inline="always")
def _entry_bookkeeping(idle: float, busy: bool, cost: float) -> tuple[float, float]:
    """The idle-entry bookkeeping after the previous batch (none if this one found the core busy), at most the
    idle gap, and the gap left."""
    post = 0.0 if busy else cost
    book = post if post <= idle else idle
    return book, idle - book


@_compiled
def _serve_periods(
    n: np.ndarray,
    t: np.ndarray,
    gaps: np.ndarray,
    sx: np.ndarray,
    slock: np.ndarray,
    h: np.ndarray,
    ss: np.ndarray,
    sa: np.ndarray,
    poll: np.ndarray,
    idle_cost: np.ndarray,
    targets: np.ndarray,
    exits: np.ndarray,
    history: int,
    w0: int,
    offset: np.ndarray,
    w2_out: np.ndarray,
    bookkeeping: np.ndarray,
    residency: np.ndarray,
    interrupts: np.ndarray,
) -> None:
    nf, nc, nk = slock.shape
    ring = np.empty(history)
    for fi in range(nf):
        hf, ssf, saf, pollf, idlef = h[fi], ss[fi], sa[fi], poll[fi], idle_cost[fi]
        for c in range(nc):
            ring[:] = 1e9  # the menu governor's history before any idle gap: the deepest state
            slot = 0
            run1 = run2 = 0.0  # the two FIFO passes' running sums and maxima (`_fifo_start`)
            top1 = top2 = 0.0
            fin1 = 0.0
            fin2 = 0.0
            for k in range(nk):
                tk = t[c, k]
                base = n[c, k] * ssf
                base = base + saf * sx[c, k]
                base = base + slock[fi, c, k]
                # first pass: interrupt work on every batch, which batches find the core busy
                w1 = base + hf
                run1, top1, st1 = _fifo_start(run1, top1, w1, tk, k == 0)
                busy = st1 > tk + 1e-9
                idle1 = 1e9 if k == 0 else _idle_gap(tk, fin1)
                fin1 = st1 + w1
                # menu governor: the shortest of the last `history` actual idle gaps before this batch
                state = _menu_state(ring, history, targets)
                if not busy:
                    slot = _remember_gap(ring, slot, idle1)
                if busy:
                    wake = 0.0
                    irq = pollf
                else:
                    wake = exits[state]
                    irq = hf
                # second pass: the batch as it is served
                w2 = base + irq
                w2 = w2 + wake
                run2, top2, st2 = _fifo_start(run2, top2, w2, tk, k == 0)
                off = st2 - tk
                off = off + wake
                off = off + irq
                off = off + n[c, k] * ssf
                offset[fi, c, k] = off
                w2_out[fi, c, k] = w2
                if k == 0:
                    idle2 = 0.0 if busy else gaps[c, 0]
                else:
                    idle2 = _idle_gap(tk, fin2)
                    book, idle2 = _entry_bookkeeping(idle2, busy, idlef)
                    bookkeeping[fi, c, k - 1] = book
                fin2 = st2 + w2
                if k >= w0:
                    residency[fi, state] += idle2
                    if not busy:
                        interrupts[fi] += 1


def serve_periods(
    n: np.ndarray,
    t: np.ndarray,
    gaps: np.ndarray,
    sx: np.ndarray,
    slock: np.ndarray,
    work: tuple[np.ndarray, np.ndarray, np.ndarray],
    poll: np.ndarray,
    idle_cost: np.ndarray,
    targets: np.ndarray,
    exits: np.ndarray,
    history: int,
    w0: int,
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Walk every core's periods at each frequency (see the module docstring).

    In: per period (C, K) `n`, `t`, `gaps`, `sx`; (F, C, K) `slock`; per frequency (F,) `work` = (H, s_stack,
    s_app), `poll` and `idle_cost` (µs); the C-states' ascending target residencies and exit latencies; the
    menu governor's `history` (>= 1); the warm-up periods `w0`.
    Out: (F, C, K) time from interrupt to app start `offset` and served work `w2`; (F, C, K-1) the bookkeeping
    taken out of each following idle gap; (F, S) idle time per C-state and (F,) interrupts, over the measured
    periods (from `w0`)."""
    if history < 1:
        raise ValueError(f"menu_history must be >= 1, got {history}")
    if np.any(targets[1:] < targets[:-1]):
        raise ValueError("C-state target residencies must be ascending")
    h, ss, sa = (np.ascontiguousarray(v, dtype=np.float64) for v in work)
    shape = slock.shape
    offset = np.empty(shape)
    w2 = np.empty(shape)
    bookkeeping = np.empty(shape[:-1] + (max(shape[-1] - 1, 0),))
    residency = np.zeros((shape[0], targets.size))
    interrupts = np.zeros(shape[0], np.int64)
    _serve_periods(
        np.ascontiguousarray(n, dtype=np.int64),
        np.ascontiguousarray(t, dtype=np.float64),
        np.ascontiguousarray(gaps, dtype=np.float64),
        np.ascontiguousarray(sx, dtype=np.float64),
        np.ascontiguousarray(slock, dtype=np.float64),
        h,
        ss,
        sa,
        np.ascontiguousarray(poll, dtype=np.float64),
        np.ascontiguousarray(idle_cost, dtype=np.float64),
        np.ascontiguousarray(targets, dtype=np.float64),
        np.ascontiguousarray(exits, dtype=np.float64),
        int(history),
        int(w0),
        offset,
        w2,
        bookkeeping,
        residency,
        interrupts,
    )
    return offset, w2, bookkeeping, residency, interrupts


# ---- the draws' bookkeeping (`actuators.sim.arrivals.draw_arrivals`): the same values as its numpy form ----


@_compiled
def period_events(ev: np.ndarray, tx_irq: bool) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """From the (C, K) Poisson event counts: which periods are empty, which of those end on an arrival (not on a
    TX-completion-only interrupt), and the events each period holds (an empty period ends with the event that
    fires the next interrupt, a TX-only one with none).

    TX-only interrupts are part of why Linux default costs "over 2X in energy" at 400K (ch. 5.2.2, seed text line
    ~1154): at its 16 µs adaptive ITR the cores wake for nearly every request and again for its reply's
    completion.  ixgbe's queue vector serves the RX and TX rings of its core and one throttle (EITR) gates both
    causes: the replies sent after a batch complete on the wire and raise a TX cause, so an interrupt fires at
    T + ITR even when no request arrived (it only cleans TX descriptors, `ixgbe_poll` -> `ixgbe_clean_tx_irq`).
    The period after it has nothing pending, so an empty one ends at the next arrival.  In a run of consecutive
    empty periods they therefore alternate TX-only, arrival, TX-only, ... starting with TX-only (the period
    before the run produced replies); `tx_irq` False: no TX-only periods."""
    nc, nk = ev.shape
    empty = np.empty((nc, nk), np.bool_)
    gap_on = np.empty((nc, nk), np.bool_)
    out = np.empty((nc, nk), np.int64)
    for c in range(nc):
        last_full = -1
        for k in range(nk):
            e = ev[c, k] == 0
            empty[c, k] = e
            if not e:
                last_full = k
                gap_on[c, k] = False
                out[c, k] = ev[c, k]
            else:
                tx_only = tx_irq and (k - last_full) % 2 == 1
                gap_on[c, k] = not tx_only
                out[c, k] = 0 if tx_only else 1
    return empty, gap_on, out


@_compiled
def period_times(expo: np.ndarray, rate: np.ndarray, gap_on: np.ndarray, itr: float) -> tuple[np.ndarray, np.ndarray]:
    """(C, K) gaps (ITR, plus an Exp(rate) wait for the next arrival when the period ended on one) and the
    interrupt times (their running sum per chain)."""
    nc, nk = expo.shape
    gaps = np.empty((nc, nk))
    t = np.empty((nc, nk))
    for c in range(nc):
        run = 0.0
        for k in range(nk):
            g = itr + (expo[c, k] / rate[c] if gap_on[c, k] else 0.0)
            gaps[c, k] = g
            run = g if k == 0 else run + g
            t[c, k] = run
    return gaps, t


@njit(inline="always")
def _cumsum0(x: np.ndarray) -> np.ndarray:
    """The running sum of `x` with a leading 0, added left to right as np.cumsum does."""
    out = np.empty(x.size + 1)
    out[0] = 0.0
    run = 0.0
    for j in range(x.size):
        run = x[j] if j == 0 else run + x[j]
        out[j + 1] = run
    return out


@_compiled
def event_positions(evf: np.ndarray, e: np.ndarray, extra: np.ndarray) -> np.ndarray:
    """Each event's position in its period (0..1, sorted within the period; events in period order, `evf` per
    period): normalised exponential spacings -- the running sum of `e` within the period over its total plus
    the period's `extra` draw."""
    ce0 = _cumsum0(e)
    u = np.empty(e.size)
    j = 0
    for i in range(evf.size):
        lo = j
        hi = j + evf[i]
        base = ce0[lo]
        tot = ce0[hi] - base
        tot = tot + extra[i]
        for q in range(lo, hi):
            u[q] = (ce0[q + 1] - base) / tot
        j = hi
    return u


@_compiled
def kept_requests(
    u: np.ndarray,
    nf: np.ndarray,
    empty: np.ndarray,  # (KK,)
    x: np.ndarray,
    k: int,
    w0: int,
    itr: float,
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """The periods' request segments and the measured requests' values: (KK,) `starts`, `ends`; (C, 2) each
    chain's measured range of requests; per measured request its period, its period's start, its wait from
    arrival to the interrupt (0 in a period that was empty: the arrival fires it), its running app work within
    the batch, and its period within the chain's measured run; (C, K) the app work per period."""
    kk = nf.size
    nc = kk // k
    ends = np.empty(kk, np.int64)
    starts = np.empty(kk, np.int64)
    run = 0
    for i in range(kk):
        run += nf[i]
        ends[i] = run
        starts[i] = run - nf[i]
    c0 = _cumsum0(x)
    ranges = np.empty((nc, 2), np.int64)
    total = 0
    for c in range(nc):
        ranges[c, 0] = starts[c * k + w0]
        ranges[c, 1] = ends[c * k + k - 1]
        total += ranges[c, 1] - ranges[c, 0]
    kept_period = np.empty(total, np.int64)
    kept_start = np.empty(total, np.int64)
    wait = np.empty(total)
    cx = np.empty(total)
    pos = np.empty(total, np.int64)
    o = 0
    for c in range(nc):
        first = c * k + w0  # the chain's first measured period: its requests' positions count from it
        for per in range(first, c * k + k):
            s = starts[per]
            base = c0[s]
            idle = empty[per]
            for q in range(s, ends[per]):  # the period's requests (`idx[q] == per`)
                kept_period[o] = per
                kept_start[o] = s
                wait[o] = 0.0 if idle else itr * (1.0 - u[q])
                cx[o] = c0[q + 1] - base
                pos[o] = per - first
                o += 1
    sx = np.empty(kk)
    for i in range(kk):
        sx[i] = c0[ends[i]] - c0[starts[i]]
    return starts, ends, ranges, kept_period, kept_start, wait, cx, pos, sx.reshape(nc, k)


@_compiled
def lock_segments(
    hold: np.ndarray,
    util: np.ndarray,
    coin: np.ndarray,
    e: np.ndarray,
    starts: np.ndarray,
    ends: np.ndarray,
    ranges: np.ndarray,
    kept_start: np.ndarray,
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Each request's time at the global critical section at each frequency -- the hold plus, when its `coin`
    is under the utilisation, an M/M/1 wait `e` x hold / (1 - U) -- summed per period (F, KK), and for the
    measured requests (F, Rk) the running sum within their batch up to and including them and the wait alone.
    The sums are differences of one running sum per frequency, as numpy's cumulative sum forms it."""
    nf = hold.size
    r = coin.size
    kk = starts.size
    rk = kept_start.size
    slock = np.empty((nf, kk))
    clock = np.empty((nf, rk))
    kept_wait = np.empty((nf, rk))
    c0 = np.empty(r + 1)
    wait = np.empty(r)
    for fi in range(nf):
        hf = hold[fi]
        uf = util[fi]
        c0[0] = 0.0
        run = 0.0
        for j in range(r):
            w = e[j] * hf / (1.0 - uf) if coin[j] < uf else 0.0
            wait[j] = w
            v = hf + w
            run = v if j == 0 else run + v
            c0[j + 1] = run
        for i in range(kk):
            slock[fi, i] = c0[ends[i]] - c0[starts[i]]
        o = 0
        for c in range(ranges.shape[0]):
            for q in range(ranges[c, 0], ranges[c, 1]):
                clock[fi, o] = c0[q + 1] - c0[kept_start[o]]
                kept_wait[fi, o] = wait[q]
                o += 1
    return slock, clock, kept_wait


@_compiled
def latencies(
    offset: np.ndarray,
    kept_period: np.ndarray,
    wait: np.ndarray,
    sa: np.ndarray,
    cx: np.ndarray,
    clock: np.ndarray,
    net: float,
) -> np.ndarray:
    """(F, Rk) the measured requests' latencies: ((((wait + the batch's offset to app start) + app work up to
    and including the request) + its lock time) + the network), summed in that order as numpy's in-place adds
    did (`offset` (F, KK) per period, the rest per measured request)."""
    nf = offset.shape[0]
    rk = kept_period.size
    lat = np.empty((nf, rk))
    for fi in range(nf):
        saf = sa[fi]
        for o in range(rk):
            v = offset[fi, kept_period[o]] + wait[o]
            v = v + saf * cx[o]
            v = v + clock[fi, o]
            lat[fi, o] = v + net
    return lat
