"""The daemon's configuration as dataclasses, one per TOML table, with their defaults; the percentiles and
rewards a policy may name; the `[tuning]` fields handed to the optimiser's `TunerSettings`."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from tuner.optimize.table import TUNER_TABLE, Setting, by_name
from tuner.optimize.table import WINDOW_MODES as WINDOW_MODES  # re-exported: `tuning.window_mode` values


#: Percentiles a policy may target (must be one of `actuators.host.PERCENTILES`).
ALLOWED_PERCENTILES: tuple[float, ...] = (50.0, 90.0, 95.0, 99.0, 99.9)
#: Reward functions used when the optimiser does not publish its own list.
DEFAULT_REWARDS: tuple[str, ...] = ("constrained", "edp", "latency", "sla-linear")


def known_rewards() -> tuple[str, ...]:
    """Reward names the optimiser accepts (`reward.REWARDS` if that module publishes them)."""
    try:
        import reward

        names = getattr(reward, "REWARDS", None) or getattr(reward, "REWARD_NAMES", None)
        if names:
            return tuple(sorted(str(n) for n in names))
    except Exception:  # noqa: BLE001 - fall back to the documented names
        pass
    return DEFAULT_REWARDS


@dataclass(frozen=True)
class HostConfig:
    spec: str = "sim"
    options: dict[str, Any] = field(default_factory=dict)
    mode: str = "tune"  # "observe": measure at the OS's own settings, write nothing, record no trials


#: `[host] mode` values.
HOST_MODES: tuple[str, ...] = ("tune", "observe")


@dataclass(frozen=True)
class KnobBounds:
    """Inclusive bounds; the host's own knob lists are filtered to them."""

    itr_us: tuple[int, int] = (0, 100_000)
    dvfs_ghz: tuple[float, float] = (0.0, 100.0)


@dataclass(frozen=True)
class PolicyConfig:
    reward: str = "constrained"
    sla_us: float = 500.0
    percentile: float = 99.0


def _period_or_never(v: float) -> bool:
    return v == 0 or v >= 1


#: The daemon's own `[tuning]` keys (not the optimiser's): when it retunes and how it guards the held point.
DAEMON_TUNING: tuple[Setting, ...] = tuple(
    replace(row, optimizer=False, replay=False)
    for row in (
        Setting("retune_period_s", float, 3600.0, "scheduled retune period", low=1, expect="a period >= 1 second"),
        Setting(
            "load_change_pct",
            float,
            20.0,
            "retune when the load leaves the tuned band by more than this %",
            low=0,
            high=1000,
            low_open=True,
            expect="a percentage in (0, 1000]",
        ),
        Setting(
            "guardrail_margin_pct",
            float,
            10.0,
            "revert when the percentile exceeds SLA x (1 + this %)",
            low=0,
            high=1000,
            expect="a percentage in [0, 1000]",
        ),
        Setting(
            "idle_qps",
            float,
            100.0,
            "below this load hold the idle point (lowest ITR, lowest frequency) and never retune",
            low=0,
        ),
        Setting(
            "baseline_every_s",
            float,
            0.0,
            "a baseline window at the OS's own settings this often (docs/real-hosts.md)",
            low=0,
            allowed=_period_or_never,
            expect="0 (never) or a period >= 1 second",
        ),
        Setting(
            "retry_max_s",
            float,
            600.0,
            "a failed retune is retried after window_s, the wait doubling up to this",
            low=1,
            high=86_400,
            expect="1..86400 s",
        ),
    )
)
#: Every `[tuning]` key: the optimiser's settings the daemon exposes, then its own.
TUNING_TABLE: tuple[Setting, ...] = tuple(row for row in TUNER_TABLE if row.daemon) + DAEMON_TUNING
_T = by_name(TUNING_TABLE)


