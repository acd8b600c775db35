"""`tuner restore --root KIT` puts back every knob of the fake-hardware kit, NIC included, from the originals a
dead process saved -- through the kit's file-backed NIC, never the real one."""

from __future__ import annotations

import json

from actuators.fakehw import FileNic, create, make_fake_host
from actuators.fakehw.kit import IFACE
from actuators.fakehw.nic import nic_path
from actuators.host import OperatingPoint
from tests.fakefs import kit_knobs as knob_files
from tuner.cli.app import main


class Counter:
    def total_requests(self) -> float:
        return 0.0


def test_restore_after_a_dead_process_puts_back_every_knob_of_the_kit_nic_included(tmp_path, capsys) -> None:
    root = create(tmp_path / "hw")
    boot = knob_files(root)
    host = make_fake_host(str(root), model=False, qps=Counter(), latency=None, state_dir=str(tmp_path / "state"))
    host.apply(itr_us=100, dvfs_ghz=1.6)
    assert host.point() == OperatingPoint(100, 1.6)
    assert knob_files(root) != boot  # the process dies here: nothing restored
    assert main(["restore", "--root", str(root), "--state-dir", str(tmp_path / "state")]) == 0
    out = capsys.readouterr().out
    assert knob_files(root) == boot, out
    assert FileNic(root).get_coalesce(IFACE)["use_adaptive_rx_coalesce"] == 1
    assert IFACE in out and "cannot be redirected" not in out
    assert main(["restore", "--root", str(root), "--state-dir", str(tmp_path / "state")]) == 0  # safe twice
    assert "nothing to restore" in capsys.readouterr().out


def test_set_then_restore_on_the_kit_goes_through_its_nic(tmp_path, capsys) -> None:
    root = create(tmp_path / "hw")
    boot = knob_files(root)
    state = str(tmp_path / "state")
    assert main(["set", "--root", str(root), "--state-dir", state, "--itr", "50", "--dvfs", "2.0"]) == 0
    assert json.loads(nic_path(root, IFACE).read_text())["coalesce"]["rx_coalesce_usecs"] == 50
    assert main(["restore", "--root", str(root), "--state-dir", state]) == 0
    capsys.readouterr()
    assert knob_files(root) == boot
