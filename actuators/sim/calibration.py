"""Calibration of `SimHost` against the dissertation's measurements: pure functions over `expected()`.

Each target lists the dissertation's value and the accepted range; `calibration(host)` evaluates all of
them, `format_table` renders the simulator-vs-dissertation table in docs/simulator.md (`bench/sim.py
--calibration` prints it).

Eq. 6.3 units: t = Z / DVFS^(1 + alpha) + phi * ITR with DVFS in GHz and Z, t, ITR in µs.  That reading gives
sane values (200K, 1.3 GHz: 86.3 / 1.3^0.52 = 75 µs of work, + 1.09 * 350 µs = 456 µs, matching table 5.1's
energy-optimal point just under the 500 µs SLA); DVFS in MHz would make the work term vanish (< 0.3 µs).

What the simulator is judged by: table 5.1's optima, Linux default ~2x the optimum's energy, a peak of 800-880K
QPS, and eq. 6.3 only in its band (`in_eq63_band`: ITR >= 200 µs, where batching sets the tail and the fit and
the TX-completion model agree, and not 600K at <= 1.5 GHz, where the simulated hottest cores saturate).  The
points outside the band are known deviations, listed with their causes in docs/simulator.md.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from actuators.host import OperatingPoint
from actuators.sim.cells import Expected
from actuators.sim.host import SimHost

SLA_US = 500.0
#: Table 6.1, Linux column: QPS -> (Z µs, alpha, phi).
TABLE_6_1 = {200_000.0: (86.3, -0.48, 1.09), 400_000.0: (251.67, 0.71, 1.08), 600_000.0: (687.97, 1.34, 1.02)}
#: Table 5.1, Linux-static energy-optimal (ITR µs, DVFS GHz) per QPS, (dissertation ch. 5.3).
TABLE_5_1 = {200_000.0: (350, 1.3), 400_000.0: (300, 1.3), 600_000.0: (300, 1.7)}
#: Accepted location of the energy-optimal static point: (ITR lo, ITR hi, DVFS lo, DVFS hi).
OPTIMUM_RANGE = {200_000.0: (250, 450, 1.2, 1.4), 400_000.0: (250, 450, 1.2, 1.4), 600_000.0: (200, 400, 1.5, 1.9)}
OPT_POWER_W = (45.0, 80.0)  # package power at the energy-optimal points (table 5.1: 1050-1471 J / 20 s)
IDLE_POWER_W = (20.0, 35.0)
#: Linux default energy / energy-optimal static energy, per QPS.  The dissertation
#: itself: at 400K "Linux-static can ... save up over 2X in energy over normal Linux" (ch. 5.2.2, seed text
#: line ~1154), and its 24 h trace saves "over 50%" / "up to 50%" (abstract line ~81, ch. 7.4 line ~1552).
DEFAULT_RATIO = {200_000.0: (1.7, 2.5), 400_000.0: (2.0, 2.5)}
DEFAULT_P99_MAX_US = SLA_US  # Linux default meets the SLA with a wide margin (fig. 7.6: its p99 is the lowest)
MAX_QPS = (800_000.0, 880_000.0)  # highest QPS meeting the SLA at (ITR 2, 2.9 GHz); dissertation: Linux peaks ~800K
EQ63_TOLERANCE = 0.20  # relative, wherever the fit predicts <= EQ63_LIMIT_US
EQ63_LIMIT_US = 600.0
EQ63_ITRS = (2, 10, 50, 100, 200, 300, 400, 500)
EQ63_DVFS = (1.3, 1.5, 1.7, 2.1, 2.5, 2.9)
#: Eq. 6.3's band: from this ITR up batching (phi * ITR) sets the tail, so the fit and the simulator's
#: TX-completion interrupts agree; below it those interrupts double the wake-ups and the fit is not a target.
EQ63_MIN_ITR_US = 200
#: QPS -> highest DVFS (GHz) at which the simulated hottest cores saturate while the fit stays finite.
EQ63_SATURATED_GHZ = {600_000.0: 1.5}


def eq63_p99_us(qps: float, itr_us: float, dvfs_ghz: float) -> float:
    """Eq. 6.3 with table 6.1's Linux parameters (QPS one of 200K/400K/600K)."""
    z, alpha, phi = TABLE_6_1[float(qps)]
    return float(z / dvfs_ghz ** (1.0 + alpha) + phi * itr_us)


