"""Statistically sized measurement windows: measure a trial only as long as its percentile needs.

A fixed 20 s window is far more than a p99 at 600K QPS needs and can be too little at a light load.
CONFIRM (Maricq et al., OSDI 2018, sec. 5) sizes experiments by growing them until the nonparametric
confidence interval of the statistic fits within +-r % of its estimate; Antoniou et al. apply the same
rule to memcached tail latency. `measure_window` does this inside one trial:

* `mode="fixed"`: one `host.measure(max_s)` (today's behaviour).
* `mode="adaptive"`: measure `min_s` (as `batches` equal chunks), then grow in further chunks, pooling
  them (`Measurement.merge`), until the CI of the chosen percentile (at `confidence`) has a half-width
  <= `ci_pct` % of the estimate, or `max_s` is reached. The half-width is the larger of two:
  the order-statistic CI of the pooled samples (CONFIRM's rule; valid for independent samples), and a
  batch-means CI across the chunks (each chunk's own percentile, weighted by its length, Student t with
  k-1 degrees of freedom) -- which also sees what makes whole windows differ: load bursts, correlated
  queueing. On the simulator with 0.5 s minimum windows the order-statistic rule alone reports CIs
  that miss the noise-free p99 in 19 % of windows (47 % at 700K QPS), the combined rule in 1.5 %
  (docs/optimizer-windows.md, `bench/windows.py`); `batches=1` turns the batch check off. The next chunk is sized from the
  current half-width h assuming
  h ~ 1/sqrt(seconds): total needed ~ elapsed (h / target)^2, plus a 20 % margin, at least
  `min_s / batches`, at most doubling the window (a few noisy chunks with Student's t for few degrees of
  freedom overstate h; doubling bounds the overshoot to 2x what was needed), never past `max_s`. The
  result covers every chunk measured (time, energy, requests). Its `latency_ci_us` (what Ax gets as
  the SEM) is, per percentile, the pooled order-statistic interval widened to the batch-means one
  when the chunks disagree more than their samples say (95 %, with >= 2 chunks). Percentiles and CIs
  come from the exact pooled samples; the result keeps them as an encoded HdrHistogram (`HdrDist`, a
  few kB instead of 4 bytes a sample: trial records keep their measurements), so a later merge of it
  is quantised to 0.1 %.

Two early ends for a point that is over the line (the tuner sets both): `stop_above_us` (the limit its final
choice applies) ends the window at `min_s` once the estimate is above it -- such a point can never be
chosen; `abort_above_us` (the SLA) is a guard that ends it after any chunk, the first included, once the
pooled CI lies wholly above the SLA -- users are not kept over the SLA for min_s to learn what one chunk
showed. The settle period before the window is guarded in its second half only (`guarded_settle`, the tuner's
`settle_guard`): right after a change it can hold the backlog a previous point left, and a guard there would
condemn a good point for its predecessor's queue; after half the settle a point whose percentile's CI lies wholly
above the SLA is clearly breaking it, and the trial ends there with that half as its window.

Hosts whose measurements carry no latency distribution (`latency_dist` None, e.g. a Prometheus or hook
latency source) or no CI (`ci_known` False) cannot be pooled: adaptive mode then falls back to one fixed
window -- the first chunk is followed by one chunk of the rest of `max_s`, and the result's latency
percentiles are those of the longer chunk (time, energy and requests cover both).

A slowly updating energy source (a BMC, a PDU in Prometheus: every 1-5 s) reports `energy_updates`; the window
then also waits (in chunks of `min_s / batches`, past `max_s` if need be, at most `ENERGY_WAIT_LIMIT` x `max_s`)
until the source has updated `energy_updates_needed` times, so the energy is as precise as the latency CI. RAPL and
the simulator report no count (they update every millisecond): their windows are unchanged.

Honest limits: the stopping rule checks the CI width after every chunk (a sequential look); width,
unlike location, barely depends on the estimate, so this costs little coverage, and the bench
(`bench/windows.py`) measures how often the adaptive p99 lands within +-ci_pct of the simulator's
noise-free value. The CI assumes independent samples; consecutive requests through one queue are not,
so on a real host a prober's sparse samples (ms apart) fit the assumption better than a full trace.
No sleeps and no wall clock here: all time is the host's own `measure`.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from typing import Any

from actuators.host import Host, Measurement, merged_energy
from actuators.latency.dist import SampleDist
from core.errors import TunerError
from core.stats import quantile_ci_achievable, relative_half_width
from tuner.optimize.table import WINDOW_MODES

MODES = WINDOW_MODES  # `TunerSettings.window_mode` values, declared with the setting
#: Safety factor on the 1/sqrt(n) extrapolation of the next chunk's length.
GROWTH_MARGIN = 1.2
#: A chunk adds at most this many times the time measured so far (1: the window at most doubles).
MAX_GROWTH = 1.0
#: Waiting for a slow energy source's updates ends at this many times `max_s` whatever it did (a bound, not a goal).
ENERGY_WAIT_LIMIT = 10.0


@dataclass(frozen=True)
class WindowPolicy:
    """How long to measure a trial: fixed `max_s`, or adaptive between `min_s` and `max_s` (seconds)."""

    mode: str = "fixed"
    percentile: float = 99.0
    ci_pct: float = 5.0
    confidence: float = 0.95
    min_s: float = 2.0
    max_s: float = 20.0
    batches: int = 3  # chunks in min_s, and the fewest behind a batch-means CI; 1 = order statistics only
    # adaptive: end the window once the percentile's estimate is above this (µs) after `min_s`: the tuner passes
    # the limit its final choice applies, which a point measured above can never meet, so more seconds there
    # only keep users near or over the SLA (and a saturated point never narrows its CI)
    stop_above_us: float | None = None
    # adaptive: the guard -- end the window after ANY chunk, the first included, once the pooled percentile's
    # 95 % CI lies wholly above this (µs; the tuner passes the SLA): a point clearly breaking the SLA is left
    # after one chunk (min_s / batches) instead of min_s, whatever the model predicted for it
    abort_above_us: float | None = None

    def __post_init__(self) -> None:
        if self.mode not in MODES:
            raise TunerError(f"window mode {self.mode!r}: expected 'fixed' or 'adaptive'")
        if not _finite(self.percentile) or not 0.0 < self.percentile < 100.0:
            raise TunerError(f"window percentile {self.percentile!r}: expected 0 < percentile < 100")
        if not _finite(self.ci_pct) or not self.ci_pct > 0.0:
            raise TunerError(f"window ci_pct {self.ci_pct!r}: expected a CI half-width > 0 % of the estimate")
        if not _finite(self.confidence) or not 0.0 < self.confidence < 1.0:
            raise TunerError(f"window confidence {self.confidence!r}: expected 0 < confidence < 1")
        if not _finite(self.max_s) or not self.max_s > 0.0:
            raise TunerError(f"window max_s {self.max_s!r}: expected seconds > 0")
        if not _finite(self.min_s) or not 0.0 < self.min_s <= self.max_s:
            raise TunerError(f"window min_s {self.min_s!r}: expected 0 < min_s <= max_s ({self.max_s!r} s)")
        if isinstance(self.batches, bool) or not isinstance(self.batches, int) or not 1 <= self.batches <= 100:
            raise TunerError(f"window batches {self.batches!r}: expected an integer 1..100")
        for name in ("stop_above_us", "abort_above_us"):
            v = getattr(self, name)
            if v is not None and not (_finite(v) and v > 0):
                raise TunerError(f"window {name} {v!r}: expected µs > 0 or None")

    @classmethod
    def from_settings(
        cls, settings: Any, percentile: float, stop_above_us: float | None = None, abort_above_us: float | None = None
    ) -> WindowPolicy:
        """The policy of `TunerSettings` (window_mode, window_ci_pct, window_min_s, window_s as max_s).

        `window_min_s` is capped at `window_s`, so a short fixed window setting stays valid.
        """
        max_s = float(settings.window_s)
        return cls(
            mode=str(getattr(settings, "window_mode", "fixed")),
            percentile=float(percentile),
            ci_pct=float(getattr(settings, "window_ci_pct", 5.0)),
            min_s=min(float(getattr(settings, "window_min_s", 2.0)), max_s),
            max_s=max_s,
            stop_above_us=stop_above_us,
            abort_above_us=abort_above_us,
        )


def _finite(x: Any) -> bool:
    return isinstance(x, int | float) and not isinstance(x, bool) and math.isfinite(x)


def percentile_half_width(m: Measurement, percentile: float, confidence: float = 0.95) -> float:
    """Relative CI half-width of `percentile` in `m`, from its distribution; inf when not established.

    inf when `m` has no distribution, when the sample is too small for a two-sided CI at that percentile
    (the interval would only be the sample range), or when the estimate is 0.
    """
    dist = m.latency_dist
    if dist is None or not m.ci_known:
        return math.inf
    q = percentile / 100.0
    if not quantile_ci_achievable(dist.count, q, confidence):
        return math.inf
    est, lo, hi = dist.quantile_ci(q, confidence)
    return relative_half_width(est, lo, hi)


def batch_half_width(
    estimates: Sequence[float], seconds: Sequence[float], reference: float, confidence: float = 0.95
) -> float:
    """Relative half-width of a batch-means CI from per-chunk estimates (pure); inf with < 2 chunks.

    Chunk i of length s_i is taken to estimate the same value with variance sigma^2 / s_i; the weighted
    mean's standard error is sqrt(sigma^2 / S) with sigma^2 = sum s_i (x_i - mean)^2 / (k - 1) and
    S = sum s_i; the half-width is t_{k-1} times that, relative to `reference` (the pooled estimate).
    """
    from scipy.stats import t as student_t

    x = [float(e) for e in estimates]
    w = [float(s) for s in seconds]
    k = len(x)
    if k != len(w):
        raise ValueError("one length per estimate")
    total = sum(w)
    if k < 2 or not total > 0 or not reference > 0:
        return math.inf
    mean = sum(wi * xi for wi, xi in zip(w, x)) / total
    var = sum(wi * (xi - mean) ** 2 for wi, xi in zip(w, x)) / (k - 1)
    se = math.sqrt(var / total)
    return float(student_t.ppf(0.5 + confidence / 2.0, k - 1)) * se / reference


def next_chunk_s(
    elapsed_s: float,
    half_width: float,
    target: float,
    remaining_s: float,
    min_chunk_s: float,
    max_growth: float = MAX_GROWTH,
) -> float:
    """Length of the next chunk (pure): enough, by h ~ 1/sqrt(seconds), to reach `target`, within bounds.

    `half_width` and `target` are relative half-widths; unknown width (inf/nan) asks for the maximum.
    At most `max_growth` x `elapsed_s` (1: the window at most doubles) and `remaining_s`; at least
    `min_chunk_s`; a chunk that would leave less than `min_chunk_s` over takes the rest too.
    """
    if remaining_s <= 0.0:
        return 0.0
    if math.isfinite(half_width) and half_width > 0.0:
        chunk = elapsed_s * ((half_width / target) ** 2 * GROWTH_MARGIN - 1.0)
    else:
        chunk = math.inf
    chunk = max(min(chunk, max_growth * elapsed_s), min_chunk_s)
    if remaining_s - chunk < min_chunk_s:
        chunk = remaining_s
    return min(chunk, remaining_s)


def window_half_width(total: Measurement, chunks: Sequence[Measurement], policy: WindowPolicy) -> float:
    """The half-width the stopping rule uses: max(pooled order-statistic, batch-means across `chunks`)."""
    h = percentile_half_width(total, policy.percentile, policy.confidence)
    if policy.batches < 2 or not math.isfinite(h):
        return h
    if len(chunks) < policy.batches:
        return math.inf
    q = policy.percentile / 100.0
    est = total.latency_dist.quantile_ci(q, policy.confidence)[0]  # type: ignore[union-attr]
    per_chunk = [c.latency_dist.quantile_ci(q, policy.confidence)[0] for c in chunks]  # type: ignore[union-attr]
    return max(h, batch_half_width(per_chunk, [c.seconds for c in chunks], est, policy.confidence))


def with_batch_ci(total: Measurement, chunks: Sequence[Measurement], confidence: float = 0.95) -> Measurement:
    """`total` with each percentile's CI widened to the batch-means CI across `chunks` where that is wider."""
    if len(chunks) < 2 or total.latency_dist is None:
        return total
    cis = dict(total.latency_ci_us)
    for pct, est in total.latency_us.items():
        q = pct / 100.0
        per_chunk = [c.latency_dist.quantile_ci(q, confidence)[0] for c in chunks]  # type: ignore[union-attr]
        b = batch_half_width(per_chunk, [c.seconds for c in chunks], est, confidence) * est
        lo, hi = cis[pct]
        if math.isfinite(b):
            cis[pct] = (min(lo, max(est - b, 0.0)), max(hi, est + b))
    return replace(total, latency_ci_us=cis)


