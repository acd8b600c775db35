"""What each NIC driver accepts for `rx-usecs`, how it rounds, how its adaptive moderation is turned off, and
which other coalescing fields matter -- read from each driver's ethtool code in the Linux sources.

A profile's grid (`values()`) is what the tuner searches: the `rx-usecs` values the driver applies exactly, so a
read-back returns the value written. Every grid stops at `TUNE_MAX_US` (1022 µs, the ixgbe maximum and the range
the tuner's models are calibrated on) even where the driver accepts more; `driver_max_us` is what the driver
itself accepts. Sources (Linux `drivers/net/ethernet/...`, functions named in each profile's `source`):

- ixgbe (intel/ixgbe/ixgbe_ethtool.c `ixgbe_set_coalesce`): EITR counts 2 µs units (`IXGBE_MAX_EITR` 0xFF8 in
  0.25 µs), maximum 1022 µs (1024 -> EINVAL); rx-usecs 1 is the driver's dynamic mode; with LRO (RSC) on, crossing
  6 <-> 7 µs toggles RSC and resets the adapter.
- i40e, ice (intel/i40e/i40e_ethtool.c, intel/ice/ice_ethtool.c `__ice_set_coalesce`): 2 µs ITR granularity,
  up to 8160 µs; adaptive through use-adaptive-rx.
- mlx5_core (mellanox/mlx5/core/en_ethtool.c `mlx5e_ethtool_set_coalesce`): the CQ moderation period in µs, up to
  `MLX5E_MAX_COAL_TIME` = `MLX5_MAX_CQ_PERIOD` = 2^12 - 1 = 4095 (the 12-bit `cq_period` of `mlx5_ifc_cqc_bits`),
  frames up to `MLX5_MAX_CQ_COUNT` = 2^16 - 1 = 65535 (16-bit `cq_max_count`); beyond either -> ERANGE.
  Adaptive is DIM (`rx_dim_enabled`, use-adaptive-rx). The timer starts at the first CQE (CQE mode,
  priv-flag `rx_cqe_moder`, the default where `cq_period_start_from_cqe` is supported) or at the last EQE (EQE
  mode); ETHTOOL_SCOALESCE cannot switch it (netlink `cqe-mode-rx` or the priv flag can), so the tuner reads it
  and leaves it. `rx-frames` is set to 65535 so the period alone paces interrupts, as ixgbe's EITR does (the
  default 32 frames fires early above 32 packets per period).
- bnxt_en (broadcom/bnxt/bnxt_ethtool.c `bnxt_set_coalesce`, bnxt.c `bnxt_hwrm_set_coal_params`): rx-usecs is
  stored as given (`coal_ticks`, read back as is) and converted to firmware timer units (`usec * 1000 /
  timer_units`, `bnxt_usec_to_coal_tmr`; the units are reported by the firmware, 80 ns being the driver's default in
  `bnxt_hwrm_coal_params_qcaps`, not a value read from a card), a u16, so 1 µs steps apply exactly up to
  5242 µs. Adaptive is DIM
  (`BNXT_FLAG_DIM`); turning it off jumps to `reset_coalesce` and ignores the rest of that same request, so
  adaptive goes off in its own write first.
- ena (amazon/ena/ena_ethtool.c `ena_set_coalesce`, ena_com.c `ena_com_update_nonadaptive_moderation_interval`):
  the interval is `rx-usecs / intr_delay_resolution` (integer division: rounds down) and reads back times the
  resolution; the resolution is reported by the device (1 µs when it reports 0,
  `ENA_DEFAULT_INTR_DELAY_RESOLUTION`), so the grid assumes 1 µs and a coarser device shows up as a read-back
  mismatch (warned once, then mapped). The register field is 15 bits (`ENA_ETH_IO_INTR_REG_RX_INTR_DELAY_MASK`),
  so at most 32767 resolution units. Adaptive is DIM through use-adaptive-rx.
- igb, igc (intel/igb/igb_ethtool.c `igb_set_coalesce`, intel/igc/igc_ethtool.c `igc_ethtool_set_coalesce`):
  rx-usecs 0 (off), 1 and 3 (dynamic modes: `IGB_DEFAULT_ITR` 3) or 10..10000 (`IGB_MIN_ITR_USECS`,
  `IGB_MAX_ITR_USECS`; 2 and 4..9 -> EINVAL); stored as `usecs << 2` and read back `>> 2`, written to EITR masked
  with 0x7FFC (`igb_write_itr`), i.e. 1 µs steps up to 8191 µs. No use-adaptive-rx: a static rx-usecs >= 10 is
  what turns the dynamic mode off (a non-zero use-adaptive-rx is refused by the ethtool core, EOPNOTSUPP). igc's
  limits are the same constants in igc.h (`IGC_MIN_ITR_USECS`, `IGC_MAX_ITR_USECS`); with queue pairs a changed
  tx-usecs wins over rx-usecs, so the tuner writes back the tx-usecs it read.
"""

