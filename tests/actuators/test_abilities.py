"""Optional host abilities are declared Protocols: each host has exactly the ones it claims, a plain host has none,
a wrapped host passes its own on, and the replay and the oracle work without them."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import pytest

from actuators.abilities import (
    AtomicApply,
    Closable,
    ExpectedAnchors,
    ExpectedCacheShared,
    ExpectedDrawsKept,
    ExpectedModel,
    HardwareClassified,
    Interruptible,
    Warns,
    abilities_of,
)
from actuators.host import Host, KnobSpace, LoadControl, OperatingPoint, apply_point
from actuators.hwclass import host_class
from actuators.linux.hwio import HardwareIO, UnavailableNic
from actuators.linux.originals import OriginalsStore
from actuators.loadctl import CommandLoad, LoadedHost
from actuators.real import RealHost
from actuators.sim.host import SimHost
from core.errors import TunerError
from tests.fakes import FakeHost, FixedLoadHost
from tuner.optimize.presets import cold_settings
from tuner.optimize.settings import Objective
from tuner.replay.oracle import oracle_point
from tuner.replay.run import ReplayWindow, replay

SIM_ABILITIES = {ExpectedModel, ExpectedAnchors, ExpectedDrawsKept, ExpectedCacheShared, HardwareClassified}
REAL_ABILITIES = {AtomicApply, Closable, HardwareClassified, Interruptible, Warns}


def _real_host(root: Path) -> RealHost:
    return RealHost(
        HardwareIO(root, UnavailableNic("no NIC in this test"), dry_run=True), OriginalsStore(root / "s", root)
    )


def test_the_simulated_host_has_the_model_abilities_and_nothing_else() -> None:
    host = SimHost(seed=0, cores=4)
    assert isinstance(host, Host) and isinstance(host, LoadControl)
    assert set(abilities_of(host)) == SIM_ABILITIES
    with host.expected_draws_kept():
        (e,) = host.expected([OperatingPoint(100, 2.0)], 100_000.0)
    assert e.latency_us[99.0] > 0 and e.power_w > 0
    assert host.expected_itr_anchors()[0] == host.knobs().itr_us[0]
    assert host.expected_cache.stats()  # the memo the factory's cache= option shares


def test_the_real_host_has_the_hardware_abilities_and_nothing_else(tmp_path: Path) -> None:
    host = _real_host(tmp_path)
    assert isinstance(host, Host) and not isinstance(host, LoadControl)
    assert set(abilities_of(host)) == REAL_ABILITIES


def test_the_real_host_says_its_limits_by_source(tmp_path: Path) -> None:
    class Source:
        def warnings(self) -> list[str]:
            raise OSError("socket gone")

    host = _real_host(tmp_path)
    host.absent["energy"] = "no RAPL"
    host.warnings = ["cpu 3 reads 2.1 GHz"]
    host.latency = Source()  # type: ignore[assignment]
    assert host.warnings_by_source() == {
        "energy": ["energy unavailable: no RAPL"],
        "latency": ["latency source warnings unavailable: socket gone"],
        "dvfs": ["cpu 3 reads 2.1 GHz"],
        "itr": [],
    }
    assert host.notices() == [line for lines in host.warnings_by_source().values() for line in lines]


def test_a_plain_host_satisfies_only_host() -> None:
    host = FixedLoadHost()
    assert isinstance(host, Host)
    assert abilities_of(host) == {} and not isinstance(host, LoadControl)
    assert host_class(host) is None
    apply_point(host, OperatingPoint(100, 2.0))  # without AtomicApply: one knob after the other
    assert host.calls == [("set_itr", 100), ("set_dvfs", 2.0)]


def test_apply_point_uses_one_call_on_a_host_that_can() -> None:
    class Atomic(FixedLoadHost, AtomicApply):
        def apply(self, itr_us: int | None = None, dvfs_ghz: float | None = None) -> list[str]:
            self.calls.append(("apply", (itr_us, dvfs_ghz)))
            return []

    host = Atomic()
    assert apply_point(host, OperatingPoint(100, 2.0)) == OperatingPoint(100, 2.0)
    assert host.calls == [("apply", (100, 2.0))]


def test_a_loaded_host_passes_on_the_wrapped_hosts_abilities() -> None:
    load = CommandLoad("true {qps}")
    sim = LoadedHost(SimHost(seed=0, cores=4), load)
    assert set(abilities_of(sim)) == SIM_ABILITIES | {Closable}
    assert sim.expected_itr_anchors() == sim.host.expected_itr_anchors()  # type: ignore[attr-defined]
    plain = LoadedHost(FixedLoadHost(), load)
    assert set(abilities_of(plain)) == {Closable}  # its own close: the generator's
    assert isinstance(plain, LoadControl) and host_class(plain) is None


def test_replay_without_optional_abilities_runs_and_says_the_oracle_is_unavailable() -> None:
    host = FakeHost(qps=150_000.0)
    assert abilities_of(host) == {}
    settings = cold_settings(trials=3, sobol_trials=2, settle_s=1.0, window_s=5.0, seed=1)
    result = replay(
        lambda: host,
        (ReplayWindow(0, 0.0, 300.0, 150_000.0),),
        Objective("constrained", 99, 400.0),
        settings,
        policies=("static-performance", "oracle"),
    )
    assert result.policies["static-performance"].windows[0].point is not None
    oracle = result.policies["oracle"]
    assert not oracle.available and "no noise-free model" in oracle.note


@dataclass(frozen=True)
class _Expected:
    latency_us: dict[float, float]
    power_w: float


class _ModelOnly(FakeHost, ExpectedModel):
    """A host whose only optional ability is a closed-form noise-free model (`FakeHost`'s own)."""

    def expected(self, points: Sequence[OperatingPoint], qps: float) -> list[_Expected]:
        out = []
        for p in points:
            lat, util, _ = self.model(p.itr_us, p.dvfs_ghz, qps)
            busy = min(util, 1.0) * 0.6 * p.dvfs_ghz**3 + max(1.0 - util, 0.0) * self.idle_w(p.itr_us)
            out.append(_Expected(lat, 10.0 + self.cores * busy))
        return out


def test_the_oracle_needs_only_expected() -> None:
    host = _ModelOnly(knobs=KnobSpace.ixgbe((1.2, 2.9), lo=100, hi=110))
    assert abilities_of(host) == {ExpectedModel: ("expected",)}
    obj = Objective("constrained", 99, 500.0)
    point, how = oracle_point(host, obj, 100_000.0)
    assert "of 12 points" in how  # without anchors every ITR is a cell
    assert point == oracle_point(host, obj, 100_000.0, exhaustive=True)[0]
    with pytest.raises(TunerError, match="host 'fake' has no noise-free model"):
        oracle_point(FakeHost(), obj, 100_000.0)
