"""Named tuners: `cold` (the dissertation's tuner: every learning feature off, 30 trials, a fresh experiment per
window), `warm` (the defaults, the tuner users get) and warm's ablations, each warm without one feature (the rows
of the 3-day benchmark in docs/benchmarks.md, so that `tuner replay --preset NAME` reproduces one).

A preset sets every field on which cold and warm differ, so it means the same on any base settings; `cold`'s
values are the `cold` of each row of `tuner.optimize.table.TUNER_TABLE`, `warm`'s are the rows' defaults.
"""

from __future__ import annotations

from dataclasses import replace
from typing import TYPE_CHECKING, Any

from core.errors import TunerError
from tuner.optimize.table import TUNER_TABLE, Setting

if TYPE_CHECKING:  # imported where used: the CLI lists the presets without numpy
    from tuner.optimize.settings import TunerSettings


def cold_values(table: tuple[Setting, ...] = TUNER_TABLE) -> dict[str, Any]:
    """The fields on which the dissertation's tuner differs from the defaults, at its values."""
    return {row.name: row.cold for row in table if row.cold is not None}


def warm_values(table: tuple[Setting, ...] = TUNER_TABLE) -> dict[str, Any]:
    """The same fields at their defaults (the learning tuner)."""
    return {row.name: row.default for row in table if row.cold is not None}


#: The benchmark's ablations, each warm without one feature (docs/benchmarks.md); `warm-grid` is not an ablation
#: but the fast variant: Ax's acquisition over the allowed points only, hyperparameters every 5th trial. The zoo's
#: ablation (bench/ablation.py) adds: the 8 µs ITR grid (not 16), no new-peak step, Ax's own acquisition (not the
#: constrained EI), and each margin at 0.
WARM_ABLATIONS: dict[str, dict[str, Any]] = {
    "warm-no-safety": {"safe_delta": 0.0},
    "warm-no-evidence": {"safe_radius": 0.0},
    "warm-no-adaptive": {"window_mode": "fixed"},
    "warm-no-stop": {"stop_ei_pct": 0.0},
    "warm-no-context": {"context": False},
    "warm-no-guard": {"window_guard": False},
    "warm-no-settle-guard": {"settle_guard": False},
    "warm-no-step-down": {"step_down": False},
    "warm-no-sd-scale": {"safe_sd_scale": 1.0},
    "warm-headroom": {"latency_metric": "headroom"},
    "warm-grid": {"acquisition": "grid", "refit_every": 5},
    "warm-itr-8": {"itr_resolution_us": 8},
    "warm-no-peak-step": {"peak_step": False},
    "warm-ax": {"acquisition": "ax"},
    "warm-no-sla-margin": {"sla_margin_pct": 0.0},
    "warm-no-final-margin": {"final_margin_pct": 0.0},
    "warm-no-first-proven": {"first_proven": False},
    "warm-no-proof-reset": {"proof_reset": False},
    "warm-no-descend": {"descend_pct": 0.0},
}
#: Variants that ADD a feature to warm (not defaults: measured in docs/optimizer-safety.md, "The monotone structure",
#: and for `warm-drift`, `warm-expand`, `warm-refine` and `warm-estimate-guard` in docs/benchmarks.md).
WARM_ADDITIONS: dict[str, dict[str, Any]] = {
    "warm-break-step": {"break_step": True},
    "warm-peak-first": {"peak_first": True},
    "warm-monotone": {"peak_first": True, "break_step": True},
    "warm-drift": {"drift_h": 8.0},
    "warm-expand": {"expand_ei_pct": 1.0},
    "warm-refine": {"refine_step": True},
    "warm-estimate-guard": {"estimate_guard": True},
}
#: `tuner replay --preset NAME` / bench variants: the `TunerSettings` fields each preset sets.
TUNER_PRESETS: dict[str, dict[str, Any]] = {
    "cold": cold_values(),
    "warm": warm_values(),
    **{name: {**warm_values(), **over} for name, over in {**WARM_ABLATIONS, **WARM_ADDITIONS}.items()},
}
#: The preset `tuner replay` runs unless told: the defaults.
DEFAULT_PRESET = "warm"


def preset_settings(name: str, base: TunerSettings | None = None, **overrides: Any) -> TunerSettings:
    """`base` (default `TunerSettings()`) with preset `name`'s fields, then `overrides`, applied."""
    from tuner.optimize.settings import TunerSettings

    if name not in TUNER_PRESETS:
        raise TunerError(f"unknown tuner preset {name!r}: expected one of {', '.join(TUNER_PRESETS)}")
    fields = {**TUNER_PRESETS[name], **overrides}
    try:
        return replace(base if base is not None else TunerSettings(), **fields)
    except TypeError as exc:  # a field this TunerSettings does not have
        raise TunerError(f"tuner preset {name!r}: {exc}") from None


def cold_settings(**overrides: Any) -> TunerSettings:
    """The dissertation's tuner with `overrides` (what `TunerSettings(**overrides)` was before the learning tuner
    became the default)."""
    return preset_settings("cold", **overrides)
