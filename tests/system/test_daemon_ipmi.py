"""A daemon in observe mode reporting power from a BMC (a real `ipmi_sim`) over IPMI-over-LAN, with RAPL compared
beside it; and a BMC that stops answering mid-run: no traceback, windows with energy unknown while it backs off, then
the source dropped (energy unknown from then on, said as a warning) while latency keeps being observed."""

from __future__ import annotations

import json

import pytest

from tests import fakefs
from tests.daemon_fakes import Running, registry_samples, wait_for, write_config

NCPU = 2


@pytest.fixture(autouse=True)
def _guard(monkeypatch, tmp_path):
    fakefs.guard_writes(monkeypatch, tmp_path)
    fakefs.msr_device_semantics(monkeypatch)


def _config(tmp_path, bmc, memcached, give_up_s=60.0):
    root = tmp_path / "root"
    fakefs.realhost_tree(root, NCPU, 20 << 8)
    opts = {"root": str(root), "state_dir": str(tmp_path / "orig"), "qps": f"memcached:{memcached.address}"}
    energy = {**bmc.reader_options(), "give_up_s": give_up_s}
    tables = '[host.options.latency]\nisolation = "thread"\nrate_hz = 300\n[host.options.energy]\n'
    tables += "".join(f"{k} = {json.dumps(v)}\n" for k, v in energy.items())
    tables += '[[host.options.energy_compare]]\nkind = "rapl"\n'
    cfg = write_config(tmp_path, host="real", options=opts, window_s=0.5, extra=tables)
    cfg.write_text(cfg.read_text().replace("[host]\n", '[host]\nmode = "observe"\n', 1))
    return cfg


def _windows(r) -> int:
    return sum(b.windows for b in r.daemon.observer.baseline.data.values())


def _window_of_updates(r, n: int):
    """The daemon's status once it has observed 2 windows and its last one saw >= `n` BMC updates, else None."""
    s = r.daemon.status()
    updates = (s.last_measurement or {}).get("energy_updates") or 0
    return s if _windows(r) >= 2 and updates >= n else None


def test_observe_reports_the_bmc_power_beside_rapl(tmp_path, fake_bmc, memcached):
    with Running(_config(tmp_path, fake_bmc, memcached), serve=False) as r:
        # ipmi_sim polls its sensor every 0.2 s: a 0.5 s window sees 2 updates, or 1 on a loaded machine
        s = wait_for(lambda: _window_of_updates(r, 2), timeout=30)
        metrics = registry_samples(r.daemon.metrics.registry)
    last = s.last_measurement
    assert last["energy_source"] == "ipmi" and last["power_w"] == pytest.approx(150.0, rel=0.05)
    assert last["energy_updates"] >= 2
    assert set(last["power_by_source_w"]) == {"ipmi", "rapl"}  # side by side
    assert last["power_by_source_w"]["ipmi"] == pytest.approx(150.0, rel=0.05)
    assert metrics[("tuner_energy_joules_total", (("source", "ipmi"), ("zone", "platform")))] > 0
    assert metrics[("tuner_energy_source_watts", (("source", "ipmi"),))] == pytest.approx(150.0, rel=0.05)
    assert ("tuner_energy_source_watts", (("source", "rapl"),)) in metrics
    assert metrics[("tuner_power_watts", ())] == pytest.approx(150.0, rel=0.05)


def test_a_bmc_that_stops_answering_backs_off_then_degrades_to_energy_unknown(tmp_path, fake_bmc, memcached, caplog):
    with caplog.at_level("WARNING"), Running(_config(tmp_path, fake_bmc, memcached, give_up_s=2.0), serve=False) as r:
        wait_for(lambda: _windows(r) >= 1, timeout=30)
        fake_bmc.stop()
        wait_for(lambda: any("energy unavailable" in w for w in r.daemon.status().warnings), timeout=60)
        n = _windows(r)
        wait_for(lambda: _windows(r) >= n + 1, timeout=30)  # latency still observed
        s = r.daemon.status()
        state = r.daemon.ctx.loop_state
    messages = [rec.getMessage() for rec in caplog.records]
    assert not [rec for rec in caplog.records if rec.exc_info], "no traceback"
    assert any("backing off" in m for m in messages)  # transient first: backed off and retried
    assert any("energy source dropped" in m for m in messages)  # then permanent: dropped
    assert s.last_measurement["power_w"] is None and state == "observing"
