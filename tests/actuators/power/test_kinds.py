"""Energy sources by name: RAPL strings unchanged, `{kind = ...}` tables, one-line errors naming the field."""

from __future__ import annotations

import pytest

from actuators.power import kinds
from actuators.power.sampled import SampledEnergyMeter
from core.errors import HostError


def _rapl(prefer):
    return ("rapl", prefer)


@pytest.mark.parametrize("spec", ["auto", "powercap", "msr"])
def test_todays_strings_build_rapl_as_before(spec):
    assert kinds.build_source(spec, _rapl) == ("rapl", spec)


def test_a_rapl_table_takes_prefer():
    assert kinds.build_source({"kind": "rapl"}, _rapl) == ("rapl", "auto")
    assert kinds.build_source({"kind": "rapl", "prefer": "msr"}, _rapl) == ("rapl", "msr")


def test_a_reader_kind_is_read_through_a_sampled_meter(tmp_path, monkeypatch):
    monkeypatch.setattr("shutil.which", lambda name: "/usr/bin/" + name)
    pw = tmp_path / "pw"
    pw.write_text("x")
    spec = {"kind": "ipmi", "host": "10.0.0.9", "user": "u", "password_file": str(pw), "method": "hold"}
    source = kinds.build_source(spec, _rapl)
    assert isinstance(source, SampledEnergyMeter) and source.method == "hold"
    assert source.info.source == "ipmi" and source.info.zones == ("platform",)


@pytest.mark.parametrize(
    ("spec", "field", "message"),
    [
        ("rapl", "energy", "energy: 'rapl': expected auto | powercap | msr or a table"),
        (3, "energy", "energy: expected a string or a table, got int"),
        ({"kind": "snmp"}, "energy", "energy.kind: 'snmp': expected one of rapl, ipmi"),
        ({"kind": "rapl", "prefer": "x"}, "energy", "energy: kind rapl: prefer 'x'"),
        ({"kind": "rapl", "zone": "x"}, "energy", "energy: kind rapl: unknown key 'zone'"),
        ({"kind": "ipmi", "user": "u"}, "energy_compare[1]", "energy_compare[1].host: required for kind ipmi"),
        ({"kind": "ipmi", "method": "simpson"}, "energy", "energy.method: 'simpson': expected trapezoid | hold"),
        ({"kind": "ipmi", "give_up_s": 0}, "energy", "energy.give_up_s: 0: expected seconds > 0"),
    ],
)
def test_bad_specs_are_one_line_naming_the_field(spec, field, message):
    with pytest.raises(HostError) as exc:
        kinds.build_source(spec, _rapl, field)
    assert str(exc.value).startswith(message) and "\n" not in str(exc.value) and exc.value.permanent


def test_a_reader_whose_client_library_is_missing_is_one_line_naming_the_package(monkeypatch):
    monkeypatch.setitem(kinds.READERS, "redfish", "no_such_client_library_for_tests")
    with pytest.raises(HostError) as err:
        kinds.build_source({"kind": "redfish", "base_url": "https://127.0.0.1:1"}, _rapl)
    assert err.value.permanent
    assert str(err.value).startswith("energy: kind redfish needs the Python package 'no_such_client_library_for_tests'")
    assert "\n" not in str(err.value)
