"""The replay's `report.html`: the command and settings, the summary per policy (and per day), the per-window
table, the per-window and hourly oracles side by side where both ran, and the interactive figures -- one
self-contained page (`tuner.replay.html_page`) that reads offline."""

from __future__ import annotations

import datetime
from dataclasses import asdict
from pathlib import Path
from typing import Any

from tuner.replay.html_page import Cell, Report
from tuner.replay.report_figures import knobs_figure, latency_figure, power_figure
from tuner.replay.run import ReplayResult, WindowResult
from tuner.replay.summary import day_summaries, days, oracle_comparison, policy_summary

REPORT = "report.html"

#: the summary table's columns: header, `policy_summary` key, format spec
SUMMARY_COLUMNS: tuple[tuple[str, str, str], ...] = (
    ("energy (kJ)", "energy_kj", ".1f"),
    ("mean power (W)", "mean_power_w", ".1f"),
    ("saved vs linux-default (%)", "saved_vs_linux_default_pct", ".1f"),
    ("x oracle", "ratio_to_oracle", ".3f"),
    ("x hourly oracle", "ratio_to_hourly_oracle", ".3f"),
    ("windows over the SLA", "sla_violating_windows", "d"),
    ("of them significantly", "sla_violating_windows_significant", "d"),
    ("trial time over the SLA (s)", "explore_above_sla_s", ".0f"),
    ("trial time over the SLA (%)", "explore_above_sla_pct", ".2f"),
    ("trials", "trials", "d"),
    ("failed trials", "failed_trials", "d"),
    ("trials per retune", "trials_per_retune", ".2f"),
    ("held windows", "held_windows", "d"),
    ("median suggest (s)", "median_suggest_s", ".3f"),
    ("wall (s)", "wall_s", ".1f"),
)


def _settings(result: ReplayResult) -> dict[str, Any]:
    ws = result.windows
    meta = dict(result.meta)
    started = meta.pop("started_unix", None)
    out: dict[str, Any] = {
        "trace": result.source,
        "host": result.host,
        "seed": result.seed,
        "objective": result.objective.describe(),
        "reward": result.objective.reward,
        "windows": len(ws),
        "window length (s)": ws[0].seconds if ws else None,
        "days": len(days(result)),
        "offered load (kQPS)": f"{min(w.qps for w in ws) / 1000:.0f}-{max(w.qps for w in ws) / 1000:.0f}" if ws else "",
        "policies": ", ".join(result.policies),
    }
    if started is not None:
        out["started (UTC)"] = datetime.datetime.fromtimestamp(float(started), datetime.UTC).isoformat(" ", "seconds")
    out.update({k: v for k, v in meta.items()})
    out["tuner"] = asdict(result.settings)
    return out


def summary_rows(result: ReplayResult) -> tuple[list[list[Cell]], list[str]]:
    """One row per policy: its name, then `SUMMARY_COLUMNS` from `policy_summary` (None where it does not apply or
    the policy was unavailable); and each policy's note ("policy: note")."""
    rows: list[list[Cell]] = []
    notes: list[str] = []
    for p in result.policies:
        ps = policy_summary(result, p)
        if ps.get("note"):
            notes.append(f"{p}: {ps['note']}")
        if not ps.get("available", True):
            rows.append([p, *([None] * len(SUMMARY_COLUMNS))])
            continue
        ps["energy_kj"] = ps["energy_j"] / 1000.0
        if p != "tuner":
            ps["held_windows"] = None
        rows.append([p, *(ps.get(key) for _, key, _ in SUMMARY_COLUMNS)])
    return rows, notes


def _summary_table(page: Report, result: ReplayResult) -> None:
    cols = ["policy", *(h for h, _, _ in SUMMARY_COLUMNS)]
    formats = {h: f for h, _, f in SUMMARY_COLUMNS}
    rows, notes = summary_rows(result)
    note = (
        "Energy counts everything in each window, the tuner's trials included. A window is over the SLA when its "
        "steady-state percentile is; 'significantly' when its confidence interval lies above the SLA. "
    ) + " ".join(n if n.endswith(".") else n + "." for n in notes)
    page.table(f"Summary per policy ({result.objective.describe()})", cols, rows, formats=formats, note=note)


def _day_table(page: Report, result: ReplayResult) -> None:
    cols = ["day", "windows", "energy (kJ)", "x oracle", "saved vs linux-default (%)", "windows over the SLA"]
    cols += ["trials per retune", "trial time over the SLA (%)"]
    rows: list[list[Cell]] = []
    for d in day_summaries(result):
        ps = d["policies"]["tuner"]
        rows.append(
            [d["day"], ps["windows"], ps["energy_j"] / 1000.0, ps["ratio_to_oracle"], ps["saved_vs_linux_default_pct"]]
            + [ps["sla_violating_windows"], ps["trials_per_retune"], ps["explore_above_sla_pct"]]
        )
    fmts = {"energy (kJ)": ".1f", "x oracle": ".3f", "saved vs linux-default (%)": ".1f"}
    fmts |= {"trials per retune": ".2f", "trial time over the SLA (%)": ".2f"}
    page.table("The tuner per day", cols, rows, formats=fmts)


def _by_index(result: ReplayResult, policy: str) -> dict[int, WindowResult]:
    pr = result.policies.get(policy)
    return {} if pr is None or not pr.available else {w.index: w for w in pr.windows}


