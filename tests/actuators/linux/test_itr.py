"""ITR through a mocked ethtool ioctl layer; pyroute2 on the real eth0 strictly read-only."""

from __future__ import annotations

import errno
from pathlib import Path

import pytest

from actuators.linux.hwio import HardwareIO, Transaction
from actuators.linux.itr import ADAPTIVE_RX, RX_USECS, NicItr, PyrouteEthtool, physical_interfaces, profile_for
from actuators.linux.originals import OriginalsStore, restore_originals
from core.errors import HostError, KnobRangeError
from tests import fakefs


@pytest.fixture(autouse=True)
def _guard(monkeypatch, tmp_path):
    fakefs.guard_writes(monkeypatch, tmp_path)


def setup(root: Path, nics: dict[str, str | None], nic: fakefs.FakeNic):
    for ifname, driver in nics.items():
        fakefs.net_iface(root, ifname, driver)
    return HardwareIO(root, nic), OriginalsStore(root / "state", root)


def set_itr(io, store, itr, value):
    with Transaction(io, store) as txn:
        for s in itr.plan(value):
            txn.write(s)
        itr.verify(value)


def test_ixgbe_profile_facts():
    p = profile_for("ixgbe")
    values = p.values()
    assert values[0] == 2 and values[-1] == 1022 and 1024 not in values and 7 not in values
    assert p.dynamic_us == (1,) and p.lro_unsafe_below_us == 8
    assert not profile_for("virtio_net").verified


def test_set_turns_adaptive_off_verifies_and_restores(tmp_path):
    nic = fakefs.FakeNic()
    nic.add("eth1", rx_usecs=1)  # ixgbe dynamic mode
    nic.add("eth2", rx_usecs=50, adaptive=1)  # i40e adaptive on
    io, store = setup(tmp_path, {"eth1": "ixgbe", "eth2": "i40e", "lo": None}, nic)
    assert physical_interfaces(tmp_path) == ("eth1", "eth2")
    itr = NicItr(io, ("eth1", "eth2"))
    assert itr.current() is None  # dynamic / adaptive: the driver is in charge
    set_itr(io, store, itr, 100)
    assert nic.coalesce["eth1"][RX_USECS] == 100 and nic.coalesce["eth2"][ADAPTIVE_RX] == 0
    assert itr.current() == 100
    restore_originals(io, store)
    assert nic.coalesce["eth1"][RX_USECS] == 1
    assert nic.coalesce["eth2"] == {**nic.coalesce["eth2"], RX_USECS: 50, ADAPTIVE_RX: 1}
    assert not store.path.exists()


@pytest.mark.parametrize("value", [7, 1024, 0, -2, 3.5])
def test_out_of_range_refused_before_any_ioctl(tmp_path, value):
    nic = fakefs.FakeNic()
    nic.add("eth1", rx_usecs=1)
    io, store = setup(tmp_path, {"eth1": "ixgbe"}, nic)
    with pytest.raises(KnobRangeError, match=r"not supported by eth1 \(driver ixgbe\): expected 2..1022 in steps of 2"):
        NicItr(io, ("eth1",)).plan(value)
    assert nic.set_calls == []


def test_lro_low_itr_refused_unless_forced(tmp_path):
    nic = fakefs.FakeNic()
    nic.add("eth1", rx_usecs=1, lro=True)
    io, store = setup(tmp_path, {"eth1": "ixgbe"}, nic)
    with pytest.raises(KnobRangeError, match=r"ITR 6 µs on eth1 \(ixgbe\) with LRO on: .*reset the adapter.*--force"):
        set_itr(io, store, NicItr(io, ("eth1",)), 6)
    assert nic.set_calls == [] and not store.path.exists()
    set_itr(io, store, NicItr(io, ("eth1",)), 8)  # 8 µs is safe
    set_itr(io, store, NicItr(io, ("eth1",), force=True), 6)
    assert nic.coalesce["eth1"][RX_USECS] == 6


