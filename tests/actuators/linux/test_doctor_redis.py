"""`tuner doctor --redis`: the Redis/Valkey finding beside (or instead of) memcached's, against Debian's servers."""

from __future__ import annotations

import json

import pytest

from actuators.linux import doctor
from actuators.linux.doctor_redis import check_redis
from actuators.linux.findings import Finding
from tuner import cli


def test_a_running_redis_is_ok_with_its_version(redis_server):
    finding = check_redis(redis_server.address)
    assert finding.check == "redis" and finding.status == "ok"
    assert finding.detail.startswith(f"{redis_server.address}: redis 7.") or " valkey " in finding.detail


def test_memcached_is_not_redis(memcached):
    finding = check_redis(memcached.address, timeout_s=0.5)
    assert finding.status == "fail" and "not reachable" in finding.detail and "--redis" in finding.fix


@pytest.mark.parametrize(("address", "said"), [("127.0.0.1:1", "not reachable"), ("h:0", "port 0 outside")])
def test_unreachable_or_malformed_is_a_failing_finding_never_an_exception(address, said):
    finding = check_redis(address, timeout_s=0.3)
    assert finding.status == "fail" and said in finding.detail


def test_summarize_needs_every_server_checked():
    F = Finding
    tunable = [F("dvfs-cpufreq", "ok", ""), F("nic:eth1", "ok", ""), F("cap-net-admin", "ok", ""), F("rapl", "ok", "")]
    assert doctor.summarize([*tunable, F("redis", "ok", "")]).can_tune  # redis instead of memcached
    assert doctor.summarize([*tunable, F("redis", "fail", "")]).missing == ("redis",)
    assert doctor.summarize([*tunable, F("memcached", "ok", ""), F("redis", "fail", "")]).missing == ("redis",)
    assert doctor.summarize(tunable).missing == ("memcached",)  # no server checked: memcached, as before


def test_cli_checks_redis_instead_of_memcached(redis_server, capsys):
    cli.main(["doctor", "--json", "--redis", redis_server.address])
    data = json.loads(capsys.readouterr().out)
    checks = {f["check"]: f for f in data["findings"]}
    assert checks["redis"]["status"] == "ok" and "memcached" not in checks
    assert "redis" not in data["missing"] and "memcached" not in data["missing"]


def test_cli_bad_redis_address_is_a_usage_error(capsys):
    rc = cli.main(["doctor", "--redis", "127.0.0.1:"])
    err = capsys.readouterr().err
    assert rc == 2 and "redis address '127.0.0.1:': the port after ':' is missing" in err and "Traceback" not in err