def in_eq63_band(qps: float, itr_us: float, dvfs_ghz: float) -> bool:
    """Whether eq. 6.3 is a fidelity target at this point (see the module docstring)."""
    saturated = EQ63_SATURATED_GHZ.get(float(qps))
    return itr_us >= EQ63_MIN_ITR_US and not (saturated is not None and dvfs_ghz <= saturated + 1e-9)


def full_grid(host: SimHost) -> list[OperatingPoint]:
    k = host.knobs()
    return [OperatingPoint(i, f) for i in k.itr_us for f in k.dvfs_ghz]


def optimal_static(host: SimHost, qps: float, sla_us: float = SLA_US) -> tuple[OperatingPoint, Expected]:
    """The exhaustive energy-optimal static point with expected p99 <= `sla_us` over the full grid."""
    grid = full_grid(host)
    exp = host.expected(grid, qps)
    best = min((e.power_w, i) for i, e in enumerate(exp) if e.latency_us[99.0] <= sla_us)
    return grid[best[1]], exp[best[1]]


@dataclass(frozen=True)
class Eq63Row:
    qps: float
    itr_us: int
    dvfs_ghz: float
    sim_p99_us: float
    fit_p99_us: float

    @property
    def rel_error(self) -> float:
        return self.sim_p99_us / self.fit_p99_us - 1.0


def eq63_rows(
    host: SimHost,
    qps: float,
    itrs: Sequence[int] = EQ63_ITRS,
    dvfs: Sequence[float] = EQ63_DVFS,
    limit_us: float = EQ63_LIMIT_US,
    sla_us: float | None = None,
) -> list[Eq63Row]:
    """Simulated vs eq. 6.3 p99 at the sampled points where the fit predicts <= `limit_us`.

    With `sla_us`, only the points whose simulated p99 meets it: the dissertation fitted eq. 6.3 on
    SLA-meeting configurations only ("we filter out ITR and DVFS settings which violate the SLA in our data
    set", ch. 6.1), so the fit makes no claim about the others.
    """
    pts = [OperatingPoint(i, f) for i in itrs for f in dvfs if eq63_p99_us(qps, i, f) <= limit_us]
    exp = host.expected(pts, qps)
    rows = [
        Eq63Row(qps, p.itr_us, p.dvfs_ghz, e.latency_us[99.0], eq63_p99_us(qps, p.itr_us, p.dvfs_ghz))
        for p, e in zip(pts, exp)
    ]
    return rows if sla_us is None else [r for r in rows if r.sim_p99_us <= sla_us]


def eq63_band_rows(rows: list[Eq63Row]) -> list[Eq63Row]:
    """The rows inside eq. 6.3's band (`in_eq63_band`)."""
    return [r for r in rows if in_eq63_band(r.qps, r.itr_us, r.dvfs_ghz)]


def eq63_deviations(rows: list[Eq63Row]) -> list[Eq63Row]:
    """The rows outside the band that miss the fit by more than `EQ63_TOLERANCE`: the known deviations."""
    return [r for r in rows if not in_eq63_band(r.qps, r.itr_us, r.dvfs_ghz) and abs(r.rel_error) > EQ63_TOLERANCE]


def _eq63_summary(rows: list[Eq63Row]) -> dict[str, Any]:
    errs = [r.rel_error for r in rows]
    return {
        "points": len(rows),
        "max_abs_rel_error": round(max(abs(x) for x in errs), 3),
        "mean_rel_error": round(sum(errs) / len(errs), 3),
        "within_tolerance": sum(abs(x) <= EQ63_TOLERANCE for x in errs),
        "worst": [
            (r.itr_us, r.dvfs_ghz, round(r.sim_p99_us), round(r.fit_p99_us))
            for r in sorted(rows, key=lambda r: -abs(r.rel_error))[:3]
        ],
    }


