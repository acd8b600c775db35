"""Settings declared once: the `Setting` row (name, type, default, bounds or choices, one line of doc, the TOML
section and the surfaces that expose it) and `TUNER_TABLE`, one row per `TunerSettings` field.

Everything else is derived from the rows: `TunerSettings`' defaults and validation (`tuner.optimize.settings`),
the presets (`tuner.optimize.presets`), the daemon's `[tuning]` keys, defaults and reader (`tuner.config.tables`,
`tuner.config.parse`), `tuner replay`'s flags (`tuner.cli.replay_settings`) and the references in docs/daemon.md
and docs/replay.md (`python -m tuner.cli.docs_reference`). A row's default is the tuner users get (the learning tuner);
its `cold` is the dissertation's tuner's value. To add a setting: a row here, a field of the same name and type in
`TunerSettings` (and in `tuner.config.schema.TuningConfig` if the daemon reads it; both checked at import), a
line in deploy/tuner.example.toml, then regenerate the docs.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

from core.errors import TunerError
from tuner.optimize.latscale import KINDS as LATENCY_METRICS

#: How `Optimizer.best` decides that a measured trial met the SLA: "ci" = the upper end of the percentile's 95 %
#: order-statistic CI is within the SLA; "estimate" = the point estimate is.
SLA_CHECKS: tuple[str, ...] = ("ci", "estimate")
#: `window_mode`: "fixed" = `window_s` per trial; "adaptive" = grow until the percentile's CI is within
#: +-`window_ci_pct` % (at most `window_s`), via `tuner.optimize.windowing.measure_window`.
WINDOW_MODES: tuple[str, ...] = ("fixed", "adaptive")
#: `acquisition`, how the next point is chosen once the model is fitted (docs/optimizer.md, "Compute per
#: suggestion"): "ax" = Ax's own qLogNEI over the whole grid, vetted by the safety filter after; "cei" = the allowed
#: point of largest constrained EI; "grid" = Ax's qLogNEI over the allowed points only.
ACQUISITIONS: tuple[str, ...] = ("ax", "grid", "cei")

_KIND_TEXT = {bool: "true or false", int: "an integer", float: "a number", str: "a string", dict: "a table"}


def _num(x: float) -> str:
    """A bound as people write it: 1000000, 0.001."""
    return str(int(x)) if float(x).is_integer() else f"{x:g}"


@dataclass(frozen=True)
class Setting:
    """One setting. `low`/`high` bound a number (`low_open`/`high_open`: the bound itself excluded); `choices`
    list a string's values; `expect` is what a valid value is, for error lines and the docs (derived from the
    bounds when empty). Surfaces: `optimizer` (a `TunerSettings` field), `daemon` (a key of the daemon's
    `[section]`), `replay` (a `tuner replay` flag, `--FLAG` = `flag` or the name with `-`; `shown`: in `--help`).
    `cold` is the value the dissertation's tuner (the `cold` preset) sets (None: the presets leave the field), and
    `daemon_default` the daemon's default where it differs (None: the same)."""

    name: str
    kind: type
    default: Any
    doc: str
    low: float | None = None
    high: float | None = None
    low_open: bool = False
    high_open: bool = False
    choices: tuple[str, ...] = ()
    expect: str = ""
    unit: str = ""
    allowed: Callable[[Any], str | None] | None = None  # a further rule: None, or what was expected instead
    item: type = int  # a `tuple` setting's item type: `[low, high]` of them
    doc_default: str = ""  # the default as the docs say it, when its value does not (a path, the host's range)
    section: str = "tuning"
    optimizer: bool = True
    daemon: bool = True
    replay: bool = True
    flag: str = ""
    shown: bool = False
    cold: Any = None
    daemon_default: Any = None

    def __post_init__(self) -> None:
        problem = self.problem(self.default)
        if problem is not None:
            raise TypeError(f"setting {self.name}: default {self.default!r}: {problem}")

    @property
    def expected(self) -> str:
        """What a valid value is: "1..1000", "a probability in [0, 1) (0 = off)", "one of 'fixed', 'adaptive'"."""
        if self.expect:
            return self.expect
        if self.choices:
            return "one of " + ", ".join(map(repr, self.choices))
        if self.kind not in (int, float):
            return self.kind_text
        unit = f" {self.unit}" if self.unit else ""
        if self.low is not None and self.high is not None:
            return f"{_num(self.low)}..{_num(self.high)}{unit}"
        if self.low is not None:
            return f"a value {'>' if self.low_open else '>='} {_num(self.low)}{unit}"
        return _KIND_TEXT[self.kind]

    @property
    def cli_flag(self) -> str:
        return "--" + (self.flag or self.name).replace("_", "-")

    @property
    def cli_dest(self) -> str:
        return (self.flag or self.name).replace("-", "_")

    @property
    def daemon_value(self) -> Any:
        """The daemon's default (`daemon_default`, else `default`)."""
        return self.default if self.daemon_default is None else self.daemon_default

    @property
    def kind_text(self) -> str:
        if self.kind is tuple:
            return f"[low, high] {'integers' if self.item is int else 'numbers'}"
        return _KIND_TEXT[self.kind]

    def convert(self, value: Any) -> Any:
        """`value` in this setting's type (an int for a float setting becomes a float; a `[low, high]` list a
        tuple), or None if it is not one."""
        if self.kind is tuple:
            if not isinstance(value, list | tuple) or len(value) != 2:
                return None
            pair = [Setting("", self.item, self.item(0), "").convert(v) for v in value]
            return (pair[0], pair[1]) if None not in pair and pair[0] <= pair[1] else None
        if self.kind is dict:
            return dict(value) if isinstance(value, dict) else None
        if self.kind is bool or self.kind is str:
            return value if isinstance(value, self.kind) else None
        if isinstance(value, bool) or not isinstance(value, int | float):
            return None
        if self.kind is int:
            return value if isinstance(value, int) else None
        return float(value) if math.isfinite(value) else None

    def check(self, value: Any) -> str | None:
        """None if `value` (already of this type) is within the bounds and choices; else `expected`."""
        if self.choices and value not in self.choices:
            return self.expected
        if self.kind in (int, float):
            low_bad = self.low is not None and (value <= self.low if self.low_open else value < self.low)
            high_bad = self.high is not None and (value >= self.high if self.high_open else value > self.high)
            if low_bad or high_bad:
                return self.expected
        if self.allowed is not None:
            return self.allowed(value)
        return None

    def problem(self, value: Any) -> str | None:
        """None if `value` is valid; else "expected ..." (the type first, then the bounds)."""
        if self.convert(value) is None:
            return f"expected {self.kind_text}"
        bad = self.check(self.convert(value))
        return None if bad is None else f"expected {bad}"

    def validate(self, value: Any) -> None:
        """A one-line `TunerError` (`name: expected ..., got ...`) unless `value` is valid."""
        problem = self.problem(value)
        if problem is not None:
            raise TunerError(f"{self.name}: {problem}, got {value!r}")

    def from_flag(self, text: Any, flag: str) -> Any:
        """The value of `flag` given as `text` (a string, or already typed), checked; a one-line `TunerError`
        (`--flag 'text': expected ...`) if it is not valid."""
        value = text
        if isinstance(text, str) and self.kind in (int, float):
            try:
                value = self.kind(text)
            except ValueError:
                raise TunerError(f"{flag} {text!r}: expected {_KIND_TEXT[self.kind]}") from None
        converted = self.convert(value)
        if converted is None:
            raise TunerError(f"{flag} {text!r}: expected {_KIND_TEXT[self.kind]}")
        bad = self.check(converted)
        if bad is not None:
            raise TunerError(f"{flag} {text!r}: expected {bad}")
        return converted


