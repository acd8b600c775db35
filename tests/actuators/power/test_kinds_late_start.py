"""A source whose server is down when the source is built (the daemon starts before its BMC or Prometheus): it is
kept, its windows' energy is unknown (a transient fault, never 0) with one back-off warning, and it reads the
server's power once that answers. A server that answers with a fault retrying cannot help stays permanent at
start. Each kind against its real server, started after the source is built."""

from __future__ import annotations

import logging
import shutil
import time

import pytest

from actuators.fakehw.bmc import USER, free_udp_port, ipmi_sim_binary, start_bmc
from actuators.power.deferred import DeferredReader
from actuators.power.kinds import build_source
from core.errors import HostError
from tests.memcached_server import free_port
from tests.prometheus_server import start_exporter
from tests.redfish_mockup import start_redfish


def _no_rapl(prefer: str):
    raise AssertionError("RAPL is not asked for")


def _unknown_window(source, match: str) -> None:
    """One window while the server is down: no energy, a transient fault saying why."""
    source.begin()
    with pytest.raises(HostError, match=match) as exc:
        source.end()
    assert not exc.value.permanent


def _first_known_window(source, within_s: float):
    """Windows until one has energy (the others transient faults), within `within_s`."""
    deadline = time.monotonic() + within_s
    while True:
        source.begin()
        try:
            return source.end()
        except HostError as exc:
            assert not exc.permanent, exc
            if time.monotonic() > deadline:
                raise AssertionError(f"no energy within {within_s} s: {exc}") from None
        time.sleep(0.05)  # poll interval of a bounded wait for the server's first answer


def _back_offs(caplog) -> list[str]:
    return [r.getMessage() for r in caplog.records if "backing off" in r.getMessage()]


def test_a_redfish_bmc_down_at_start_is_read_once_it_answers(tmp_path, caplog):
    port = free_port()
    password = tmp_path / "bmc-password"
    password.write_text("s3cret\n")
    spec = {
        "kind": "redfish",
        "base_url": f"http://127.0.0.1:{port}",
        "username": "admin",
        "password_file": str(password),
        "timeout_s": 0.5,
    }
    with caplog.at_level(logging.WARNING):
        source = build_source(spec, _no_rapl)
        assert isinstance(source.reader, DeferredReader) and source.info.source == "redfish"
        _unknown_window(source, "connection refused")
        _unknown_window(source, "connection refused")
        bmc = start_redfish("power", port=port)  # the BMC comes up
        try:
            bmc.watts = 412.0
            reading = _first_known_window(source, within_s=5.0)
            assert reading.energy_j / reading.seconds == pytest.approx(412.0)
            assert source.info.update_period_s == 5.0  # the built reader's (no SensingInterval: the default)
            source.reader.close()
        finally:
            bmc.close()
    assert len(_back_offs(caplog)) == 1, caplog.records


def test_a_redfish_bmc_answering_5xx_at_start_is_kept_and_one_refusing_the_login_is_not(tmp_path):
    bmc = start_redfish("power")
    try:
        spec = {"kind": "redfish", "base_url": bmc.url, "username": bmc.username}
        spec["password_file"] = bmc.password_file(tmp_path)
        bmc.fail_with = (503, b"busy")
        source = build_source(spec, _no_rapl)
        _unknown_window(source, "HTTP 503")
        bmc.fail_with = None
        assert _first_known_window(source, within_s=5.0).energy_j > 0
        source.reader.close()
        (tmp_path / "wrong").write_text("nope\n")
        with pytest.raises(HostError, match="refused") as exc:
            build_source({**spec, "password_file": str(tmp_path / "wrong")}, _no_rapl)
        assert exc.value.permanent and "\n" not in str(exc.value)
    finally:
        bmc.close()


def test_a_prometheus_down_at_start_is_read_once_it_answers_and_scrapes(prometheus, caplog):
    exporter = start_exporter()
    try:
        exporter.watts.set(250.0)
        port = free_port()
        spec = {"kind": "prometheus", "url": f"http://127.0.0.1:{port}", "query": "test_pdu_watts", "type": "gauge"}
        with caplog.at_level(logging.WARNING):
            source = build_source(spec, _no_rapl)
            _unknown_window(source, "cannot connect")
            prometheus([exporter.target], scrape_interval="200ms", port=port)  # up; "no series" until it scrapes
            reading = _first_known_window(source, within_s=20.0)
        assert reading.energy_j / reading.seconds == pytest.approx(250.0)
        assert source.info.update_period_s == 0.2  # the job's scrape interval, once Prometheus answered
        assert len(_back_offs(caplog)) == 1, caplog.records
    finally:
        exporter.stop()


def test_an_ipmi_bmc_down_at_start_is_read_once_it_answers(tmp_path, caplog):
    if ipmi_sim_binary() is None or shutil.which("ipmitool") is None:
        pytest.skip("ipmi_sim or ipmitool not installed (Debian packages openipmi, ipmitool)")
    port = free_udp_port()
    password = tmp_path / "bmc-password"
    password.write_text("fakebmc\n")
    spec = {"kind": "ipmi", "host": "127.0.0.1", "port": port, "user": USER, "password_file": str(password)}
    with caplog.at_level(logging.WARNING):
        source = build_source({**spec, "update_period_s": 0.2}, _no_rapl)
        _unknown_window(source, "Unable to establish")
        bmc = start_bmc(tmp_path / "bmc", watts=150, poll_ms=200, port=port)
        try:
            reading = _first_known_window(source, within_s=10.0)
        finally:
            bmc.stop()
    assert reading.energy_j / reading.seconds == pytest.approx(150.0)
    assert len(_back_offs(caplog)) == 1, caplog.records