def max_qps_meeting_sla(
    host: SimHost,
    point: OperatingPoint = OperatingPoint(2, 2.9),
    sla_us: float = SLA_US,
    lo: float = 100_000.0,
    hi: float = 1_500_000.0,
    step: float = 5_000.0,
) -> float:
    """Highest offered QPS whose expected p99 at `point` meets `sla_us` (bisection to `step`)."""

    def ok(q: float) -> bool:
        return host.expected([point], q)[0].latency_us[99.0] <= sla_us

    if not ok(lo):
        return 0.0
    while hi - lo > step:
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if ok(mid) else (lo, mid)
    return lo


def idle_power_w(host: SimHost) -> float:
    """Package power with (almost) no load, in Linux default mode (1 request/s)."""
    return host.expected_default(1.0).power_w


def calibration(host: SimHost) -> dict[str, Any]:
    """Evaluate every calibration target; returns plain data (JSON-serialisable)."""
    out: dict[str, Any] = {"optimum": {}, "default_ratio": {}, "eq63_band": {}, "eq63": {}, "eq63_sla_meeting": {}}
    for qps, (ilo, ihi, flo, fhi) in OPTIMUM_RANGE.items():
        pt, e = optimal_static(host, qps)
        ok = (
            ilo <= pt.itr_us <= ihi
            and flo - 1e-9 <= pt.dvfs_ghz <= fhi + 1e-9
            and OPT_POWER_W[0] <= e.power_w <= OPT_POWER_W[1]
        )
        out["optimum"][int(qps)] = {
            "itr_us": pt.itr_us,
            "dvfs_ghz": pt.dvfs_ghz,
            "p99_us": round(e.latency_us[99.0], 1),
            "power_w": round(e.power_w, 2),
            "energy_20s_j": round(20 * e.power_w, 1),
            "dissertation": TABLE_5_1[qps],
            "ok": ok,
        }
        if qps in (200_000.0, 400_000.0):
            d = host.expected_default(qps)
            ratio = d.power_w / e.power_w
            lo, hi = DEFAULT_RATIO[qps]
            out["default_ratio"][int(qps)] = {
                "default_power_w": round(d.power_w, 2),
                "default_p99_us": round(d.latency_us[99.0], 1),
                "ratio": round(ratio, 3),
                "accepted": [lo, hi],
                "ok": lo <= ratio <= hi and d.latency_us[99.0] <= DEFAULT_P99_MAX_US,
            }
        rows = eq63_rows(host, qps)
        out["eq63_band"][int(qps)] = _eq63_summary(eq63_band_rows(rows))
        out["eq63"][int(qps)] = _eq63_summary(rows)
        out["eq63"][int(qps)]["deviations"] = [
            (r.itr_us, r.dvfs_ghz, round(r.sim_p99_us), round(r.fit_p99_us)) for r in eq63_deviations(rows)
        ]
        meeting = [r for r in rows if r.sim_p99_us <= SLA_US]
        out["eq63_sla_meeting"][int(qps)] = _eq63_summary(meeting)
        # where the fit itself says the SLA is met but the simulator violates it (outside the fit's data set)
        out["eq63_sla_meeting"][int(qps)]["fit_meets_sim_violates"] = [
            (r.itr_us, r.dvfs_ghz, round(r.sim_p99_us), round(r.fit_p99_us))
            for r in rows
            if r.sim_p99_us > SLA_US and r.fit_p99_us <= SLA_US
        ]
    idle = idle_power_w(host)
    out["idle_power_w"] = {"value": round(idle, 2), "ok": IDLE_POWER_W[0] <= idle <= IDLE_POWER_W[1]}
    mq = max_qps_meeting_sla(host)
    out["max_qps_itr2_2.9"] = {"value": mq, "ok": MAX_QPS[0] <= mq <= MAX_QPS[1]}
    return out


