"""Plants: the simulated host and named variations of it, each calibrated to something the dissertation states.

A plant is `SimParams` (the model's constants), a core count, the peak load a day is scaled to, and optionally a
drift (the constants changing with the host's simulated clock). Every variation changes a few named constants of
the bundled plant and says why (`Plant.source`) and how it differs (`Plant.differs`); none was shaped to make the
tuner look good. Which plant is in the tuning half and which in the test half is `tuner.replay.zoo.ZOO`.

The bundled plant's random streams are untouched: a plant only changes constants, and `SimHost` draws the same
numbers for the same calls whatever its constants (a plant without drift never calls anything new).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import Any

from actuators.sim.params import SimParams
from core.errors import TunerError

BUNDLED = "bundled"
DAY_S = 86_400.0


@dataclass(frozen=True)
class Plant:
    """One simulated plant: the model's constants, cores, the peak load of a day on it, and its provenance."""

    name: str
    params: SimParams
    cores: int = 16
    peak_qps: float = 600_000.0
    source: str = ""
    differs: str = ""
    #: (simulated seconds from which, constants) after the first stage; empty: the host does not drift
    drift: tuple[tuple[float, SimParams], ...] = field(default=())


def _drift_stages(base: SimParams, growth: float, stages: int, span_s: float) -> tuple[tuple[float, SimParams], ...]:
    """`stages` equal steps over `span_s` in which the app work (cycles and memory part) grows to `growth` x."""
    out = []
    for k in range(1, stages):
        g = 1.0 + (growth - 1.0) * k / (stages - 1)
        out.append((span_s * k / stages, replace(base, app_cyc=base.app_cyc * g, app_mem=base.app_mem * g)))
    return tuple(out)


def _steal_stages(
    base: SimParams, shares: tuple[float, ...], hours: tuple[float, ...]
) -> tuple[tuple[float, SimParams], ...]:
    """From each of `hours` on, a co-tenant takes `shares` of every core's cycles: each cycle count / (1 - share)."""
    cyc = ("irq_cyc", "stack_cyc", "app_cyc", "poll_cyc", "idle_cyc", "lock_cyc")
    return tuple(
        (h * 3600.0, replace(base, **{c: getattr(base, c) / (1.0 - s) for c in cyc})) for s, h in zip(shares, hours)
    )


_B = SimParams()

