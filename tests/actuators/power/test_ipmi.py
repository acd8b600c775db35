"""The IPMI reader against a real BMC simulator (`ipmi_sim`, IPMI-over-LAN on loopback): ipmi_sim serves no DCMI,
so the reader falls back to the SDR sensor in watts, whose value the test sets."""

from __future__ import annotations

import os
import time

import pytest

from actuators.power.ipmi import make_reader
from actuators.power.sampled import SampledEnergyMeter
from actuators.power.source import PowerReader
from core.errors import HostError


def _reader(bmc, **extra):
    opts = {**bmc.reader_options(), **extra}
    opts.pop("kind")
    return make_reader(**{k: v for k, v in opts.items() if v is not None})


def _until(reader, watts, within_s=5.0):
    deadline = time.monotonic() + within_s
    while (w := reader.read().watts) != watts and time.monotonic() < deadline:
        time.sleep(0.05)  # poll interval of a bounded wait for ipmi_sim's next sensor poll
    return w


def test_reads_the_power_sensor_the_test_sets_over_lanplus(fake_bmc):
    reader = _reader(fake_bmc)
    assert isinstance(reader, PowerReader)
    sample = reader.read()
    assert sample.watts == 150.0 and sample.joules is None
    assert "SDR sensor 'Pwr Consumption'" in reader.describe()  # no DCMI on ipmi_sim: the SDR fallback
    fake_bmc.set_watts(87)
    assert _until(reader, 87.0) == 87.0
    info = reader.info
    assert (info.source, info.zones, info.update_period_s, info.resolution_unit) == ("ipmi", ("platform",), 0.2, "W")


def test_the_password_is_never_on_the_command_line(fake_bmc):
    cmd, _env = _reader(fake_bmc)._command("mc", "info")
    assert "fakebmc" not in " ".join(cmd) and "-f" in cmd
    os.environ["TEST_BMC_PW"] = "fakebmc"
    try:
        reader = _reader(fake_bmc, password_file=None, password_env="TEST_BMC_PW")
        cmd, env = reader._command("mc", "info")
        assert "fakebmc" not in " ".join(cmd) and "-E" in cmd and env["IPMI_PASSWORD"] == "fakebmc"
        assert reader.read().watts == 150.0
    finally:
        del os.environ["TEST_BMC_PW"]


def test_a_named_sensor_that_is_missing_is_permanent(fake_bmc):
    with pytest.raises(HostError, match="no SDR sensor named 'PSU Power'") as exc:
        _reader(fake_bmc, sensor="PSU Power").read()
    assert exc.value.permanent


def test_a_bmc_that_stops_answering_is_a_transient_fault(fake_bmc):
    reader = _reader(fake_bmc)
    assert reader.read().watts == 150.0
    fake_bmc.stop()
    with pytest.raises(HostError, match="ipmi 127.0.0.1") as exc:
        reader.read()
    assert not exc.value.permanent  # the meter backs off and retries; it gives up after give_up_s


def test_the_sampled_meter_integrates_the_bmc_power(fake_bmc):
    meter = SampledEnergyMeter(_reader(fake_bmc))
    meter.begin()
    deadline = time.monotonic() + 1.0
    while time.monotonic() < deadline:
        time.sleep(meter.poll_interval_s)  # the meter's own poll period
        meter.poll()
    reading = meter.end()
    assert reading.energy_j == pytest.approx(150.0 * reading.seconds, rel=0.05)
    assert reading.updates is not None and reading.updates >= 3  # a repeat a whole period later is an update


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"user": "u", "password_file": "/dev/null"}, "energy.host: required"),
        ({"host": "h", "user": "u"}, "energy.password_file: required"),
        ({"host": "h", "user": "u", "password_file": "/dev/null", "port": "623"}, "energy.port: '623': expected int"),
        ({"host": "h", "user": "u", "password_file": "/dev/null", "colour": 1}, "energy.colour: unknown ipmi option"),
        ({"host": "h", "user": "u", "password_file": "/nonexistent/pw"}, "energy.password_file: /nonexistent/pw"),
        ({"host": "h", "user": "u", "password_file": "/dev/null", "update_period_s": 0}, "energy.update_period_s"),
    ],
)
def test_bad_options_are_one_line_naming_the_key(options, message):
    with pytest.raises(HostError, match=message.replace(".", r"\.")) as exc:
        make_reader(**options)
    assert "\n" not in str(exc.value) and exc.value.permanent
