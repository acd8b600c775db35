"""Sweep heatmap: energy over ITR x DVFS with the SLA contour (matplotlib Agg, no pyplot global state)."""

from __future__ import annotations

import math
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from tuner.replay.static_sweep import SweepPoint


def _edges(values: Sequence[float], pad: float) -> np.ndarray:
    """Cell edges around sorted centre `values` (midpoints; half a gap, or `pad`, at the ends)."""
    v = np.asarray(values, dtype=float)
    if v.size == 1:
        return np.array([v[0] - pad, v[0] + pad])
    mid = (v[:-1] + v[1:]) / 2
    return np.concatenate([[v[0] - (mid[0] - v[0])], mid, [v[-1] + (v[-1] - mid[-1])]])


def _grid(points: Sequence[SweepPoint], percentile: float) -> tuple[list[int], list[float], np.ndarray, np.ndarray]:
    """(ITRs, frequencies, energy[freq, ITR], percentile latency[freq, ITR]); NaN where not measured."""
    itrs = sorted({p.itr_us for p in points})
    freqs = sorted({p.dvfs_ghz for p in points})
    ix = {v: i for i, v in enumerate(itrs)}
    iy = {v: i for i, v in enumerate(freqs)}
    energy = np.full((len(freqs), len(itrs)), np.nan)
    latency = np.full_like(energy, np.nan)
    for p in points:
        energy[iy[p.dvfs_ghz], ix[p.itr_us]] = p.energy_j
        lat = p.latency(percentile)
        latency[iy[p.dvfs_ghz], ix[p.itr_us]] = lat if math.isfinite(lat) else np.nan
    return itrs, freqs, energy, latency


def _runs(flags: np.ndarray) -> list[tuple[int, int, int]]:
    """(row, first, last column) of each run of True cells in each row."""
    out = []
    rows, cols = flags.shape
    for j in range(rows):
        i = 0
        while i < cols:
            if flags[j, i]:
                k = i
                while k + 1 < cols and flags[j, k + 1]:
                    k += 1
                out.append((j, i, k))
                i = k + 1
            else:
                i += 1
    return out


def _boundary(measured: np.ndarray, violates: np.ndarray, xe: np.ndarray, ye: np.ndarray) -> list[list[tuple]]:
    """The SLA boundary: cell edges between a measured cell that meets the SLA and one that does not."""
    segments = []
    rows, cols = measured.shape
    for j in range(rows):
        for i in range(cols):
            if not measured[j, i]:
                continue
            if i + 1 < cols and measured[j, i + 1] and violates[j, i] != violates[j, i + 1]:
                segments.append([(xe[i + 1], ye[j]), (xe[i + 1], ye[j + 1])])
            if j + 1 < rows and measured[j + 1, i] and violates[j, i] != violates[j + 1, i]:
                segments.append([(xe[i], ye[j + 1]), (xe[i + 1], ye[j + 1])])
    return segments


def _mark_points(ax: Any, pareto: Sequence[SweepPoint], best: SweepPoint | None) -> list[Any]:
    """Circle the Pareto-optimal points and star the best one; returns their legend handles."""
    from matplotlib.lines import Line2D

    handles: list[Any] = []
    if pareto:
        ax.scatter(
            [p.itr_us for p in pareto],
            [p.dvfs_ghz for p in pareto],
            s=18,
            facecolors="none",
            edgecolors="white",
            linewidths=1.2,
        )
        handles.append(Line2D([], [], marker="o", ls="", mfc="none", mec="grey", label="Pareto-optimal"))
    if best is not None:
        ax.scatter([best.itr_us], [best.dvfs_ghz], marker="*", s=260, color="gold", edgecolors="black", zorder=5)
        handles.append(
            Line2D(
                [],
                [],
                marker="*",
                ls="",
                color="gold",
                mec="black",
                ms=14,
                label=f"min energy under SLA: ITR {best.itr_us} µs, {best.dvfs_ghz:g} GHz, {best.energy_j:.0f} J",
            )
        )
    return handles


def sweep_heatmap(
    points: Sequence[SweepPoint],
    path: str | Path,
    sla_us: float,
    percentile: float,
    title: str = "",
    best: SweepPoint | None = None,
    pareto: Sequence[SweepPoint] = (),
) -> Path:
    """Write a PNG of energy per window over (ITR, DVFS) with the `percentile` = `sla_us` contour.

    Cells not measured stay blank; cells over the SLA are hatched and a red line runs along the cell
    edges between meeting and missing it (measured values, no interpolation); the energy-optimal point
    under the SLA is a star and Pareto-optimal points are circles.
    """
    from matplotlib.artist import Artist
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.collections import LineCollection, PatchCollection
    from matplotlib.figure import Figure
    from matplotlib.lines import Line2D
    from matplotlib.patches import Patch, Rectangle

    if not points:
        raise ValueError("no points to plot")
    itrs, freqs, energy, latency = _grid(points, percentile)
    fig = Figure(figsize=(10, 6.0), dpi=120, layout="constrained")
    FigureCanvasAgg(fig)
    ax = fig.add_subplot()
    mesh = ax.pcolormesh(
        _edges(itrs, 1.0), _edges(freqs, 0.05), np.ma.masked_invalid(energy), cmap="viridis", shading="flat"
    )
    seconds = sorted({p.seconds for p in points})
    window = f"{seconds[0]:g} s window" if len(seconds) == 1 else "window"
    fig.colorbar(mesh, ax=ax, label=f"energy per {window} (J)")

    pname = f"p{percentile:g}"
    handles: list[Artist] = []
    measured = np.isfinite(energy)
    violates = measured & ~(latency <= sla_us)  # unmeasurable latency counts as a violation
    xe, ye = _edges(itrs, 1.0), _edges(freqs, 0.05)
    rects = [Rectangle((xe[i], ye[j]), xe[k + 1] - xe[i], ye[j + 1] - ye[j]) for j, i, k in _runs(violates)]
    if rects:
        ax.add_collection(PatchCollection(rects, facecolor="none", edgecolor="black", hatch="//", linewidth=0))
        handles.append(Patch(facecolor="none", edgecolor="black", hatch="//", label=f"{pname} > SLA"))
    segments = _boundary(measured, violates, xe, ye)
    if segments:
        ax.add_collection(LineCollection(segments, colors="red", linewidths=2))
        handles.append(Line2D([], [], color="red", lw=2, label=f"SLA boundary: {pname} = {sla_us:g} µs"))
    handles += _mark_points(ax, pareto, best)
    if not any(p.latency(percentile) <= sla_us for p in points):
        ax.text(
            0.5,
            0.5,
            f"no point meets {pname} <= {sla_us:g} µs",
            transform=ax.transAxes,
            ha="center",
            va="center",
            fontsize=13,
            color="red",
            bbox={"facecolor": "white", "alpha": 0.85},
        )
    if len(freqs) <= 20:  # label the measured values themselves, not round numbers between them
        ax.set_yticks(freqs, [f"{f:g}" for f in freqs])
    if len(itrs) <= 15:
        ax.set_xticks(itrs, [str(i) for i in itrs])
    ax.set_xlabel("ITR: interrupt throttling interval (µs)")
    ax.set_ylabel("DVFS: core frequency (GHz)")
    ax.set_title(title or f"Energy over ITR x DVFS, SLA {pname} <= {sla_us:g} µs")
    if handles:
        fig.legend(handles=handles, loc="outside lower center", ncols=min(len(handles), 4), fontsize=8, frameon=False)
    out = Path(path)
    fig.savefig(out)
    return out
