"""A plausible package-power model for the fake-hardware kit (not a calibrated one: the simulator is that).

Per package: `static_w` (uncore, memory controller) plus, per core, a busy part that grows as f^2.5 (dynamic
power ~ f V^2 with voltage rising with frequency) and an idle part linear in f. A core's utilisation is the load's
CPU time at that frequency: `qps * cost_per_request_s * fmax / f` plus `interrupts/s * cost_per_interrupt_s *
fmax / f`, with interrupts/s = min(qps, 1e6 / rx-usecs) when the NIC throttles (rx-usecs >= 2) and = qps in
adaptive or off mode -- so both knobs change energy as they do on a real server, in the same direction.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class PowerModel:
    cores: int = 2
    fmax_ghz: float = 2.9
    static_w: float = 8.0
    core_busy_w: float = 10.0  # one core fully busy at fmax
    core_idle_w: float = 1.0  # one idle core at fmax
    request_cost_s: float = 10e-6  # CPU time per request at fmax
    interrupt_cost_s: float = 2e-6  # CPU time per interrupt at fmax

    def utilisation(self, ghz: float, qps: float, rx_usecs: int | None) -> float:
        """Mean core utilisation in [0, 1] at `ghz` serving `qps` with the NIC at `rx_usecs` (None: adaptive)."""
        irq = qps if rx_usecs is None or rx_usecs < 2 else min(qps, 1e6 / rx_usecs)
        cpu_s = (qps * self.request_cost_s + irq * self.interrupt_cost_s) * self.fmax_ghz / ghz
        return min(cpu_s / self.cores, 1.0)

    def watts(self, ghz: float, qps: float, rx_usecs: int | None) -> float:
        """Package power (W) at frequency `ghz`, load `qps` and ITR `rx_usecs`."""
        u = self.utilisation(ghz, qps, rx_usecs)
        x = ghz / self.fmax_ghz
        return float(self.static_w + self.cores * (u * self.core_busy_w * x**2.5 + (1 - u) * self.core_idle_w * x))
