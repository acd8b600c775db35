"""Sweep heatmap: energy over ITR x DVFS with the SLA contour (matplotlib Agg, no pyplot global state)."""

from __future__ import annotations

import math
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from tuner.sweep import SweepPoint


def _edges(values: Sequence[float], pad: float) -> np.ndarray:
    """Cell edges around sorted centre `values` (midpoints; half a gap, or `pad`, at the ends)."""
    v = np.asarray(values, dtype=float)
    if v.size == 1:
        return np.array([v[0] - pad, v[0] + pad])
    mid = (v[:-1] + v[1:]) / 2
    return np.concatenate([[v[0] - (mid[0] - v[0])], mid, [v[-1] + (v[-1] - mid[-1])]])


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

    Cells not measured stay blank; cells over the SLA are hatched; the energy-optimal point under the
    SLA is a star and Pareto-optimal points are circles.
    """
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure
    from matplotlib.lines import Line2D
    from matplotlib.patches import Patch

    if not points:
        raise ValueError("no points to plot")
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
    handles = []
    lat_ok = np.isfinite(latency) & (latency > 0)
    if len(itrs) >= 2 and len(freqs) >= 2 and lat_ok.any():
        loglat = np.ma.masked_invalid(np.where(lat_ok, np.log10(np.where(lat_ok, latency, 1.0)), np.nan))
        level = math.log10(sla_us)
        lo, hi = float(loglat.min()), float(loglat.max())
        if lo < level < hi:
            ax.contourf(itrs, freqs, loglat, levels=[level, hi + 1], colors="none", hatches=["//"])
            ax.contour(itrs, freqs, loglat, levels=[level], colors="red", linewidths=2)
        handles.append(Line2D([], [], color="red", lw=2, label=f"{pname} = {sla_us:g} µs (SLA)"))
        handles.append(Patch(facecolor="none", edgecolor="black", hatch="//", label=f"{pname} > SLA"))
    else:  # a single row or column: no contour; mark violating cells instead
        bad = [p for p in points if not p.latency(percentile) <= sla_us]
        if bad:
            ax.scatter([p.itr_us for p in bad], [p.dvfs_ghz for p in bad], marker="x", color="red", s=30)
            handles.append(Line2D([], [], color="red", marker="x", ls="", label=f"{pname} > {sla_us:g} µs"))
    if pareto:
        ax.scatter([p.itr_us for p in pareto], [p.dvfs_ghz for p in pareto], s=18, facecolors="none",
                   edgecolors="white", linewidths=1.2)
        handles.append(Line2D([], [], marker="o", ls="", mfc="none", mec="grey", label="Pareto-optimal"))
    if best is not None:
        ax.scatter([best.itr_us], [best.dvfs_ghz], marker="*", s=260, color="gold", edgecolors="black", zorder=5)
        handles.append(Line2D([], [], marker="*", ls="", color="gold", mec="black", ms=14,
                              label=f"min energy under SLA: ITR {best.itr_us} µs, {best.dvfs_ghz:g} GHz, "
                                    f"{best.energy_j:.0f} J"))
    ax.set_xlabel("ITR: interrupt throttling interval (µs)")
    ax.set_ylabel("DVFS: core frequency (GHz)")
    ax.set_title(title or f"Energy over ITR x DVFS, SLA {pname} <= {sla_us:g} µs")
    if handles:
        fig.legend(handles=handles, loc="outside lower center", ncols=min(len(handles), 4), fontsize=8, frameon=False)
    out = Path(path)
    fig.savefig(out)
    return out
