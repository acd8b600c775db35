"""`DeferredReader`: a reader whose server did not answer at start-up, built at the first read that can build it;
its provisional `info` until then (pure: fake builds)."""

from __future__ import annotations

import pytest

from actuators.power.deferred import PROVISIONAL_PERIOD_S, DeferredReader, provisional_info
from actuators.power.sampled import SampledEnergyMeter
from actuators.power.source import PowerReader, PowerSample, SourceInfo
from core.errors import HostError, UnreachableError


class Built:
    info = SourceInfo("redfish", ("platform",), 5.0, 1.0, "W")

    def __init__(self) -> None:
        self.closed = False

    def read(self) -> PowerSample:
        return PowerSample(t=1.0, watts=412.0)

    def close(self) -> None:
        self.closed = True


def _builds(*outcomes):
    """A build answering `outcomes` in turn: an exception is raised, anything else built."""
    left = list(outcomes)
    calls = []

    def build():
        calls.append(1)
        out = left.pop(0)
        if isinstance(out, Exception):
            raise out
        return out

    return build, calls


def test_the_provisional_info_is_the_kind_the_zone_and_the_configured_period():
    assert provisional_info("prometheus", {"zone": "pdu", "update_period_s": 2}) == SourceInfo(
        "prometheus", ("pdu",), 2.0, 1.0, "W"
    )
    info = provisional_info("redfish", {"base_url": "http://bmc"})
    assert info.zones == ("platform",) and info.update_period_s == PROVISIONAL_PERIOD_S


def test_builds_at_each_read_until_it_answers_then_reads_the_built_reader():
    built = Built()
    build, calls = _builds(UnreachableError("refused"), HostError("no series (not scraped yet)"), built)
    reader = DeferredReader(build, provisional_info("redfish", {}))
    assert isinstance(reader, PowerReader) and reader.info.update_period_s == PROVISIONAL_PERIOD_S
    for _ in range(2):
        with pytest.raises(HostError) as exc:
            reader.read()
        assert not exc.value.permanent
    assert reader.read().watts == 412.0 and reader.read().watts == 412.0
    assert len(calls) == 3 and reader.info is built.info  # built once; its own info from then on
    reader.close()
    assert built.closed


def test_a_permanent_fault_of_a_late_build_is_permanent_to_the_meter():
    build, _ = _builds(UnreachableError("refused"), HostError("login refused (HTTP 401)", permanent=True))
    meter = SampledEnergyMeter(DeferredReader(build, provisional_info("redfish", {})))
    meter.begin()  # refused: transient, the window goes on
    with pytest.raises(HostError, match="login refused") as exc:
        meter.end()
    assert exc.value.permanent
