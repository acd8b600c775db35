"""The replay page's interactive figures as plotly dicts (rendered by `tuner.replay.html_page`): power, the
steady-state percentile with the SLA, and the held ITR and frequency, per window and policy (the PNGs' content)."""

from __future__ import annotations

import html
import math
from collections.abc import Sequence
from typing import Any

from tuner.replay.run import ReplayResult, WindowResult

#: the PNGs' colours (matplotlib's tab10), so the page and the PNGs agree
COLOURS = {
    "tuner": "#1f77b4",
    "linux-default": "#d62728",
    "static-performance": "#ff7f0e",
    "oracle": "#2ca02c",
    "oracle-hourly": "#bcbd22",
}


def _num(x: float) -> float | None:
    return x if math.isfinite(x) else None


def _step(policy: str, ws: Sequence[WindowResult], values: Sequence[float], **kw: Any) -> dict[str, Any]:
    """A post-step line over the windows (hours on x), the last one drawn to its end; `text` per point on hover."""
    x = [w.start_s / 3600.0 for w in ws] + [(ws[-1].start_s + ws[-1].seconds) / 3600.0]
    y = [_num(v) for v in values] + [_num(values[-1])]
    trace = {
        "type": "scatter",
        "mode": "lines",
        "name": html.escape(policy),
        "x": x,
        "y": y,
        "line": {"shape": "hv", "color": COLOURS.get(policy)},
        "customdata": [w.index for w in ws] + [ws[-1].index],
        "hovertemplate": "window %{customdata}, %{x:.2f} h: %{y}<extra>" + html.escape(policy) + "</extra>",
    }
    trace.update(kw)
    return trace


def _policies(result: ReplayResult) -> list[str]:
    return [p for p, pr in result.policies.items() if pr.available and pr.windows]


def _x_title(result: ReplayResult) -> str:
    width = result.windows[0].seconds if result.windows else 3600.0
    return f"window start (h); windows of {width:g} s"


def _load_trace(result: ReplayResult) -> dict[str, Any]:
    ws = list(result.windows)
    x = [w.start_s / 3600.0 for w in ws] + [(ws[-1].start_s + ws[-1].seconds) / 3600.0]
    y = [w.qps / 1000.0 for w in ws] + [ws[-1].qps / 1000.0]
    return {
        "type": "scatter",
        "mode": "lines",
        "name": "offered load (kQPS)",
        "x": x,
        "y": y,
        "yaxis": "y2",
        "line": {"shape": "hv", "color": "#999999", "dash": "dot"},
        "hovertemplate": "%{x:.2f} h: %{y:.0f} kQPS<extra>offered load</extra>",
    }


def _layout(result: ReplayResult, y_title: str, **kw: Any) -> dict[str, Any]:
    layout: dict[str, Any] = {
        "height": 460,
        "margin": {"t": 30, "r": 70, "l": 70, "b": 60},
        "xaxis": {"title": {"text": _x_title(result)}},
        "yaxis": {"title": {"text": y_title}, "rangemode": "tozero"},
        "yaxis2": {
            "title": {"text": "offered load (kQPS)"},
            "overlaying": "y",
            "side": "right",
            "rangemode": "tozero",
            "tickmode": "auto",
            "nticks": 6,
            "showgrid": False,
        },
        "legend": {"orientation": "h", "y": -0.2},
        "hovermode": "closest",
    }
    layout.update(kw)
    return layout


def power_figure(result: ReplayResult) -> dict[str, Any]:
    """Mean power per window (exploration included) per policy, with the offered load on the right axis."""
    data = [_step(p, ws, [w.power_w for w in ws]) for p in _policies(result) if (ws := result.policies[p].windows)]
    data.append(_load_trace(result))
    return {"data": data, "layout": _layout(result, "mean power incl. exploration (W)")}


def latency_figure(result: ReplayResult) -> dict[str, Any]:
    """The steady-state percentile per window per policy, the SLA as a dashed line; log scale past 4x the SLA."""
    pct, sla = result.objective.percentile, result.objective.sla_us
    data = []
    finite: list[float] = []
    for p in _policies(result):
        ws = result.policies[p].windows
        lat = [w.latency_us(pct) for w in ws]
        finite += [v for v in lat if math.isfinite(v)]
        data.append(_step(p, ws, lat))
    data.append(_load_trace(result))
    end = (result.windows[-1].start_s + result.windows[-1].seconds) / 3600.0 if result.windows else 1.0
    sla_line = {"type": "line", "x0": 0, "x1": end, "y0": sla, "y1": sla, "line": {"dash": "dash", "width": 1.5}}
    log = bool(finite) and max(finite) > 4 * sla
    layout = _layout(result, f"steady-state p{pct:g} latency (µs)", shapes=[sla_line])
    layout["yaxis"] = {"title": {"text": f"steady-state p{pct:g} latency (µs)"}, "type": "log" if log else "linear"}
    if not log:
        layout["yaxis"]["rangemode"] = "tozero"
    layout["annotations"] = [
        {"x": end, "y": sla, "xanchor": "right", "yanchor": "bottom", "text": f"SLA {sla:g} µs", "showarrow": False}
    ]
    return {"data": data, "layout": layout}


def knobs_figure(result: ReplayResult) -> dict[str, Any]:
    """The held ITR (top) and frequency (bottom) per window; linux-default runs the OS's policies (no point)."""
    data = []
    for p in _policies(result):
        ws = [w for w in result.policies[p].windows if w.point is not None]
        if not ws:
            continue
        itr = [float(w.point.itr_us) for w in ws if w.point is not None]
        ghz = [float(w.point.dvfs_ghz) for w in ws if w.point is not None]
        data.append(_step(p, ws, itr, legendgroup=p))
        data.append(_step(p, ws, ghz, legendgroup=p, showlegend=False, xaxis="x2", yaxis="y2"))
    layout = {
        "height": 560,
        "margin": {"t": 30, "r": 30, "l": 70, "b": 60},
        "grid": {"rows": 2, "columns": 1, "pattern": "independent"},
        "xaxis": {"matches": "x2", "showticklabels": False},
        "yaxis": {"title": {"text": "ITR (µs)"}, "rangemode": "tozero"},
        "xaxis2": {"title": {"text": _x_title(result)}},
        "yaxis2": {"title": {"text": "frequency (GHz)"}},
        "legend": {"orientation": "h", "y": -0.15},
        "hovermode": "closest",
    }
    return {"data": data, "layout": layout}