def _finish(total: Measurement, chunks: Sequence[Measurement]) -> Measurement:
    """Batch-widened CIs, and the pooled samples kept as an encoded HdrHistogram (kB, not MB)."""
    out = with_batch_ci(total, chunks)
    dist = out.latency_dist
    if isinstance(dist, SampleDist):
        out = replace(out, latency_dist=dist.to_hdr())
    return out


def measure_window(host: Host, policy: WindowPolicy) -> Measurement:
    """Measure one trial's window under `policy` (module docstring); the result covers all time measured."""
    if policy.mode == "fixed":
        return host.measure(policy.max_s)
    min_chunk = policy.min_s / policy.batches
    first = host.measure(min_chunk)
    if first.latency_dist is None or not first.ci_known:
        return _fallback(host, first, min_chunk, policy)
    chunks = [first]
    total = first
    target = policy.ci_pct / 100.0
    # measured seconds may exceed the requested ones slightly on a real host: budget on what was asked
    asked = min_chunk
    while True:
        if _confidently_above(total, policy):
            return _finish(total, chunks)
        if len(chunks) < policy.batches:
            chunk = min_chunk
        else:
            h = window_half_width(total, chunks, policy)
            if _estimate_above(total, policy):
                return _finish(total, chunks)
            remaining = policy.max_s - asked
            if h <= target or remaining <= 1e-9 * policy.max_s:
                if energy_settled(total, policy) or asked >= ENERGY_WAIT_LIMIT * policy.max_s:
                    return _finish(total, chunks)
                chunk = min_chunk  # the latency is known well enough; the energy source has not updated enough
            else:
                chunk = next_chunk_s(asked, h, target, remaining, min_chunk)
        m = host.measure(chunk)
        asked += chunk
        if m.latency_dist is None or not m.ci_known:
            raise TunerError(
                f"host {getattr(host, 'name', '?')!r}: a window chunk came back without a latency "
                "distribution after the first had one; cannot pool it (use window_mode fixed)"
            )
        total = Measurement.merge(total, m)
        chunks.append(m)