def test_unsupported_nic_names_driver(tmp_path):
    nic = fakefs.FakeNic()
    nic.add("eth0")
    nic.unsupported.add("eth0")
    io, store = setup(tmp_path, {"eth0": "virtio_net"}, nic)
    with pytest.raises(HostError, match=r"^NIC eth0 \(driver virtio_net\) does not support interrupt coalescing"):
        set_itr(io, store, NicItr(io, ("eth0",)), 50)
    assert nic.set_calls == []


def test_permission_denied_and_second_nic_failure_roll_back_first(tmp_path):
    nic = fakefs.FakeNic()
    nic.add("eth1", rx_usecs=1)
    nic.add("eth2", rx_usecs=1)
    nic.fail_set["eth2"] = errno.EPERM
    io, store = setup(tmp_path, {"eth1": "ixgbe", "eth2": "ixgbe"}, nic)
    with pytest.raises(HostError, match=r"^permission denied for ETHTOOL_SCOALESCE on eth2: needs CAP_NET_ADMIN$"):
        set_itr(io, store, NicItr(io, ("eth1", "eth2")), 50)
    assert nic.coalesce["eth1"][RX_USECS] == 1  # eth1 was set, then rolled back
    assert nic.set_calls[0] == ("eth1", {ADAPTIVE_RX: 0, RX_USECS: 50})
    assert nic.set_calls[-1] == ("eth1", {ADAPTIVE_RX: 0, RX_USECS: 1})


def test_readback_mismatch_is_kept_mapped_and_warned_once(tmp_path):
    nic = fakefs.FakeNic()
    nic.add("eth1", rx_usecs=1)
    io, store = setup(tmp_path, {"eth1": "ixgbe"}, nic)
    nic.rounds.update({20: 18, 40: 38})
    itr = NicItr(io, ("eth1",))
    with Transaction(io, store) as txn:
        for s in itr.plan(20):
            txn.write(s)
        first = itr.verify(20)
    assert len(first) == 1 and first[0].startswith(
        "NIC eth1 (driver ixgbe) reads back rx_coalesce_usecs=18 after setting 20 µs"
    )
    assert nic.coalesce["eth1"][RX_USECS] == 18 and itr.current() == 20  # kept, counted as what was asked
    set_itr(io, store, itr, 40)  # a second mismatch on the same NIC: no new warning
    assert itr.verify(40) == [] and itr.notes == first and itr.current() == 40


def test_adaptive_still_on_after_the_write_rolls_back(tmp_path):
    nic = fakefs.FakeNic()
    nic.add("eth1", rx_usecs=50, adaptive=1)
    io, store = setup(tmp_path, {"eth1": "i40e"}, nic)
    itr = NicItr(io, ("eth1",))
    plan = itr.plan(20)
    nic.coalesce["eth1"][ADAPTIVE_RX] = 1
    nic.rounds.clear()
    original = nic.set_coalesce

    def sticky(ifname, values):  # a driver that ignores adaptive off
        original(ifname, values)
        nic.coalesce[ifname][ADAPTIVE_RX] = 1

    nic.set_coalesce = sticky
    with pytest.raises(HostError, match="reads back rx-usecs=20 adaptive-rx=1 after setting 20 µs with adaptive off"):
        with Transaction(io, store) as txn:
            for s in plan:
                txn.write(s)
            itr.verify(20)
    assert nic.coalesce["eth1"][RX_USECS] == 50


def test_einval_from_driver(tmp_path):
    nic = fakefs.FakeNic()
    nic.add("eth1", rx_usecs=1)
    nic.fail_set["eth1"] = errno.EINVAL
    io, store = setup(tmp_path, {"eth1": "sfc"}, nic)
    with pytest.raises(HostError, match=r"NIC eth1 \(driver sfc\) has no verified ITR profile .*--force"):
        set_itr(io, store, NicItr(io, ("eth1",)), 40)
    assert nic.set_calls == []
    with pytest.raises(HostError, match=r"NIC eth1 \(driver sfc\) rejected the coalescing values"):
        set_itr(io, store, NicItr(io, ("eth1",), force=True), 40)
    assert nic.coalesce["eth1"][RX_USECS] == 1


