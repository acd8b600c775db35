"""`HostWarnings` alone: what limits the host, logged once per line, sticky sources kept."""

from __future__ import annotations

import logging

from actuators.abilities import Warns
from tests.daemon_fakes import loop_context
from tests.fakes import FakeHost
from tuner.daemon.host_warnings import HostWarnings


class NoEnergyHost(FakeHost, Warns):
    def warnings_by_source(self) -> dict[str, list[str]]:
        return {
            "energy": ["energy unavailable: no RAPL in this VM"],
            "dvfs": ["cpu 3 reads back 2.0 GHz"],
            "itr": ["NIC eth1 (driver ena) reads back rx-usecs=4 after setting 5 µs"],
        }


def test_each_warning_is_logged_once_and_startup_lines_stay(tmp_path, caplog):
    ctx = loop_context(tmp_path, NoEnergyHost())
    w = HostWarnings(ctx)
    with caplog.at_level(logging.WARNING, logger="tuner.daemon.loop"):
        w.refresh({"startup": ["DRY RUN"]})
        w.refresh()
    assert w.lines() == [
        "energy unavailable: no RAPL in this VM",
        "cpu 3 reads back 2.0 GHz",
        "NIC eth1 (driver ena) reads back rx-usecs=4 after setting 5 µs",
        "DRY RUN",
    ]
    assert [r.getMessage() for r in caplog.records].count("DRY RUN") == 1
    samples = {
        s: ctx.metrics.registry.get_sample_value("tuner_host_warnings", {"source": s})
        for s in ("energy", "dvfs", "itr", "startup", "latency")
    }
    assert samples == {"energy": 1, "dvfs": 1, "itr": 1, "startup": 1, "latency": 0}
    ctx.store.release()
