"""Replay report: rich tables, `summary.json`, `windows.csv`, fig. 7.6-style PNGs (matplotlib Agg, lazy) and
`report.html` (`tuner.replay.report_html`)."""

from __future__ import annotations

import csv
import json
import math
from dataclasses import asdict
from pathlib import Path
from typing import Any

from tuner.replay.report_html import write_html
from tuner.replay.run import ReplayResult
from tuner.replay.summary import day_summaries, days, oracle_comparison, policy_summary

SUMMARY = "summary.json"
WINDOWS = "windows.csv"
TRIALS = "trials.jsonl"  # = tuner.store.history.REPLAY_TRIALS_FILE (read by `tuner trials export --from-replay`)
PLOTS = ("power.png", "latency.png", "knobs.png")

_COLOURS = {
    "tuner": "tab:blue",
    "linux-default": "tab:red",
    "static-performance": "tab:orange",
    "oracle": "tab:green",
    "oracle-hourly": "tab:olive",
}


def _finite(x: float | None) -> float | None:
    return None if x is None or not math.isfinite(x) else x


def summary(result: ReplayResult) -> dict[str, Any]:
    """The content of `summary.json`."""
    obj = result.objective
    return {
        "host": result.host,
        "seed": result.seed,
        "trace": result.source,
        "objective": {"reward": obj.reward, "percentile": obj.percentile, "sla_us": obj.sla_us},
        "settings": asdict(result.settings),
        "windows": len(result.windows),
        "days": len(days(result)),
        "window_s": result.windows[0].seconds if result.windows else None,
        "peak_qps": max(w.qps for w in result.windows) if result.windows else None,
        "min_qps": min(w.qps for w in result.windows) if result.windows else None,
        "wall_s": result.wall_s,
        "policies": {p: policy_summary(result, p) for p in result.policies},
        "oracle_comparison": oracle_comparison(result),
        "per_day": day_summaries(result),
        **result.meta,
    }


def window_rows(result: ReplayResult) -> list[dict[str, Any]]:
    """One row per (policy, window), as written to `windows.csv`."""
    pct = result.objective.percentile
    rows = []
    for policy, pr in result.policies.items():
        for w in pr.windows:
            rows.append(
                {
                    "policy": policy,
                    "day": w.day,
                    "window": w.index,
                    "start_s": w.start_s,
                    "qps": round(w.qps, 3),
                    # what the host measured in the steady window (a real host: memcached's counters)
                    "measured_qps": "" if w.steady is None else round(w.steady.offered_qps, 3),
                    "itr_us": "" if w.point is None else w.point.itr_us,
                    "dvfs_ghz": "" if w.point is None else w.point.dvfs_ghz,
                    f"p{pct:g}_us": "" if w.steady is None else round(w.latency_us(pct), 3),
                    f"p{pct:g}_ci_low_us": "" if w.steady is None else round(w.steady.latency_ci_us[pct][0], 3),
                    f"p{pct:g}_ci_high_us": "" if w.steady is None else round(w.steady.latency_ci_us[pct][1], 3),
                    "steady_power_w": "" if w.steady is None else round(w.steady.power_w, 4),
                    "power_w": round(w.power_w, 4) if math.isfinite(w.power_w) else "",
                    "energy_j": round(w.energy_j, 3),
                    "trials": w.trials,
                    "failed_trials": w.failed_trials,
                    "explore_s": round(w.explore_s, 3),
                    "explore_energy_j": round(w.explore_energy_j, 3),
                    "explore_above_sla_s": round(w.explore_above_sla_s, 3),
                    "trial_window_s": round(w.trial_window_s, 3),
                    "fixed_window_s": round(w.fixed_window_s, 3),
                    "sla_met": "" if w.met_sla is None else int(w.met_sla),
                    "note": w.note,
                    "error": w.error or "",
                }
            )
    return rows


def write_files(result: ReplayResult, out: Path, command: str | None = None) -> list[Path]:
    """Write summary.json, windows.csv, trials.jsonl, the PNGs and report.html (with `command` on top) into `out`
    (created); returns the paths."""
    out.mkdir(parents=True, exist_ok=True)
    paths = []
    p = out / SUMMARY
    p.write_text(json.dumps(summary(result), indent=2, default=_json_default) + "\n")
    paths.append(p)
    rows = window_rows(result)
    p = out / WINDOWS
    with p.open("w", newline="") as fh:
        if rows:
            writer = csv.DictWriter(fh, fieldnames=list(rows[0]))
            writer.writeheader()
            writer.writerows(rows)
    paths.append(p)
    if write_trials(result, out / TRIALS):
        paths.append(out / TRIALS)
    paths.extend(write_plots(result, out))
    paths.append(write_html(result, out, command))
    return paths