@dataclass(frozen=True)
class TuningConfig:
    """The `[tuning]` table: one field per row of `TUNING_TABLE` (defaults: the rows' daemon defaults)."""

    trials: int = _T["trials"].daemon_value
    sobol_trials: int = _T["sobol_trials"].daemon_value
    window_s: float = _T["window_s"].daemon_value
    settle_s: float = _T["settle_s"].daemon_value
    seed: int = _T["seed"].daemon_value
    retune_period_s: float = _T["retune_period_s"].daemon_value
    load_change_pct: float = _T["load_change_pct"].daemon_value
    guardrail_margin_pct: float = _T["guardrail_margin_pct"].daemon_value
    context: bool = _T["context"].daemon_value
    context_max_qps: float = _T["context_max_qps"].daemon_value
    itr_resolution_us: int = _T["itr_resolution_us"].daemon_value
    history_max_trials: int = _T["history_max_trials"].daemon_value
    min_trials: int = _T["min_trials"].daemon_value
    stop_ei_pct: float = _T["stop_ei_pct"].daemon_value
    safe_delta: float = _T["safe_delta"].daemon_value
    safe_radius: float = _T["safe_radius"].daemon_value
    safe_model_error: float = _T["safe_model_error"].daemon_value
    safe_sd_scale: float = _T["safe_sd_scale"].daemon_value
    final_margin_pct: float = _T["final_margin_pct"].daemon_value
    final_margin_ci: float = _T["final_margin_ci"].daemon_value
    latency_metric: str = _T["latency_metric"].daemon_value
    window_mode: str = _T["window_mode"].daemon_value
    window_ci_pct: float = _T["window_ci_pct"].daemon_value
    window_min_s: float = _T["window_min_s"].daemon_value
    window_guard: bool = _T["window_guard"].daemon_value
    refit_every: int = _T["refit_every"].daemon_value
    hyper_iters: int = _T["hyper_iters"].daemon_value
    peak_step: bool = _T["peak_step"].daemon_value
    acquisition: str = _T["acquisition"].daemon_value
    hold_max_p: float = _T["hold_max_p"].daemon_value
    idle_qps: float = _T["idle_qps"].daemon_value
    baseline_every_s: float = _T["baseline_every_s"].daemon_value
    retry_max_s: float = _T["retry_max_s"].daemon_value


def _check_fields() -> None:
    """`TuningConfig`'s fields are `TUNING_TABLE`'s rows, with the row's type (checked once, at import)."""
    fields = {f.name: f.type for f in dataclasses.fields(TuningConfig)}
    rows = {row.name: row.kind.__name__ for row in TUNING_TABLE}
    if fields != rows:
        raise TypeError(f"TuningConfig fields {fields} differ from TUNING_TABLE {rows}")


_check_fields()

#: The `[tuning]` keys the daemon hands its worker's optimiser itself (trials and windows, the seed of each
#: retune), or applies itself (`hold_max_p`: the guardrail holds from the model, the worker's optimiser does not).
PASSED_BY_THE_DAEMON: frozenset[str] = frozenset(
    {"trials", "sobol_trials", "window_s", "settle_s", "seed", "hold_max_p"}
)
#: `TuningConfig` fields passed to the optimiser's `TunerSettings` under the same names.
SETTINGS_FIELDS: tuple[str, ...] = tuple(
    row.name for row in TUNING_TABLE if row.optimizer and row.name not in PASSED_BY_THE_DAEMON
)


@dataclass(frozen=True)
class HistoryConfig:
    """The daemon's trial store (`tuner.store`) and warm start from it."""

    #: Seed each retune's optimiser with the stored trials (always done when `tuning.context` is on).
    warm_start: bool = False
    #: An older daemon's JSON-lines history, imported into the trial store once; None = `<state.dir>/history.jsonl`.
    file: Path | None = None
    #: Newest trials a warm start takes from each source (this host's own, its hardware class's).
    keep_trials: int = 2000
    #: The trial store: "" = `<state.dir>/trials.sqlite`; `postgresql://...` (a fleet) or `sqlite:///path`.
    url: str = ""


@dataclass(frozen=True)
class GrpcConfig:
    listen: str = "unix:///run/tuner/tuner.sock"
    tls_cert: Path | None = None
    tls_key: Path | None = None
    tls_client_ca: Path | None = None
    token_file: Path | None = None


@dataclass(frozen=True)
class Config:
    path: Path | None = None
    host: HostConfig = field(default_factory=HostConfig)
    knobs: KnobBounds = field(default_factory=KnobBounds)
    policy: PolicyConfig = field(default_factory=PolicyConfig)
    tuning: TuningConfig = field(default_factory=TuningConfig)
    state_dir: Path = Path("/var/lib/tuner")
    grpc: GrpcConfig = field(default_factory=GrpcConfig)
    metrics_listen: str | None = "127.0.0.1:9464"
    history: HistoryConfig = field(default_factory=HistoryConfig)

    @property
    def history_path(self) -> Path:
        """An older daemon's history file (`history.file`, default `<state.dir>/history.jsonl`), imported once."""
        return self.history.file if self.history.file is not None else Path(self.state_dir) / "history.jsonl"

    @property
    def warm_start(self) -> bool:
        """Whether retunes are seeded from the history store (warm start, or the contextual model)."""
        return self.history.warm_start or self.tuning.context
