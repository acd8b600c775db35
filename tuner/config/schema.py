"""The daemon's configuration as dataclasses, one per TOML table, their defaults from the declared rows
(`tuner.config.tables`); the `[tuning]` fields handed to the optimiser's `TunerSettings`."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tuner.config.checks import ALLOWED_PERCENTILES as ALLOWED_PERCENTILES  # re-exported
from tuner.config.checks import DEFAULT_REWARDS as DEFAULT_REWARDS
from tuner.config.checks import known_rewards as known_rewards
from tuner.config.tables import HOST_MODES as HOST_MODES
from tuner.config.tables import TUNING_TABLE, default
from tuner.optimize.table import WINDOW_MODES as WINDOW_MODES  # `tuning.window_mode` values
from tuner.optimize.table import by_name


@dataclass(frozen=True)
class HostConfig:
    spec: str = default("host", "spec")
    options: dict[str, Any] = field(default_factory=dict)
    mode: str = default("host", "mode")  # "observe": measure at the OS's own settings, write nothing, record no trials
    server: str = default("host", "server")  # the cache server's kind: memcached or redis (Redis, Valkey)


@dataclass(frozen=True)
class KnobBounds:
    """Inclusive bounds; the host's own knob lists are filtered to them."""

    itr_us: tuple[int, int] = default("knobs", "itr_us")
    dvfs_ghz: tuple[float, float] = default("knobs", "dvfs_ghz")


@dataclass(frozen=True)
class PolicyConfig:
    reward: str = default("policy", "reward")
    sla_us: float = default("policy", "sla_us")
    percentile: float = default("policy", "percentile")


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
    itr_resolution_sla_pct: float = _T["itr_resolution_sla_pct"].daemon_value
    history_max_trials: int = _T["history_max_trials"].daemon_value
    drift_h: float = _T["drift_h"].daemon_value
    expand_ei_pct: float = _T["expand_ei_pct"].daemon_value
    descend_pct: float = _T["descend_pct"].daemon_value
    min_trials: int = _T["min_trials"].daemon_value
    stop_ei_pct: float = _T["stop_ei_pct"].daemon_value
    safe_delta: float = _T["safe_delta"].daemon_value
    safe_limit_delta: float = _T["safe_limit_delta"].daemon_value
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
    settle_guard: bool = _T["settle_guard"].daemon_value
    step_down: bool = _T["step_down"].daemon_value
    refit_every: int = _T["refit_every"].daemon_value
    hyper_iters: int = _T["hyper_iters"].daemon_value
    peak_step: bool = _T["peak_step"].daemon_value
    first_proven: bool = _T["first_proven"].daemon_value
    proof_reset: bool = _T["proof_reset"].daemon_value
    estimate_guard: bool = _T["estimate_guard"].daemon_value
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
    keep_trials: int = default("history", "keep_trials")
    #: The trial store: "" = `<state.dir>/trials.sqlite`; `postgresql://...` (a fleet) or `sqlite:///path`.
    url: str = ""


@dataclass(frozen=True)
class GrpcConfig:
    listen: str = default("grpc", "listen")
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
    state_dir: Path = Path(default("state", "dir"))
    grpc: GrpcConfig = field(default_factory=GrpcConfig)
    metrics_listen: str | None = default("metrics", "listen")
    history: HistoryConfig = field(default_factory=HistoryConfig)
    #: The file's text as read: start-up problems found later are located at their key's line (`locate_problem`).
    source: str = field(default="", repr=False, compare=False)

    @property
    def history_path(self) -> Path:
        """An older daemon's history file (`history.file`, default `<state.dir>/history.jsonl`), imported once."""
        return self.history.file if self.history.file is not None else Path(self.state_dir) / "history.jsonl"

    @property
    def warm_start(self) -> bool:
        """Whether retunes are seeded from the history store (warm start, or the contextual model)."""
        return self.history.warm_start or self.tuning.context
