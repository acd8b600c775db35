"""The soak benchmark's statistics (`bench/soak_daemon.py`): the warm-up left out, RSS slopes (Theil-Sen with
Sen's interval, least squares), the daemon's RSS less glibc's arenas, load-step cycles and the slope verdict."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from tuner.daemon.model_tables import MODEL_TABLES
from tuner.daemon.state import KEEP_WINDOWS

MB = 2**20
#: Retune decisions `--warmup-retunes` waits for when asked (the daemon keeps the model tables of its last
#: `MODEL_TABLES` retunes); the default waits for none.
WARMUP_RETUNES = MODEL_TABLES


def warmup_floor_s(window_s: float, levels: int, step_s: float) -> float:
    """The least warm-up: the daemon's ring of `KEEP_WINDOWS` holding windows is full and the load schedule has
    visited each of its `levels` once (each level's first retune or model hold is done)."""
    return max(KEEP_WINDOWS * window_s, levels * step_s)


@dataclass(frozen=True)
class Warmup:
    """The warm-up left out of the slope: at least `min_s` seconds and until `retunes` retunes have decided."""

    min_s: float
    retunes: int

    def cut_s(self, decision_s: list[float]) -> float:
        """The cut in run seconds, given the run seconds of each decision (a run with fewer decisions than
        `retunes` is all warm-up: the cut is past its end)."""
        if self.retunes <= 0:
            return self.min_s
        if len(decision_s) < self.retunes:
            return float("inf")
        return max(self.min_s, sorted(decision_s)[self.retunes - 1])


def theil_sen(points: list[tuple[float, float]], confidence: float = 0.95) -> tuple[float, float, float] | None:
    """Theil-Sen slope of (x, y) points with Sen's (1968) distribution-free interval (`scipy.stats.theilslopes`).

    The median of the pairwise slopes: a sample taken in a retune's transient peak cannot move it, unlike least
    squares.  The interval assumes independent residuals: over 10-s samples of a process that swings with each
    retune they are not, so the interval over per-cycle values (one point per retune) is the honest one.
    None below 3 points or when every x is the same.
    """
    if len(points) < 3 or len({x for x, _ in points}) < 2:
        return None
    from scipy.stats import theilslopes

    res = theilslopes([y for _, y in points], [x for x, _ in points], alpha=confidence)
    return float(res.slope), float(res.low_slope), float(res.high_slope)


def least_squares(points: list[tuple[float, float]], confidence: float = 0.95) -> tuple[float, float, float] | None:
    """Least-squares slope of (x, y) points with its t-interval (independent residuals assumed)."""
    if len(points) < 3 or len({x for x, _ in points}) < 2:
        return None
    from scipy.stats import linregress
    from scipy.stats import t as student_t

    res = linregress([x for x, _ in points], [y for _, y in points])
    h = float(student_t.ppf(0.5 + confidence / 2, len(points) - 2)) * float(res.stderr)
    return float(res.slope), float(res.slope) - h, float(res.slope) + h


def slope_mb_per_hour(points: list[tuple[float, float]]) -> float | None:
    """Least-squares slope of (seconds, bytes) samples, in MB per hour."""
    fit = least_squares(points)
    return None if fit is None else fit[0] * 3600 / MB


def per_hour(fit: tuple[float, float, float] | None) -> dict | None:
    """A (slope, lo, hi) fit over (seconds, MB) as MB/hour, rounded."""
    if fit is None:
        return None
    return {"slope": round(fit[0] * 3600, 3), "ci95": [round(fit[1] * 3600, 3), round(fit[2] * 3600, 3)]}


#: Anonymous mappings at least this large are glibc's thread arenas (each reserves a 64 MiB heap).
ARENA_MIN_BYTES = 32 * MB


def rss_parts(ps: Any) -> dict:
    """The daemon's resident memory in glibc thread arenas, and the rest (`psutil` memory maps): an arena keeps
    freed pages resident until glibc trims it, so it moves RSS by tens of MB without any object being kept."""
    import psutil

    try:
        maps = ps.memory_maps(grouped=False)
    except psutil.Error:
        return {}
    arenas = 0
    for m in maps:
        lo, hi = (int(x, 16) for x in m.addr.split("-"))
        if m.path in ("", "[anon]") and hi - lo >= ARENA_MIN_BYTES:
            arenas += m.rss
    total = sum(m.rss for m in maps)
    return {"arenas_mb": round(arenas / MB, 2), "rss_less_arenas_mb": round((total - arenas) / MB, 2)}


def rss_cycles(rows: list[dict], starts_s: list[float]) -> list[dict]:
    """One record per cycle: from each of `starts_s` (run seconds; the load schedule's steps) to the next.

    Each cycle reports the daemon's RSS peak, trough and last sample (the plateau it settled at before the next
    step), and the worker's RSS at the cycle's last sample (0 MB: no worker, or it exited and its memory went
    back to the OS)."""
    out = []
    bounds = sorted(starts_s)
    for i, start in enumerate(bounds):
        end = bounds[i + 1] if i + 1 < len(bounds) else float("inf")
        inside = [r for r in rows if start <= r["t_s"] < end]
        if not inside:
            continue
        rss = [r["rss_mb"] for r in inside]
        rest = [r["rss_less_arenas_mb"] for r in inside if "rss_less_arenas_mb" in r]
        out.append(
            {
                "start_s": round(start, 1),
                "end_s": round(end if end != float("inf") else inside[-1]["t_s"], 1),
                "samples": len(inside),
                "rss_mb_peak": max(rss),
                "rss_mb_trough": min(rss),
                "rss_mb_last": rss[-1],
                **({"rss_less_arenas_mb_trough": min(rest)} if rest else {}),
                "worker_rss_mb_last": inside[-1]["worker_rss_mb"],
                "closed": end != float("inf"),
            }
        )
    return out


def slope_report(rows: list[dict], cycles: list[dict], warmup_s: float, limit: float = 1.0) -> dict:
    """The daemon's RSS slope after warm-up, four ways, and a verdict on the `limit` (MB/hour).

    * `samples_least_squares` / `samples_theil_sen`: every post-warm-up 10-s sample (intervals too narrow:
      neighbouring samples are correlated);
    * `cycle_troughs_theil_sen` / `cycle_lasts_theil_sen`: one point per closed cycle (load step) that starts
      after the warm-up (its lowest RSS / the RSS it settled at before the next retune), Theil-Sen with Sen's
      interval.  The trough series is the verdict's basis: a leak raises every trough, a plateau leaves them
      level, and a retune's transient peak does not enter it.

    Verdict: `met` when the trough interval's upper end is <= limit, `exceeded` when its lower end is above
    it, otherwise `not shown` (the run is too short or too noisy to tell).
    """
    warm = [(r["t_s"], r["rss_mb"]) for r in rows if r["t_s"] >= warmup_s]
    closed = [c for c in cycles if c["closed"] and c["start_s"] >= warmup_s]
    mid = [((c["start_s"] + c["end_s"]) / 2, c) for c in closed]
    troughs = per_hour(theil_sen([(t, c["rss_mb_trough"]) for t, c in mid]))
    report = {
        "warmup_cut_s": round(warmup_s, 1),
        "post_warmup_samples": len(warm),
        "post_warmup_cycles": len(closed),
        "span_h": round((warm[-1][0] - warm[0][0]) / 3600, 3) if len(warm) > 1 else 0.0,
        "samples_least_squares": per_hour(least_squares(warm)),
        "samples_theil_sen": per_hour(theil_sen(warm)),
        "cycle_troughs_theil_sen": troughs,
        "cycle_lasts_theil_sen": per_hour(theil_sen([(t, c["rss_mb_last"]) for t, c in mid])),
        # the same troughs without glibc's thread arenas (whose free pages glibc keeps or returns at will): what
        # the Python heap, the main heap and the libraries hold -- a leak of objects shows here too
        "cycle_troughs_less_arenas_theil_sen": per_hour(
            theil_sen([(t, c["rss_less_arenas_mb_trough"]) for t, c in mid if "rss_less_arenas_mb_trough" in c])
        ),
        "limit_mb_per_h": limit,
    }
    if troughs is None:
        report["verdict"] = "not shown"
    elif troughs["ci95"][1] <= limit:
        report["verdict"] = "met"
    elif troughs["ci95"][0] > limit:
        report["verdict"] = "exceeded"
    else:
        report["verdict"] = "not shown"
    return report
