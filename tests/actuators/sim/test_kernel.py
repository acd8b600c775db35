"""The simulator's compiled period walk equals a plain, line-by-line Python reading of the model bit for bit.

tests/actuators/sim/test_model_outputs.py pins the whole simulator's outputs on real runs; these check the kernels on
small random inputs that reach every branch (busy and idle batches, warm-up, several frequencies and cores, every C-state) and
say what each one computes, in the order the model defines it.
"""

from __future__ import annotations

import numpy as np
import pytest

from actuators.sim import kernel
from actuators.sim.kernel import event_positions, kept_requests, latencies, lock_segments, serve_periods

TARGETS = np.array([0.0, 2.0, 20.0, 211.0, 345.0])
EXITS = np.array([0.0, 2.0, 10.0, 80.0, 104.0])


def _np_max(a: float, b: float) -> float:
    return a if a >= b else b  # np.maximum(a, b) without NaNs


def _fifo_starts(w: list[float], t: np.ndarray) -> list[float]:
    """A FIFO pass (Lindley): start = max over j <= k of (t_j - work before j) + work before k."""
    cum, top, starts = 0.0, 0.0, []
    for k, wk in enumerate(w):
        cum += wk
        before = cum - wk
        top = t[k] - before if k == 0 else _np_max(top, t[k] - before)
        starts.append(top + before)
    return starts


def _reference_walk(n, t, gaps, sx, slock, work, poll, idle_cost, history, w0):
    """The period walk as the model states it, one period at a time, in plain Python floats."""
    h, ss, sa = work
    nf, nc, nk = slock.shape
    offset, w2s = np.empty(slock.shape), np.empty(slock.shape)
    book = np.empty((nf, nc, nk - 1))
    res, intr = np.zeros((nf, TARGETS.size)), np.zeros(nf, np.int64)
    for fi in range(nf):
        for c in range(nc):
            base = [float(n[c, k]) * ss[fi] + sa[fi] * sx[c, k] + slock[fi, c, k] for k in range(nk)]
            # first FIFO pass: interrupt work on every batch
            w1 = [b + h[fi] for b in base]
            st1 = _fifo_starts(w1, t[c])
            busy = [st1[k] > t[c, k] + 1e-9 for k in range(nk)]
            idle1 = [1e9] + [_np_max(t[c, k] - (st1[k - 1] + w1[k - 1]), 0.0) for k in range(1, nk)]
            # menu governor: the shortest of the last `history` gaps the core really idled (1e9 before any)
            actual: list[float] = []
            state = []
            for k in range(nk):
                pred = min(([1e9] * history + actual)[-history:])
                state.append(int(np.sum(pred >= TARGETS)) - 1)
                if not busy[k]:
                    actual.append(idle1[k])
            wake = [0.0 if busy[k] else EXITS[state[k]] for k in range(nk)]
            irq = [poll[fi] if busy[k] else h[fi] for k in range(nk)]
            w2 = [base[k] + irq[k] + wake[k] for k in range(nk)]
            st2 = _fifo_starts(w2, t[c])
            idle2 = [0.0 if busy[0] else gaps[c, 0]]
            for k in range(1, nk):
                gap = _np_max(t[c, k] - (st2[k - 1] + w2[k - 1]), 0.0)
                post = 0.0 if busy[k] else idle_cost[fi]  # the core idles after k-1 unless k found it busy
                book[fi, c, k - 1] = min(post, gap)
                idle2.append(gap - book[fi, c, k - 1])
            for k in range(nk):
                offset[fi, c, k] = st2[k] - t[c, k] + wake[k] + irq[k] + float(n[c, k]) * ss[fi]
                w2s[fi, c, k] = w2[k]
                if k >= w0:
                    res[fi, state[k]] += idle2[k]
                    intr[fi] += not busy[k]
    return offset, w2s, book, res, intr


def _periods(rng: np.random.Generator, nc: int, nk: int, itr: float, lam: float):
    n = rng.poisson(lam * itr, size=(nc, nk))
    gaps = itr + np.where(n == 0, rng.exponential(size=(nc, nk)) / lam, 0.0)
    return n, np.cumsum(gaps, axis=1), gaps, rng.gamma(1.57, 1 / 1.57, size=(nc, nk)) * np.maximum(n, 1)


@pytest.mark.parametrize(
    ("nf", "nc", "nk", "itr", "lam", "w0", "some_busy"),
    [(1, 1, 400, 2.0, 0.05, 0, True), (3, 4, 300, 20.0, 0.2, 32, True), (2, 2, 200, 300.0, 0.02, 10, False)],
)
def test_the_period_walk_equals_the_plain_reading_bit_for_bit(
    nf: int, nc: int, nk: int, itr: float, lam: float, w0: int, some_busy: bool
) -> None:
    rng = np.random.default_rng(nk)
    n, t, gaps, sx = _periods(rng, nc, nk, itr, lam)
    slock = rng.exponential(size=(nf, nc, nk)) * 0.3
    f = np.linspace(1.2, 2.9, nf)
    work = (1.5 / f + 0.2, 0.8 / f + 0.1, 2.0 / f + 0.5)
    args = (n, t, gaps, sx, slock, work, 0.3 / f, 1.1 / f)
    got = serve_periods(*args, TARGETS, EXITS, 4, w0)
    want = _reference_walk(*args, 4, w0)
    for g, w in zip(got, want, strict=True):
        assert np.array_equal(g, w)
    # the inputs reach both kinds of batch where they should (every idle one raises an interrupt)
    assert 0 < got[4].sum() and (got[4].sum() < nf * nc * (nk - w0)) == some_busy
    assert np.count_nonzero(got[3]) >= 2


