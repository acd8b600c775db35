"""The zoo on the replay grid: a member's runs (`RunSpec`s: its plant, its day, seeds x SLAs x variants) and the
per-cell statistics the generalisation and ablation benchmarks print, with the targets each cell is held to.

A cell is (member, SLA, variant) over seeds: the median and worst (highest) ratio to the per-window oracle, trials
per retune (all windows; and after the first day where the day spans several), the highest share of a run's
trial time spent above the SLA, and the significantly SLA-violating windows (steady state) summed over runs.
"""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from typing import Any

from core.errors import TunerError
from tuner.replay.grid import RunSpec, TraceSpec, grid
from tuner.replay.zoo import Member

#: (percentile, SLA µs) -> (median, worst) ratio to the per-window oracle a cell must stay within.
RATIO_TARGETS: dict[tuple[float, float], tuple[float, float]] = {
    (99.0, 500.0): (1.02, 1.04),
    (99.0, 200.0): (1.03, 1.06),
    (99.9, 500.0): (1.03, 1.06),
}
MAX_ABOVE_SLA_PCT = 1.0  # trial time above the SLA, % of the run's trial time, in every run
MAX_TRIALS_AFTER_DAY1 = 3.0  # trials per retune after the first day
DEFAULT_SLAS: tuple[tuple[float, float], ...] = tuple(RATIO_TARGETS)


def member_days(m: Member) -> int:
    """How many days member `m`'s day spans (the bundled sample: one)."""
    from traces.days import DAYS, SAMPLE

    return DAYS[m.day].days if m.day != SAMPLE else 1


def member_trace(
    m: Member, *, hours: float | None = None, start_hour: int = 0, every: int = 1, days: int | None = None
) -> TraceSpec:
    """The grid's `TraceSpec` of member `m`: its day (the bundled sample is the trace file), scaled to its plant's
    peak; `hours` from `start_hour` (default: all of the day's days), every `every`-th window. `days` N: the
    same hours of each of its first N days instead (a multi-day member's later days kept at any `hours`)."""
    from actuators.sim.plants import plant
    from traces.days import SAMPLE

    day = "" if m.day == SAMPLE else m.day
    if days is not None:
        if days < 1:
            raise TunerError(f"--days {days}: expected at least 1")
        h = 24.0 - start_hour if hours is None else min(float(hours), 24.0 - start_hour)
        n = min(days, member_days(m))
        return TraceSpec(m.name, "", start_hour, h, every, plant(m.plant).peak_qps, day, n)
    span = 24.0 * member_days(m)
    h = span - start_hour if hours is None else min(float(hours), span - start_hour)
    return TraceSpec(m.name, "", start_hour, h, every, plant(m.plant).peak_qps, day)


def member_specs(
    members: Sequence[Member],
    seeds: Sequence[int],
    slas: Sequence[tuple[float, float]],
    variants: Sequence[tuple[str, str, dict[str, Any]]],
    *,
    hours: float | None = None,
    start_hour: int = 0,
    every: int = 1,
    trials: int = 30,
    days: int | None = None,
) -> list[RunSpec]:
    """Every member's runs: its plant and day x `seeds` x `slas` x `variants` (name, preset, overrides)."""
    out: list[RunSpec] = []
    for m in members:
        trace = member_trace(m, hours=hours, start_hour=start_hour, every=every, days=days)
        out += grid([trace], seeds, slas, variants, trials=trials, plant=m.plant)
    return out


def _after_day1(run: dict[str, Any]) -> float | None:
    """Trials per retune over the tuner's windows after the first day (None: the run has one day)."""
    ws = [w for w in run["windows"].get("tuner", []) if w.get("day", 0) >= 1]
    return sum(w["trials"] for w in ws) / len(ws) if ws else None


def _after_day1_reason(runs: Sequence[dict[str, Any]]) -> str | None:
    """Why a cell has no trials-per-retune-after-day-1 figure (None: it has one)."""
    from tuner.replay.zoo import ZOO

    if any(_after_day1(r) is not None for r in runs):
        return None
    m = next((m for m in ZOO if m.name == runs[0]["trace"]), None)
    if m is not None and member_days(m) == 1:
        return f"not measurable: day {m.day!r} is one day"
    return "not measured: the runs replayed the first day only (--days N replays each of a multi-day member's days)"


def _stats(values: Sequence[float | None]) -> dict[str, float | None]:
    vals = [float(v) for v in values if v is not None]
    if not vals:
        return {"median": None, "worst": None}
    return {"median": statistics.median(vals), "worst": max(vals)}


def cell(runs: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """The statistics of one (member, SLA, variant) cell over its runs (one per seed), and the targets met."""
    first = runs[0]
    ratio = _stats([r["summary"]["ratio_to_oracle"] for r in runs])
    trials = _stats([r["summary"]["trials_per_retune"] for r in runs])
    after: dict[str, Any] = {**_stats([_after_day1(r) for r in runs]), "reason": _after_day1_reason(runs)}
    above = _stats([r["summary"].get("explore_above_sla_pct") or 0.0 for r in runs])
    violating = [int(r["summary"]["sla_violating_windows_significant"] or 0) for r in runs]
    key = (float(first["percentile"]), float(first["sla_us"]))
    target = RATIO_TARGETS.get(key)
    met: dict[str, bool | None] = {
        "ratio_median": None if target is None or ratio["median"] is None else ratio["median"] <= target[0],
        "ratio_worst": None if target is None or ratio["worst"] is None else ratio["worst"] <= target[1],
        "no_violating_windows": sum(violating) == 0,
        "above_sla_every_run": above["worst"] is None or above["worst"] <= MAX_ABOVE_SLA_PCT,
        "trials_after_day1": None if after["worst"] is None else after["worst"] <= MAX_TRIALS_AFTER_DAY1,
    }
    return {
        "member": first["trace"],
        "plant": first["plant"],
        "percentile": first["percentile"],
        "sla_us": first["sla_us"],
        "variant": first["variant"],
        "seeds": [r["seed"] for r in runs],
        "ratio_to_oracle": ratio,
        "ratio_per_seed": [r["summary"]["ratio_to_oracle"] for r in runs],
        "trials_per_retune": trials,
        "trials_per_retune_after_day1": after,
        "explore_above_sla_pct_of_trial_time": above,
        "sla_violating_windows_significant": {"total": sum(violating), "worst": max(violating)},
        "target_ratio": None if target is None else {"median": target[0], "worst": target[1]},
        "met": met,
    }


def cells(runs: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """`cell` per (member, SLA, variant), in the runs' order."""
    groups: dict[tuple[Any, ...], list[dict[str, Any]]] = {}
    for r in runs:
        groups.setdefault((r["trace"], r["plant"], r["percentile"], r["sla_us"], r["variant"]), []).append(r)
    return [cell(rows) for rows in groups.values()]


def pooled(rows: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """Cells pooled over members (a half at one SLA and variant): median of the per-seed ratios and the worst."""
    ratios = [v for c in rows for v in c["ratio_per_seed"] if v is not None]
    return {
        "cells": len(rows),
        "runs": sum(len(c["seeds"]) for c in rows),
        "ratio_to_oracle": _stats(ratios),
        "explore_above_sla_pct_worst": max(
            (c["explore_above_sla_pct_of_trial_time"]["worst"] or 0.0 for c in rows), default=None
        ),
        "sla_violating_windows_significant": sum(c["sla_violating_windows_significant"]["total"] for c in rows),
        "all_targets_met": all(v is not False for c in rows for v in c["met"].values()),
    }