def settle_guard_policy(settings: Any, window: WindowPolicy) -> WindowPolicy | None:
    """The guard `guarded_settle` applies: the adaptive trial window's own (its SLA limit) when the settings'
    `settle_guard` is on and the window is guarded; None otherwise."""
    if window.mode != "adaptive" or window.abort_above_us is None or not getattr(settings, "settle_guard", False):
        return None
    return window


def guarded_settle(
    measure: Callable[[float], Measurement], settle_s: float, guard: WindowPolicy | None
) -> tuple[Measurement | None, Measurement | None]:
    """A trial's settle after a knob change: (settle, window). Without `guard` (or its `abort_above_us`) one
    `measure(settle_s)` and no window (the caller measures it). With it, two halves: the first may hold the
    backlog of the point before and is never judged; if the second's percentile CI lies wholly above the guard's
    limit (the SLA) it is returned as the trial's window -- the point is clearly over the SLA, and measuring it for
    a window too would keep users there for nothing -- and the first half is the settle; otherwise the settle is
    both halves pooled and the window is None. No settle (`settle_s` 0): (None, None)."""
    if settle_s <= 0:
        return None, None
    if guard is None or guard.abort_above_us is None:
        return measure(settle_s), None
    first = measure(settle_s / 2)
    second = measure(settle_s / 2)
    pooled = all(m.latency_dist is not None and m.ci_known for m in (first, second))
    if not pooled:  # a latency source without a distribution: no CI to judge by, nothing to pool
        return _joined(first, second), None
    if _confidently_above(second, guard):
        return first, _finish(second, [second])
    return Measurement.merge(first, second), None


