"""Reward functions: pure maps from one measured window to the number the optimiser minimises.

Notation: J = energy per second of the measured window (J/s = mean power, W), p = the chosen latency
percentile of the window (µs), S = the SLA (µs). Every reward shares the SLA penalty

    g(p) = 1                if p <= S
    g(p) = p - S + 1        if p >  S        (linear in the violation, in µs; g(S + 1 µs) = 2)

J is normalised per second so that rewards stay comparable when trial windows differ in length; with the
dissertation's fixed-length windows it is its "measured_joules" up to a constant factor.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass


def sla_penalty(latency_us: float, sla_us: float) -> float:
    """g(p): 1 when p <= S, else p - S + 1 (the linear SLA penalty of dissertation eq. 7.2)."""
    return 1.0 if latency_us <= sla_us else latency_us - sla_us + 1.0


def sla_linear(joules: float, latency_us: float, sla_us: float) -> float:
    """`sla-linear` (dissertation ch. 7.3.2, eq. 7.2, as its authors' code applies it): R = J * g(p).

    R = J when p <= S, R = J * (p - S + 1) when p > S. The formula as printed, R = J * (p - S + 1)
    without the condition, goes to zero at p = S - 1 and NEGATIVE below it, so a minimiser would chase
    points far under the SLA (or, minimising, reward wasting energy when latency is low); the condition
    makes every point under the SLA compete on energy alone.
    """
    return joules * sla_penalty(latency_us, sla_us)


def edp(joules: float, latency_us: float, sla_us: float) -> float:
    """`edp`: energy-delay product with the same SLA handling, R = J * p * g(p)."""
    return joules * latency_us * sla_penalty(latency_us, sla_us)


def latency(joules: float, latency_us: float, sla_us: float) -> float:
    """`latency` (dissertation fig. 7.7, minimise the tail): R = p * g(p); energy is ignored."""
    del joules
    return latency_us * sla_penalty(latency_us, sla_us)


def constrained(joules: float, latency_us: float, sla_us: float) -> float:
    """`constrained`: minimise R = J subject to p <= S.

    The optimiser gives Ax energy (power) and latency as two separately modelled metrics, the SLA as an
    outcome constraint `latency <= S`; this value is the objective only (feasibility is judged apart).
    """
    del latency_us, sla_us
    return joules


@dataclass(frozen=True)
class Reward:
    """A named reward: `fn(J, p, S)`, and whether the SLA goes to Ax as an outcome constraint."""

    name: str
    fn: Callable[[float, float, float], float]
    constrained: bool
    summary: str

    def __call__(self, joules: float, latency_us: float, sla_us: float) -> float:
        return self.fn(joules, latency_us, sla_us)

    def sem(self, joules: float, joules_sem: float, latency_us: float, latency_sem: float, sla_us: float) -> float:
        """Standard error of R by the delta method: sqrt((dR/dJ * sem_J)^2 + (dR/dp * sem_p)^2).

        Partial derivatives are central differences (exact for these piecewise polynomials away from
        p = S, where the one-sided slope above the SLA is used).
        """
        hj = max(abs(joules), 1.0) * 1e-6
        dj = (self.fn(joules + hj, latency_us, sla_us) - self.fn(joules - hj, latency_us, sla_us)) / (2 * hj)
        hp = max(abs(latency_us), 1.0) * 1e-6
        if latency_us == sla_us:
            dp = (self.fn(joules, latency_us + hp, sla_us) - self.fn(joules, latency_us, sla_us)) / hp
        else:
            dp = (self.fn(joules, latency_us + hp, sla_us) - self.fn(joules, latency_us - hp, sla_us)) / (2 * hp)
        return math.hypot(dj * joules_sem, dp * latency_sem)


#: Every reward by name (the CLI, config and optimiser all select from this registry).
REGISTRY: dict[str, Reward] = {
    r.name: r
    for r in (
        Reward("constrained", constrained, True, "minimise energy; percentile <= SLA as an Ax outcome constraint"),
        Reward("sla-linear", sla_linear, False, "J x (p - SLA + 1) above the SLA, J under it (eq. 7.2)"),
        Reward("edp", edp, False, "energy x latency, same SLA penalty"),
        Reward("latency", latency, False, "minimise the percentile (fig. 7.7), same SLA penalty"),
    )
}


def get_reward(name: str) -> Reward:
    """The reward called `name`; `ValueError` with the known names otherwise."""
    try:
        return REGISTRY[name]
    except KeyError:
        raise ValueError(f"unknown reward {name!r}: expected one of {', '.join(sorted(REGISTRY))}") from None