def by_name(table: Iterable[Setting]) -> dict[str, Setting]:
    return {s.name: s for s in table}


def _p(name: str, default: float, doc: str, expect: str, high: float, **kw: Any) -> Setting:
    """A float setting in [0, high] (`high_open`: [0, high)) described by `expect`."""
    return Setting(name, float, default, doc, low=0.0, high=high, expect=expect, **kw)


#: Every `TunerSettings` field, in the order of the docs.
TUNER_TABLE: tuple[Setting, ...] = (
    Setting("trials", int, 30, "(max) trials per retune", low=1, high=1000, shown=True, cold=30),
    Setting("sobol_trials", int, 8, "quasi-random (Sobol) trials before the model", low=1, high=1000),
    Setting(
        "window_s",
        float,
        20.0,
        "a trial's measurement window (adaptive windows: its maximum)",
        low=0.001,
        high=3600,
        unit="seconds",
        flag="window",
    ),
    Setting("settle_s", float, 1.0, "wait after a knob change", low=0, high=600, unit="seconds", flag="settle"),
    Setting(
        "seed",
        int,
        0,
        "the optimiser's seed (replay: the hosts' too; the daemon's retune N uses seed + N)",
        low=0,
        shown=True,
    ),
    Setting(
        "itr_resolution_us",
        int,
        16,
        "the ITR grid the optimiser searches (8 halves the step for ~2x the compute per trial)",
        low=1,
        high=1024,
        unit="µs",
        flag="itr_resolution",
        cold=8,
    ),
    _p(
        "itr_resolution_sla_pct",
        4.0,
        "the ITR grid's step is halved (down to 2 µs) while it is over this % of the SLA (16 µs at 500 µs, 8 at 200)",
        "a percentage in [0, 100] (0 = itr_resolution_us at every SLA)",
        100,
        cold=0.0,
    ),
    Setting("torch_threads", int, 1, "PyTorch threads of a model fit", low=1, daemon=False, replay=False),
    Setting(
        "sla_check",
        str,
        "ci",
        "a trial met the SLA if its percentile's 95 % CI upper end (ci) or its estimate is within it",
        choices=SLA_CHECKS,
        daemon=False,
        replay=False,
    ),
    _p(
        "sla_margin_pct",
        5.0,
        "exploration aims within the SLA less this % (the safety gate, the adaptive window's early end)",
        "a percentage in [0, 100)",
        100,
        high_open=True,
        daemon=False,
        replay=False,
    ),
    Setting(
        "context",
        bool,
        True,
        "offered QPS is a model input: one experiment learns across loads and retunes",
        cold=False,
    ),
    Setting("context_max_qps", float, 1e6, "QPS normaliser of the load input (capped at 1)", low=0, low_open=True),
    Setting(
        "history_max_trials",
        int,
        100,
        "most trials the contextual model keeps (the newest)",
        low=1,
        high=100_000,
    ),
    _p(
        "drift_h",
        0.0,
        "context: retire the trials before a run of trials faster than the model predicts once the run's CUSUM "
        "of z scores (allowance 1 SD) passes this many SDs (the host sped up)",
        "a CUSUM threshold in SDs, [0, 100] (0 = off)",
        100,
        cold=0.0,
    ),
    _p(
        "expand_ei_pct",
        0.0,
        "before a retune stops: one trial toward a point no measurement reaches yet where the model expects an "
        "improvement of at least this % of the best power",
        "a percentage in [0, 100] (0 = off)",
        100,
        cold=0.0,
    ),
    _p(
        "descend_pct",
        10.0,
        "before a retune stops: one trial halfway toward a cheaper point measured within the limit at a load up to "
        "10 % below, when the held point's power is more than this % above the model's power there or its frequency "
        "0.4 GHz or more above",
        "a percentage in [0, 100] (0 = off: neither)",
        100,
        cold=0.0,
    ),
    Setting("min_trials", int, 2, "trials per retune before the stopping rule may end it", low=1, high=1000),
    _p(
        "stop_ei_pct",
        0.5,
        "end a retune when one more trial's expected improvement < this % of the best power",
        "a percentage in [0, 100) (0 = off)",
        100,
        high_open=True,
        cold=0.0,
    ),
    _p(
        "safe_delta",
        0.05,
        "safe exploration: skip points whose modelled P(percentile > SLA) exceeds this",
        "a probability in [0, 1) (0 = off)",
        1,
        high_open=True,
        cold=0.0,
    ),
    _p(
        "safe_limit_delta",
        0.05,
        "with safe_delta: also skip points whose modelled P(percentile > the final choice's limit) exceeds this",
        "a probability in (0, 1] (1 = P(SLA broken) alone gates)",
        1,
        low_open=True,
    ),
    _p(
        "safe_radius",
        0.2,
        "with safe_delta: try only points within this normalised knob distance of one measured within the limit",
        "a normalised knob distance in [0, 2] (0 = off)",
        2,
    ),
    _p(
        "safe_model_error",
        0.0,
        "with safe_delta: an SD of ln latency added to the model's own in P(SLA broken)",
        "an SD of ln latency in [0, 1] (0 = off)",
        1,
    ),
    Setting(
        "safe_sd_scale",
        float,
        2.0,
        "with safe_delta: the model's SD times this in P(SLA broken) (a GP is overconfident near the cliff)",
        low=1,
        high=10,
        expect="a factor in [1, 10] (1 = the model's SD as it is)",
        cold=1.0,
    ),
    _p(
        "final_margin_pct",
        5.0,
        "the final choice needs estimate + (1 + final_margin_ci) CI half-widths within SLA x (1 - this %)",
        "a margin in % of the SLA in [0, 100)",
        100,
        high_open=True,
        replay=False,
    ),
    _p(
        "final_margin_ci",
        0.0,
        "extra CI half-widths the final choice counts",
        "extra CI half-widths in [0, 10] (0 = the CI as measured)",
        10,
        replay=False,
    ),
    Setting(
        "latency_metric",
        str,
        "log",
        "the scale the model fits the percentile on: log (ln µs) or headroom (SLA / µs)",
        choices=LATENCY_METRICS,
    ),
    Setting(
        "window_mode",
        str,
        "adaptive",
        "fixed: window_s per trial; adaptive: grow until the percentile's CI is within +-window_ci_pct %",
        choices=WINDOW_MODES,
        cold="fixed",
    ),
    Setting(
        "window_ci_pct",
        float,
        5.0,
        "adaptive windows: the CI half-width target",
        low=0,
        high=100,
        low_open=True,
        high_open=True,
        expect="a percentage in (0, 100)",
    ),
    Setting(
        "window_min_s",
        float,
        2.0,
        "adaptive windows: the shortest window (at most window_s)",
        low=0.001,
        high=3600,
        unit="seconds",
    ),
    Setting(
        "window_guard",
        bool,
        True,
        "adaptive windows: end a trial after any chunk whose percentile's CI is wholly above the SLA",
    ),
    Setting(
        "step_down",
        bool,
        True,
        "safe start: once the safe line's next step is a cell measured already, step the frequency down from the "
        "cheapest point measured within the limit instead",
    ),
    Setting(
        "settle_guard",
        bool,
        True,
        "adaptive windows: measure the settle in two halves and end the trial after the second if its "
        "percentile's CI is wholly above the SLA",
    ),
    Setting(
        "refit_every",
        int,
        1,
        "re-optimise the GP's hyperparameters every N-th new trial (or once the data grew 20 %)",
        low=1,
        high=1000,
        unit="trials",
        replay=False,
    ),
    Setting(
        "hyper_iters",
        int,
        0,
        "N > 0: hyperparameters warm-started from the last fit, at most N L-BFGS iterations",
        low=0,
        high=1000,
        expect="0..1000 L-BFGS iterations (0 = off)",
        replay=False,
    ),
    Setting(
        "peak_step",
        bool,
        True,
        "at a load above every one measured within the limit, step from the best point at the highest load",
        replay=False,
        cold=False,
    ),
    _p(
        "hold_max_p",
        0.0,
        "with context: at a load measured within the limit, hold the model's best point without trials if "
        "P(over the limit) <= this (tuner replay: 0.05 in windows under an hour)",
        "a probability in [0, 0.5] (0 = always retune)",
        0.5,
        shown=True,
        daemon_default=0.05,
    ),
    Setting(
        "acquisition",
        str,
        "cei",
        "the next point: cei (largest constrained EI among allowed points), ax (Ax's own), grid (qLogNEI on them)",
        choices=ACQUISITIONS,
        replay=False,
        cold="ax",
    ),
    Setting(
        "refine_step",
        bool,
        False,
        "before a retune stops, one trial at the next longer ITR of the point it would hold",
        daemon=False,
        replay=False,
    ),
    Setting(
        "first_proven",
        bool,
        True,
        "with safe exploration: a retune's first trial is the cheapest point the orderings prove within the limit "
        "at its load (its ITR measured within it at that frequency or a lower one, at that load or above), if any",
        cold=False,
    ),
    Setting(
        "proof_reset",
        bool,
        True,
        "with safe exploration: once a point the orderings proved reads over the SLA, the readings before it prove "
        "no point from now on (the host slowed since them); they stay in the model",
        cold=False,
    ),
    Setting(
        "estimate_guard",
        bool,
        False,
        "with the stopping rule: a retune does not stop while the point it would hold met the SLA by its estimate "
        "only (no trial met it with its CI within the SLA less the margin)",
    ),
    Setting(
        "peak_first",
        bool,
        False,
        "with peak_step: a retune's first trial at a load above every one measured within the limit is the step",
        daemon=False,
        replay=False,
    ),
    Setting(
        "break_step",
        bool,
        False,
        "after a retune's first trials read over the SLA (none within the limit), one frequency step up at that ITR",
        daemon=False,
        replay=False,
    ),
)
