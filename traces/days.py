"""Days of other shapes than the bundled sample, from the trace synthesis's rate model, as load schedules.

`traces.synth` writes a trace whose rate is a diurnal shape times minute-scale log-normal AR(1) noise; a day
here is that rate model with another shape (or heavier noise), binned into windows and scaled to a peak --
the rate the synthesised trace would have, without writing millions of rows. Each day is deterministic (its
own fixed seed; a replay's seed varies the host, not the day, as with the bundled sample). The bundled day
itself is the sample trace file (`traces.schedule.sample_trace_path`). Which day is in the tuning half and
which in the test half is `tuner.replay.zoo.ZOO`.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from core.errors import TunerError
from traces.schedule import Schedule, Window
from traces.synth import DAY_S, NOISE_RHO, NOISE_SIGMA, diurnal_shape

SAMPLE = "sample"


def _gauss(h: np.ndarray, centre: float, width: float) -> np.ndarray:
    d = (h - centre + 12.0) % 24.0 - 12.0  # on the clock: 23:00 is near 01:00
    out: np.ndarray = np.exp(-0.5 * (d / width) ** 2)
    return out


def _two_peaks(h: np.ndarray) -> np.ndarray:
    """A morning and an evening peak (11:00 and 20:00) over a low night, a trough near 15:30 between them."""
    return 0.35 + 0.65 * _gauss(h, 11.0, 1.8) + 0.6 * _gauss(h, 20.0, 1.8)


def _flat_high(h: np.ndarray) -> np.ndarray:
    """The synthesis's diurnal shape at a fifth of its swing around a high level: the day stays within ~80-100 %."""
    out: np.ndarray = 4.0 + 0.2 * (diurnal_shape(h) - 1.0) * 5.0 / 2.0
    return out


#: (hour, height over the diurnal level) of the spikes of `spiky`: an hour at up to ~2x its neighbours.
SPIKES = ((3.0, 0.9), (9.0, 1.0), (14.0, 0.8), (22.0, 0.7))


def _spiky(h: np.ndarray) -> np.ndarray:
    """The synthesis's diurnal shape with four one-hour spikes (`SPIKES`)."""
    out = diurnal_shape(h).copy()
    for at, height in SPIKES:
        out += height * ((h >= at) & (h < at + 1.0))
    return out


def _no_return(h: np.ndarray) -> np.ndarray:
    """A load that climbs all day and never comes back to an earlier level (30 % -> 100 %, steepest early)."""
    out: np.ndarray = 0.3 + 0.7 * np.sqrt(np.clip(h, 0.0, 24.0) / 24.0)
    return out


@dataclass(frozen=True)
class Day:
    """A day's rate model: its shape over hours since midnight, days, noise, seed, and provenance."""

    name: str
    shape: Callable[[np.ndarray], np.ndarray]
    source: str
    days: int = 1
    noise_sigma: float = NOISE_SIGMA
    seed: int = 0
    monotone: bool = False  # the rate never falls (noise folded in as a running maximum)


DAYS: dict[str, Day] = {
    d.name: d
    for d in (
        Day("two-peaks", _two_peaks, "two Gaussian peaks (11:00, 20:00) over a night at 35 %; synthesis noise", seed=1),
        Day("flat-high", _flat_high, "the synthesis's diurnal shape at a fifth of its swing: within ~80-100 %", seed=2),
        Day("spiky", _spiky, "the synthesis's diurnal shape plus four one-hour spikes (03, 09, 14, 22 h)", seed=3),
        Day(
            "noisy-3",
            diurnal_shape,
            "three days of the synthesis's diurnal shape with 3x its minute noise (sigma 0.18)",
            days=3,
            noise_sigma=3 * NOISE_SIGMA,
            seed=4,
        ),
        Day(
            "no-return",
            _no_return,
            "a climb from 30 % to the peak that never returns (running max)",
            seed=5,
            monotone=True,
        ),
    )
}


def day(name: str) -> Day:
    """The day `name`; a one-line error naming the known ones (and the bundled `sample`)."""
    try:
        return DAYS[name]
    except KeyError:
        raise TunerError(f"day {name!r}: expected {SAMPLE} or one of {', '.join(DAYS)}") from None


def rate(d: Day, seconds: int) -> np.ndarray:
    """Expected requests per second over `seconds`: the shape times the synthesis's AR(1) minute noise (seeded)."""
    rng = np.random.default_rng([d.seed, 52])
    minutes = -(-seconds // 60)
    eps = rng.standard_normal(minutes)
    x = np.empty(minutes)
    x[0] = eps[0] * d.noise_sigma
    scale = d.noise_sigma * math.sqrt(1 - NOISE_RHO**2)
    for m in range(1, minutes):
        x[m] = NOISE_RHO * x[m - 1] + scale * eps[m]
    t = np.arange(seconds)
    out: np.ndarray = d.shape((t % DAY_S) / 3600.0) * np.exp(x - d.noise_sigma**2 / 2)[t // 60]
    if d.monotone:
        out = np.maximum.accumulate(out)
    return out


def day_schedule(
    name: str, *, bin_s: float = 3600.0, hours: float | None = None, peak_qps: float = 600_000.0
) -> Schedule:
    """Day `name` binned into `bin_s` windows (mean rate per bin), the busiest scaled to `peak_qps`; the first
    `hours` (default all its days). A multi-day day's windows carry their `day`."""
    d = day(name)
    if not (bin_s >= 1 and math.isfinite(bin_s)) or DAY_S % bin_s:
        raise TunerError(f"day {name!r}: bin {bin_s:g} s: expected a whole divisor of a day (e.g. 3600, 300)")
    total_h = 24.0 * d.days if hours is None else float(hours)
    if not (0 < total_h <= 24.0 * d.days):
        raise TunerError(f"day {name!r}: hours {total_h:g}: expected (0, {24 * d.days}]")
    if not (peak_qps > 0 and math.isfinite(peak_qps)):
        raise TunerError(f"day {name!r}: peak {peak_qps!r}: expected a QPS > 0")
    n = int(total_h * 3600 // bin_s)
    if n < 1:
        raise TunerError(f"day {name!r}: {total_h:g} h is shorter than one {bin_s:g} s window")
    r = rate(d, int(DAY_S * d.days))
    step = int(bin_s)
    bins = r[: int(DAY_S * d.days) // step * step].reshape(-1, step).mean(axis=1)
    factor = peak_qps / float(bins.max())  # the whole day's busiest bin, whatever part is replayed
    windows = tuple(
        Window(
            index=i,
            start_s=float(i * step),
            seconds=float(step),
            qps=float(bins[i] * factor),
            day=int(i * step // DAY_S),
        )
        for i in range(n)
    )
    return Schedule(
        windows=windows,
        source=f"day {name} (synthesised: {d.source})",
        scale=factor,
        raw_peak_qps=float(bins.max()),
        days=d.days,
    )