def test_dry_run_records_and_does_not_call_set(tmp_path):
    nic = fakefs.FakeNic()
    nic.add("eth1", rx_usecs=1)
    fakefs.net_iface(tmp_path, "eth1", "ixgbe")
    io = HardwareIO(tmp_path, nic, dry_run=True)
    store = OriginalsStore(tmp_path / "state", tmp_path)
    with Transaction(io, store) as txn:
        for s in NicItr(io, ("eth1",)).plan(64):
            txn.write(s)
    assert nic.set_calls == [] and not store.path.exists()
    assert [(p.kind, p.target, p.value[RX_USECS]) for p in io.planned] == [("coalesce", "eth1", 64)]


def test_real_eth0_read_only():
    """pyroute2's GCOALESCE/GFEATURES on the live eth0 -- reads only; never SCOALESCE."""
    if not Path("/sys/class/net/eth0").exists():
        pytest.skip("no eth0")
    try:
        nic = PyrouteEthtool()
    except OSError as exc:
        pytest.skip(f"no ethtool socket: {exc}")
    try:
        try:
            values = nic.get_coalesce("eth0")
        except OSError as exc:
            if exc.errno in (errno.EOPNOTSUPP, errno.EPERM):
                pytest.skip(f"eth0 coalescing not readable here: {exc}")
            raise
        assert RX_USECS in values and ADAPTIVE_RX in values and "cmd" not in values
        assert all(isinstance(v, int) and v >= 0 for v in values.values())
        assert isinstance(nic.lro_enabled("eth0"), bool)
    finally:
        nic.close()


NETNS_SCRIPT = r"""
import json
from actuators.linux.hwio import COALESCE, HardwareIO, Setting, Transaction
from actuators.linux.itr import NicItr, PyrouteEthtool
from actuators.linux.originals import OriginalsStore
from core.errors import HostError
import sys, tempfile
io = HardwareIO("/", PyrouteEthtool())
out = {}
try:
    with Transaction(io, OriginalsStore(tempfile.mkdtemp(), "/")) as txn:
        for s in NicItr(io, ("lo",), force=True).plan(50):
            txn.write(s)
except HostError as exc:
    out["plan"] = str(exc)
try:
    io.apply(Setting(COALESCE, "lo", {"rx_coalesce_usecs": 50}))
except HostError as exc:
    out["set"] = str(exc)
try:
    io.get_coalesce("eth0")
except HostError as exc:
    out["eth0"] = str(exc)
try:
    out["pflags"] = PyrouteEthtool().priv_flags("lo")  # ETHTOOL_GSSET_INFO / GPFLAGS: reads only
except OSError as exc:
    out["pflags"] = exc.errno
print(json.dumps(out))
"""


def test_real_ioctl_path_in_a_private_network_namespace():
    """pyroute2's real GCOALESCE/SCOALESCE ioctls, run in a fresh network namespace (`unshare -n`):
    it holds only its own `lo`, so the host's NICs are unreachable (eth0 -> ENODEV)."""
    import json
    import shutil
    import subprocess
    import sys

    if shutil.which("unshare") is None:
        pytest.skip("unshare not installed")
    repo = Path(__file__).resolve().parents[3]
    proc = subprocess.run(
        ["unshare", "-n", sys.executable, "-c", NETNS_SCRIPT], cwd=repo, capture_output=True, text=True, timeout=30
    )
    if proc.returncode != 0 and "unshare" in proc.stderr:
        pytest.skip(f"cannot create a network namespace: {proc.stderr.strip()}")
    assert proc.returncode == 0, proc.stderr
    out = json.loads(proc.stdout)
    assert out["plan"] == (
        "NIC lo (driver virtual) does not support interrupt coalescing (ETHTOOL_GCOALESCE: EOPNOTSUPP)"
    )
    assert out["set"] == (
        "NIC lo (driver virtual) does not support interrupt coalescing (ETHTOOL_SCOALESCE: EOPNOTSUPP)"
    )
    assert out["eth0"] == "no network interface 'eth0' (ENODEV)"
    assert out["pflags"] == errno.EOPNOTSUPP  # lo has no private flags
