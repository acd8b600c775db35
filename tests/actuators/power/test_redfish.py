"""The Redfish power reader against a local Redfish service (tests/redfish_mockup.py): the newer schemas
(EnvironmentMetrics, PowerSubsystem's supplies), the deprecated Power resource, an energy counter, sessions
(login once, again on 401, logout at close), refused logins and a BMC that stops answering."""

from __future__ import annotations

import time

import pytest

from actuators.power.redfish import DEFAULT_UPDATE_PERIOD_S, iso_duration, make_reader
from actuators.power.source import PowerReader
from core.errors import HostError, is_permanent
from tests.redfish_mockup import start_redfish


@pytest.fixture
def bmc_factory():
    started = []

    def start(schema="environment", counter=None):
        started.append(start_redfish(schema=schema, counter=counter))
        return started[-1]

    yield start
    for bmc in started:
        bmc.close()


def _reader(bmc, tmp_path, **extra):
    options = {"timeout_s": 1.0, **extra}
    return make_reader(base_url=bmc.url, username=bmc.username, password_file=bmc.password_file(tmp_path), **options)


def test_environment_metrics_power_watts_with_the_sensors_interval(bmc_factory, tmp_path):
    bmc = bmc_factory("environment")
    bmc.watts = 412.0
    reader = _reader(bmc, tmp_path)
    assert isinstance(reader, PowerReader)
    assert reader.plan.chassis == "/redfish/v1/Chassis/1"  # the backplane listed first has no power data
    assert reader.plan.kind == "environment"
    info = reader.info
    assert (info.source, info.zones, info.resolution, info.resolution_unit) == ("redfish", ("platform",), 1.0, "W")
    assert info.update_period_s == 1.0  # the PowerWatts sensor's SensingInterval PT1S
    first = reader.read()
    assert first.watts == 412.0 and first.joules is None
    bmc.watts = 388.5
    second = reader.read()
    assert second.watts == 388.5 and second.t > first.t
    assert bmc.logins == 1  # one session for every read
    reader.close()
    reader.close()
    assert bmc.logouts == 1 and not bmc.tokens


def test_power_supplies_metrics_summed(bmc_factory, tmp_path):
    bmc = bmc_factory("supplies")
    bmc.watts = 500.0
    reader = _reader(bmc, tmp_path, zone="psu-input")
    assert reader.plan.kind == "supplies" and len(reader.plan.paths) == 2
    assert reader.info.update_period_s == DEFAULT_UPDATE_PERIOD_S == 5.0  # no sensor interval stated
    assert reader.info.zones == ("psu-input",)
    assert reader.read().watts == 500.0  # 250 W from each of two supplies


def test_deprecated_power_resource_of_older_bmcs(bmc_factory, tmp_path):
    bmc = bmc_factory("power")
    bmc.watts = 275.0
    reader = _reader(bmc, tmp_path, update_period_s=2, chassis="1")
    assert reader.plan.kind == "power" and reader.info.update_period_s == 2.0
    assert reader.read().watts == 275.0
    bmc.watts = 280.0
    assert reader.read().watts == 280.0


@pytest.mark.parametrize("counter,resolution", [("EnergyJoules", 1.0), ("EnergykWh", 3600.0)])
def test_an_energy_counter_is_read_as_joules(bmc_factory, tmp_path, counter, resolution):
    bmc = bmc_factory("environment", counter=counter)
    bmc.watts, bmc.joules = 300.0, 7.2e6
    reader = _reader(bmc, tmp_path)
    assert reader.plan.counter == counter
    assert (reader.info.resolution_unit, reader.info.resolution) == ("J", resolution)
    sample = reader.read()
    assert sample.joules == pytest.approx(7.2e6) and sample.watts == 300.0
    bmc.joules += 3600.0
    assert reader.read().joules == pytest.approx(7.2e6 + 3600.0)
    gauge_only = _reader(bmc, tmp_path, energy_counter=False)
    assert gauge_only.info.resolution_unit == "W" and gauge_only.read().joules is None


def test_a_missing_reading_is_transient_and_a_counter_is_never_replaced_by_watts(bmc_factory, tmp_path):
    bmc = bmc_factory("environment", counter="EnergyJoules")
    bmc.joules = 5000.0
    counter, gauge = _reader(bmc, tmp_path), _reader(bmc, tmp_path, energy_counter=False)
    bmc.joules = None  # the BMC answers "Reading": null for a moment; its watts are still there
    with pytest.raises(HostError, match="EnvironmentMetrics has no EnergyJoules reading at the moment") as e:
        counter.read()
    assert not is_permanent(e.value)
    assert gauge.read().watts == 300.0
    bmc.watts = None
    with pytest.raises(HostError, match="has no power reading at the moment") as e:
        gauge.read()
    assert not is_permanent(e.value)


def test_an_expired_session_logs_in_again_and_basic_auth_works(bmc_factory, tmp_path):
    bmc = bmc_factory("power")
    reader = _reader(bmc, tmp_path)
    reader.read()
    bmc.expire_sessions()  # the BMC restarted: every token is unknown
    bmc.watts = 310.0
    assert reader.read().watts == 310.0
    assert bmc.logins == 2 and len(bmc.tokens) == 1
    basic = _reader(bmc, tmp_path, auth="basic")
    assert basic.read().watts == 310.0 and bmc.logins == 2  # no session for basic auth


