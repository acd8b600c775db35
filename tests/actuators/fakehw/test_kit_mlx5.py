"""The kit's fake ConnectX (mlx5_core) NIC: created by `python -m actuators.fakehw --nic mlx5_core`, driven by the
real host and by `tuner set` / `doctor` / `restore` with the driver's limits, frames and CQE timer mode."""

from __future__ import annotations

import json
import os

from actuators.fakehw import FileNic, make_fake_host
from actuators.fakehw.__main__ import main as fakehw_main
from actuators.fakehw.kit import IFACE
from actuators.host import OperatingPoint, apply_point
from tuner.cli import app as cli

BOOT = {"rx_coalesce_usecs": 8, "use_adaptive_rx_coalesce": 1, "rx_max_coalesced_frames": 32, "tx_coalesce_usecs": 16}


class _NoLatency:
    def begin(self) -> None: ...

    def end(self):  # pragma: no cover - not measured here
        raise AssertionError

    def close(self) -> None: ...


def _kit(tmp_path):
    root = tmp_path / "hw"
    assert fakehw_main([str(root), "--nic", "mlx5_core", "--create-only"]) == 0
    return root


def test_the_kit_plays_a_connectx_port(tmp_path) -> None:
    root = _kit(tmp_path)
    assert os.path.basename(os.readlink(root / "sys/class/net/eth1/device/driver")) == "mlx5_core"
    nic = FileNic(root)
    assert nic.get_coalesce(IFACE) == BOOT and nic.priv_flags(IFACE)["rx_cqe_moder"] is True
    assert fakehw_main([str(root), "--nic", "ixgbe", "--reset", "--create-only"]) == 0  # a reset changes the driver
    assert os.path.basename(os.readlink(root / "sys/class/net/eth1/device/driver")) == "ixgbe"


def test_the_real_host_tunes_the_fake_mlx5_and_restores_it(tmp_path) -> None:
    root = _kit(tmp_path)
    host = make_fake_host(str(root), model=False, qps=object(), latency=_NoLatency(), state_dir=str(tmp_path / "s"))
    try:
        assert host.knobs().itr_us == tuple(range(1, 1023))  # 1 µs steps, capped at the calibrated 1022
        assert host.point() is None  # DIM on: the driver is in charge
        apply_point(host, OperatingPoint(333, 1.6))
        assert host.point() == OperatingPoint(333, 1.6)
        assert FileNic(root).get_coalesce(IFACE) == {
            **BOOT,
            "rx_coalesce_usecs": 333,
            "use_adaptive_rx_coalesce": 0,
            "rx_max_coalesced_frames": 65535,
        }
        assert host.warnings_by_source()["itr"] == []
        host.restore()
        assert FileNic(root).get_coalesce(IFACE) == BOOT
    finally:
        host.close()


def test_set_doctor_and_restore_commands_over_the_fake_mlx5(tmp_path, capsys) -> None:
    root, state = _kit(tmp_path), tmp_path / "state"
    args = ["--root", str(root), "--state-dir", str(state)]
    assert cli.main(["set", "--itr", "4096", *args]) == 2
    err = capsys.readouterr().err
    assert "ITR 4096 µs is not supported by eth1 (driver mlx5_core): expected 1..1022 in steps of 1" in err
    assert FileNic(root).get_coalesce(IFACE) == BOOT  # refused before the driver saw it
    assert cli.main(["set", "--itr", "50", *args]) == 0
    assert capsys.readouterr().out.startswith("ITR 50 µs, adaptive off, on eth1\n")
    assert FileNic(root).get_coalesce(IFACE)["rx_max_coalesced_frames"] == 65535
    cli.main(["doctor", "--root", str(root), "--memcached", "127.0.0.1:1", "--json"])
    found = {f["check"]: f for f in json.loads(capsys.readouterr().out)["findings"]}
    detail = found["nic:eth1"]["detail"]
    assert "rx-usecs 50, adaptive-rx off, rx-frames 65535" in detail and "timer mode CQE" in detail
    assert "profile mlx5_core: rx-usecs 1..1022 µs step 1 (driver applies up to 4095 µs" in detail
    assert cli.main(["restore", *args]) == 0
    assert FileNic(root).get_coalesce(IFACE) == BOOT