def format_table(cal: dict[str, Any]) -> str:
    """Markdown table: target, dissertation, simulator, accepted range, pass."""
    rows = ["| target | dissertation | simulator | accepted | ok |", "|---|---|---|---|---|"]
    for qps, o in cal["optimum"].items():
        ilo, ihi, flo, fhi = OPTIMUM_RANGE[float(qps)]
        rows.append(
            f"| energy-optimal static point, {qps // 1000}K (p99 <= 500 µs) | {o['dissertation']} | "
            f"({o['itr_us']}, {o['dvfs_ghz']}) p99 {o['p99_us']} µs | ITR {ilo}-{ihi}, DVFS {flo}-{fhi} | "
            f"{'yes' if o['ok'] else 'NO'} |"
        )
        rows.append(
            f"| package power at that point, {qps // 1000}K | 1050-1471 J / 20 s | {o['power_w']} W "
            f"({o['energy_20s_j']} J / 20 s) | {OPT_POWER_W[0]:g}-{OPT_POWER_W[1]:g} W | "
            f"{'yes' if OPT_POWER_W[0] <= o['power_w'] <= OPT_POWER_W[1] else 'NO'} |"
        )
    for qps, d in cal["default_ratio"].items():
        diss = "over 2x (ch. 5.2.2)" if qps == 400_000 else "~2x (24 h trace: 50 % saved, ch. 7)"
        rows.append(
            f"| Linux default / optimal energy, {qps // 1000}K | {diss} | {d['ratio']} "
            f"({d['default_power_w']} W, p99 {d['default_p99_us']} µs) | {d['accepted'][0]}-"
            f"{d['accepted'][1]}, p99 <= {DEFAULT_P99_MAX_US:g} µs | {'yes' if d['ok'] else 'NO'} |"
        )
    for qps, e in cal["eq63_band"].items():
        sat = EQ63_SATURATED_GHZ.get(float(qps))
        band = f"ITR >= {EQ63_MIN_ITR_US} µs" + (f", DVFS > {sat} GHz" if sat else "")
        rows.append(
            f"| p99 vs eq. 6.3 (table 6.1) in its band ({band}), {qps // 1000}K, {e['points']} points | fit | "
            f"max abs error {100 * e['max_abs_rel_error']:.0f} %, mean {100 * e['mean_rel_error']:+.0f} %, "
            f"{e['within_tolerance']}/{e['points']} within ±20 % | ±20 % | "
            f"{'yes' if e['within_tolerance'] == e['points'] else 'NO'} |"
        )
    # outside the band eq. 6.3 is not a target: these rows show the known deviations (docs/simulator.md)
    for qps, e in cal["eq63"].items():
        rows.append(
            f"| p99 vs eq. 6.3, all sampled points, {qps // 1000}K, {e['points']} points | fit | max abs error "
            f"{100 * e['max_abs_rel_error']:.0f} %, mean {100 * e['mean_rel_error']:+.0f} %, "
            f"{e['within_tolerance']}/{e['points']} within ±20 % | ±20 % in the band only | "
            f"{'yes' if e['within_tolerance'] + len(e['deviations']) == e['points'] else 'NO'} |"
        )
    for qps, e in cal["eq63_sla_meeting"].items():
        rows.append(
            f"| same, only where the simulated p99 meets the 500 µs SLA (the fit's data set, ch. 6.1), "
            f"{qps // 1000}K, {e['points']} points | fit | max abs error "
            f"{100 * e['max_abs_rel_error']:.0f} %, mean {100 * e['mean_rel_error']:+.0f} %, "
            f"{e['within_tolerance']}/{e['points']} within ±20 %; fit <= 500 µs but sim > 500 µs at "
            f"{len(e['fit_meets_sim_violates'])} points | ±20 % in the band only | -- |"
        )
    i = cal["idle_power_w"]
    rows.append(
        f"| idle package power | ~20-35 W | {i['value']} W | {IDLE_POWER_W[0]:g}-{IDLE_POWER_W[1]:g} W | "
        f"{'yes' if i['ok'] else 'NO'} |"
    )
    m = cal["max_qps_itr2_2.9"]
    rows.append(
        f"| max QPS with p99 <= 500 µs at (2, 2.9) | ~800K | {m['value'] / 1000:.0f}K | "
        f"{MAX_QPS[0] / 1000:.0f}K-{MAX_QPS[1] / 1000:.0f}K | "
        f"{'yes' if m['ok'] else 'NO'} |"
    )
    return "\n".join(rows)