from __future__ import annotations

from dataclasses import dataclass

RX_USECS = "rx_coalesce_usecs"
ADAPTIVE_RX = "use_adaptive_rx_coalesce"
RX_FRAMES = "rx_max_coalesced_frames"
TUNE_MAX_US = 1022

#: ETHTOOL_SCOALESCE field names as `ethtool -c` prints them.
FIELD_NAMES = {RX_USECS: "rx-usecs", ADAPTIVE_RX: "adaptive-rx", RX_FRAMES: "rx-frames"}


@dataclass(frozen=True)
class DriverProfile:
    """One driver's `rx-usecs` facts and what the tuner writes beside it."""

    driver: str
    step_us: int
    min_us: int
    max_us: int  # top of the tuning grid
    driver_max_us: int = TUNE_MAX_US  # the largest value the driver applies
    dynamic_us: tuple[int, ...] = ()  # rx-usecs values meaning "driver picks" (ixgbe 1; igb/igc 1, 3)
    lro_unsafe_below_us: int | None = None  # with LRO on, values below this reset the adapter
    adaptive_field: bool = True  # the driver has use-adaptive-rx (written 0 with every set)
    adaptive_first: bool = False  # adaptive off must be its own ETHTOOL_SCOALESCE before rx-usecs (bnxt_en)
    extra: tuple[tuple[str, int], ...] = ()  # other fields set with every write
    adaptive_off: str = "use-adaptive-rx off"
    rounding: str = ""
    leaves: tuple[str, ...] = ()  # fields that matter and the tuner leaves as they are
    source: str = ""
    verified: bool = True

    def values(self) -> tuple[int, ...]:
        """The tuning grid: values the driver applies exactly (a read-back returns them)."""
        first = self.min_us + (-self.min_us) % self.step_us
        return tuple(range(first, self.max_us + 1, self.step_us))

    def applied(self, usecs: int) -> int:
        """What the driver applies for `usecs` (rounded down to its step); grid values map to themselves."""
        return usecs - usecs % self.step_us

    def describe(self) -> str:
        """One line for `tuner doctor`: range, step, adaptive off how, the fields set and left."""
        sets = ", ".join(f"{FIELD_NAMES.get(k, k)} {v}" for k, v in self.extra) or "nothing else"
        left = "; leaves " + ", ".join(self.leaves) if self.leaves else ""
        return (
            f"profile {self.driver}: rx-usecs {self.min_us}..{self.max_us} µs step {self.step_us} "
            f"(driver applies up to {self.driver_max_us} µs; {self.rounding}); adaptive off: {self.adaptive_off}; "
            f"sets {sets}{left} [{self.source}]"
        )


_INTEL_DYNAMIC = "rx-usecs 1 = dynamic mode, 3 = dynamic conservative; static values >= 10 turn it off"

