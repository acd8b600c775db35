"""What each NIC driver's ETHTOOL_SCOALESCE does with a request, played for the fake NIC (`FileNic`).

Written from the drivers' ethtool code, not from the tuner's profiles (`actuators.linux.nic_profiles`), so the
tuner's code is tested against an independent reading of the driver: the limits each one refuses with its errno,
what it stores and what ETHTOOL_GCOALESCE reads back. `apply(old, request)` returns the new coalescing state or
raises `OSError` with the driver's errno.
"""

from __future__ import annotations

import errno
from collections.abc import Callable
from dataclasses import dataclass, field

RX, TX, ADAPTIVE, FRAMES = (
    "rx_coalesce_usecs",
    "tx_coalesce_usecs",
    "use_adaptive_rx_coalesce",
    "rx_max_coalesced_frames",
)

State = dict[str, int]


def _refuse(code: int) -> OSError:
    return OSError(code, f"driver refused the coalescing values ({errno.errorcode[code]})")


def _ixgbe(old: State, req: State) -> State:
    # ixgbe_set_coalesce: rx-usecs above 1022 -> EINVAL (EITR max 0xFF8 in 0.25 µs); stored as given.
    if not 0 <= req[RX] <= 1022:
        raise _refuse(errno.EINVAL)
    return dict(req)


def _mlx5(old: State, req: State) -> State:
    # mlx5e_ethtool_set_coalesce: period above MLX5_MAX_CQ_PERIOD (4095) or frames above MLX5_MAX_CQ_COUNT
    # (65535) -> ERANGE; stored as given (DIM on/off from use-adaptive-rx).
    if req[RX] > 4095 or req[TX] > 4095 or req[FRAMES] > 65535:
        raise _refuse(errno.ERANGE)
    return dict(req)


def _bnxt(old: State, req: State) -> State:
    # bnxt_set_coalesce: turning DIM off jumps to reset_coalesce -- the rest of the request is ignored.
    if not req[ADAPTIVE] and old[ADAPTIVE]:
        return {**old, ADAPTIVE: 0}
    return {**req, RX: req[RX] & 0xFFFF}  # coal_ticks is a u16


def _ena(resolution: int) -> Callable[[State, State], State]:
    # ena_com_update_nonadaptive_moderation_interval: interval = usecs / resolution; read back interval * res.
    def apply(old: State, req: State) -> State:
        return {**req, RX: req[RX] // resolution * resolution, TX: req[TX] // resolution * resolution}

    return apply


def _igb(old: State, req: State) -> State:
    # igb_set_coalesce / igc_ethtool_set_coalesce: 0, 1, 3 or 10..10000, else EINVAL; no use-adaptive-rx
    # (ethtool_set_coalesce_supported refuses a non-zero unsupported field with EOPNOTSUPP).
    if req[ADAPTIVE] or req[FRAMES]:
        raise _refuse(errno.EOPNOTSUPP)
    for usecs in (req[RX], req[TX]):
        if usecs > 10000 or 3 < usecs < 10 or usecs == 2:
            raise _refuse(errno.EINVAL)
    return {**req, ADAPTIVE: 0}


@dataclass(frozen=True)
class FakeDriver:
    """A driver's boot-time coalescing, private flags and `apply` rule."""

    name: str
    boot: State
    apply: Callable[[State, State], State]
    priv_flags: dict[str, bool] = field(default_factory=dict)


def _boot(rx: int, adaptive: int, frames: int = 0, tx: int = 0) -> State:
    return {RX: rx, ADAPTIVE: adaptive, FRAMES: frames, TX: tx}


#: The drivers the kit can play (boot values close to each driver's defaults; `ena-res4` is an ENA device reporting a
#: 4 µs interrupt-delay resolution, whose read-back differs from the 1 µs the profile assumes).
DRIVERS: dict[str, FakeDriver] = {
    "ixgbe": FakeDriver("ixgbe", _boot(1, 1), _ixgbe),
    "mlx5_core": FakeDriver(
        "mlx5_core", _boot(8, 1, 32, 16), _mlx5, {"rx_cqe_moder": True, "tx_cqe_moder": False, "rx_cqe_compress": False}
    ),
    "bnxt_en": FakeDriver("bnxt_en", _boot(10, 1, 15, 28), _bnxt),
    "ena": FakeDriver("ena", _boot(0, 1, 0, 64), _ena(1)),
    "ena-res4": FakeDriver("ena", _boot(0, 1, 0, 64), _ena(4)),  # a device reporting a 4 µs resolution
    "igb": FakeDriver("igb", _boot(3, 0), _igb),
    "igc": FakeDriver("igc", _boot(3, 0), _igb),
}
