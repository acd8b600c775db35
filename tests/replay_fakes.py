"""Shared builders of the replay's tests: the fake host with a noise-free `expected()` (so the replay's oracle is
available; nameable as `--host tests.replay_fakes:make_model_host`) and a tiny trace file."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from actuators.abilities import ExpectedModel
from actuators.host import KnobSpace, OperatingPoint
from tests.fakes import FakeHost

KNOBS = KnobSpace(tuple(range(20, 401, 20)), (1.2, 1.6, 2.0, 2.4, 2.9))


@dataclass(frozen=True)
class Expected:
    latency_us: dict
    power_w: float


class ModelHost(FakeHost, ExpectedModel):
    """FakeHost with a noise-free `expected()` (as the simulated host has), so the oracle is available."""

    def expected(self, points: list[OperatingPoint], qps: float) -> list[Expected]:
        out = []
        for p in points:
            lat, util, _ = self.model(p.itr_us, p.dvfs_ghz, qps)
            power = 10.0 + self.cores * (
                min(util, 1.0) * 0.6 * p.dvfs_ghz**3 + max(1.0 - util, 0.0) * self.idle_w(p.itr_us)
            )
            out.append(Expected(lat, power))
        return out


def make_model_host(seed: int | None = None) -> ModelHost:
    return ModelHost(seed=seed, knobs=KNOBS)


def tiny_trace(path: Path, seconds: int) -> Path:
    """A trace of `seconds` seconds at 3 requests per second, one more every minute, written to `path`."""
    lines = []
    for t in range(seconds):
        for k in range(3 + (t // 60)):
            lines.append(f"{t},key{k},4,100,1,get,0")
    path.write_text("\n".join(lines) + "\n")
    return path