def energy_updates_needed(policy: WindowPolicy) -> int:
    """Source updates a window needs so its energy is as precise as the latency CI it reports: a sampled source
    (a BMC, a PDU) misses at most about one update's energy at the window's edges, so k updates bound the
    relative error by ~1/k -- k >= 100 / ci_pct (20 at the default 5 %)."""
    return math.ceil(100.0 / policy.ci_pct)


def energy_settled(total: Measurement, policy: WindowPolicy) -> bool:
    """Whether the window's energy source updated often enough (always for RAPL and the simulator: None)."""
    return total.energy_updates is None or total.energy_updates >= energy_updates_needed(policy)


def _estimate_above(total: Measurement, policy: WindowPolicy) -> bool:
    """Whether the pooled percentile's estimate is above `policy.stop_above_us`."""
    if policy.stop_above_us is None:
        return False
    est = total.latency_us.get(policy.percentile)
    return est is not None and _finite(est) and est > policy.stop_above_us


def _confidently_above(total: Measurement, policy: WindowPolicy) -> bool:
    """The guard: whether the pooled percentile's 95 % CI (its lower end) is above `policy.abort_above_us`."""
    if policy.abort_above_us is None:
        return False
    est = total.latency_us.get(policy.percentile)
    ci = total.latency_ci_us.get(policy.percentile)
    if est is None or ci is None or not _finite(ci[0]):
        return False
    return min(est, ci[0]) > policy.abort_above_us


def _fallback(host: Host, first: Measurement, first_s: float, policy: WindowPolicy) -> Measurement:
    """No distribution to pool: measure the rest of `max_s` as one window; latency of the longer chunk."""
    rest_s = policy.max_s - first_s
    if rest_s <= 1e-9 * policy.max_s:
        return first
    return _joined(first, host.measure(rest_s))


def _joined(first: Measurement, rest: Measurement) -> Measurement:
    """Two consecutive windows that cannot be pooled as one: time, energy and requests of both, the latency
    percentiles of the longer (the later on a tie)."""
    main = rest if rest.seconds >= first.seconds else first
    seconds = first.seconds + rest.seconds
    return Measurement(
        seconds=seconds,
        offered_qps=(first.offered_qps * first.seconds + rest.offered_qps * rest.seconds) / seconds,
        achieved_qps=(first.achieved_qps * first.seconds + rest.achieved_qps * rest.seconds) / seconds,
        requests=first.requests + rest.requests,
        latency_us=dict(main.latency_us),
        latency_ci_us=dict(main.latency_ci_us),
        energy_j=first.energy_j + rest.energy_j,
        point=main.point,
        ci_known=main.ci_known,
        latency_dist=None,
        **merged_energy([first, rest]),
    )
