"""The OS's own policy as a baseline, per load band, and the energy the tuner saves against it.

Observe mode measures windows while adaptive interrupt moderation and the cpufreq governor are in charge and
keeps, per load band, the mean package power and mean latency percentiles (Welford running moments, so the
file stays small). With tuning on, the same statistics are kept for the tuned windows, and

    saved = 1 - T / B,   T = sum_b w_b * tuned_power_b,   B = sum_b w_b * baseline_power_b,

over the bands measured both ways, each band weighted by the seconds the tuner held it (`w_b`). The 95 %
confidence interval is the delta method's on the ratio of the two weighted means (normal approximation,
standard errors from the windows' spread; a band needs >= 2 windows on each side). Power within a band still
varies with load; narrow bands (the daemon's `load_change_pct`) keep that small.

Windows without energy (no RAPL: most VMs) count for latency and for `windows`, never for power: a band with
no power measured reports none, and no saving is computed from it.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from actuators.host import Measurement
from core.errors import InputError
from core.fsutil import atomic_write

#: Below this load a window belongs to the idle band.
IDLE_QPS = 100.0
#: Two-sided 95 % normal quantile.
Z95 = 1.959964
FORMAT = "tuner.baseline/v1"


@dataclass(frozen=True)
class LoadBands:
    """Geometric load bands: [IDLE_QPS * (1 + w)^k, IDLE_QPS * (1 + w)^(k+1)) requests/s, plus the idle band."""

    width_pct: float = 20.0
    idle_qps: float = IDLE_QPS

    def index(self, qps: float) -> int:
        """-1 for the idle band, else k."""
        if not qps >= self.idle_qps:
            return -1
        return int(math.floor(math.log(qps / self.idle_qps) / math.log1p(self.width_pct / 100) + 1e-9))

    def bounds(self, index: int) -> tuple[float, float]:
        if index < 0:
            return 0.0, self.idle_qps
        step = 1 + self.width_pct / 100
        return self.idle_qps * step**index, self.idle_qps * step ** (index + 1)

    def label(self, index: int) -> str:
        lo, hi = self.bounds(index)
        return f"{lo:.0f}-{hi:.0f}"


@dataclass
class Moments:
    """Running count, mean and sum of squared deviations (Welford), plus the seconds they cover."""

    n: int = 0
    mean: float = 0.0
    m2: float = 0.0
    seconds: float = 0.0

    def add(self, x: float, seconds: float) -> None:
        self.n += 1
        d = x - self.mean
        self.mean += d / self.n
        self.m2 += d * (x - self.mean)
        self.seconds += seconds

    @property
    def sem(self) -> float | None:
        """Standard error of the mean; None with fewer than two values."""
        return math.sqrt(self.m2 / (self.n - 1) / self.n) if self.n > 1 else None

    def to_list(self) -> list[float]:
        return [self.n, self.mean, self.m2, self.seconds]

    @classmethod
    def from_list(cls, v: Any) -> Moments:
        n, mean, m2, seconds = v
        return cls(int(n), float(mean), float(m2), float(seconds))


@dataclass
class Band:
    windows: int = 0
    power: Moments = field(default_factory=Moments)
    latency: dict[float, Moments] = field(default_factory=dict)


@dataclass
class BandStats:
    """Per-load-band power and latency of a set of windows (the OS's baseline, or the tuned windows)."""

    bands: LoadBands = field(default_factory=LoadBands)
    data: dict[int, Band] = field(default_factory=dict)

    def add(self, m: Measurement) -> int:
        """Add one window; returns its band index."""
        k = self.bands.index(m.offered_qps)
        band = self.data.setdefault(k, Band())
        band.windows += 1
        if m.energy_known and m.seconds > 0:
            band.power.add(m.power_w, m.seconds)
        for pct, us in m.latency_us.items():
            if math.isfinite(us):
                band.latency.setdefault(float(pct), Moments()).add(us, m.seconds)
        return k

    def power_w(self, k: int) -> float | None:
        band = self.data.get(k)
        return band.power.mean if band and band.power.n else None

    def to_json(self) -> dict[str, Any]:
        return {
            "format": FORMAT,
            "band_width_pct": self.bands.width_pct,
            "idle_qps": self.bands.idle_qps,
            "bands": {
                str(k): {
                    "windows": b.windows,
                    "power_w": b.power.to_list(),
                    "latency_us": {f"{p:g}": mo.to_list() for p, mo in b.latency.items()},
                }
                for k, b in sorted(self.data.items())
            },
        }

    @classmethod
    def from_json(cls, d: Any, where: str = "baseline") -> BandStats:
        try:
            if d.get("format") != FORMAT:
                raise ValueError(f"format {d.get('format')!r}, expected {FORMAT!r}")
            out = cls(LoadBands(float(d["band_width_pct"]), float(d["idle_qps"])))
            for k, b in d["bands"].items():
                out.data[int(k)] = Band(
                    int(b["windows"]),
                    Moments.from_list(b["power_w"]),
                    {float(p): Moments.from_list(v) for p, v in b["latency_us"].items()},
                )
        except (AttributeError, KeyError, TypeError, ValueError) as exc:
            raise InputError(f"{where}: not a tuner baseline ({exc})") from None
        return out

    def save(self, path: Path) -> None:
        atomic_write(path, (json.dumps(self.to_json(), indent=1) + "\n").encode())

    @classmethod
    def load(cls, path: Path, bands: LoadBands) -> BandStats:
        """The baseline at `path` (empty if absent); an InputError if it is corrupt or its bands differ."""
        if not path.exists():
            return cls(bands)
        try:
            data = json.loads(path.read_text())
        except (OSError, ValueError) as exc:
            raise InputError(f"{path}: cannot read the baseline ({exc})") from None
        out = cls.from_json(data, str(path))
        if out.bands != bands:
            raise InputError(
                f"{path}: baseline bands are {out.bands.width_pct:g} % wide from {out.bands.idle_qps:g} QPS, "
                f"this config's {bands.width_pct:g} % from {bands.idle_qps:g}: observe again or remove the file"
            )
        return out


@dataclass(frozen=True)
class Savings:
    """Energy saved against the baseline: ratio with its 95 % CI, and the bands it rests on."""

    ratio: float
    lower: float
    upper: float
    bands: tuple[str, ...]


def energy_saved(baseline: BandStats, tuned: BandStats) -> Savings | None:
    """`1 - T/B` over the bands both have power for (>= 2 windows each), weighted by tuned seconds; None
    when no band qualifies."""
    used = []
    for k, t in tuned.data.items():
        b = baseline.data.get(k)
        if b is None or t.power.sem is None or b.power.sem is None or not b.power.mean > 0:
            continue
        used.append((k, t.power, b.power))
    if not used:
        return None
    total = sum(t.seconds for _, t, _ in used)
    if not total > 0:
        return None
    weights = [t.seconds / total for _, t, _ in used]
    tuned_mean = sum(w * t.mean for w, (_, t, _) in zip(weights, used))
    base_mean = sum(w * b.mean for w, (_, _, b) in zip(weights, used))
    tuned_var = sum((w * (t.sem or 0.0)) ** 2 for w, (_, t, _) in zip(weights, used))
    base_var = sum((w * (b.sem or 0.0)) ** 2 for w, (_, _, b) in zip(weights, used))
    ratio = tuned_mean / base_mean
    se = abs(ratio) * math.sqrt(tuned_var / tuned_mean**2 + base_var / base_mean**2) if tuned_mean > 0 else 0.0
    saved = 1.0 - ratio
    return Savings(saved, saved - Z95 * se, saved + Z95 * se, tuple(tuned.bands.label(k) for k, _, _ in used))