def window_rows(result: ReplayResult) -> tuple[list[str], list[list[Cell]]]:
    """The per-window table: one row per window of the schedule; the tuner's point, percentile, power, trials and
    SLA, then each other policy's mean power."""
    pct = result.objective.percentile
    multi = len(days(result)) > 1
    cols = ["window", *(["day"] if multi else []), "start (h)", "offered kQPS"]
    tuner = _by_index(result, "tuner")
    if tuner:
        cols += ["tuner ITR (µs)", "tuner GHz", f"tuner p{pct:g} (µs)", "tuner W", "tuner kJ", "tuner trials"]
        cols += ["tuner SLA met"]
    others = [p for p in result.policies if p != "tuner" and _by_index(result, p)]
    cols += [f"{p} W" for p in others]
    rows: list[list[Cell]] = []
    for win in result.windows:
        row: list[Cell] = [win.index, *([win.day] if multi else []), win.start_s / 3600.0, win.qps / 1000.0]
        if tuner:
            w = tuner.get(win.index)
            row += _tuner_cells(w, pct)
        for p in others:
            ow = _by_index(result, p).get(win.index)
            row.append(None if ow is None else ow.power_w)
        rows.append(row)
    return cols, rows


def _tuner_cells(w: WindowResult | None, pct: float) -> list[Cell]:
    if w is None:
        return [None] * 7
    met = "-" if w.met_sla is None else ("yes" if w.met_sla else "NO")
    return [
        None if w.point is None else w.point.itr_us,
        None if w.point is None else float(w.point.dvfs_ghz),
        w.latency_us(pct),
        w.power_w,
        w.energy_j / 1000.0,
        w.trials,
        met,
    ]


def _window_table(page: Report, result: ReplayResult) -> None:
    cols, rows = window_rows(result)
    fmts = {"start (h)": ".2f", "offered kQPS": ".0f", "tuner GHz": ".1f", "tuner kJ": ".1f"}
    fmts |= {c: ".1f" for c in cols if c.endswith(" W") or c.endswith("(µs)")}
    fmts["tuner ITR (µs)"] = "d"
    note = "W: mean power over the window, the trials included; tuner trials: 0 where the tuner held its point."
    page.table("Per window", cols, rows, formats=fmts, note=note)


def oracle_rows(result: ReplayResult) -> list[list[Cell]]:
    """The per-window oracle and the hourly one side by side, one row per window (empty unless both ran)."""
    pct = result.objective.percentile
    window, hourly = _by_index(result, "oracle"), _by_index(result, "oracle-hourly")
    rows: list[list[Cell]] = []
    if not window or not hourly:
        return rows
    for win in result.windows:
        a, b = window.get(win.index), hourly.get(win.index)
        row: list[Cell] = [win.index, win.start_s / 3600.0, win.qps / 1000.0]
        for w in (a, b):
            pt = None if w is None else w.point
            row += [None if pt is None else pt.itr_us, None if pt is None else float(pt.dvfs_ghz)]
            row += [None if w is None else w.latency_us(pct), None if w is None else w.power_w]
        row.append(b.energy_j / a.energy_j if a is not None and b is not None and a.energy_j > 0 else None)
        rows.append(row)
    return rows


def _oracle_table(page: Report, result: ReplayResult) -> None:
    rows = oracle_rows(result)
    if not rows:
        return
    pct = result.objective.percentile
    cols = ["window", "start (h)", "offered kQPS"]
    for who in ("oracle", "hourly"):
        cols += [f"{who} ITR (µs)", f"{who} GHz", f"{who} p{pct:g} (µs)", f"{who} W"]
    cols.append("hourly / oracle energy")
    fmts = {c: ".1f" for c in cols if c.endswith(" W") or c.endswith(f"p{pct:g} (µs)") or c.endswith("GHz")}
    fmts |= {"start (h)": ".2f", "offered kQPS": ".0f", "hourly / oracle energy": ".4f"}
    cmp = oracle_comparison(result) or {}
    note = (
        "oracle: the best static point for each window's load; hourly: the best static point of each clock hour "
        "(the oracle at the hour's highest window load), held for all of its windows."
    )
    if cmp.get("ratio_to_window_oracle") and cmp.get("ratio_to_hourly_oracle"):
        note += (
            f" The tuner: {cmp['ratio_to_window_oracle']:.3f} x the per-window oracle, "
            f"{cmp['ratio_to_hourly_oracle']:.3f} x the hourly one."
        )
    page.table("The per-window and the hourly oracle", cols, rows, formats=fmts, note=note)


def replay_page(result: ReplayResult, command: str | None = None) -> Report:
    """The replay's page: settings, summaries, tables and figures, ready to `write`."""
    page = Report(f"Replay: {result.objective.describe()}, host {result.host}", command=command)
    page.settings = _settings(result)
    _summary_table(page, result)
    if "tuner" in result.policies and result.policies["tuner"].available and len(days(result)) > 1:
        _day_table(page, result)
    if result.windows:
        pct = result.objective.percentile
        page.figure("Power per window", power_figure(result), note="Mean power per window, exploration included.")
        page.figure(f"Steady-state p{pct:g} per window", latency_figure(result))
        page.figure(
            "Held ITR and frequency per window", knobs_figure(result), note="linux-default runs the OS's own policies."
        )
    _oracle_table(page, result)
    _window_table(page, result)
    return page


def write_html(result: ReplayResult, out: Path, command: str | None = None) -> Path:
    """Write `report.html` into the directory `out`; returns its path."""
    return replay_page(result, command).write(out / REPORT)