def test_the_period_walk_refuses_what_it_cannot_model() -> None:
    n, t, gaps, sx = _periods(np.random.default_rng(0), 1, 10, 20.0, 0.1)
    slock, one = np.zeros((1, 1, 10)), np.ones(1)
    with pytest.raises(ValueError, match="menu_history must be >= 1"):
        serve_periods(n, t, gaps, sx, slock, (one, one, one), one, one, TARGETS, EXITS, 0, 0)
    with pytest.raises(ValueError, match="ascending"):
        serve_periods(n, t, gaps, sx, slock, (one, one, one), one, one, TARGETS[::-1].copy(), EXITS, 4, 0)


def test_event_positions_are_normalised_exponential_spacings_per_period() -> None:
    rng = np.random.default_rng(5)
    evf = rng.integers(0, 4, size=300)
    e, extra = rng.exponential(size=int(evf.sum())), rng.exponential(size=evf.size)
    u = event_positions(evf, e, extra)
    ce = np.concatenate(([0.0], np.cumsum(e)))
    ends = np.cumsum(evf)
    starts = ends - evf
    idx = np.repeat(np.arange(evf.size), evf)  # each event's period
    tot = (ce[ends] - ce[starts]) + extra
    assert np.array_equal(u, (ce[1:] - ce[starts][idx]) / tot[idx])
    assert np.all((u > 0) & (u < 1))
    assert all(np.all(np.diff(u[idx == i]) > 0) for i in range(evf.size))  # sorted within a period


def test_kept_requests_are_the_measured_periods_requests() -> None:
    rng = np.random.default_rng(8)
    nc, k, w0, itr = 3, 50, 5, 20.0
    nf = rng.integers(0, 3, size=nc * k)
    r = int(nf.sum())
    idx = np.repeat(np.arange(nf.size), nf)
    u, x, empty = rng.random(r), rng.gamma(1.57, size=r), rng.random(nf.size) < 0.3
    starts, ends, ranges, period, start, wait, cx, pos, sx = kept_requests(u, nf, empty, x, k, w0, itr)
    assert np.array_equal(ends, np.cumsum(nf)) and np.array_equal(starts, ends - nf)
    c0 = np.concatenate(([0.0], np.cumsum(x)))
    keep = np.concatenate([np.arange(lo, hi) for lo, hi in ranges])
    assert np.array_equal(keep, np.flatnonzero(idx % k >= w0))  # every measured period's requests, no other
    assert np.array_equal(period, idx[keep]) and np.array_equal(start, starts[idx[keep]])
    assert np.array_equal(wait, np.where(empty[idx[keep]], 0.0, itr * (1.0 - u[keep])))
    assert np.array_equal(cx, c0[keep + 1] - c0[start])
    assert np.array_equal(pos, idx[keep] % k - w0)
    assert np.array_equal(sx, (c0[ends] - c0[starts]).reshape(nc, k))


def test_lock_time_is_the_hold_plus_an_mm1_wait_summed_per_batch() -> None:
    rng = np.random.default_rng(9)
    nf = rng.integers(0, 4, size=40)
    r = int(nf.sum())
    ends = np.cumsum(nf)
    starts = ends - nf
    ranges = np.array([[starts[4], ends[19]], [starts[24], ends[39]]])
    keep = np.concatenate([np.arange(lo, hi) for lo, hi in ranges])
    kept_start = starts[np.repeat(np.arange(nf.size), nf)][keep]
    hold, util = np.array([0.4, 0.6]), np.array([0.3, 0.999])
    coin, e = rng.random(r), rng.exponential(size=r)
    slock, clock, kept_wait = lock_segments(hold, util, coin, e, starts, ends, ranges, kept_start)
    wait = np.where(coin[None, :] < util[:, None], e[None, :] * hold[:, None] / (1.0 - util[:, None]), 0.0)
    c0 = np.concatenate((np.zeros((2, 1)), np.cumsum(hold[:, None] + wait, axis=1)), axis=1)
    assert np.array_equal(slock, c0[:, ends] - c0[:, starts])
    assert np.array_equal(clock, c0[:, keep + 1] - c0[:, kept_start])
    assert np.array_equal(kept_wait, wait[:, keep])


def test_latency_is_wait_offset_app_work_lock_and_network_added_in_that_order() -> None:
    rng = np.random.default_rng(10)
    offset, clock = rng.exponential(size=(2, 30)) * 50, rng.exponential(size=(2, 200))
    period = np.sort(rng.integers(0, 30, size=200))
    wait, cx, sa = rng.random(200) * 20, rng.gamma(1.57, size=200), np.array([3.0, 1.7])
    lat = latencies(offset, period, wait, sa, cx, clock, 25.0)
    want = np.take(offset, period, axis=1)
    want += wait
    want += sa[:, None] * cx[None]
    want += clock
    want += 25.0
    assert np.array_equal(lat, want)


def test_kernels_compile_without_a_writable_cache(monkeypatch: pytest.MonkeyPatch) -> None:
    """A read-only installation (no cache directory numba can write) compiles in each process instead of
    failing at import."""
    calls: list[bool] = []

    def fake_njit(cache: bool, nogil: bool):
        calls.append(cache)
        if cache:
            raise RuntimeError("cannot cache function 'f': no locator available for file 'kernel.py'")
        return lambda fn: fn

    monkeypatch.setattr(kernel, "njit", fake_njit)
    compiled = kernel._compiled(lambda x: x + 1)
    assert calls == [True, False]
    assert compiled(1) == 2