def trial_times(result: ReplayResult, start: float) -> list[float]:
    """Unix time of each tuner trial on the replay's own clock: `start` + its window's start + the trials
    before it in that window (settle included)."""
    pr = result.policies["tuner"]
    times: list[float] = []
    i = 0
    for w in pr.windows:
        t = start + w.start_s
        for r in pr.trials[i : i + w.trials]:
            times.append(t)
            t += sum(m.seconds for m in (r.settle, r.measurement) if m is not None)
        i += w.trials
    return times


def write_trials(result: ReplayResult, path: Path) -> int:
    """Write the tuner policy's completed trials as `tuner.trial/v1` JSON lines (HIST's `tuner.store.history`),
    timed on the replay's clock from `result.meta["started_unix"]` (default: now); returns how many (0 and
    no file when the tuner did not run)."""
    pr = result.policies.get("tuner")
    if pr is None or not pr.trials:
        return 0
    import time

    from tuner.store.history import host_label
    from tuner.store.history import write_trials as write_history

    start = float(result.meta.get("started_unix", time.time()))
    return write_history(
        path,
        pr.trials,
        host=host_label(result.host or "replay"),
        objective=result.objective,
        times=trial_times(result, start),
    )


def _json_default(x: Any) -> Any:
    if isinstance(x, float) and not math.isfinite(x):
        return None
    return str(x)


class _Plots:
    """The replay's figures, one per method; each saved under `out`, its path in `written`."""

    def __init__(self, result: ReplayResult, out: Path) -> None:
        self.result, self.out = result, out
        self.written: list[Path] = []
        self.width = result.windows[0].seconds / 3600.0 if result.windows else 1.0
        self.policies = [p for p, pr in result.policies.items() if pr.available and pr.windows]
        first_start: dict[int, float] = {}
        for w in result.windows:
            first_start[w.day] = min(first_start.get(w.day, math.inf), w.start_s)
        self.day_starts = [x for d, x in sorted(first_start.items()) if d > 0]

    def save(self, fig: Any, name: str) -> None:
        from matplotlib.backends.backend_agg import FigureCanvasAgg

        FigureCanvasAgg(fig)
        fig.tight_layout()
        path = self.out / name
        fig.savefig(path, dpi=110)
        self.written.append(path)

    @staticmethod
    def step(ax: Any, ws: list[Any], values: list[float], **kw: Any) -> None:
        """A post-step line over the windows, the last one drawn to its end."""
        if not ws:
            return
        x = [w.start_s / 3600.0 for w in ws] + [(ws[-1].start_s + ws[-1].seconds) / 3600.0]
        ax.step(x, list(values) + [values[-1]], where="post", **kw)

    def day_lines(self, ax: Any) -> None:
        """Dotted vertical lines where each repeated day starts (multi-day schedules)."""
        for x in self.day_starts:
            ax.axvline(x / 3600.0, color="0.75", linestyle=":", linewidth=1)

    def qps_axis(self, ax: Any) -> None:
        ax2 = ax.twinx()
        qps = [w.qps / 1000.0 for w in self.result.windows]
        self.step(ax2, list(self.result.windows), qps, color="0.6", linestyle=":", label="offered load")
        ax2.set_ylabel("offered load (kQPS)", color="0.4")
        ax2.set_ylim(bottom=0)

    def power(self) -> None:
        from matplotlib.figure import Figure

        result = self.result
        fig = Figure(figsize=(9, 4.2))
        ax = fig.add_subplot(1, 1, 1)
        for p in self.policies:
            ws = result.policies[p].windows
            self.step(ax, ws, [w.power_w for w in ws], label=p, color=_COLOURS.get(p))
        ax.set_xlabel(f"window start (h); windows of {self.width:.3g} h")
        ax.set_ylabel("mean power incl. exploration (W)")
        ax.set_ylim(bottom=0)
        ax.set_title(f"Power per window -- {result.objective.describe()}")
        ax.legend(loc="lower left", fontsize=8, framealpha=0.8)
        self.day_lines(ax)
        self.qps_axis(ax)
        self.save(fig, "power.png")

    def latency(self) -> None:
        from matplotlib.figure import Figure

        result = self.result
        pct, sla = result.objective.percentile, result.objective.sla_us
        fig = Figure(figsize=(9, 4.2))
        ax = fig.add_subplot(1, 1, 1)
        for p in self.policies:
            ws = result.policies[p].windows
            self.step(ax, ws, [w.latency_us(pct) for w in ws], label=p, color=_COLOURS.get(p))
        ax.axhline(sla, color="black", linestyle="--", linewidth=1, label=f"SLA {sla:g} µs")
        ax.set_xlabel(f"window start (h); windows of {self.width:.3g} h")
        ax.set_ylabel(f"steady-state p{pct:g} latency (µs)")
        finite = [
            w.latency_us(pct)
            for p in self.policies
            for w in result.policies[p].windows
            if math.isfinite(w.latency_us(pct))
        ]
        if finite and max(finite) > 4 * sla:
            ax.set_yscale("log")
        else:
            ax.set_ylim(bottom=0)
        ax.set_title(f"Steady-state p{pct:g} per window")
        ax.legend(loc="lower left", fontsize=8, framealpha=0.8)
        self.day_lines(ax)
        self.qps_axis(ax)
        self.save(fig, "latency.png")

    def knobs(self) -> None:
        from matplotlib.figure import Figure

        fig = Figure(figsize=(9, 5.5))
        ax_itr = fig.add_subplot(2, 1, 1)
        ax_f = fig.add_subplot(2, 1, 2, sharex=ax_itr)
        for p in self.policies:
            ws = [w for w in self.result.policies[p].windows if w.point is not None]
            points = [w.point for w in ws if w.point is not None]
            if not ws:
                continue
            self.step(ax_itr, ws, [pt.itr_us for pt in points], label=p, color=_COLOURS.get(p))
            self.step(ax_f, ws, [pt.dvfs_ghz for pt in points], label=p, color=_COLOURS.get(p))
        ax_itr.set_ylabel("ITR (µs)")
        ax_itr.set_title("Chosen (held) ITR and DVFS per window (linux-default: OS policies, not shown)")
        ax_itr.legend(loc="upper left", fontsize=8)
        self.day_lines(ax_itr)
        self.day_lines(ax_f)
        ax_f.set_ylabel("DVFS (GHz)")
        ax_f.set_xlabel(f"window start (h); windows of {self.width:.3g} h")
        self.save(fig, "knobs.png")


