"""Observe mode, dry runs, measured savings and the start-up checks of the daemon (sim and fake hosts)."""

from __future__ import annotations

import dataclasses
import json
import urllib.request

import pytest
from prometheus_client.parser import text_string_to_metric_families

from actuators.sim.host import SimHost
from core.errors import EXIT_CONFIG
from tests import fakefs
from tests.daemon_fakes import Running, read_state, wait_for, write_config
from tests.fakes import FakeHost
from tuner.cli import app as cli

SIM = {"seed": 1, "cores": 16, "qps": 150_000}


def scrape(port: int) -> dict:
    text = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5).read().decode()
    return {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for fam in text_string_to_metric_families(text)
        for s in fam.samples
    }


class VmHost(SimHost):
    """The simulated host as a VM shows it: no energy counter (power unknown)."""

    def measure(self, seconds: float):
        m = super().measure(seconds)
        return dataclasses.replace(m, energy_j=0.0, energy_by_zone_j={}, energy_known=False)


def make_vm_host(seed: int = 0, qps: float = 100_000.0) -> VmHost:
    return VmHost(seed=seed, qps=qps)


class DryHost(FakeHost):
    """A host with a `dry_run` option that must never see a knob write."""

    def __init__(self, dry_run: bool = False) -> None:
        super().__init__(qps=50_000.0)
        self.dry_run = dry_run

    def set_itr(self, itr_us: int) -> None:
        raise AssertionError("a dry run wrote ITR")

    def set_dvfs(self, ghz: float) -> None:
        raise AssertionError("a dry run wrote DVFS")


def make_dry_host(dry_run: bool = False) -> DryHost:
    return DryHost(dry_run)


def test_observe_mode_measures_the_os_policy_and_writes_nothing(tmp_path):
    cfg = write_config(tmp_path, host="sim", options=SIM, extra="")
    cfg.write_text(cfg.read_text().replace("[host]\n", '[host]\nmode = "observe"\n', 1))
    with Running(cfg) as r:
        wait_for(lambda: sum(b.windows for b in r.daemon.observer.baseline.data.values()) >= 4)
        s = r.daemon.status()
        metrics = scrape(r.daemon.metrics_port)
        host = r.host
        assert host.point() is None  # the OS's own policies stayed in charge
    assert s.mode == "observe" and s.point is None and s.state == "observing"
    assert s.trials_total == 0 and r.optimizers.created == 0
    assert s.last_measurement["point"] is None and s.last_measurement["power_w"] > 0
    assert metrics[("tuner_mode", (("tuner_mode", "observe"),))] == 1
    assert not any(name == "tuner_itr_seconds" for name, _ in metrics)  # no point is claimed
    powers = {labels: v for (name, labels), v in metrics.items() if name == "tuner_baseline_power_watts"}
    assert powers and all(v > 0 for v in powers.values())
    assert any(name == "tuner_baseline_latency_seconds" for name, _ in metrics)
    state = read_state(tmp_path)
    assert state["trials"] == [] and not (tmp_path / "state" / "history.jsonl").exists()
    saved = json.loads((tmp_path / "state" / "baseline.json").read_text())
    assert sum(b["windows"] for b in saved["bands"].values()) >= 4


def test_observe_on_a_host_without_energy_reports_power_unknown(tmp_path):
    cfg = write_config(tmp_path, host="tests.tuner.daemon.test_observer:make_vm_host", options={"seed": 2})
    cfg.write_text(cfg.read_text().replace("[host]\n", '[host]\nmode = "observe"\n', 1))
    with Running(cfg) as r:
        wait_for(lambda: sum(b.windows for b in r.daemon.observer.baseline.data.values()) >= 3)
        s = r.daemon.status()
        metrics = scrape(r.daemon.metrics_port)
        from tuner.daemon.grpc_messages import measurement_msg
        from tuner.daemon.service import protos

        msg = measurement_msg(protos()[0], s.last_measurement)
    assert s.last_measurement["power_w"] is None and s.last_measurement["energy_j"] is None
    assert not msg.HasField("power_w") and not msg.HasField("energy_j")  # unset on the wire, not 0
    names = {name for name, _ in metrics}
    assert "tuner_power_watts" not in names and "tuner_baseline_power_watts" not in names
    assert all(v == 0 for (n, _), v in metrics.items() if n == "tuner_energy_joules_total")
    assert sum(v for (n, _), v in metrics.items() if n == "tuner_baseline_windows") >= 3
    assert all(row["power_w"] is None for row in s.baseline)


def test_dry_run_writes_nothing_records_nothing_and_says_so(tmp_path, caplog):
    cfg = write_config(tmp_path, host="tests.tuner.daemon.test_observer:make_dry_host", options={"dry_run": True})
    with caplog.at_level("WARNING"), Running(cfg) as r:
        wait_for(lambda: r.host.measure_count >= 3)
        s = r.daemon.status()
        metrics = scrape(r.daemon.metrics_port)
    assert any("DRY RUN" in rec.getMessage() for rec in caplog.records)  # said at start
    assert s.mode == "dry_run" and any("DRY RUN" in w for w in s.warnings)
    assert s.point is None and s.trials_total == 0 and r.optimizers.created == 0
    assert ("tuner_itr_seconds", ()) not in metrics and ("tuner_cpu_frequency_hertz", ()) not in metrics
    assert metrics[("tuner_host_warnings", (("source", "startup"),))] == 1
    assert read_state(tmp_path)["trials"] == [] and not (tmp_path / "state" / "history.jsonl").exists()


