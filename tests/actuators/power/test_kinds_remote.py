"""`energy = {kind = "redfish" | "prometheus", ...}` through kinds.py: a sampled meter over the reader, and a bad
option named by the field it came from."""

from __future__ import annotations

import pytest

from actuators.power.kinds import build_source, kinds
from actuators.power.sampled import SampledEnergyMeter
from core.errors import HostError, is_permanent
from tests.redfish_mockup import start_redfish


def _no_rapl(prefer: str):
    raise AssertionError("RAPL is not asked for")


@pytest.fixture
def bmc():
    server = start_redfish("power")
    yield server
    server.close()


def test_redfish_and_prometheus_are_kinds():
    assert {"redfish", "prometheus"} <= set(kinds())


def test_a_redfish_table_builds_a_sampled_meter(bmc, tmp_path):
    spec = {
        "kind": "redfish",
        "base_url": bmc.url,
        "username": bmc.username,
        "password_file": bmc.password_file(tmp_path),
        "give_up_s": 5.0,  # the meter's key, not the reader's
    }
    source = build_source(spec, _no_rapl)
    assert isinstance(source, SampledEnergyMeter) and source.give_up_s == 5.0
    assert source.info.source == "redfish" and source.info.zones == ("platform",)
    bmc.watts = 200.0
    source.begin()
    bmc.watts = 220.0
    reading = source.end()
    # between the two readings' times, 200 -> 220 W integrated; those times lie inside the window's seconds
    assert reading.seconds > 0 and 0 < reading.energy_j <= 220.0 * reading.seconds
    source.reader.close()


def test_a_bad_option_is_named_by_its_field(tmp_path):
    spec = {"kind": "prometheus", "url": "http://127.0.0.1:9", "query": "q", "type": "rate"}
    with pytest.raises(HostError, match=r"^energy_compare\[1\]\.type: 'rate': expected counter") as e:
        build_source(spec, _no_rapl, field="energy_compare[1]")
    assert is_permanent(e.value)
    with pytest.raises(HostError, match=r"^energy\.password: unknown option \(put the password in a file"):
        build_source({"kind": "redfish", "base_url": "https://bmc", "password": "x"}, _no_rapl)