def write_plots(result: ReplayResult, out: Path) -> list[Path]:
    """Fig. 7.6-style plots per window: power per policy (with QPS), percentile per policy with the SLA line,
    and the chosen ITR and DVFS."""
    plots = _Plots(result, out)
    plots.power()
    plots.latency()
    plots.knobs()
    return plots.written


def _fmt(x: float | None, spec: str, none: str = "-") -> str:
    return none if x is None or (isinstance(x, float) and not math.isfinite(x)) else format(x, spec)


def _pct_cell(x: float | None) -> str:
    return "-" if x is None else f"{x:.1f}%"


def _window_table(result: ReplayResult, multi: bool) -> Any:
    """One row per tuner window, with the power of the other policies beside it."""
    from rich.table import Table

    pct = result.objective.percentile
    t = Table(title=f"tuner per window ({result.objective.describe()})", show_lines=False)
    for col in (("day",) if multi else ()) + (
        "win",
        "kQPS",
        "ITR µs",
        "GHz",
        f"p{pct:g} µs",
        "W",
        "kJ",
        "trials",
        "SLA",
    ):
        t.add_column(col, justify="right")
    others = [
        p for p in ("linux-default", "oracle", "oracle-hourly") if p in result.policies and result.policies[p].windows
    ]
    for p in others:
        t.add_column(f"{p} W", justify="right")
    by_idx = {p: {w.index: w for w in result.policies[p].windows} for p in others}
    for w in result.policies["tuner"].windows:
        met = "-" if w.met_sla is None else ("[green]yes[/]" if w.met_sla else "[red]NO[/]")
        fails = f" ({w.failed_trials} failed)" if w.failed_trials else ""
        row = ([str(w.day)] if multi else []) + [
            str(w.index),
            f"{w.qps / 1000:.0f}",
            "-" if w.point is None else str(w.point.itr_us),
            "-" if w.point is None else f"{w.point.dvfs_ghz:.1f}",
            _fmt(w.latency_us(pct), ".0f"),
            _fmt(w.power_w, ".1f"),
            f"{w.energy_j / 1000:.1f}",
            f"{w.trials}{fails}",
            met,
        ]
        for p in others:
            ow = by_idx[p].get(w.index)
            row.append("-" if ow is None else _fmt(ow.power_w, ".1f"))
        t.add_row(*row)
    return t


