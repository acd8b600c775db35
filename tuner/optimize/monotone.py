"""The latency structure that holds across plants, as pure functions of measured evidence (no Ax, no torch).

On every plant the project models -- and on the hardware behind them (a queue served by a core at some clock,
interrupts moderated by ITR) -- two orderings hold whatever the latency's shape or tail:

* at a fixed ITR the percentile does not rise with the core's frequency (a faster core serves no slower);
* at a fixed point it does not fall as the load rises (a busier queue waits no less).

So a point measured within the limit at load L' vouches, exactly, for the same ITR at any higher frequency at
any load up to L' (`known_safe`), and a point measured over the SLA at load L' condemns the same ITR at any
lower frequency at any load from L' up (`known_unsafe`). The ITR axis has no such order (above the range where
per-interrupt overhead dominates the percentile rises with ITR, below it an interrupt per request can raise it
as well), so neither rule reaches across ITRs; the safety filter's distance rules (`acquisition.supported`,
`acquisition.vetoed`) do that, with a radius. Coordinates are the optimiser's normalised (itr, dvfs) in [0, 1]^2
and loads the model's normalised `load`.

`step_path` is the one-step move these orderings give after a first trial over the SLA: the same ITR, one
frequency up, and on up only past cells already measured or condemned.
"""

from __future__ import annotations

from collections.abc import Collection, Sequence

import numpy as np

#: Two normalised ITR coordinates closer than this are the same grid column.
SAME_ITR = 1e-9


def _same_column(cand: np.ndarray, ev: np.ndarray) -> np.ndarray:
    """(n x m) True where candidate n and evidence m share an ITR."""
    return np.abs(cand[:, None, 0] - ev[None, :, 0]) <= SAME_ITR


def known_safe(
    cand: np.ndarray | Sequence[Sequence[float]],
    ev: np.ndarray | Sequence[Sequence[float]],
    ev_load: np.ndarray | Sequence[float],
    ev_met: np.ndarray | Sequence[bool],
    load: float | None,
    load_tol: float = 0.0,
) -> np.ndarray:
    """Which candidates the orderings prove within the limit: some point measured within it (`ev_met`) has the
    candidate's ITR, a frequency at most the candidate's, and a load at least `load` x (1 - `load_tol`) (any load
    when `load` is None; `load_tol` absorbs the noise of a load measured twice)."""
    c = np.asarray(cand, dtype=float).reshape(-1, 2)
    e = np.asarray(ev, dtype=float).reshape(-1, 2)
    use = np.asarray(ev_met, dtype=bool).copy()
    if load is not None:
        use &= np.asarray(ev_load, dtype=float) >= load * (1.0 - load_tol) - 1e-12
    if not use.any():
        return np.zeros(len(c), dtype=bool)
    e = e[use]
    faster = c[:, None, 1] >= e[None, :, 1] - 1e-12
    return (_same_column(c, e) & faster).any(axis=1)


def known_unsafe(
    cand: np.ndarray | Sequence[Sequence[float]],
    ev: np.ndarray | Sequence[Sequence[float]],
    ev_load: np.ndarray | Sequence[float],
    ev_broke: np.ndarray | Sequence[bool],
    load: float | None,
    load_tol: float = 0.0,
) -> np.ndarray:
    """Which candidates the orderings prove over the SLA: some point measured over it (`ev_broke`) has the
    candidate's ITR, a frequency at least the candidate's, and a load at most `load` x (1 + `load_tol`) (any load
    when `load` is None)."""
    c = np.asarray(cand, dtype=float).reshape(-1, 2)
    e = np.asarray(ev, dtype=float).reshape(-1, 2)
    use = np.asarray(ev_broke, dtype=bool).copy()
    if load is not None:
        use &= np.asarray(ev_load, dtype=float) <= load * (1.0 + load_tol) + 1e-12
    if not use.any():
        return np.zeros(len(c), dtype=bool)
    e = e[use]
    slower = c[:, None, 1] <= e[None, :, 1] + 1e-12
    return (_same_column(c, e) & slower).any(axis=1)


def step_path(broke: tuple[int, int], n_freq: int, skip: Collection[tuple[int, int]] = ()) -> list[tuple[int, int]]:
    """Grid cells (itr index, dvfs index) one step safer than the cell `broke` measured over the SLA, cheapest
    first: its ITR at each higher frequency, without the cells in `skip` (measured in this retune, or condemned).
    The first is the cheapest point the orderings do not condemn in the direction they make safer."""
    i, j = broke
    return [(i, k) for k in range(j + 1, n_freq) if (i, k) not in skip]


def step_down(
    met: Sequence[tuple[tuple[int, int], float, float]],
    tried: Collection[tuple[int, int]],
    freqs: Sequence[float],
    headroom: float,
) -> tuple[int, int] | None:
    """The next cell of a walk down in frequency (the safe start's, once its line has nothing new to try): from the
    cells measured within the limit, given as (cell, power, latency / limit), cheapest first, one frequency step
    below the first whose lower neighbour is untried and whose latency, scaled by the square of the frequency ratio
    (a core's service time by the clock, its queue by the utilisation again), stays within `headroom` of the limit.
    A lower neighbour measured within the limit is itself a base, so the walk goes on from it; one measured over
    the limit ends the walk at that ITR. None when no base qualifies. `freqs` ascend with the dvfs index."""
    for (i, j), _, ratio in sorted(met, key=lambda e: (e[1], e[0])):
        if j <= 0 or (i, j - 1) in tried:
            continue
        if ratio * (freqs[j] / freqs[j - 1]) ** 2 <= headroom:
            return (i, j - 1)
    return None
