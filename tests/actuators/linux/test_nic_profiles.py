"""Per-driver NIC profiles, driven through `NicItr` over the fake NIC playing each driver's own ethtool rules
(`actuators.fakehw.drivers`, written from the drivers' code independently of the profiles)."""

from __future__ import annotations

import errno

import pytest

from actuators.fakehw.drivers import DRIVERS
from actuators.fakehw.nic import FileNic, create_nic
from actuators.linux.hwio import HardwareIO, Transaction
from actuators.linux.itr import NicItr
from actuators.linux.nic_profiles import ADAPTIVE_RX, PROFILES, RX_FRAMES, RX_USECS, TUNE_MAX_US, profile_for
from actuators.linux.originals import OriginalsStore, restore_originals
from core.errors import HostError, KnobRangeError
from tests import fakefs

NEW = ("mlx5_core", "bnxt_en", "ena", "igb", "igc")
PLAYED = ("ixgbe", *NEW)


@pytest.fixture(autouse=True)
def _guard(monkeypatch, tmp_path):
    fakefs.guard_writes(monkeypatch, tmp_path)


class CountingNic(FileNic):
    """The fake NIC, counting the writes that reach the driver."""

    def __init__(self, root) -> None:
        super().__init__(root)
        self.writes: list[dict[str, int]] = []

    def set_coalesce(self, ifname: str, values: dict[str, int]) -> None:
        self.writes.append(dict(values))
        super().set_coalesce(ifname, values)


def nic_of(tmp_path, driver: str, ifname: str = "eth1") -> tuple[HardwareIO, OriginalsStore, CountingNic]:
    """`ifname` bound to `driver` (a key of DRIVERS) under tmp_path, at the driver's boot coalescing."""
    fakefs.net_iface(tmp_path, ifname, DRIVERS[driver].name)
    create_nic(tmp_path, ifname, driver)
    nic = CountingNic(tmp_path)
    return HardwareIO(tmp_path, nic), OriginalsStore(tmp_path / "state", tmp_path), nic


def set_itr(io: HardwareIO, store: OriginalsStore, itr: NicItr, value: int) -> list[str]:
    with Transaction(io, store) as txn:
        for s in itr.plan(value):
            txn.write(s)
        return itr.verify(value)


@pytest.mark.parametrize("driver", sorted(PROFILES))
def test_every_profile_names_its_source_and_its_grid_is_what_the_driver_applies(driver):
    p = profile_for(driver)
    grid = p.values()
    assert p.verified and p.source and p.rounding and p.adaptive_off
    assert grid[0] == p.min_us and grid[-1] <= min(p.max_us, p.driver_max_us) <= p.driver_max_us
    assert p.max_us <= TUNE_MAX_US and all(p.applied(v) == v for v in grid)
    assert not set(grid) & set(p.dynamic_us)  # "driver picks" values are never searched


@pytest.mark.parametrize("driver", PLAYED)
def test_the_whole_grid_is_accepted_and_read_back_unchanged_by_the_driver(driver):
    fake = DRIVERS[driver]
    for usecs in profile_for(fake.name).values():
        state = fake.apply(fake.boot, {**fake.boot, ADAPTIVE_RX: 0, RX_USECS: usecs})
        state = fake.apply(state, {**state, RX_USECS: usecs})  # bnxt_en: adaptive went off in the first write
        assert state[RX_USECS] == usecs


@pytest.mark.parametrize(
    ("driver", "usecs", "code"),
    [
        ("ixgbe", 1024, errno.EINVAL),
        ("mlx5_core", 4096, errno.ERANGE),
        ("igb", 10001, errno.EINVAL),
        ("igb", 5, errno.EINVAL),
        ("igc", 2, errno.EINVAL),
    ],
)
def test_the_driver_refuses_beyond_its_own_limits(driver, usecs, code):
    fake = DRIVERS[driver]
    with pytest.raises(OSError) as exc:
        fake.apply(fake.boot, {**fake.boot, ADAPTIVE_RX: 0, RX_USECS: usecs})
    assert exc.value.errno == code


