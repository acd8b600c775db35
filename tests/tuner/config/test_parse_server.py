"""`[host] server`: the cache server's kind, written or named by `[host.options] qps`, and what the daemon derives
from it for the real host (its default qps, the prober's protocol)."""

from __future__ import annotations

from pathlib import Path

import pytest

from core.errors import InputError
from tuner.config import load_config, parse_config
from tuner.daemon.startup import host_options


def _config(tmp_path: Path, text: str):
    path = tmp_path / "t.toml"
    path.write_text(text)
    return load_config(path)


def test_memcached_by_default_and_the_kind_qps_names_when_unwritten(tmp_path):
    assert parse_config("", tmp_path / "c.toml").host.server == "memcached"
    cfg = _config(tmp_path, '[host]\nspec = "real"\n[host.options]\nqps = "redis:127.0.0.1:6379"\n')
    assert cfg.host.server == "redis"
    cfg = _config(tmp_path, '[host]\nspec = "real"\nserver = "redis"\n[host.options]\nqps = "nic:eth0"\n')
    assert cfg.host.server == "redis"


def test_a_qps_naming_another_kind_is_refused_at_its_line(tmp_path):
    text = '[host]\nspec = "real"\nserver = "redis"\n\n[host.options]\nqps = "memcached:127.0.0.1:11211"\n'
    with pytest.raises(InputError) as err:
        _config(tmp_path, text)
    assert str(err.value) == (
        f"{tmp_path / 't.toml'}:6: host.options.qps: expected a redis server (host.server), "
        "got 'memcached:127.0.0.1:11211'"
    )


def test_an_unknown_kind_names_the_choices(tmp_path):
    with pytest.raises(InputError, match=r":3: host.server: expected one of 'memcached', 'redis', got 'valkey'"):
        _config(tmp_path, '[host]\nspec = "real"\nserver = "valkey"\n')


def test_redis_is_the_real_hosts_default_qps_and_its_probers_protocol():
    out = host_options("real", {"latency": {"rate_hz": 100}}, "observe", server="redis")
    assert out["qps"] == "redis:127.0.0.1:6379"
    assert out["latency"] == {"protocol": "redis", "rate_hz": 100}
    given = host_options("real", {"qps": "redis:10.0.0.2:7000"}, "tune", server="redis")
    assert given["qps"] == "redis:10.0.0.2:7000" and "latency" not in given
    # memcached changes nothing; the simulated host's qps (a number) is not a server
    assert host_options("real", {"iface": "eth1"}, "tune") == {"iface": "eth1"}
    assert "qps" not in host_options("sim", {}, "tune", server="redis")
