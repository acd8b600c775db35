"""A load schedule for the simulated host: offered QPS that moves with time (steps, a sine, or a binned trace).

A `SimHost` given a `LoadSchedule` reads its offered load from it instead of holding one value, so a daemon
on the simulator sees the load shift and retunes, and a soak can swing it for hours.  Shapes:

* ``steps``  -- ``levels`` (QPS) each held ``step_s`` seconds, cycling;
* ``sine``   -- between ``low`` and ``high`` QPS with period ``period_s``, starting at ``low``;
* ``series`` -- one QPS per ``step_s`` bin, cycling: what a trace file becomes (the application reads the
  file -- `tuner.hosts` -- since this package does not import `traces`).

``time_scale`` compresses the schedule: schedule seconds per clock second (60 plays an hour in a minute).
``clock`` is ``wall`` (seconds since the host was made: what a daemon, which waits out each window in real
time, should see) or ``sim`` (the host's simulated seconds measured so far: deterministic, for tests and
batch runs that never sleep).  A window measured by the host runs at the load of its start.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from core.errors import TunerError

SHAPES = ("steps", "sine", "series")
CLOCKS = ("wall", "sim")
_KEYS = {
    "steps": {"levels", "step_s"},
    "sine": {"low", "high", "period_s"},
    "series": {"levels", "step_s", "source"},
}
_COMMON = {"shape", "time_scale", "clock"}
MAX_QPS = 1e9  # refuse absurd loads (a typo adding zeros) before the model runs them


@dataclass(frozen=True)
class LoadSchedule:
    """Offered QPS as a function of time; see the module docstring for the shapes."""

    shape: str
    levels: tuple[float, ...] = ()
    step_s: float = 0.0
    low: float = 0.0
    high: float = 0.0
    period_s: float = 0.0
    time_scale: float = 1.0
    clock: str = "wall"
    source: str = ""

    def qps_at(self, t_s: float) -> float:
        """Offered QPS `t_s` clock seconds after the start."""
        s = max(t_s, 0.0) * self.time_scale
        if self.shape == "sine":
            return self.low + (self.high - self.low) * 0.5 * (1.0 - math.cos(2.0 * math.pi * s / self.period_s))
        return self.levels[int(s // self.step_s) % len(self.levels)]

    @property
    def span_s(self) -> float:
        """Clock seconds of one cycle of the schedule."""
        cycle = self.period_s if self.shape == "sine" else self.step_s * len(self.levels)
        return cycle / self.time_scale

    def describe(self) -> str:
        pace = f", x{self.time_scale:g}" if self.time_scale != 1.0 else ""
        if self.shape == "sine":
            what = f"sine {self.low:.0f}-{self.high:.0f} QPS, period {self.period_s:g} s"
        elif self.shape == "steps":
            what = f"steps {'/'.join(f'{q:.0f}' for q in self.levels)} QPS, {self.step_s:g} s each"
        else:
            what = f"{self.source or 'series'}: {len(self.levels)} bins of {self.step_s:g} s"
        return f"{what}{pace}, {self.clock} clock"


def _number(value: Any, field: str, *, positive: bool = False, at_most: float | None = None) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise TunerError(f"sim: load_schedule.{field} {value!r}: expected a number")
    v = float(value)
    if not math.isfinite(v) or v < 0 or (positive and v == 0):
        raise TunerError(
            f"sim: load_schedule.{field} {value!r}: expected a finite number {'> 0' if positive else '>= 0'}"
        )
    if at_most is not None and v > at_most:
        raise TunerError(f"sim: load_schedule.{field} {value!r}: expected at most {at_most:g}")
    return v


def _levels(value: Any, field: str) -> tuple[float, ...]:
    if isinstance(value, (str, bytes)) or not isinstance(value, Sequence) or not value:
        raise TunerError(f"sim: load_schedule.{field} {value!r}: expected a non-empty list of QPS values")
    return tuple(_number(v, f"{field}[{i}]", at_most=MAX_QPS) for i, v in enumerate(value))


def parse_load(spec: LoadSchedule | Mapping[str, Any]) -> LoadSchedule:
    """Validate a load table (the `load_schedule` host option) into a `LoadSchedule`; one-line `TunerError` otherwise."""
    if isinstance(spec, LoadSchedule):
        return spec
    if not isinstance(spec, Mapping):
        raise TunerError(f"sim: load_schedule {spec!r}: expected a table with shape = {' | '.join(SHAPES)} | trace")
    shape = spec.get("shape")
    if shape == "trace":
        raise TunerError("sim: load_schedule.shape 'trace' is read by the application's 'sim' host (tuner.hosts)")
    if shape not in SHAPES:
        raise TunerError(f"sim: load_schedule.shape {shape!r}: expected one of {', '.join(SHAPES)}, trace")
    unknown = sorted(set(spec) - _KEYS[shape] - _COMMON)
    if unknown:
        allowed = ", ".join(sorted(_KEYS[shape] | _COMMON - {"shape"}))
        raise TunerError(f"sim: load_schedule ({shape}): unknown key(s) {', '.join(unknown)}: expected {allowed}")
    missing = sorted(_KEYS[shape] - {"source"} - set(spec))
    if missing:
        raise TunerError(f"sim: load_schedule ({shape}): missing {', '.join(missing)}")
    clock = spec.get("clock", "wall")
    if clock not in CLOCKS:
        raise TunerError(f"sim: load_schedule.clock {clock!r}: expected one of {', '.join(CLOCKS)}")
    common = {"time_scale": _number(spec.get("time_scale", 1.0), "time_scale", positive=True), "clock": clock}
    if shape == "sine":
        low = _number(spec["low"], "low", at_most=MAX_QPS)
        high = _number(spec["high"], "high", at_most=MAX_QPS)
        if high < low:
            raise TunerError(f"sim: load_schedule.high {high:g} is below load_schedule.low {low:g}")
        return LoadSchedule(
            "sine", low=low, high=high, period_s=_number(spec["period_s"], "period_s", positive=True), **common
        )
    source = spec.get("source", "")
    if not isinstance(source, str):
        raise TunerError(f"sim: load_schedule.source {source!r}: expected a string")
    return LoadSchedule(
        shape,
        levels=_levels(spec["levels"], "levels"),
        step_s=_number(spec["step_s"], "step_s", positive=True),
        source=source,
        **common,
    )