#: Profiles of the drivers this tuner knows (see the module docstring for each source).
PROFILES: dict[str, DriverProfile] = {
    "ixgbe": DriverProfile(
        "ixgbe",
        2,
        2,
        TUNE_MAX_US,
        1022,
        dynamic_us=(1,),
        lro_unsafe_below_us=8,
        adaptive_off="a static rx-usecs >= 2 (1 = the driver's dynamic mode); use-adaptive-rx off",
        rounding="EITR counts 2 µs",
        leaves=("LRO (values < 8 µs refused while it is on)",),
        source="ixgbe_ethtool.c ixgbe_set_coalesce",
    ),
    "i40e": DriverProfile(
        "i40e",
        2,
        2,
        TUNE_MAX_US,
        8160,
        rounding="ITR counts 2 µs",
        source="i40e_ethtool.c __i40e_set_coalesce",
    ),
    "ice": DriverProfile(
        "ice",
        2,
        2,
        TUNE_MAX_US,
        8160,
        rounding="ITR counts 2 µs",
        source="ice_ethtool.c __ice_set_coalesce",
    ),
    "mlx5_core": DriverProfile(
        "mlx5_core",
        1,
        1,
        TUNE_MAX_US,
        4095,
        extra=((RX_FRAMES, 65535),),
        adaptive_off="use-adaptive-rx off (DIM)",
        rounding="CQ period in 1 µs, read back as set",
        leaves=(
            "the CQE/EQE timer mode (priv-flag rx_cqe_moder; ETHTOOL_SCOALESCE cannot set it)",
            "tx-usecs/tx-frames",
        ),
        source="en_ethtool.c mlx5e_ethtool_set_coalesce",
    ),
    "bnxt_en": DriverProfile(
        "bnxt_en",
        1,
        1,
        TUNE_MAX_US,
        5242,
        adaptive_first=True,
        adaptive_off="use-adaptive-rx off (DIM) in its own write first (the driver ignores the rest of that write)",
        rounding="stored in µs, firmware timer in 80 ns units",
        leaves=("rx-frames", "rx-usecs-irq", "cqe-mode-rx"),
        source="bnxt_ethtool.c bnxt_set_coalesce, bnxt.c bnxt_hwrm_set_coal_params",
    ),
    "ena": DriverProfile(
        "ena",
        1,
        1,
        TUNE_MAX_US,
        32767,
        adaptive_off="use-adaptive-rx off (DIM)",
        rounding="rounded down to the device's interrupt-delay resolution, 1 µs unless the device reports more",
        leaves=("tx-usecs",),
        source="ena_ethtool.c ena_set_coalesce, ena_com.c",
    ),
    "igb": DriverProfile(
        "igb",
        1,
        10,
        TUNE_MAX_US,
        8191,
        dynamic_us=(1, 3),
        adaptive_field=False,
        adaptive_off=_INTEL_DYNAMIC,
        rounding="stored as usecs << 2, EITR masked 0x7FFC: 1 µs",
        leaves=("tx-usecs (queue pairs share rx-usecs)",),
        source="igb_ethtool.c igb_set_coalesce, igb_main.c igb_write_itr",
    ),
    "igc": DriverProfile(
        "igc",
        1,
        10,
        TUNE_MAX_US,
        8191,
        dynamic_us=(1, 3),
        adaptive_field=False,
        adaptive_off=_INTEL_DYNAMIC,
        rounding="stored as usecs << 2, 1 µs",
        leaves=("tx-usecs (queue pairs: a changed tx-usecs wins)",),
        source="igc_ethtool.c igc_ethtool_set_coalesce",
    ),
}


def profile_for(driver: str) -> DriverProfile:
    """The profile of `driver`; unknown drivers get ixgbe's grid, flagged unverified (read-back checks)."""
    return PROFILES.get(driver) or DriverProfile(
        driver, 2, 2, TUNE_MAX_US, rounding="unknown", source="no profile: unverified", verified=False
    )


def unverified_message(ifname: str, driver: str) -> str:
    """The one-line refusal for a driver without a profile."""
    return (
        f"NIC {ifname} (driver {driver}) has no verified ITR profile (known: {', '.join(sorted(PROFILES))}); "
        f"pass --force (host option force = true) to try static rx-usecs anyway"
    )
