"""What a tuning run optimises and how it runs: `Objective` (reward, percentile, SLA) and `TunerSettings`
(trials, windows, seed, and the contextual, stopping, safety and adaptive-window options), validated on
construction with one-line errors; plus the two derived quantities every layer uses (`met_limit_us`,
`itr_candidates`)."""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from actuators.host import PERCENTILES, Measurement
from core.errors import TunerError
from reward import DEFAULT_REWARD  # chosen by bench/replay.py (docs, section "replay")
from tuner.optimize.table import ACQUISITIONS, SLA_CHECKS, TUNER_TABLE, WINDOW_MODES

__all__ = [
    "ACQUISITIONS",
    "SLA_CHECKS",
    "WINDOW_MODES",
    "Objective",
    "TunerSettings",
    "confident_high_us",
    "final_limit_us",
    "itr_candidates",
    "itr_step_us",
    "met_limit_us",
    "pct_text",
]

#: Each `TunerSettings` field's default, from its row of the table.
_D: dict[str, Any] = {row.name: row.default for row in TUNER_TABLE}


def pct_text(pct: float) -> str:
    return f"p{pct:g}"


@dataclass(frozen=True)
class Objective:
    """What to optimise: a reward by name, the latency percentile it uses, and the SLA (µs)."""

    reward: str = DEFAULT_REWARD
    percentile: float = 99.0
    sla_us: float = 500.0

    def __post_init__(self) -> None:
        from reward import REGISTRY

        if self.reward not in REGISTRY:
            raise TunerError(f"unknown reward {self.reward!r}: expected one of {', '.join(sorted(REGISTRY))}")
        try:
            pct = float(self.percentile)
        except (TypeError, ValueError):
            pct = math.nan
        if pct not in PERCENTILES:
            allowed = ", ".join(f"{p:g}" for p in PERCENTILES)
            raise TunerError(f"unknown percentile {self.percentile!r}: expected one of {allowed}")
        object.__setattr__(self, "percentile", pct)
        try:
            sla = float(self.sla_us)
        except (TypeError, ValueError):
            sla = math.nan
        if not (sla > 0 and math.isfinite(sla)):
            raise TunerError(f"SLA must be a positive number of µs, got {self.sla_us!r}")
        object.__setattr__(self, "sla_us", sla)

    def describe(self) -> str:
        return f"{self.reward}, {pct_text(self.percentile)} <= {self.sla_us:g} µs"

    def met(self, m: Measurement) -> bool:
        """Whether the measured percentile (point estimate) is within the SLA."""
        return m.percentile(self.percentile) <= self.sla_us

    def violated_confidently(self, m: Measurement) -> bool:
        """Whether even the lower end of the percentile's 95 % CI is above the SLA (a significant violation)."""
        ci = m.latency_ci_us.get(self.percentile)
        low = ci[0] if ci is not None else m.percentile(self.percentile)
        return min(low, m.percentile(self.percentile)) > self.sla_us

    def met_confidently(self, m: Measurement, widen: float = 1.0) -> bool:
        """Whether the upper end of the percentile's 95 % CI is within the SLA; `widen` counts the CI's upper
        half-width that many times (estimate + widen x (upper end - estimate); 1 = the CI as measured)."""
        return confident_high_us(m, self.percentile, widen) <= self.sla_us