def test_savings_against_the_observed_baseline_on_the_sim_host(tmp_path):
    """Observe first (the baseline per load band is persisted), then tune on the same state: the energy saved
    against the OS's own policy is exported with its CI."""
    cfg = write_config(tmp_path, host="sim", options=SIM, trials=3)
    observe = cfg.read_text().replace("[host]\n", '[host]\nmode = "observe"\n', 1)
    tune = cfg.read_text()
    cfg.write_text(observe)
    with Running(cfg) as r:
        wait_for(lambda: max((b.power.n for b in r.daemon.observer.baseline.data.values()), default=0) >= 6)
    cfg.write_text(tune)
    with Running(cfg) as r:
        wait_for(lambda: r.daemon.observer.savings is not None, timeout=30)
        wait_for(lambda: sum(b.power.n for b in r.daemon.observer.tuned.data.values()) >= 6, timeout=30)
        s = r.daemon.status().savings
        metrics = scrape(r.daemon.metrics_port)
    assert s.lower <= s.ratio <= s.upper and -1 < s.ratio < 1
    assert metrics[("tuner_energy_saved_ratio", ())] == pytest.approx(s.ratio, abs=0.05)
    assert metrics[("tuner_energy_saved_ratio_lower", ())] <= metrics[("tuner_energy_saved_ratio_upper", ())]


def test_periodic_baseline_windows_hand_the_knobs_back_for_one_window(tmp_path):
    cfg = write_config(tmp_path, host="sim", options=SIM, trials=3, tuning="baseline_every_s = 1")
    with Running(cfg) as r:
        wait_for(lambda: r.daemon.state.held is not None, timeout=30)
        wait_for(lambda: sum(b.windows for b in r.daemon.observer.baseline.data.values()) >= 2, timeout=30)
        wait_for(lambda: r.daemon.status().point is not None)  # the held point is back


def _real_config(tmp_path, mode: str = "tune"):
    """A real host on a fake tree with no cpufreq/MSR, no RAPL, and a NIC layer that cannot be reached."""
    root = tmp_path / "root"
    fakefs.cpu_online(root, 2)
    fakefs.net_iface(root, "eth1", "ixgbe")
    opts = {"root": str(root), "state_dir": str(tmp_path / "orig"), "iface": "eth1"}
    cfg = write_config(tmp_path, host="real", options=opts)
    cfg.write_text(cfg.read_text().replace("[host]\n", f'[host]\nmode = "{mode}"\n', 1))
    return cfg


def test_startup_checks_list_every_missing_part_and_exit_78(tmp_path, capsys):
    cfg = _real_config(tmp_path)
    rc = cli.main(["daemon", "--config", str(cfg)])
    err = capsys.readouterr().err.strip().splitlines()
    assert rc == EXIT_CONFIG == 78 and len(err) == 3  # one `FILE:LINE: host: part: why` line per part
    assert err[0].startswith(f"tuner: error: {cfg}:2: host: itr: ")
    assert err[1].startswith(f"{cfg}:2: host: dvfs: ") and err[2].startswith(f"{cfg}:2: host: energy: ")
    assert rc not in (0, 1, 2)  # distinct from "cannot tune" (doctor) and usage errors
    rc = cli.main(["doctor", "--config", str(cfg)])
    out = capsys.readouterr().out
    assert rc == 1 and "start-up checks of" in out and "3 problem(s)" in out and ": host: energy: " in out


def test_doctor_config_passes_observe_mode_without_knobs(tmp_path, capsys):
    cfg = _real_config(tmp_path, "observe")
    rc = cli.main(["doctor", "--config", str(cfg), "--json"])
    data = json.loads(capsys.readouterr().out)
    assert rc == 0 and data["config"]["mode"] == "observe" and data["config"]["startup_problems"] == []
    assert data["can_tune"] is False  # the machine cannot tune, but observing needs only the sensors


def test_ctl_status_says_none_and_unknown_instead_of_inventing():
    """A dry run once showed `ITR 2 µs @ 2.9 GHz` in `tuner ctl status` with the hardware untouched."""
    from tuner.cli.ctl import _human
    from tuner.daemon.grpc_messages import measurement_msg
    from tuner.daemon.service import protos

    pb = protos()[0]
    md = {"seconds": 1.0, "offered_qps": 900.0, "achieved_qps": 900.0, "requests": 900, "latency_us": {"99": 80.0}}
    msg = pb.Status(state="observing", mode="dry_run", warnings=["DRY RUN (host option dry_run = true): ..."])
    msg.last_measurement.CopyFrom(measurement_msg(pb, {**md, "power_w": None, "energy_j": None}))
    text = _human("status", msg)
    assert "point: none (the OS's own policy is in charge)" in text and "ITR" not in text
    assert "power unknown" in text and "mode: dry_run" in text and "warning: DRY RUN" in text
