"""Constants of the simulated E5-2690 + 82599 memcached host: its C-states and `SimParams` (see
`actuators.sim.model` for the model they feed)."""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class CState:
    """An idle state: what the governor sees (target residency) and what the hardware does."""

    name: str
    target_residency_us: float
    exit_latency_us: float  # effective wake-up delay added to the waking batch
    power_w: float  # per-core power while resident (C1 scales with V, see `idle_power_w`)


# intel_idle's Sandy Bridge table (target residency 2/20/211/345/345 µs, exit latency 2/10/80/104/109 µs);
# C1E takes the table's 10 µs, the deep states' effective exits are below their worst-case values, as
# measured on SNB-EP parts.
SNB_CSTATES: tuple[CState, ...] = (
    CState("POLL", 0.0, 0.0, -1.0),  # power = leakage + a little dynamic (idle loop); see idle_power_w
    CState("C1", 2.0, 1.0, -2.0),  # clock gated at current voltage; see idle_power_w
    CState("C1E", 20.0, 10.0, 0.75),
    CState("C3", 211.0, 25.0, 0.35),
    CState("C6", 345.0, 35.0, 0.08),
    CState("C7", 345.0, 40.0, 0.06),
)


@dataclass(frozen=True)
class SimParams:
    """Constants of the simulated E5-2690 + 82599 memcached host (µs, GHz, W, J)."""

    f_min: float = 1.2
    f_max: float = 2.9
    v_min: float = 0.80  # core voltage at f_min (V)
    v_max: float = 1.10  # at f_max
    c_dyn: float = 2.3  # W / (GHz V^2) per busy core
    leak_w_per_v: float = 1.8  # per-core leakage while in C0 (W / V)
    static_w: float = 16.0  # both packages, everything that is on whatever the load (W)
    uncore_active_w: float = 5.0  # uncore/LLC/ring (W); package C-states are not modelled, so always on
    request_j: float = 4e-6  # package energy per request outside the cores (LLC, IMC) (J)
    # work: cycles in µs*GHz (time = cyc / f) + memory-bound µs (does not scale with f)
    irq_cyc: float = 7.26
    irq_mem: float = 0.06
    stack_cyc: float = 9.98
    stack_mem: float = 0.02
    app_cyc: float = 10.8
    app_mem: float = 2.89
    poll_cyc: float = 4.0  # per poll round when the batch found the core busy (softirq + epoll round)
    idle_cyc: float = 18.7  # OS bookkeeping to enter/leave idle after a batch (nohz tick, governor, NAPI re-arm)
    menu_history: int = 4
    app_shape: float = 1.57  # gamma shape of per-request app work (CV = 1/sqrt(shape))
    app_dist: str = "gamma"  # its family: "gamma", or "lognormal" with the same mean 1 and CV
    net_us: float = (
        2.1  # constant path outside the server (fitted: the measured 43-59 µs p99 at fast settings leaves little)
    )
    cstates: tuple[CState, ...] = SNB_CSTATES
    # Linux default mode
    rx_bytes: float = 120.0  # per request packet (ETC keys 20-70 B + headers)
    tx_bytes: float = 420.0  # per reply (75 % GETs, values up to 1 KB)
    pstate_period_s: float = 0.010  # intel_pstate sampling interval (INTEL_PSTATE_SAMPLING_INTERVAL, 10 ms)
    burst_mean: float = 1.0  # requests per arrival event (mutilate pipelines up to 4 per connection)
    lock_us: float = 0.55  # global critical section per request: cache-line bound part (not f-scaled), all cores
    lock_cyc: float = 0.95  # and the cycles executed while holding it (µs*GHz): the hold, so the wait, grows at low f
    rss_spread: float = 0.142  # RSS imbalance: simulated cores carry (1 -/+ spread) x the mean load
    tx_irq: bool = True  # TX completions raise an interrupt ITR after a batch (`actuators.sim.kernel.period_events`)
    warmup_us: float = 20_000.0  # simulated time discarded at the start of every run (queues start empty)

    def volt(self, f: np.ndarray | float) -> np.ndarray:
        return self.v_min + (np.asarray(f, float) - self.f_min) * (self.v_max - self.v_min) / (self.f_max - self.f_min)

    def busy_power_w(self, f: np.ndarray | float) -> np.ndarray:
        """Per-core power while executing at `f` GHz."""
        f = np.asarray(f, float)
        v = self.volt(f)
        out: np.ndarray = self.c_dyn * f * v * v + self.leak_w_per_v * v
        return out

    def idle_power_w(self, f: np.ndarray | float) -> np.ndarray:
        """(F, S) per-core power in each C-state at frequency `f`."""
        f = np.atleast_1d(np.asarray(f, float))
        v = self.volt(f)
        out = np.empty((f.size, len(self.cstates)))
        for s, c in enumerate(self.cstates):
            if c.power_w == -1.0:
                out[:, s] = self.leak_w_per_v * v + 0.3 * self.c_dyn * f * v * v
            elif c.power_w == -2.0:
                out[:, s] = 0.9 * self.leak_w_per_v * v
            else:
                out[:, s] = c.power_w
        return out

    def work_us(self, f: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(H, s_stack, mean s_app) in µs at frequencies `f`."""
        return (self.irq_cyc / f + self.irq_mem, self.stack_cyc / f + self.stack_mem, self.app_cyc / f + self.app_mem)

    def app_work(self, rng: np.random.Generator, size: int) -> np.ndarray:
        """`size` draws of per-request app work in units of its mean (mean 1, CV 1/sqrt(`app_shape`))."""
        if self.app_dist == "gamma":
            return rng.gamma(self.app_shape, 1.0 / self.app_shape, size=size)
        if self.app_dist == "lognormal":
            sigma = math.sqrt(math.log1p(1.0 / self.app_shape))
            return rng.lognormal(-sigma * sigma / 2.0, sigma, size=size)
        raise ValueError(f"app_dist {self.app_dist!r}: expected gamma or lognormal")

    def idle_w(self, cores: int) -> float:
        """Package power with no load: all cores in the deepest state, no uncore activity."""
        return self.static_w + cores * float(self.idle_power_w(self.f_min)[0, -1])
