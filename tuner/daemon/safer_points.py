"""Which operating point is safer for latency, and what to hold when the load is near idle.

A lower ITR (interrupts sooner) and a higher DVFS frequency (serves faster) each shorten the tail, so
points are partially ordered: `a` is at least as safe as `b` when `a.itr_us <= b.itr_us` and
`a.dvfs_ghz >= b.dvfs_ghz`. Two points where one has the lower ITR and the other the higher frequency are
incomparable: neither is known to be safer. A guardrail revert may only move to a point at least as safe
as the one it leaves (`safe_revert`); the safe corner (lowest ITR, highest frequency) is at least as safe as
every point.
"""

from __future__ import annotations

from collections.abc import Iterable

from actuators.host import KnobSpace, OperatingPoint
from tuner.daemon.plain import safe_corner


def at_least_as_safe(a: OperatingPoint, b: OperatingPoint) -> bool:
    """`a` >= `b` in the safety partial order (lower-or-equal ITR and higher-or-equal frequency)."""
    return a.itr_us <= b.itr_us and a.dvfs_ghz >= b.dvfs_ghz - 5e-4


def safe_revert(
    current: OperatingPoint | None, candidates: Iterable[OperatingPoint], space: KnobSpace
) -> OperatingPoint:
    """The first of `candidates` (most preferred first) that is strictly safer than `current`; else the safe
    corner. With no current point (the OS in charge) any candidate is allowed."""
    corner = safe_corner(space)
    for p in candidates:
        if current is None or (at_least_as_safe(p, current) and p != current):
            return p
    return corner


def idle_point(space: KnobSpace, itr_us: int | None = None) -> OperatingPoint:
    """The point held while the load is near idle: the lowest frequency (little work to do) with the
    lowest ITR, unless `itr_us` (configured) says otherwise. At near-zero load the queue is empty, so the
    tail is one request's service time plus the interrupt delay; a low ITR keeps that delay small, and the
    low frequency is what saves power when the cores are idle anyway."""
    itr = space.check_itr(itr_us) if itr_us is not None else space.itr_us[0]
    return OperatingPoint(itr, space.dvfs_ghz[0])
