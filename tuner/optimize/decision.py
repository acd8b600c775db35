"""What a retune settles on: the best MEASURED point of it that met the SLA (`best_decision`), never a
modelled one."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace

from actuators.host import KnobSpace, Measurement, OperatingPoint
from tuner.optimize.records import STATUS_COMPLETED, STATUS_FAILED, TrialRecord
from tuner.optimize.settings import Objective, TunerSettings, met_limit_us, pct_text


@dataclass(frozen=True)
class Decision:
    """The point a retune settles on, its measured window, whether that met the SLA, and why it was chosen."""

    point: OperatingPoint
    measurement: Measurement | None
    met_sla: bool
    reason: str


def best_decision(
    retune_trials: Sequence[TrialRecord], objective: Objective, settings: TunerSettings, space: KnobSpace
) -> Decision:
    """The best MEASURED point of `retune_trials` (the current retune's) that met the SLA (lowest reward); if none did, the
    safest measured point.

    With `sla_check="ci"` (default) a trial meets the SLA when the upper end of its percentile's 95 % CI
    does; if no trial does but some have their point estimate within the SLA, the best of those is taken
    (and the reason says so). "Safest" = lowest measured percentile (ties: lower power). With no completed
    trial at all, the host's safe corner (lowest ITR, highest frequency) is returned, `measurement=None`.
    """
    done = [r for r in retune_trials if r.status == STATUS_COMPLETED and r.measurement is not None]
    obj = objective
    pct = obj.percentile
    label = f"{pct_text(pct)} <= {obj.sla_us:g} µs"
    met = [r for r in done if obj.met(r.measurement)]  # type: ignore[arg-type]
    strict = replace(obj, sla_us=met_limit_us(objective.sla_us, settings))  # used only with sla_check="ci"
    margin = f" less {settings.sla_margin_pct:g} %" if settings.sla_margin_pct else ""
    sure = [r for r in met if strict.met_confidently(r.measurement)]  # type: ignore[arg-type]
    pool, how = (sure, f"with its 95 % CI{margin}") if settings.sla_check == "ci" and sure else (met, "")
    if settings.sla_check == "ci" and not sure and met:
        how = f"by its estimate only: no trial's CI was within the SLA{margin}"
    if pool:
        r = min(pool, key=lambda r: (r.reward, r.measurement.percentile(pct), r.index))  # type: ignore[union-attr]
        m = r.measurement
        assert m is not None
        return Decision(
            r.point,
            m,
            True,
            f"best measured point meeting {label}{' ' + how if how else ''} "
            f"({len(pool)} of {len(done)} trials did): "
            f"{pct_text(pct)} {m.percentile(pct):.0f} µs, {m.power_w:.1f} W",
        )
    if done:
        r = min(done, key=lambda r: (r.measurement.percentile(pct), r.measurement.power_w, r.index))  # type: ignore[union-attr]
        m = r.measurement
        assert m is not None
        return Decision(
            r.point,
            m,
            False,
            f"no measured point met {label} in {len(done)} trial(s); applying the safest measured "
            f"point ({pct_text(pct)} {m.percentile(pct):.0f} µs)",
        )
    safe = OperatingPoint(space.itr_us[0], space.dvfs_ghz[-1])
    n_failed = sum(1 for r in retune_trials if r.status == STATUS_FAILED)
    return Decision(safe, None, False, f"no trial completed ({n_failed} failed); applying the safe corner {safe}")
