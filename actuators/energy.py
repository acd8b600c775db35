"""Pure helpers for wrapping energy counters (RAPL `energy_uj`, `MSR_PKG_ENERGY_STATUS`)."""

from __future__ import annotations


def counter_delta(before: int, after: int, wrap: int) -> int:
    """Increase of a counter that wraps to 0 after `wrap - 1` (at most one wrap between reads)."""
    if wrap <= 0:
        raise ValueError("wrap must be positive")
    if not (0 <= before < wrap and 0 <= after < wrap):
        raise ValueError(f"counter values must be in [0, {wrap})")
    return after - before if after >= before else after + wrap - before


def max_read_interval_s(wrap_joules: float, max_power_w: float) -> float:
    """Longest time between reads that cannot miss a wrap at `max_power_w` (with a 2x safety margin)."""
    return wrap_joules / max_power_w / 2.0
