"""Summaries of a replay: per policy and per day, energy against linux-default and the oracle, windows over the
SLA, exploration cost (what `summary.json`, the report and the benchmarks print)."""

from __future__ import annotations

import statistics
from typing import Any

from tuner.replay.run import ReplayResult, WindowResult


def days(result: ReplayResult) -> list[int]:
    """The days present in the replayed schedule, in order ([0] for a single day)."""
    return sorted({w.day for w in result.windows})


def _pct(part: float, whole: float) -> float | None:
    return 100.0 * part / whole if whole > 0 else None


def policy_summary(result: ReplayResult, policy: str, day: int | None = None) -> dict[str, Any]:
    """Totals for one policy (over one `day` if given): energy, savings vs linux-default, ratio to oracle, SLA,
    trials (also per retune), exploration above the SLA (s, % of trial time and % of all the policy's time),
    adaptive-window saving, the safety filter's calibration (`gated_*`: trials it passed on the model's P,
    the violations that P expected, the ones measured), timings.

    `window_saved_s`: trial measurement time saved against fixed `settings.window_s` windows (0 when fixed);
    `wall_s` is the policy's whole replay, not per day.
    """
    pr = result.policies[policy]
    if not pr.available:
        return {"available": False, "note": pr.note}

    def pick(ws: list[WindowResult]) -> list[WindowResult]:
        return ws if day is None else [w for w in ws if w.day == day]

    ws = pick(pr.windows)
    energy = sum(w.energy_j for w in ws)
    base = result.policies.get("linux-default")
    base_ws = pick(base.windows) if base is not None and base.available else []
    base_e = sum(w.energy_j for w in base_ws) if base_ws else None
    oracle_e = _energy(result, "oracle", day)
    hourly_e = _energy(result, "oracle-hourly", day)
    suggest = [s for w in ws for s in w.suggest_s]
    elapsed = sum(w.elapsed_s for w in ws)
    explore_s = sum(w.explore_s for w in ws)
    above = sum(w.explore_above_sla_s for w in ws)
    fixed = sum(w.fixed_window_s for w in ws)
    saved = sum(max(w.fixed_window_s - w.trial_window_s, 0.0) for w in ws)
    trials = sum(w.trials for w in ws)
    out: dict[str, Any] = {
        "available": True,
        "windows": len(ws),
        "energy_j": energy,
        "mean_power_w": energy / elapsed if ws and elapsed > 0 else None,
        "saved_vs_linux_default_pct": (100.0 * (1 - energy / base_e)) if base_e else None,
        "ratio_to_oracle": (energy / oracle_e) if oracle_e else None,
        "ratio_to_hourly_oracle": (energy / hourly_e) if hourly_e else None,
        "sla_violating_windows": sum(1 for w in ws if w.met_sla is False),
        "sla_violating_windows_significant": sum(
            1 for w in ws if w.steady is not None and result.objective.violated_confidently(w.steady)
        ),
        "windows_without_steady_state": sum(1 for w in ws if w.steady is None),
        "explore_s": explore_s,
        "explore_above_sla_s": above,
        "explore_above_sla_pct": _pct(above, explore_s),
        "explore_above_sla_pct_of_time": _pct(above, elapsed),
        "explore_energy_j": sum(w.explore_energy_j for w in ws),
        "trials": trials,
        "trials_per_retune": trials / len(ws) if policy == "tuner" and ws else None,
        "held_windows": sum(1 for w in ws if w.held),
        "median_decide_s": statistics.median([w.decide_s for w in ws]) if policy == "tuner" and ws else None,
        "median_hold_decide_s": statistics.median(held_s) if (held_s := [w.decide_s for w in ws if w.held]) else None,
        "failed_trials": sum(w.failed_trials for w in ws),
        "failed_windows": sum(1 for w in ws if w.error),
        "trial_window_s": sum(w.trial_window_s for w in ws),
        "window_saved_s": saved,
        "window_saved_pct": _pct(saved, fixed),
        "gated_trials": sum(w.gated_trials for w in ws),
        "gated_expected_over": sum(w.gated_p_sum for w in ws),
        "gated_over": sum(w.gated_over for w in ws),
        "median_suggest_s": statistics.median(suggest) if suggest else None,
        "wall_s": pr.wall_s,
        "note": pr.note,
    }
    if day is not None:
        out["day"] = day
    elif policy == "tuner" and pr.history_used:
        out["history_trials_used"] = pr.history_used
    return out


def _energy(result: ReplayResult, policy: str, day: int | None) -> float | None:
    """A policy's energy over the replay (over one `day` if given); None if it did not run or is unavailable."""
    pr = result.policies.get(policy)
    if pr is None or not pr.available:
        return None
    ws = [w for w in pr.windows if day is None or w.day == day]
    return sum(w.energy_j for w in ws) if ws else None


#: `oracle_comparison`'s side-by-side counts: (key prefix, policy).
_SIDE_BY_SIDE = (("tuner", "tuner"), ("window_oracle", "oracle"), ("hourly_oracle", "oracle-hourly"))


def _violating(result: ReplayResult, policy: str) -> int | None:
    """Windows of `policy` whose steady state is over the SLA with confidence; None if it did not run."""
    pr = result.policies.get(policy)
    if pr is None or not pr.available:
        return None
    return sum(1 for w in pr.windows if w.steady is not None and result.objective.violated_confidently(w.steady))


def oracle_comparison(result: ReplayResult) -> dict[str, Any] | None:
    """The tuner's energy against the oracles that ran: the per-window oracle (`oracle`) and the best static point of
    each hour held for its windows (`oracle-hourly`); None without the tuner. A ratio below 1 against the hourly
    oracle is energy a tuner following the load within the hour saves over any static hourly point. Side by side:
    the per-window oracle's energy against the hourly one's, and the windows each of the three held significantly
    over the SLA (None for an oracle that did not run), with the tuner's share of trial time above the SLA."""
    tuner = _energy(result, "tuner", None)
    if tuner is None:
        return None
    hourly, window = _energy(result, "oracle-hourly", None), _energy(result, "oracle", None)
    out: dict[str, Any] = {
        "tuner_energy_j": tuner,
        "hourly_oracle_energy_j": hourly,
        "ratio_to_hourly_oracle": tuner / hourly if hourly else None,
        "window_oracle_energy_j": window,
        "ratio_to_window_oracle": tuner / window if window else None,
        "window_oracle_ratio_to_hourly": window / hourly if window and hourly else None,
        "window_s": result.windows[0].seconds if result.windows else None,
        "windows": len(result.windows),
        **{f"{name}_violating_windows_significant": _violating(result, p) for name, p in _SIDE_BY_SIDE},
        "tuner_explore_above_sla_pct": policy_summary(result, "tuner")["explore_above_sla_pct"],
    }
    if hourly is None:
        out["note_hourly"] = "the hourly oracle did not run (add oracle-hourly to --policies)"
    if window is None:
        out["note_window"] = "the per-window oracle did not run (add oracle to --policies; ~1-4 s per window)"
    return out


def day_summaries(result: ReplayResult) -> list[dict[str, Any]]:
    """Per day of the schedule: `{"day", "windows", "policies": {policy: policy_summary(..., day)}}`."""
    out = []
    for d in days(result):
        out.append(
            {
                "day": d,
                "windows": sum(1 for w in result.windows if w.day == d),
                "policies": {p: policy_summary(result, p, day=d) for p in result.policies},
            }
        )
    return out