PLANTS: dict[str, Plant] = {
    p.name: p
    for p in (
        Plant(
            BUNDLED,
            _B,
            source="the simulator as shipped: table 5.1's Linux-static optima, table 6.1's Linux fit (docs/simulator.md)",
            differs="nothing (the reference)",
        ),
        Plant(
            "e5-2650",
            replace(_B, f_max=2.6, v_max=0.95),
            source="ch. 3.1: the MOC cluster's other node type, Xeon E5-2650 @ 2.60 GHz (16 cores, 82599 NIC); "
            "voltage so a core's busy power at its top P-state is 0.71x the E5-2690's (the parts' TDPs, 95/135 W)",
            differs="P-states 1.2-2.6 GHz (top 2.6, not 2.9) at 0.80-0.95 V: a lower top frequency and power curve",
        ),
        Plant(
            "ebbrt",
            replace(_B, irq_cyc=_B.irq_cyc / 2, stack_cyc=_B.stack_cyc / 2, idle_cyc=_B.idle_cyc / 2),
            source="table 6.1's EbbRT column: Z ~55 us at every load vs Linux's 86-688 us (a leaner OS path)",
            differs="interrupt, network-stack and idle-entry cycles halved (the OS path), app work unchanged",
        ),
        Plant(
            "cliff-x1.5",
            replace(_B, lock_cyc=_B.lock_cyc * 1.5),
            source="table 6.1's Linux alpha 1.34 at 600K (the DVFS-dependent lock), its cycle part scaled by 1.5",
            differs="the global lock's cycles x1.5: the saturation cliff moves to higher frequency at high load",
        ),
        Plant(
            "silo",
            replace(_B, app_cyc=_B.app_cyc * 4, app_shape=1.0),
            peak_qps=200_000.0,
            source="memcached-silo (ch. 3, fig. 3.5; table 5.1: optima (100, 1.3-1.8) at 50-200K, table 6.2)",
            differs="app cycles x4 with an exponential service time (gamma shape 1.0, not 1.57), day peak 200K",
        ),
        Plant(
            "cores-32",
            _B,
            cores=32,
            source="the bundled plant with 2x cores (two 16-core packages); the same per-request work and lock",
            differs="32 cores: half the load per core at the same QPS, twice the cores' idle and busy power",
        ),
        Plant(
            "tail-heavy",
            replace(_B, app_shape=0.6),
            source="the bundled plant with a heavier service-time tail (gamma shape 0.6: CV 1.29 vs 0.80)",
            differs="service-time CV 1.29 (same mean work): a higher p99 at every point, the SLA's ITR lower",
        ),
        Plant(
            "flat-voltage",
            replace(_B, v_min=1.0, v_max=1.0, c_dyn=_B.c_dyn * 1.21 / 1.0),
            source="the bundled power curve without voltage scaling (1.0 V at every P-state), c_dyn rescaled so "
            "power at 2.9 GHz is as before within 6 %",
            differs="busy power linear in f (no V^2 saving at low f): slowing the clock saves less",
        ),
        Plant(
            "release",
            _B,
            drift=(
                (8 * 3600.0, replace(_B, app_cyc=_B.app_cyc * 1.25, app_mem=_B.app_mem * 1.25)),
                (16 * 3600.0, _B),
            ),
            source="the bundled plant with a software release at 08:00 that makes each request's app work 1.25x "
            "and its rollback at 16:00 (a step, not a ramp); both stages' app work within table 6.1's Linux Z range",
            differs="app work x1.25 from hour 8 to hour 16 (simulated clock), then as bundled: the optimum moves "
            "up at once and back",
        ),
        Plant(
            "lognormal",
            replace(_B, app_shape=1.0, app_dist="lognormal"),
            source="the bundled plant with a lognormal service time (CV 1.0, sigma 0.83): another tail family than "
            "tail-heavy's gamma, lighter at p99 (4.9x the mean work vs 6.0x) and as heavy at p99.9 (9.3x vs 9.6x)",
            differs="app work lognormal with CV 1.0 (same mean work; the bundled gamma's CV is 0.80): a tail "
            "that grows faster from p99 to p99.9",
        ),
        Plant(
            "steal",
            _B,
            drift=_steal_stages(_B, (0.05, 0.10, 0.15), (6.0, 12.0, 18.0)),
            source="the bundled plant sharing its cores with a co-tenant that takes 5, 10, then 15 % of every core's "
            "cycles from 06:00, 12:00 and 18:00 (CPU steal on a shared host; the tenant's own power not counted)",
            differs="every cycle count (interrupt, stack, app, poll, idle entry, lock) x1/(1 - share) in three steps "
            "up that never come back: the host slows as a whole, not only its app work",
        ),
        Plant(
            "drift",
            _B,
            drift=_drift_stages(_B, 1.3, 6, DAY_S),
            source="the bundled plant whose app work grows 1.3x over 24 h in 6 steps (a cache/heap that ages); "
            "each stage's app work within table 6.1's Linux Z range",
            differs="app work x1.06 .. x1.30 from hour 4, 8, 12, 16, 20 (simulated clock): the optimum moves",
        ),
    )
}


def plant(name: str) -> Plant:
    """The plant `name`; a one-line error naming the known ones."""
    try:
        return PLANTS[name]
    except KeyError:
        raise TunerError(f"plant {name!r}: expected one of {', '.join(PLANTS)}") from None


def plant_host_kwargs(name: str) -> Mapping[str, Any]:
    """`SimHost` keyword arguments of plant `name` (params, cores, drift)."""
    p = plant(name)
    return {"params": p.params, "cores": p.cores, "drift": p.drift}