def _day_table(result: ReplayResult) -> Any:
    """The tuner's summary per day."""
    from rich.table import Table

    t = Table(
        title="tuner per day"
        + (
            " (contextual, one experiment)"
            if getattr(result.settings, "context", False)
            else " (cold: a fresh experiment per window)"
        )
    )
    for col in (
        "day",
        "windows",
        "trials/retune",
        "energy kJ",
        "x oracle",
        "saved vs linux",
        "SLA-violating windows (significant)",
        "explore s > SLA (% of trial time)",
        "trial window s saved vs fixed (%)",
    ):
        t.add_column(col, justify="right")
    for d in day_summaries(result):
        ps = d["policies"]["tuner"]
        t.add_row(
            str(d["day"]),
            str(ps["windows"]),
            _fmt(ps["trials_per_retune"], ".1f"),
            f"{ps['energy_j'] / 1000:.1f}",
            _fmt(ps["ratio_to_oracle"], ".3f"),
            _pct_cell(ps["saved_vs_linux_default_pct"]),
            f"{ps['sla_violating_windows']}/{ps['windows']} ({ps['sla_violating_windows_significant']})",
            f"{ps['explore_above_sla_s']:.0f} ({_pct_cell(ps['explore_above_sla_pct'])})",
            f"{ps['window_saved_s']:.0f} ({_pct_cell(ps['window_saved_pct'])})",
        )
    return t


def _summary_table(result: ReplayResult, s: dict[str, Any], multi: bool) -> Any:
    """One row per policy: energy, savings, the oracle ratios, SLA, trials and time."""
    from rich.table import Table

    t = Table(
        title=f"summary: {len(result.windows)} windows"
        + (f" over {s['days']} days" if multi else "")
        + f", {result.objective.describe()}, host {result.host}"
    )
    hourly = "oracle-hourly" in s["policies"]
    for col in (
        "policy",
        "energy kJ",
        "saved vs linux",
        "x oracle",
        *(("x hourly oracle",) if hourly else ()),
        "SLA-violating windows (significant)",
        "explore s > SLA (%)",
        "trials (failed)",
        "trials/retune",
        "median suggest s",
        "wall s",
    ):
        t.add_column(col, justify="right")
    for p, ps in s["policies"].items():
        if not ps.get("available", True):
            t.add_row(p, "[dim]unavailable[/]", *([""] * (len(t.columns) - 2)))
            continue
        t.add_row(
            p,
            f"{ps['energy_j'] / 1000:.1f}",
            _pct_cell(ps["saved_vs_linux_default_pct"]),
            _fmt(ps["ratio_to_oracle"], ".3f"),
            *((_fmt(ps["ratio_to_hourly_oracle"], ".3f"),) if hourly else ()),
            f"{ps['sla_violating_windows']}/{ps['windows']} ({ps['sla_violating_windows_significant']})",
            f"{ps['explore_above_sla_s']:.0f}"
            + (f" ({_pct_cell(ps['explore_above_sla_pct'])})" if ps["explore_s"] else ""),
            f"{ps['trials']} ({ps['failed_trials']})",
            _fmt(ps["trials_per_retune"], ".1f")
            + (f", {ps['held_windows']} held" if p == "tuner" and ps.get("held_windows") else ""),
            _fmt(ps["median_suggest_s"], ".2f"),
            f"{ps['wall_s']:.1f}",
        )
    return t


def print_report(result: ReplayResult, console: Any, *, per_window: bool = True) -> None:
    """Rich tables: per window (one row per window, columns per policy), per day for the tuner (multi-day
    schedules) and the per-policy summary."""
    multi = len(days(result)) > 1
    if per_window and "tuner" in result.policies:
        console.print(_window_table(result, multi))
    if "tuner" in result.policies and result.policies["tuner"].available:
        console.print(_day_table(result))
    s = summary(result)
    console.print(_summary_table(result, s, multi))
    hourly = "oracle-hourly" in s["policies"]
    if hourly:
        console.print(
            "oracle-hourly: the best static point of each hour (the oracle at the hour's highest window load), "
            "computed once per hour and held for all of its windows"
            + ("" if "oracle" in s["policies"] else "; the per-window oracle did not run (--policies ...,oracle)")
        )
    for p, ps in s["policies"].items():
        if ps.get("note") and (not ps.get("available", True) or p == "tuner"):
            console.print(f"[yellow]{ps['note']}[/]" if not ps.get("available", True) else f"{p}: {ps['note']}")