@pytest.mark.parametrize("driver", PLAYED)
def test_in_range_values_are_set_with_adaptive_off_read_back_and_restored(tmp_path, driver):
    io, store, nic = nic_of(tmp_path, driver)
    prof, boot = profile_for(DRIVERS[driver].name), DRIVERS[driver].boot
    itr = NicItr(io, ("eth1",))
    itr.preflight()
    assert itr.current() is None  # every driver boots adaptive or in a dynamic mode
    grid = itr.values()
    for usecs in (grid[0], grid[len(grid) // 2], grid[-1]):
        assert set_itr(io, store, itr, usecs) == []
        got = nic.get_coalesce("eth1")
        assert got[RX_USECS] == usecs and got[ADAPTIVE_RX] == 0 and itr.current() == usecs
        assert all(got[k] == v for k, v in prof.extra)
    if not prof.adaptive_field:  # igb/igc: no use-adaptive-rx; a static rx-usecs is what turns dynamic off
        assert all(ADAPTIVE_RX not in w for w in nic.writes)
    restore_originals(io, store)
    assert nic.get_coalesce("eth1") == boot


@pytest.mark.parametrize(
    ("driver", "usecs"),
    [
        ("ixgbe", 7),
        ("ixgbe", 1024),
        ("mlx5_core", 0),
        ("mlx5_core", 4095),
        ("bnxt_en", 1023),
        ("ena", 2000),
        ("igb", 5),
        ("igb", 3),
        ("igc", 9),
        ("igc", 1),
        ("mlx5_core", 10.5),
        ("bnxt_en", True),
    ],
)
def test_out_of_range_is_refused_before_the_driver_sees_it(tmp_path, driver, usecs):
    io, store, nic = nic_of(tmp_path, driver)
    prof = profile_for(DRIVERS[driver].name)
    expected = f"expected {prof.min_us}..{prof.max_us} in steps of {prof.step_us}"
    with pytest.raises(KnobRangeError, match=rf"not supported by eth1 \(driver {prof.driver}\): {expected}"):
        NicItr(io, ("eth1",)).plan(usecs)
    assert nic.writes == []


def test_mlx5_sets_the_frame_limit_and_leaves_the_timer_mode(tmp_path):
    io, store, nic = nic_of(tmp_path, "mlx5_core")
    itr = NicItr(io, ("eth1",))
    (setting,) = itr.plan(64)
    assert setting.value == {ADAPTIVE_RX: 0, RX_USECS: 64, RX_FRAMES: 65535}
    set_itr(io, store, itr, 64)
    assert nic.priv_flags("eth1")["rx_cqe_moder"] is True  # ETHTOOL_SCOALESCE cannot change it: left as is
    restore_originals(io, store)
    assert nic.get_coalesce("eth1")[RX_FRAMES] == 32


def test_bnxt_turns_adaptive_off_in_its_own_write_before_rx_usecs(tmp_path):
    fake = DRIVERS["bnxt_en"]
    one_write = fake.apply(fake.boot, {**fake.boot, ADAPTIVE_RX: 0, RX_USECS: 100})
    assert one_write[RX_USECS] == fake.boot[RX_USECS]  # the driver's quirk: rx-usecs of that request ignored
    io, store, nic = nic_of(tmp_path, "bnxt_en")
    itr = NicItr(io, ("eth1",))
    assert [(s.value, s.reg) for s in itr.plan(100)] == [({ADAPTIVE_RX: 0}, 1), ({RX_USECS: 100}, 0)]
    assert set_itr(io, store, itr, 100) == [] and nic.get_coalesce("eth1")[RX_USECS] == 100
    assert [(s.value, s.reg) for s in itr.plan(200)] == [({RX_USECS: 200}, 0)]  # adaptive is off already
    restore_originals(io, store)  # rx-usecs back first, then adaptive on
    assert nic.get_coalesce("eth1") == fake.boot


def test_ena_with_a_coarser_delay_resolution_is_warned_once_and_mapped_back(tmp_path):
    io, store, nic = nic_of(tmp_path, "ena-res4")
    itr = NicItr(io, ("eth1",))
    (note,) = set_itr(io, store, itr, 5)
    assert note.startswith("NIC eth1 (driver ena) reads back rx_coalesce_usecs=4 after setting 5 µs")
    assert "rounded down to the device's interrupt-delay resolution" in note and "reported once" in note
    assert nic.get_coalesce("eth1")[RX_USECS] == 4 and itr.current() == 5  # not retried: kept and counted as 5
    assert set_itr(io, store, itr, 7) == [] and itr.current() == 7
    assert set_itr(io, store, itr, 8) == [] and itr.current() == 8  # a value the device applies exactly
    assert set_itr(io, store, itr, 4) == [] and itr.current() == 4  # 4 is itself again, not the 7 it stood for
    assert itr.notes == [note]
    restore_originals(io, store)
    assert nic.get_coalesce("eth1")[ADAPTIVE_RX] == 1


def test_two_nics_of_different_drivers_share_the_common_grid(tmp_path):
    for ifname, driver in (("eth1", "ixgbe"), ("eth2", "igb")):
        fakefs.net_iface(tmp_path, ifname, driver)
        create_nic(tmp_path, ifname, driver)
    itr = NicItr(HardwareIO(tmp_path, FileNic(tmp_path)), ("eth1", "eth2"))
    assert itr.values() == tuple(range(10, TUNE_MAX_US + 1, 2))


def test_an_unknown_driver_is_unverified_with_a_clear_message_and_force_still_works(tmp_path):
    fakefs.net_iface(tmp_path, "eth1", "sfc")
    create_nic(tmp_path, "eth1", "ixgbe")  # an sfc port that happens to take ixgbe's values
    io = HardwareIO(tmp_path, FileNic(tmp_path))
    known = ", ".join(sorted(PROFILES))
    with pytest.raises(HostError) as exc:
        NicItr(io, ("eth1",)).preflight()
    assert str(exc.value) == (
        f"NIC eth1 (driver sfc) has no verified ITR profile (known: {known}); pass --force (host option "
        f"force = true) to try static rx-usecs anyway"
    )
    assert "mlx5_core" in known and "bnxt_en" in known and "ena" in known and "igc" in known
    forced = NicItr(io, ("eth1",), force=True)
    forced.preflight()
    set_itr(io, OriginalsStore(tmp_path / "state", tmp_path), forced, 100)
    assert forced.current() == 100
