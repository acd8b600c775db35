"""`RealHost.measure` with energy sources: the source and its updates in the measurement, compared sources beside
it, and a source's faults -- propagated when energy is required, energy unknown when it is optional (observe)."""

from __future__ import annotations

import logging
import time

import pytest

from actuators.power.source import EnergyReading, SourceInfo
from actuators.power.window import CompareSources
from actuators.real import make_real_host
from core.errors import HostError
from tests import fakefs


class Source:
    def __init__(self, name="ipmi", fail=None, on="end"):
        self.info = SourceInfo(name, ("platform",), 0.2, 1.0, "W")
        self.poll_interval_s = 0.01
        self.fail, self.on = fail, on

    def _maybe(self, step):
        if self.fail is not None and self.on == step:
            raise self.fail

    def begin(self):
        self._maybe("begin")

    def poll(self):
        self._maybe("poll")

    def end(self):
        self._maybe("end")
        return EnergyReading(0.05, 10.0, {"platform": 10.0}, 3)


def _host(tmp_path, energy, optional=False, compare=()):
    fakefs.realhost_tree(tmp_path / "root", 2, 20 << 8)
    host = make_real_host(root=tmp_path / "root", state_dir=tmp_path / "st", parts=())
    host.energy, host.energy_optional = energy, optional
    host.qps, host.latency = fakefs.FakeQps(time.monotonic, 1000.0), fakefs.FakeLatency(requests=10)
    host.compare = CompareSources(list(compare))
    return host


def test_the_source_its_updates_and_compared_sources_are_in_the_measurement(tmp_path):
    host = _host(tmp_path, Source(), compare=[fakefs.power_meter(time.monotonic, 60.0)])
    m = host.measure(0.05)
    assert m.energy_j == 10.0 and m.energy_source == "ipmi" and m.energy_updates == 3 and m.energy_known
    assert set(m.energy_compare_j) == {"rapl"} and m.energy_compare_j["rapl"] == pytest.approx(60.0 * 0.05, rel=0.5)
    assert m.energy_compare_by_zone_j["rapl"].keys() == {"package-0"}


@pytest.mark.parametrize("on", ["begin", "poll", "end"])
def test_a_required_sources_fault_is_the_callers(tmp_path, on):
    host = _host(tmp_path, Source(fail=HostError("no answer"), on=on))
    with pytest.raises(HostError, match="no answer"):
        host.measure(0.05)


def test_optional_energy_transient_fault_leaves_the_window_unknown(tmp_path):
    source = Source(fail=HostError("no answer"))
    host = _host(tmp_path, source, optional=True)
    m = host.measure(0.05)
    assert not m.energy_known and m.power_or_none is None and host.energy is source  # kept: retried next window
    source.fail = None
    assert host.measure(0.05).energy_known


def test_optional_energy_warns_once_per_run_of_unknown_windows(tmp_path, caplog):
    source = Source(fail=HostError("no answer"))
    host = _host(tmp_path, source, optional=True)

    def warned() -> int:
        return len([r for r in caplog.records if r.levelno == logging.WARNING and "energy unknown" in r.getMessage()])

    with caplog.at_level(logging.INFO, logger="actuators.real"):
        for _ in range(3):
            assert not host.measure(0.05).energy_known
        assert warned() == 1
        source.fail = None
        assert host.measure(0.05).energy_known
        assert any("energy known again (source ipmi)" in r.getMessage() for r in caplog.records)
        source.fail = HostError("no answer")
        assert not host.measure(0.05).energy_known
        assert warned() == 2  # a new outage, a new warning


def test_optional_energy_permanent_fault_drops_the_source_and_says_why(tmp_path):
    host = _host(tmp_path, Source(fail=HostError("gave up", permanent=True), on="poll"), optional=True)
    m = host.measure(0.05)
    assert not m.energy_known and host.energy is None
    assert host.warnings_by_source()["energy"] == ["energy unavailable: gave up (reported as unknown)"]
    assert not host.measure(0.05).energy_known  # energy unknown from now on; latency still measured
