"""The zoo benchmarks' page (`--html PATH` of bench/generalisation.py and bench/ablation.py): one self-contained
HTML file (`tuner.replay.html_page.Report`) built from the JSON document the bench prints -- the command and its
options, the per-cell table with every target marked met / not met, the per-half (generalisation) or
per-ablation table, the per-run table, and a plotly figure of each run's ratio to the per-window oracle per
member (or preset) and SLA with the targets as lines. Its numbers are the JSON's (each cell keeps its full value
in `data-value`)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from tuner.replay import zoo
from tuner.replay import zoo_cells as zc
from tuner.replay.html_page import Cell, Report

CELL_COLUMNS = [
    "member",
    "half",
    "SLA",
    "variant",
    "seeds",
    "median x oracle",
    "median target",
    "median met",
    "worst x oracle",
    "worst target",
    "worst met",
    "trials / retune",
    "trials / retune after day 1 (worst)",
    "after day 1 met",
    "worst trial time > SLA (%)",
    "trial time met",
    "sig. violating windows",
    "violating met",
]
RUN_COLUMNS = [
    "member",
    "half",
    "SLA",
    "variant",
    "seed",
    "x oracle",
    "saved vs linux-default (%)",
    "trials / retune",
    "trial time > SLA (%)",
    "sig. violating windows",
    "energy (kJ)",
]
_FMT = {
    "median x oracle": ".4f",
    "worst x oracle": ".4f",
    "median target": ".2f",
    "worst target": ".2f",
    "x oracle": ".4f",
    "trials / retune": ".2f",
    "trials / retune after day 1 (worst)": ".2f",
    "worst trial time > SLA (%)": ".2f",
    "trial time > SLA (%)": ".2f",
    "saved vs linux-default (%)": ".2f",
    "energy (kJ)": ".1f",
}


def met_text(value: bool | None) -> str:
    """A target's mark: met, not met, or "-" (no target, or not measured)."""
    return "-" if value is None else ("met" if value else "not met")


def half_of(name: str) -> str:
    m = next((m for m in zoo.ZOO if m.name == name), None)
    return m.half if m is not None else ""


def sla_text(percentile: float, sla_us: float) -> str:
    return f"{percentile:g}:{sla_us:g}"


def cell_row(c: dict[str, Any]) -> list[Cell]:
    """One cell of `tuner.replay.zoo_cells.cells` as a row of CELL_COLUMNS."""
    target = c["target_ratio"] or {}
    after = c["trials_per_retune_after_day1"]
    met = c["met"]
    return [
        c["member"],
        half_of(c["member"]),
        sla_text(c["percentile"], c["sla_us"]),
        c["variant"],
        len(c["seeds"]),
        c["ratio_to_oracle"]["median"],
        target.get("median"),
        met_text(met["ratio_median"]),
        c["ratio_to_oracle"]["worst"],
        target.get("worst"),
        met_text(met["ratio_worst"]),
        c["trials_per_retune"]["median"],
        after["worst"] if after["worst"] is not None else (after.get("reason") or "-"),
        met_text(met["trials_after_day1"]),
        c["explore_above_sla_pct_of_trial_time"]["worst"],
        met_text(met["above_sla_every_run"]),
        c["sla_violating_windows_significant"]["total"],
        met_text(met["no_violating_windows"]),
    ]


def run_row(r: dict[str, Any]) -> list[Cell]:
    s = r["summary"]
    energy = s.get("energy_j")
    return [
        r["trace"],
        half_of(r["trace"]),
        sla_text(r["percentile"], r["sla_us"]),
        r["variant"],
        r["seed"],
        s.get("ratio_to_oracle"),
        s.get("saved_vs_linux_default_pct"),
        s.get("trials_per_retune"),
        s.get("explore_above_sla_pct"),
        s.get("sla_violating_windows_significant"),
        None if energy is None else energy / 1000.0,
    ]


def _target_shapes(axis: str, key: tuple[float, float]) -> list[dict[str, Any]]:
    """The SLA's median and worst ratio targets as horizontal lines across subplot `axis` ("x", "x2", ...)."""
    target = zc.RATIO_TARGETS.get(key)
    if target is None:
        return []
    return [
        {
            "type": "line",
            "xref": f"{axis} domain",
            "yref": "y",
            "x0": 0,
            "x1": 1,
            "y0": y,
            "y1": y,
            "line": {"color": color, "dash": "dash", "width": 1.5},
            "label": {"text": f"{what} target {y:g}", "textposition": "end", "font": {"size": 10}},
        }
        for what, y, color in (("median", target[0], "#2a9d8f"), ("worst", target[1], "#e76f51"))
    ]


