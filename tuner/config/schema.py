"""The daemon's configuration as dataclasses, one per TOML table, with their defaults; the percentiles and
rewards a policy may name; the `[tuning]` fields handed to the optimiser's `TunerSettings`."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

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


@dataclass(frozen=True)
class TuningConfig:
    trials: int = 30
    sobol_trials: int = 8
    window_s: float = 20.0
    settle_s: float = 1.0
    seed: int = 0
    retune_period_s: float = 3600.0
    load_change_pct: float = 20.0
    guardrail_margin_pct: float = 10.0
    # the long-lived tuner's options (the optimiser's `TunerSettings` fields of the same names and defaults: all on)
    context: bool = True
    context_max_qps: float = 1e6
    itr_resolution_us: int = 16
    history_max_trials: int = 100
    min_trials: int = 2
    stop_ei_pct: float = 1.0
    safe_delta: float = 0.05
    safe_radius: float = 0.2
    safe_model_error: float = 0.0
    safe_sd_scale: float = 2.0
    final_margin_pct: float = 5.0
    final_margin_ci: float = 0.0
    latency_metric: str = "log"
    window_mode: str = "adaptive"
    window_ci_pct: float = 5.0
    window_min_s: float = 2.0
    window_guard: bool = True
    refit_every: int = 1
    hyper_iters: int = 0
    peak_step: bool = True
    acquisition: str = "cei"
    # the daemon's own (not the optimiser's)
    # with context: a load shift inside the loads measured within the limit holds the recent model's best point
    # there, if measured at that load or above and P(over the limit) <= this, instead of retuning
    # (`tuner.optimize.decision.hold_or_retune`, the rule `tuner replay` applies in windows under an hour); 0 = retune
    hold_max_p: float = 0.05
    idle_qps: float = 100.0  # below this load: hold the idle point (lowest ITR, lowest frequency), never retune
    baseline_every_s: float = 0.0  # a baseline window at the OS's own settings this often (0 = never)
    retry_max_s: float = 600.0  # a failed retune is retried after window_s, doubling up to this


#: `tuning.window_mode` values (see `tuner.optimize.windowing`).
WINDOW_MODES: tuple[str, ...] = ("fixed", "adaptive")
#: `TuningConfig` fields passed to the optimiser's `TunerSettings` under the same names.
SETTINGS_FIELDS: tuple[str, ...] = (
    "context",
    "context_max_qps",
    "itr_resolution_us",
    "history_max_trials",
    "min_trials",
    "stop_ei_pct",
    "safe_delta",
    "safe_radius",
    "safe_model_error",
    "safe_sd_scale",
    "final_margin_pct",
    "final_margin_ci",
    "latency_metric",
    "window_mode",
    "window_ci_pct",
    "window_min_s",
    "window_guard",
    "refit_every",
    "hyper_iters",
    "peak_step",
    "acquisition",
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