@dataclass(frozen=True)
class TunerSettings:
    """How a retune runs: trials (Sobol first), settle and window seconds, the seed, and the learning tuner's
    options. Each field is a row of `tuner.optimize.table.TUNER_TABLE` (its default, bounds and doc line); the
    defaults are the tuner users get, `tuner.optimize.presets` has the dissertation's (`cold`) and the ablations."""

    trials: int = _D["trials"]
    sobol_trials: int = _D["sobol_trials"]
    settle_s: float = _D["settle_s"]
    window_s: float = _D["window_s"]
    seed: int = _D["seed"]
    itr_resolution_us: int = _D["itr_resolution_us"]
    itr_resolution_sla_pct: float = _D["itr_resolution_sla_pct"]
    torch_threads: int = _D["torch_threads"]
    sla_check: str = _D["sla_check"]
    sla_margin_pct: float = _D["sla_margin_pct"]
    final_margin_pct: float = _D["final_margin_pct"]
    final_margin_ci: float = _D["final_margin_ci"]
    context: bool = _D["context"]
    context_max_qps: float = _D["context_max_qps"]
    history_max_trials: int = _D["history_max_trials"]
    drift_h: float = _D["drift_h"]
    expand_ei_pct: float = _D["expand_ei_pct"]
    min_trials: int = _D["min_trials"]
    stop_ei_pct: float = _D["stop_ei_pct"]
    safe_delta: float = _D["safe_delta"]
    safe_limit_delta: float = _D["safe_limit_delta"]
    safe_radius: float = _D["safe_radius"]
    safe_model_error: float = _D["safe_model_error"]
    safe_sd_scale: float = _D["safe_sd_scale"]
    latency_metric: str = _D["latency_metric"]
    window_mode: str = _D["window_mode"]
    window_ci_pct: float = _D["window_ci_pct"]
    window_min_s: float = _D["window_min_s"]
    window_guard: bool = _D["window_guard"]
    settle_guard: bool = _D["settle_guard"]
    step_down: bool = _D["step_down"]
    refit_every: int = _D["refit_every"]
    hyper_iters: int = _D["hyper_iters"]
    peak_step: bool = _D["peak_step"]
    hold_max_p: float = _D["hold_max_p"]
    acquisition: str = _D["acquisition"]
    refine_step: bool = _D["refine_step"]
    first_proven: bool = _D["first_proven"]
    proof_reset: bool = _D["proof_reset"]
    estimate_guard: bool = _D["estimate_guard"]
    descend_pct: float = _D["descend_pct"]
    peak_first: bool = _D["peak_first"]
    break_step: bool = _D["break_step"]

    def __post_init__(self) -> None:
        for row in TUNER_TABLE:
            row.validate(getattr(self, row.name))
        if self.window_mode == "adaptive" and self.window_min_s > self.window_s:
            raise TunerError(
                f"window_min_s ({self.window_min_s:g} s) must not exceed window_s "
                f"({self.window_s:g} s, the adaptive window's maximum)"
            )

    def load_of(self, qps: float) -> float:
        """The model's `load` input for an offered load: min(qps / context_max_qps, 1), at least 0."""
        return min(max(float(qps), 0.0) / self.context_max_qps, 1.0)


def confident_high_us(m: Measurement, percentile: float, widen: float = 1.0) -> float:
    """The percentile's estimate plus `widen` x its 95 % CI's upper half-width (µs); the estimate alone when
    the measurement carries no CI for it."""
    est = m.percentile(percentile)
    ci = m.latency_ci_us.get(percentile)
    high = max(ci[1], est) if ci is not None else est
    return est + widen * (high - est)


def final_limit_us(sla_us: float, settings: TunerSettings) -> float:
    """The limit the final choice applies (`best_decision`) to estimate + (1 + `final_margin_ci`) CI half-widths:
    the SLA less `final_margin_pct` with `sla_check="ci"`, else the SLA (to the estimate alone)."""
    if settings.sla_check == "ci":
        return sla_us * (1 - settings.final_margin_pct / 100.0)
    return sla_us


def met_limit_us(sla_us: float, settings: TunerSettings) -> float:
    """The limit exploration aims within: the SLA less `sla_margin_pct` with `sla_check="ci"`, else the SLA. With
    the default final margin it is also the one `Optimizer.best` applies (`final_limit_us`)."""
    if settings.sla_check == "ci":
        return sla_us * (1 - settings.sla_margin_pct / 100.0)
    return sla_us


def itr_step_us(resolution_us: int, sla_pct: float, sla_us: float) -> int:
    """The ITR grid's step at SLA `sla_us`: `resolution_us`, halved (not below 2 µs) while it is over `sla_pct` % of
    the SLA (0: `resolution_us` at every SLA). An interrupt waits up to one ITR, so one step moves the percentile by
    up to about a step: 16 µs is 3.2 % of a 500 µs SLA but 8 % of a 200 µs one, where the cheap points sit at short
    ITRs one 16 µs step apart in cost (docs/optimizer-final-choice.md, "The ITR grid's share")."""
    step = resolution_us
    while sla_pct > 0 and step > 2 and step > sla_us * sla_pct / 100.0:
        step = max(2, step // 2)
    return step


def itr_candidates(itr_us: Sequence[int], resolution_us: int) -> tuple[int, ...]:
    """The host's ITR values thinned to at least `resolution_us` apart, starting from the lowest (the safe end).

    Ax enumerates every candidate when it optimises the acquisition over this discrete space, so its cost
    scales with their number: 511 x 18 at 2 µs vs 128 x 18 at 8 µs (see docs/optimizer.md).
    """
    out: list[int] = []
    for v in itr_us:
        if not out or v >= out[-1] + resolution_us:
            out.append(v)
    return tuple(out)


def _check_fields() -> None:
    """The dataclass's fields are the table's rows, with the row's type (checked once, at import)."""
    fields = {f.name: f.type for f in dataclasses.fields(TunerSettings)}
    rows = {row.name: row.kind.__name__ for row in TUNER_TABLE if row.optimizer}
    if fields != rows:
        raise TypeError(f"TunerSettings fields {fields} differ from tuner.optimize.table.TUNER_TABLE {rows}")


_check_fields()