def test_a_refused_login_is_one_permanent_line_naming_the_password_file(bmc_factory, tmp_path):
    bmc = bmc_factory("environment")
    wrong = tmp_path / "wrong"
    wrong.write_text("not-the-password\n")
    with pytest.raises(HostError) as e:
        make_reader(base_url=bmc.url, username="admin", password_file=str(wrong), timeout_s=1.0)
    message = str(e.value)
    assert is_permanent(e.value) and "\n" not in message
    assert "login as 'admin' refused (HTTP 401)" in message and f"password_file {str(wrong)!r}" in message
    assert "not-the-password" not in message

    reader = _reader(bmc, tmp_path)
    bmc.password = "rotated"  # changed on the BMC while the daemon runs
    bmc.expire_sessions()
    with pytest.raises(HostError, match="refused") as e:
        reader.read()
    assert is_permanent(e.value)


def test_a_bmc_that_stops_answering_is_a_transient_one_line_error(bmc_factory, tmp_path):
    bmc = bmc_factory("environment")
    reader = _reader(bmc, tmp_path, timeout_s=0.3)
    assert reader.read().watts == 300.0
    bmc.stop_answering()
    t0 = time.monotonic()
    with pytest.raises(HostError) as e:
        reader.read()
    assert time.monotonic() - t0 < 2.0  # one attempt within timeout_s, no retry loop
    assert not is_permanent(e.value) and "\n" not in str(e.value)
    assert f"Redfish {bmc.url}: GET /redfish/v1/Chassis/1/EnvironmentMetrics: no answer within 0.3 s" == str(e.value)
    bmc.answer()
    assert reader.read().watts == 300.0  # it answers again: the same reader goes on
    url = bmc.url
    bmc.close()
    with pytest.raises(HostError, match=r"GET .*: connection refused") as e:
        reader.read()
    assert not is_permanent(e.value)
    reader.close()  # a BMC that is gone: close does not raise
    with pytest.raises(HostError, match=rf"Redfish {url}: cannot reach: connection refused") as e:
        make_reader(base_url=url, timeout_s=0.3)
    assert not is_permanent(e.value)


@pytest.mark.parametrize(
    "status,body,match",
    [
        (503, b'{"error": {"code": "Base.1.0.ServiceTemporarilyUnavailable"}}', "HTTP 503"),
        (200, b"<html>", "response is not JSON"),
    ],
)
def test_a_busy_or_garbled_bmc_is_transient(bmc_factory, tmp_path, status, body, match):
    bmc = bmc_factory("environment")
    reader = _reader(bmc, tmp_path)
    bmc.fail_with = (status, body)
    with pytest.raises(
        HostError, match=rf"Redfish {bmc.url}: GET /redfish/v1/Chassis/1/EnvironmentMetrics: {match}"
    ) as e:
        reader.read()
    assert not is_permanent(e.value) and "\n" not in str(e.value)
    bmc.fail_with = None
    assert reader.read().watts == 300.0


def test_a_bmc_demanding_a_new_password_is_permanent(bmc_factory, tmp_path):
    bmc = bmc_factory("environment")
    bmc.password_change_required = True
    with pytest.raises(HostError, match="requires a new password for 'admin'") as e:
        _reader(bmc, tmp_path)
    assert is_permanent(e.value) and "\n" not in str(e.value)


def test_chassis_selection_errors_are_permanent(bmc_factory, tmp_path):
    bmc = bmc_factory("environment")
    with pytest.raises(HostError, match=r"chassis 'Blade7': no such chassis \(there are: Backplane, 1\)") as e:
        _reader(bmc, tmp_path, chassis="Blade7")
    assert is_permanent(e.value)
    with pytest.raises(HostError, match=r"chassis 'Backplane' has power data") as e:
        _reader(bmc, tmp_path, chassis="Backplane")
    assert is_permanent(e.value)
    assert bmc.logouts == 2  # a reader that fails to start logs out of the session it opened


@pytest.mark.parametrize(
    "options,match",
    [
        ({"base_url": "bmc.example"}, r"energy.base_url: 'bmc.example': expected https://BMC"),
        ({"base_url": "https://bmc", "password": "x"}, r"energy.password: unknown option \(put the password in a file"),
        ({"base_url": "https://bmc", "username": "root"}, "energy.username: give it with password_file"),
        ({"base_url": "https://bmc", "auth": "digest"}, "energy.auth: 'digest': expected session or basic"),
        ({"base_url": "https://bmc", "timeout_s": -1}, "energy.timeout_s: -1: expected a number > 0"),
        ({"base_url": "https://bmc", "verify_tls": "no"}, "energy.verify_tls: 'no': expected true or false"),
        ({"base_url": "https://bmc", "verify_tls": False, "ca_file": "/ca.pem"}, "energy.ca_file: given with verify"),
        (
            {"base_url": "https://bmc", "username": "r", "password_file": "/nonexistent"},
            "energy.password_file: '/nonexistent'",
        ),
    ],
)
def test_bad_options_are_one_permanent_line_naming_the_field(options, match):
    with pytest.raises(HostError, match=match) as e:
        make_reader(**options)
    assert is_permanent(e.value) and "\n" not in str(e.value)
    assert str(e.value).startswith("energy.") and str(e.value).endswith("(redfish energy source)")


@pytest.mark.parametrize(
    "text,seconds", [("PT1S", 1.0), ("PT0.5S", 0.5), ("PT1M", 60.0), ("P1D", 86400.0), ("PT", None), ("1s", None)]
)
def test_iso_duration(text, seconds):
    assert iso_duration(text) == seconds