def ratio_figure(runs: list[dict[str, Any]], x_of: Callable[[dict[str, Any]], str], x_title: str) -> dict[str, Any]:
    """Each run's ratio to the oracle as a box with every point, one subplot per SLA, x by `x_of(run)`."""
    keys = list(dict.fromkeys((float(r["percentile"]), float(r["sla_us"])) for r in runs))
    n = max(len(keys), 1)
    data: list[dict[str, Any]] = []
    layout: dict[str, Any] = {
        "yaxis": {"title": {"text": "energy / per-window oracle"}},
        "showlegend": False,
        "shapes": [],
        "annotations": [],
        "margin": {"t": 40},
    }
    for i, key in enumerate(keys):
        axis = "x" if i == 0 else f"x{i + 1}"
        mine = [r for r in runs if (float(r["percentile"]), float(r["sla_us"])) == key]
        data.append(
            {
                "type": "box",
                "name": sla_text(*key),
                "x": [x_of(r) for r in mine],
                "y": [r["summary"].get("ratio_to_oracle") for r in mine],
                "text": [f"{r['trace']} seed {r['seed']} ({r['variant']})" for r in mine],
                "boxpoints": "all",
                "jitter": 0.3,
                "pointpos": 0,
                "xaxis": axis,
                "yaxis": "y",
            }
        )
        gap = 0.04 if n > 1 else 0.0
        layout[f"xaxis{'' if i == 0 else i + 1}"] = {
            "domain": [i / n + (gap if i else 0.0), (i + 1) / n - (gap if i < n - 1 else 0.0)],
            "anchor": "y",
            "title": {"text": f"{x_title} -- p{sla_text(*key).replace(':', ' < ')} µs"},
        }
        layout["shapes"] += _target_shapes(axis, key)
    layout["yaxis"]["range"] = _y_range(runs, keys)
    return {"data": data, "layout": layout}


def _y_range(runs: list[dict[str, Any]], keys: list[tuple[float, float]]) -> list[float]:
    """The ratios and the targets in view (plotly's autorange leaves a lone box's point or a line out)."""
    ys = [float(v) for r in runs if (v := r["summary"].get("ratio_to_oracle")) is not None]
    ys += [t for k in keys for t in zc.RATIO_TARGETS.get(k, ())]
    lo, hi = (min(ys), max(ys)) if ys else (1.0, 1.1)
    pad = max(0.05 * (hi - lo), 0.005)
    return [lo - pad, hi + pad]


def _common(page: Report, doc: dict[str, Any]) -> None:
    """The per-cell and per-run tables every zoo page has."""
    cells = doc["cells"]
    page.table(
        "Per cell",
        CELL_COLUMNS,
        [cell_row(c) for c in cells],
        formats=_FMT,
        note="A cell is (member, SLA, variant) over its seeds. Targets (the default tuner on the test half): "
        f"ratio to the per-window oracle as shown; trial time above the SLA <= {zc.MAX_ABOVE_SLA_PCT:g} % in "
        f"every run; trials per retune after day 1 <= {zc.MAX_TRIALS_AFTER_DAY1:g} (measured only on runs that "
        "replay a member's second day or later; otherwise the reason is shown); 0 significantly violating windows.",
    )
    page.table("Per run", RUN_COLUMNS, [run_row(r) for r in doc["runs"]], formats=_FMT)


def settings_of(args: Any, doc: dict[str, Any]) -> dict[str, Any]:
    """The options as run (`--html` aside) and what the run was: engine, replays, wall time."""
    opts = {k: v for k, v in vars(args).items() if k != "html"}
    return {
        "options": opts,
        "engine": doc["engine"],
        "replays": doc["replays"],
        "wall (s)": round(float(doc["wall_s"]), 1),
    }


def _page(doc: dict[str, Any], args: Any, title: str, figure: str, by: str, axis: str, note: str) -> Report:
    """A zoo page of `doc` (titled `title`) headed by its ratio figure (`figure`, `note`): one point per run on the
    x axis `axis`, the run's field `by`."""
    page = Report(title, command=doc["command"], settings=settings_of(args, doc))
    page.figure(figure, ratio_figure(doc["runs"], lambda r: r[by], axis), note=note)
    return page


def generalisation_page(doc: dict[str, Any], args: Any) -> Report:
    """The page of bench/generalisation.py's JSON `doc`."""
    note = "One point per run (seed); dashed lines: the median and worst targets of the SLA."
    figure = "Ratio to the per-window oracle per member and SLA"
    page = _page(doc, args, "Generalisation on the zoo", figure, "trace", "member", note)
    _common(page, doc)
    rows: list[list[Cell]] = []
    for half, groups in doc["halves"].items():
        for key, p in groups.items():
            rows.append(
                [half, key, p["cells"], p["runs"], p["ratio_to_oracle"]["median"], p["ratio_to_oracle"]["worst"]]
                + [p["explore_above_sla_pct_worst"], p["sla_violating_windows_significant"]]
                + [met_text(p["all_targets_met"])]
            )
    cols = ["half", "SLA variant", "cells", "runs", "median x oracle", "worst x oracle"]
    cols += ["worst trial time > SLA (%)", "sig. violating windows", "every target"]
    page.table("Per half", cols, rows, formats=_FMT)
    return page


def ablation_page(doc: dict[str, Any], args: Any) -> Report:
    """The page of bench/ablation.py's JSON `doc`."""
    note = "One point per run (member, seed); warm is the default; dashed lines: the SLA's targets."
    figure = "Ratio to the per-window oracle per preset and SLA"
    page = _page(doc, args, "Ablation on the zoo", figure, "variant", "preset (feature off)", note)
    cols = ["preset", "runs", "median x oracle", "worst x oracle", "change vs warm (median)"]
    cols += ["change vs warm (worst)", "runs worse than warm", "trials / retune", "worst above SLA (%)"]
    cols += ["sig. violating windows"]
    keys = ["variant", "runs", "ratio_median", "ratio_worst", "delta_vs_warm_median", "delta_vs_warm_worst"]
    keys += ["worse_than_warm_runs", "trials_per_retune_median", "explore_above_sla_pct_worst"]
    keys += ["sla_violating_windows_significant"]
    fmts = {**_FMT, "change vs warm (median)": "+.4f", "change vs warm (worst)": "+.4f"}
    page.table("Per ablation", cols, [[a[k] for k in keys] for a in doc["ablations"]], formats=fmts)
    _common(page, doc)
    return page
