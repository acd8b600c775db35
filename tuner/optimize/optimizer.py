"""Bayesian optimisation of ITR x DVFS with Ax's `Client` API (Ax >= 1.x; Sobol start, then a BoTorch GP).

One trial = apply a point -> settle (measured; its energy counts) -> measure a window -> report metrics
with their standard errors to Ax. What Ax models depends on the reward (`reward.REGISTRY`):

* `constrained`: two metrics, `power` (W, minimised) and the latency metric of `tuner.optimize.latscale` (default
  `log_latency` = ln µs of the chosen percentile, capped at 4 x SLA; `latency_metric="headroom"`:
  `latency_headroom` = SLA / µs), with the SLA as its outcome constraint;
* the penalised rewards (`sla-linear`, `edp`, `latency`): one metric `log_reward` = ln R (minimised), plus
  `power` and the latency metric as tracking metrics so `predict` works for every reward.

Not raw µs: tail latency spans orders of magnitude (an overloaded point is 10^4 x the SLA) and a GP on the raw
values is dominated by those outliers; both scales are monotone, so the optimum is unchanged, and the SEM maps
by the delta method. ITR is an integer range over the INDEX into the host's ITR list
thinned to `TunerSettings.itr_resolution_us` (default 8 µs: 2, 10, ..., 1018 -> index 0..127; 2 gives every
value of 2..1022), DVFS an ordered choice of the host's frequencies.

Issue 6 options (off in `TunerSettings()`; on by default in `tuner replay` and the daemon's config, chosen by
the 3-day replay benchmark):

* `context`: a third parameter `load` = min(qps / context_max_qps, 1), pinned per retune with
  `get_next_trials(fixed_parameters=...)`; one `Optimizer` persists across retunes (`begin_retune(qps)`) and
  past trials (`add_history`, attached with `attach_trial`) count toward Ax's Sobol budget, so a warm
  experiment proposes from the GP at once. The model keeps at most `history_max_trials` (oldest dropped).
* `stop_ei_pct`: `should_stop()` ends a retune once the best constrained expected improvement over the grid at
  this load is below that % of the best measured SLA-meeting power (`tuner.optimize.acquisition`).
* `safe_delta`: safe start on a line from the safe corner, then no point whose modelled P(percentile > the
  limit `best` applies, i.e. the SLA less `sla_margin_pct`) exceeds delta is tried, and (`safe_radius`) none
  away from points measured within that limit at this load or above or next to one measured over the SLA
  (`acquisition.supported` / `vetoed`); Ax's proposal is abandoned and the allowed grid point of largest
  constrained EI is tried instead. `safe_sd_scale` multiplies the model's SD in those probabilities.
* `window_mode="adaptive"`: windows sized by `tuner.optimize.windowing.measure_window`; `window_guard` ends one after
  any chunk whose CI is wholly above the SLA.

Ax is imported lazily (it costs seconds); its INFO logging and numerical warnings are kept off the terminal.
"""

from __future__ import annotations

import json
import math
import time
import warnings
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import asdict, dataclass, replace
from typing import Any

from actuators.host import PERCENTILES, Host, KnobSpace, Measurement, OperatingPoint, apply_point
from core.errors import HostError, TunerError
from reward import DEFAULT_REWARD  # chosen by bench/replay.py (README section "replay")
from tuner.optimize.latscale import KINDS as LATENCY_METRICS
from tuner.optimize.latscale import LatencyScale

#: Relative standard error assumed for a window's mean power when the host does not report one: RAPL
#: counts energy exactly, what varies is the process; 1 % of power over a 20 s window is an upper estimate
#: of what the simulated host and the dissertation's 20 s windows show.
POWER_REL_SEM = 0.01
#: Floor for the relative SEM of the percentile (an order-statistic CI can collapse to zero width).
LATENCY_REL_SEM_FLOOR = 0.005

#: `TunerSettings.sla_margin_pct` (default 5): the final choice needs the CI's upper end within SLA x (1 - 5 %).
#: On the simulated host a point chosen from 20 s trials measured up to 10 % higher over the following hour
#: (load burstiness and winner's curse among 30 trials); the margin removed those steady-state violations
#: at ~2.5 % energy (README, section "replay").
#: How `Optimizer.best` decides that a measured trial met the SLA: "ci" = the upper end of the percentile's
#: 95 % order-statistic CI is within the SLA (a point measured just under the SLA in a 20 s window is
#: often over it in the hour that follows); "estimate" = the point estimate is.
SLA_CHECKS = ("ci", "estimate")
#: `TunerSettings.window_mode`: "fixed" = `window_s` per trial; "adaptive" = grow until the percentile's CI is
#: within +-`window_ci_pct` % (at most `window_s`), via `tuner.optimize.windowing.measure_window`.
WINDOW_MODES = ("fixed", "adaptive")
#: A completed trial whose measured load differs from the load its suggestion was pinned at by more than this
#: (normalised units: 0.5 % of `context_max_qps`) is re-filed in Ax at its measured load.
LOAD_TOLERANCE = 5e-3
#: Abandoned Ax trials (safety substitutions, re-filed loads) tolerated before the experiment is rebuilt without
#: them (`Optimizer._prune`).
ABANDONED_MAX = 12
#: `acquisition.supported`: moving to a LOWER ITR than the measured point counts this many times its distance.
#: At a fixed frequency a lower ITR means more interrupts and more CPU per request, so latency climbs into
#: saturation steeply that way, while a higher ITR only adds a bounded batching delay (dissertation ch. 5).
SAFE_ITR_DOWN_WEIGHT = 3.0
#: `acquisition.vetoed`: a point measured over the SLA rules out the points within this normalised ITR distance
#: (0.06 of the range: ~60 µs on ixgbe) at its frequency or below, at its load or above.
SAFE_VETO_RADIUS = 0.06
#: Safe exploration's evidence rule (`TunerSettings.safe_radius`): a point measured within the limit at load L'
#: vouches for its neighbourhood at loads up to L' / (1 - SAFE_LOAD_TOL), ~11 % above (day-to-day noise).
SAFE_LOAD_TOL = 0.10


def _finite_above(v: Any, lo: float, strict: bool = True) -> bool:
    if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v):
        return False
    return v > lo if strict else v >= lo


_STATUS_COMPLETED = "completed"
_STATUS_FAILED = "failed"


def _pct_text(pct: float) -> str:
    return f"p{pct:g}"


@dataclass(frozen=True)
class Objective:
    """What to optimise: a reward by name, the latency percentile it uses, and the SLA (µs)."""

    reward: str = DEFAULT_REWARD
    percentile: float = 99.0
    sla_us: float = 500.0

    def __post_init__(self) -> None:
        from reward import REGISTRY

        if self.reward not in REGISTRY:
            raise TunerError(f"unknown reward {self.reward!r}: expected one of {', '.join(sorted(REGISTRY))}")
        try:
            pct = float(self.percentile)
        except (TypeError, ValueError):
            pct = math.nan
        if pct not in PERCENTILES:
            allowed = ", ".join(f"{p:g}" for p in PERCENTILES)
            raise TunerError(f"unknown percentile {self.percentile!r}: expected one of {allowed}")
        object.__setattr__(self, "percentile", pct)
        try:
            sla = float(self.sla_us)
        except (TypeError, ValueError):
            sla = math.nan
        if not (sla > 0 and math.isfinite(sla)):
            raise TunerError(f"SLA must be a positive number of µs, got {self.sla_us!r}")
        object.__setattr__(self, "sla_us", sla)

    def describe(self) -> str:
        return f"{self.reward}, {_pct_text(self.percentile)} <= {self.sla_us:g} µs"

    def met(self, m: Measurement) -> bool:
        """Whether the measured percentile (point estimate) is within the SLA."""
        return m.percentile(self.percentile) <= self.sla_us

    def violated_confidently(self, m: Measurement) -> bool:
        """Whether even the lower end of the percentile's 95 % CI is above the SLA (a significant violation)."""
        ci = m.latency_ci_us.get(self.percentile)
        low = ci[0] if ci is not None else m.percentile(self.percentile)
        return min(low, m.percentile(self.percentile)) > self.sla_us

    def met_confidently(self, m: Measurement) -> bool:
        """Whether the upper end of the percentile's 95 % CI is within the SLA."""
        ci = m.latency_ci_us.get(self.percentile)
        high = ci[1] if ci is not None else m.percentile(self.percentile)
        return max(high, m.percentile(self.percentile)) <= self.sla_us


@dataclass(frozen=True)
class TunerSettings:
    """How a retune runs: trials (Sobol first), settle and window seconds, and the seed."""

    trials: int = 30
    sobol_trials: int = 8
    settle_s: float = 1.0
    window_s: float = 20.0
    seed: int = 0
    itr_resolution_us: int = 8
    torch_threads: int = 1
    sla_check: str = "ci"
    sla_margin_pct: float = 5.0
    # issue 6: off in this dataclass (TunerSettings() is the dissertation's cold tuner, one retune per
    # Optimizer); the product entry points -- `tuner replay` (preset "warm") and the daemon's config -- turn
    # them on, because the 3-day replay benchmark shows each helps (README, section "replay")
    context: bool = False
    context_max_qps: float = 1e6
    # Ax's time per suggestion grows with the trials in the model (GP fit, qLogNEI's baseline): 100, not the
    # 400 first agreed, keeps near the 0.5 s median target (bench/suggest.py) and still holds a day of retunes.
    history_max_trials: int = 100
    min_trials: int = 2
    stop_ei_pct: float = 0.0
    safe_delta: float = 0.0
    # with safe_delta > 0: a point is tried only within this normalised knob distance of one measured within
    # the limit at a load >= this one less SAFE_LOAD_TOL (acquisition.supported); 0 = the model's P alone
    safe_radius: float = 0.2
    # with safe_delta > 0: an SD of ln(percentile) added (in quadrature) to the model's own in P(SLA broken), for
    # the model's error near the SLA, where latency bends faster than a smooth GP; 0 = the model's SD alone
    safe_model_error: float = 0.0
    # with safe_delta > 0: the model's predictive SD is multiplied by this in P(SLA broken) and P(over the limit):
    # a GP fitted to a latency surface with a saturation cliff is overconfident next to the cliff (3-day replay,
    # 3 seeds: of 226 trials it passed, 9 measured over the SLA where its P summed to 0.1; README "replay")
    safe_sd_scale: float = 1.0
    # the scale the GP models the percentile on (`tuner.optimize.latscale`): "log" (ln µs) or "headroom" (SLA / µs)
    latency_metric: str = "log"
    window_mode: str = "fixed"
    window_ci_pct: float = 5.0
    window_min_s: float = 2.0
    # adaptive windows: the guard (`WindowPolicy.abort_above_us` = the SLA) ends a window after any chunk whose
    # percentile's CI is wholly above the SLA
    window_guard: bool = True

    def __post_init__(self) -> None:
        for name in (
            "trials",
            "sobol_trials",
            "itr_resolution_us",
            "torch_threads",
            "history_max_trials",
            "min_trials",
        ):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, int) or v < 1:
                raise TunerError(f"{name} must be an integer >= 1, got {v!r}")
        if not (self.settle_s >= 0 and math.isfinite(self.settle_s)):
            raise TunerError(f"settle_s must be >= 0 seconds, got {self.settle_s!r}")
        if not (self.window_s > 0 and math.isfinite(self.window_s)):
            raise TunerError(f"window_s must be > 0 seconds, got {self.window_s!r}")
        if isinstance(self.seed, bool) or not isinstance(self.seed, int):
            raise TunerError(f"seed must be an integer, got {self.seed!r}")
        if not (0.0 <= self.sla_margin_pct < 100.0):
            raise TunerError(f"sla_margin_pct must be in [0, 100), got {self.sla_margin_pct!r}")
        if self.sla_check not in SLA_CHECKS:
            raise TunerError(f"sla_check {self.sla_check!r}: expected one of {', '.join(SLA_CHECKS)}")
        for name in ("context", "window_guard"):
            if not isinstance(getattr(self, name), bool):
                raise TunerError(f"{name} must be true or false, got {getattr(self, name)!r}")
        if not _finite_above(self.context_max_qps, 0.0):
            raise TunerError(f"context_max_qps must be a number > 0 (requests/s), got {self.context_max_qps!r}")
        if not (_finite_above(self.stop_ei_pct, 0.0, strict=False) and self.stop_ei_pct < 100.0):
            raise TunerError(f"stop_ei_pct must be in [0, 100) (0 = off), got {self.stop_ei_pct!r}")
        if not (_finite_above(self.safe_delta, 0.0, strict=False) and self.safe_delta < 1.0):
            raise TunerError(f"safe_delta must be a probability in [0, 1) (0 = off), got {self.safe_delta!r}")
        if not (_finite_above(self.safe_radius, 0.0, strict=False) and self.safe_radius <= 2.0):
            raise TunerError(
                f"safe_radius must be in [0, 2] (normalised knob distance; 0 = off), got {self.safe_radius!r}"
            )
        if not (_finite_above(self.safe_model_error, 0.0, strict=False) and self.safe_model_error <= 1.0):
            raise TunerError(
                f"safe_model_error must be in [0, 1] (SD of ln latency; 0 = off), got {self.safe_model_error!r}"
            )
        if not (_finite_above(self.safe_sd_scale, 1.0, strict=False) and self.safe_sd_scale <= 10.0):
            raise TunerError(
                f"safe_sd_scale must be in [1, 10] (1 = the model's SD as it is), got {self.safe_sd_scale!r}"
            )
        if self.latency_metric not in LATENCY_METRICS:
            raise TunerError(f"latency_metric {self.latency_metric!r}: expected one of {', '.join(LATENCY_METRICS)}")
        if self.window_mode not in WINDOW_MODES:
            raise TunerError(f"window_mode {self.window_mode!r}: expected one of {', '.join(WINDOW_MODES)}")
        if not (_finite_above(self.window_ci_pct, 0.0) and self.window_ci_pct < 100.0):
            raise TunerError(f"window_ci_pct must be in (0, 100), got {self.window_ci_pct!r}")
        if not _finite_above(self.window_min_s, 0.0):
            raise TunerError(f"window_min_s must be > 0 seconds, got {self.window_min_s!r}")
        if self.window_mode == "adaptive" and self.window_min_s > self.window_s:
            raise TunerError(
                f"window_min_s ({self.window_min_s:g} s) must not exceed window_s "
                f"({self.window_s:g} s, the adaptive window's maximum)"
            )

    def load_of(self, qps: float) -> float:
        """The model's `load` input for an offered load: min(qps / context_max_qps, 1), at least 0."""
        return min(max(float(qps), 0.0) / self.context_max_qps, 1.0)


def met_limit_us(sla_us: float, settings: TunerSettings) -> float:
    """The latency a measured point must stay under for `Optimizer.best` to take it: the SLA less
    `sla_margin_pct` with `sla_check="ci"`, else the SLA."""
    if settings.sla_check == "ci":
        return sla_us * (1 - settings.sla_margin_pct / 100.0)
    return sla_us


def itr_candidates(itr_us: Sequence[int], resolution_us: int) -> tuple[int, ...]:
    """The host's ITR values thinned to at least `resolution_us` apart, starting from the lowest (the safe end).

    Ax enumerates every candidate when it optimises the acquisition over this discrete space, so its cost
    scales with their number: 511 x 18 at 2 µs vs 128 x 18 at 8 µs (see README, section "replay").
    """
    out: list[int] = []
    for v in itr_us:
        if not out or v >= out[-1] + resolution_us:
            out.append(v)
    return tuple(out)


@dataclass(frozen=True)
class TrialRecord:
    """One trial: the point, the load it ran at, and what happened.

    `reward` is the reward's value (W for `constrained`); `settle` is the settle-period measurement (its
    energy and time count against the exploration), `compute_s` the optimiser's compute for the trial (the
    stopping-rule check before it, Ax's suggestion and the safety filter).
    With safe exploration on, `p_violation` is the model's P(percentile > SLA) at this point and load when it
    was chosen (None: no model yet, e.g. a safe-start step) and `note` says why the point was tried when it
    is not Ax's own proposal.
    """

    index: int
    point: OperatingPoint
    qps: float
    status: str  # "completed" | "failed"
    measurement: Measurement | None
    reward: float | None
    error: str | None
    settle: Measurement | None = None
    compute_s: float = 0.0
    p_violation: float | None = None
    note: str = ""


@dataclass(frozen=True)
class Decision:
    """The point a retune settles on, its measured window, whether that met the SLA, and why it was chosen."""

    point: OperatingPoint
    measurement: Measurement | None
    met_sla: bool
    reason: str


@dataclass(frozen=True)
class Prediction:
    """Model mean and SEM of the objective's percentile latency (µs) and power (W) at a point."""

    latency_us: float
    latency_sem: float
    power_w: float
    power_sem: float
    from_measured: bool


# ----------------------------------------------------------------------------------------------- helpers

_QUIETED = False


def _quiet_ax() -> None:
    """Keep Ax's INFO logging off the terminal (its stream handler is process-wide; done once)."""
    global _QUIETED
    if _QUIETED:
        return
    import logging

    from ax.utils.common.logger import set_ax_logger_levels, set_stderr_log_level

    set_stderr_log_level(logging.ERROR)
    set_ax_logger_levels(logging.ERROR)
    _QUIETED = True


@contextmanager
def _no_warnings(threads: int | None = None) -> Iterator[None]:
    """Silence numerical/input warnings from GPyTorch/BoTorch/Ax while they fit and optimise; with `threads`,
    run torch on that many intra-op threads meanwhile (restored after)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        if threads is None:
            yield
            return
        import torch

        before = torch.get_num_threads()
        torch.set_num_threads(threads)
        try:
            yield
        finally:
            torch.set_num_threads(before)


#: Candidates per batch when Ax enumerates the (ITR x DVFS) grid to maximise the acquisition. BoTorch's
#: default (2048, halved per model output) broadcasts the training covariance over the whole batch; batches of
#: 64 stay in cache and cut the acquisition time ~2x (150 trials in the model: 2.0 s -> 0.8 s on this box,
#: bench/suggest.py) -- every candidate is still evaluated, so the proposal is the same.
ACQF_BATCH = 64


def _small_acqf_batches(client: Any) -> None:
    """Set `ACQF_BATCH` on the model-based node of the client's generation strategy."""
    for node in client._generation_strategy._nodes:
        for spec in node.generator_specs:
            if spec.generator_enum.value == "BoTorch":
                opts = dict(spec.generator_gen_kwargs.get("model_gen_options") or {})
                opts["optimizer_kwargs"] = {**opts.get("optimizer_kwargs", {}), "max_batch_size": ACQF_BATCH}
                spec.generator_gen_kwargs = {**spec.generator_gen_kwargs, "model_gen_options": opts}


def _lean(m: Measurement | None) -> Measurement | None:
    """`m` without its latency distribution: a trial record keeps the percentiles and CIs, not ~240 kB of
    samples (a long-lived contextual optimiser holds hundreds of records)."""
    if m is None or getattr(m, "latency_dist", None) is None:
        return m
    return replace(m, latency_dist=None)


def power_sem(m: Measurement) -> float:
    """SEM of a window's mean power: the host's own if it reports one (`power_sem_w`), else `POWER_REL_SEM`."""
    own = getattr(m, "power_sem_w", None)
    if own is not None and math.isfinite(own) and own > 0:
        return float(own)
    return max(POWER_REL_SEM * m.power_w, 1e-6)


def latency_sem(m: Measurement, pct: float) -> float | None:
    """SEM of the window's percentile from its order-statistic CI, floored at `LATENCY_REL_SEM_FLOOR`;
    None when the latency source gives no CI (`Measurement.ci_known` False: Ax then infers the noise)."""
    value = m.percentile(pct)
    try:
        sem = m.percentile_sem(pct)
    except KeyError:
        sem = 0.0
    if sem is None:
        return None
    return max(sem, LATENCY_REL_SEM_FLOOR * abs(value), 1e-9)


def _opt_float(v: Any) -> float | None:
    return None if v is None else float(v)


def _record_to_dict(r: TrialRecord) -> dict[str, Any]:
    return {
        "index": r.index,
        "point": {"itr_us": r.point.itr_us, "dvfs_ghz": r.point.dvfs_ghz},
        "qps": r.qps,
        "status": r.status,
        "measurement": None if r.measurement is None else r.measurement.to_dict(),
        "reward": r.reward,
        "error": r.error,
        "settle": None if r.settle is None else r.settle.to_dict(),
        "compute_s": r.compute_s,
        "p_violation": r.p_violation,
        "note": r.note,
    }


def _record_from_dict(d: dict[str, Any]) -> TrialRecord:
    return TrialRecord(
        index=int(d["index"]),
        point=OperatingPoint(int(d["point"]["itr_us"]), float(d["point"]["dvfs_ghz"])),
        qps=float(d["qps"]),
        status=str(d["status"]),
        measurement=None if d.get("measurement") is None else Measurement.from_dict(d["measurement"]),
        reward=None if d.get("reward") is None else float(d["reward"]),
        error=d.get("error"),
        settle=None if d.get("settle") is None else Measurement.from_dict(d["settle"]),
        compute_s=float(d.get("compute_s", 0.0)),
        p_violation=None if d.get("p_violation") is None else float(d["p_violation"]),
        note=str(d.get("note") or ""),
    )


# --------------------------------------------------------------------------------------------- optimiser


@dataclass
class _Pending:
    """A suggested trial awaiting its result: the point, the Ax trial behind it and why it was chosen."""

    point: OperatingPoint
    compute_s: float
    ax_index: int
    load: float | None = None
    p_violation: float | None = None
    note: str = ""
    line_t: float | None = None


class Optimizer:
    """An Ax experiment over a host's knob space for one objective; records every trial it hands out.

    Default settings: one experiment per retune (create a fresh one each time), exactly the dissertation's
    cold tuner. With `settings.context` the offered load is a third model input, `load` in [0, 1], pinned
    at the retune's load on every suggestion: one optimiser then persists across retunes and every earlier
    trial, at any load, informs the model (retunes after the first start from the GP, not Sobol, because
    Ax counts existing trials toward its initialisation budget). `add_history` seeds it with past trials.
    `settings.stop_ei_pct` turns on the stopping rule (`should_stop`), `settings.safe_delta` the safety
    filter (see `suggest`).

    Trial numbers (`TrialRecord.index`) are this optimiser's own, counted from 0 per `suggest`; they equal
    Ax's trial indices unless history, safety substitutions or data pruning added Ax trials of their own.
    """

    def __init__(self, space: KnobSpace, objective: Objective, settings: TunerSettings, name: str = "tuner") -> None:
        self.space = space
        self.objective = objective
        self.settings = settings
        self.name = name
        self._itr = itr_candidates(space.itr_us, settings.itr_resolution_us)
        self._records: dict[int, TrialRecord] = {}
        self._pending: dict[int, _Pending] = {}
        self._line_t: dict[int, float] = {}  # safe-start trials: their position on the safe line
        self._grid_cache: tuple[Any, dict[str, Any] | None] | None = None  # (key, last full-grid prediction)
        self._stop_s = 0.0  # compute of the stopping rule since the last suggestion
        self._evidence_cache: tuple[Any, tuple[Any, Any, Any, Any]] | None = None
        self._next_index = 0
        self._retune_start: int | None = None
        self._load: float | None = None
        self._client: Any = None
        self._client = self._new_client()

    # -- Ax set-up
    def _parameters(self) -> list[Any]:
        from ax import ChoiceParameterConfig, RangeParameterConfig

        params: list[Any] = []
        if len(self._itr) > 1:
            params.append(RangeParameterConfig(name="itr_index", bounds=(0, len(self._itr) - 1), parameter_type="int"))
        if len(self.space.dvfs_ghz) > 1:
            params.append(
                ChoiceParameterConfig(
                    name="dvfs_ghz",
                    values=[float(f) for f in self.space.dvfs_ghz],
                    parameter_type="float",
                    is_ordered=True,
                )
            )
        if not params:
            raise TunerError("the host offers a single ITR value and a single frequency: nothing to tune")
        if self.settings.context:
            params.append(RangeParameterConfig(name="load", bounds=(0.0, 1.0), parameter_type="float"))
        return params

    def _init_budget(self) -> int:
        return min(self.settings.sobol_trials, self.settings.trials)

    def _new_client(self) -> Any:
        from ax import Client

        _quiet_ax()
        client = Client(random_seed=self.settings.seed)
        with _no_warnings():
            client.configure_experiment(parameters=self._parameters(), name=self.name)
            scale = self._scale
            if self._reward.constrained:
                client.configure_optimization(objective="-power", outcome_constraints=[scale.constraint()])
            else:
                client.configure_optimization(objective="-log_reward")
                client.configure_tracking_metrics(["power", scale.metric])
            # Existing (attached, earlier-retune) trials count toward the Sobol budget
            # (use_existing_trials_for_initialization, Ax's default), so a warm experiment starts from the GP.
            client.configure_generation_strategy(
                method="fast",
                initialization_budget=self._init_budget(),
                initialization_random_seed=self.settings.seed,
                initialize_with_center=False,
                use_existing_trials_for_initialization=True,
                allow_exceeding_initialization_budget=True,
            )
            _small_acqf_batches(client)
        return client

    @property
    def _scale(self) -> LatencyScale:
        return LatencyScale(self.settings.latency_metric, self.objective.sla_us)

    @property
    def _reward(self) -> Any:
        from reward import get_reward

        return get_reward(self.objective.reward)

    def _to_point(self, params: dict[str, Any]) -> OperatingPoint:
        itr = self._itr[int(params["itr_index"])] if "itr_index" in params else self._itr[0]
        dvfs = self.space.check_dvfs(params["dvfs_ghz"]) if "dvfs_ghz" in params else self.space.dvfs_ghz[0]
        return OperatingPoint(itr, dvfs)

    def _to_params(self, point: OperatingPoint, load: float | None = None) -> dict[str, Any]:
        checked = self.space.check(point)
        params: dict[str, Any] = {}
        if len(self._itr) > 1:  # off-grid ITR values are predicted at the nearest grid value
            params["itr_index"] = min(range(len(self._itr)), key=lambda i: (abs(self._itr[i] - checked.itr_us), i))
        if len(self.space.dvfs_ghz) > 1:
            params["dvfs_ghz"] = float(checked.dvfs_ghz)
        if self.settings.context:
            at = load if load is not None else self._load
            params["load"] = float(at) if at is not None else 0.0
        return params

    # -- grid (ITR candidates x frequencies) in normalised coordinates
    def _grid(self) -> list[tuple[int, int]]:
        return [(i, j) for i in range(len(self._itr)) for j in range(len(self.space.dvfs_ghz))]

    def _grid_point(self, cell: tuple[int, int]) -> OperatingPoint:
        return OperatingPoint(self._itr[cell[0]], self.space.dvfs_ghz[cell[1]])

    def _coords(self, cells: Sequence[tuple[int, int]]) -> Any:
        import numpy as np

        ni, nj = max(len(self._itr) - 1, 1), max(len(self.space.dvfs_ghz) - 1, 1)
        return np.array([(i / ni, j / nj) for i, j in cells], dtype=float).reshape(-1, 2)

    def _cell_at(self, u: tuple[float, float]) -> tuple[int, int]:
        ni, nj = len(self._itr) - 1, len(self.space.dvfs_ghz) - 1
        return int(round(u[0] * ni)), int(round(u[1] * nj))

    def _cell_of(self, point: OperatingPoint) -> tuple[int, int]:
        i = min(range(len(self._itr)), key=lambda k: (abs(self._itr[k] - point.itr_us), k))
        j = self.space.dvfs_ghz.index(self.space.check_dvfs(point.dvfs_ghz))
        return i, j

    def _grid_model(
        self, load: float | None, *, refit: bool, cells: list[tuple[int, int]] | None = None
    ) -> dict[str, Any] | None:
        """Model predictions over the grid (or `cells` of it) at `load`: arrays mu/sd of the latency metric
        (`tuner.optimize.latscale`) and of power, P(SLA broken) and P(over the limit `best` applies), the safety gate's
        verdict; None while no predictive model is fitted (Sobol phase)."""
        import numpy as np

        gs = self._client._generation_strategy
        observed = tuple(self._observed())
        # the whole grid at one load is asked twice per trial (stopping rule, then safety filter) of the same
        # fit: Ax refits only when the data changed, so the data (with the load and the cells) key the answer
        key = (
            (id(self._client), observed, load, None if cells is None else tuple(cells))
            if cells is None or len(cells) > 1
            else None
        )
        if key is not None and self._grid_cache is not None and self._grid_cache[0] == key:
            return self._grid_cache[1]
        with _no_warnings(self.settings.torch_threads):
            if refit:
                if len(observed) < self._init_budget():
                    return None  # Ax would still be in its Sobol phase: no model to ask
                # Ax's public "fit outside gen": moves past Sobol if due and refits only if the data changed
                # (the next suggestion then reuses this fit).
                gs.fit(experiment=self._client._experiment)
            cells = self._grid() if cells is None else list(cells)
            params = [self._cell_params(c, load) for c in cells]
            try:
                preds = self._client.predict(params)
            except Exception:  # noqa: BLE001 - Ax raises until a predictive model is fitted
                return None
        scale = self._scale
        if not preds or scale.metric not in preds[0] or "power" not in preds[0]:
            return None
        mu = np.array([p[scale.metric][0] for p in preds], dtype=float)
        sd = np.array([p[scale.metric][1] for p in preds], dtype=float)
        pw = np.array([p["power"][0] for p in preds], dtype=float)
        pw_sd = np.array([p["power"][1] for p in preds], dtype=float)
        # both from the model's SD times `safe_sd_scale`; P(SLA broken) also with `safe_model_error` added in
        # quadrature; P(over the limit `best` applies) is also the constrained EI's feasibility
        sdk = sd * self.settings.safe_sd_scale
        pv = scale.prob_over(mu, sdk, self.objective.sla_us, self.settings.safe_model_error)
        p_unmet = scale.prob_over(mu, sdk, self._met_limit_us())
        out = {
            "cells": cells,
            "mu": mu,
            "sd": sd,
            "power": pw,
            "power_sd": np.nan_to_num(pw_sd, nan=0.0),
            "p_violation": pv,
            "p_unmet": p_unmet,
            "unsafe": self._unsafe(pv, p_unmet),
        }
        if key is not None:
            self._grid_cache = (key, out)
        return out

    def _met_limit_us(self) -> float:
        """`met_limit_us` of this objective and settings. Used by the expected improvement, the safety filter
        and the adaptive window: exploring a point likely over this limit can only cost (`best` would never
        take it), and on the simulated host gating on the SLA itself let ~10-25 % of the warm tuner's trial
        time run above the SLA (README, section "replay")."""
        return met_limit_us(self.objective.sla_us, self.settings)

    def _unsafe(self, pv: Any, p_unmet: Any) -> Any:
        """The safety gate's verdict per cell: P(SLA broken) > δ or P(over the limit `best` applies) > δ (trying a
        point `best` could never take only costs), as `_grid_model` computes them (`safe_sd_scale`,
        `safe_model_error`)."""
        import numpy as np

        delta = self.settings.safe_delta
        if delta <= 0:
            return np.zeros(np.shape(pv), dtype=bool)
        return (pv > delta) | (p_unmet > delta)

    def _ei(self, grid: dict[str, Any], best_w: float) -> Any:
        """Constrained EI of one more trial per grid cell: EI of power below `best_w` x P(percentile within the
        limit `best` applies); with safe exploration, 0 at cells the filter would never let us try."""
        from tuner.optimize import acquisition

        ei = acquisition.constrained_ei(grid["power"], grid["power_sd"], best_w, grid["p_unmet"])
        if self.settings.safe_delta > 0:
            ei = ei * ~grid["unsafe"]
        return ei

    def _cell_params(self, cell: tuple[int, int], load: float | None) -> dict[str, Any]:
        params: dict[str, Any] = {}
        if len(self._itr) > 1:
            params["itr_index"] = cell[0]
        if len(self.space.dvfs_ghz) > 1:
            params["dvfs_ghz"] = float(self.space.dvfs_ghz[cell[1]])
        if self.settings.context:
            params["load"] = float(load if load is not None else 0.0)
        return params

    # -- retunes
    def begin_retune(self, qps: float) -> None:
        """Start a retune at offered load `qps`: `best`/`retune_trials`/`should_stop` consider only trials from
        here on; in context mode every suggestion is pinned at load = min(qps / context_max_qps, 1)."""
        try:
            q = float(qps)
        except (TypeError, ValueError):
            q = math.nan
        if self.settings.context and not (math.isfinite(q) and q >= 0):
            raise TunerError(f"begin_retune needs the offered load in requests/s (>= 0), got {qps!r}")
        self._retune_start = self._next_index
        self._load = self.settings.load_of(q) if self.settings.context else None
        self._stop_s = 0.0

    def retune_trials(self) -> list[TrialRecord]:
        """Trials reported since the last `begin_retune` (all of them if it was never called)."""
        start = self._retune_start or 0
        return [r for r in self.trials() if r.index >= start]

    def add_history(self, records: Sequence[TrialRecord]) -> int:
        """Attach completed past trials (each at its own load) to the experiment as data; returns how many were
        used. Failed ones, ones without a measurement, points the host lacks, and windows Ax cannot model are
        skipped; only the newest `history_max_trials` are kept. Metrics are recomputed for this objective."""
        if self._pending:
            raise TunerError("add_history: report the pending trials first")
        usable: list[tuple[dict[str, Any], dict[str, Any]]] = []
        for r in records:
            m = r.measurement
            if r.status != _STATUS_COMPLETED or m is None:
                continue
            try:
                point = self.space.check(r.point)
                data = self.metrics(m)
            except (TunerError, ValueError, KeyError):
                continue
            qps = r.qps if math.isfinite(r.qps) else m.offered_qps
            if self.settings.context and not (math.isfinite(qps) and qps >= 0):
                continue
            usable.append((self._to_params(point, self.settings.load_of(qps) if self.settings.context else None), data))
        usable = usable[-self.settings.history_max_trials :]
        with _no_warnings():
            for params, data in usable:
                ax_index = self._client.attach_trial(parameters=params)
                self._client.complete_trial(trial_index=ax_index, raw_data=data)
        self._prune()
        return len(usable)

    def _observed(self) -> list[int]:
        from ax.core.base_trial import TrialStatus

        return sorted(self._client._experiment.trial_indices_by_status[TrialStatus.COMPLETED])

    def _prune(self) -> None:
        """Keep the model's data within `history_max_trials`: past the bound, rebuild the experiment from the
        newest 3/4 of the bound (oldest dropped first; the slack amortises the rebuild). Also rebuilt (same
        trials) when more than `ABANDONED_MAX` abandoned safety substitutions piled up: Ax keeps abandoned arms
        as pending points forever, and each one is a fantasy in every later acquisition."""
        from ax.core.base_trial import TrialStatus

        bound = self.settings.history_max_trials
        done = self._observed()
        abandoned = len(self._client._experiment.trial_indices_by_status[TrialStatus.ABANDONED])
        if self._pending or (len(done) <= bound and abandoned <= ABANDONED_MAX):
            return
        keep = done[-max(1, (3 * bound) // 4) :] if len(done) > bound else done
        exp = self._client._experiment
        df = exp.lookup_data(trial_indices=keep).df
        client = self._new_client()
        with _no_warnings():
            for ti in keep:
                rows = df[df["trial_index"] == ti]
                raw: dict[str, float | tuple[float, float]] = {}
                for _, row in rows.iterrows():
                    sem = row["sem"]
                    raw[str(row["metric_name"])] = (
                        float(row["mean"])
                        if sem is None or not math.isfinite(sem)
                        else (float(row["mean"]), float(sem))
                    )
                ni = client.attach_trial(parameters=dict(exp.trials[ti].arm.parameters))
                client.complete_trial(trial_index=ni, raw_data=raw)
        self._client = client

    # -- trials
    def suggest(self) -> tuple[int, OperatingPoint]:
        """Ask Ax for the next point; returns (trial index, point). The trial is pending until completed/failed.

        Context mode pins `load` at the retune's load. With `safe_delta` > 0: before a model exists the point
        is the next step on the safe line (from the lowest-ITR/highest-DVFS corner toward the centre, outward
        while trials meet the limit, bisecting once one broke it) instead of Sobol; afterwards, an Ax proposal
        the safety filter refuses (`_safety_filter`: the model's P of breaking the SLA or the limit `best`
        applies > `safe_delta`, or no measured evidence near it) is abandoned in Ax and the allowed grid point
        of largest constrained expected improvement (as in `should_stop`; ties and no-EI cases: the allowed
        point closest to the proposal in normalised knob coordinates) is attached and tried instead; the
        record's `note` says so and `p_violation` holds the tried point's modelled probability.
        """
        if self.settings.context and self._load is None:
            raise TunerError("context mode: call begin_retune(qps) before suggest()")
        t0 = time.perf_counter()
        self._prune()
        safe = self.settings.safe_delta > 0
        if safe and len(self._observed()) < self._init_budget():
            pend = self._safe_start()
        else:
            with _no_warnings(self.settings.torch_threads):
                if self.settings.context:
                    trials = self._client.get_next_trials(max_trials=1, fixed_parameters={"load": self._load})
                else:
                    trials = self._client.get_next_trials(max_trials=1)
            if not trials:
                raise TunerError("Ax generated no trial (search space exhausted?)")
            ((ax_index, params),) = trials.items()
            pend = _Pending(self._to_point(params), 0.0, ax_index, self._load)
            if safe:
                pend = self._safety_filter(pend)
        pend.compute_s = time.perf_counter() - t0 + self._stop_s
        self._stop_s = 0.0
        index = self._next_index
        self._next_index += 1
        self._pending[index] = pend
        if pend.line_t is not None:
            self._line_t[index] = pend.line_t
        return index, pend.point

    def _attach(self, cell: tuple[int, int]) -> int:
        with _no_warnings():
            return int(self._client.attach_trial(parameters=self._cell_params(cell, self._load)))

    def _safe_start(self, this_retune: bool = False) -> _Pending:
        """The next safe-line point (no model yet), attached to Ax as a trial of its own; `this_retune`: step
        from this retune's own line trials only (the model has no safe point at this load)."""
        from tuner.optimize import acquisition

        tried = []
        limit = self._met_limit_us()  # a step over it could never be chosen: it bounds the line like the SLA
        start = (self._retune_start or 0) if this_retune else -1
        for i, t in sorted(self._line_t.items()):
            if i < start:
                continue
            r = self._records.get(i)
            if r is not None and r.status == _STATUS_COMPLETED and r.measurement is not None:
                ratio = r.measurement.percentile(self.objective.percentile) / limit
                tried.append((t, ratio <= 1.0, ratio))
        n = self._init_budget()
        t = acquisition.next_line_t(tried, 1.0 / max(n - 1, 1))
        cell = self._cell_at(acquisition.line_point(t))
        ax_index = self._attach(cell)
        note = (
            f"safe start (no model yet): step {len(tried) + 1} of {n} on the line from the safe corner "
            f"toward the centre, t={t:.3f}"
        )
        return _Pending(self._grid_point(cell), 0.0, ax_index, self._load, None, note, t)

    def _safety_filter(self, pend: _Pending) -> _Pending:
        """Keep Ax's proposal if the gate passes it (`_unsafe`) and it is near evidence (`_supported`), else
        substitute the allowed cell of largest constrained EI (or the closest allowed one)."""
        import numpy as np

        from tuner.optimize import acquisition

        delta = self.settings.safe_delta
        prop = self._cell_of(pend.point)
        evidence = self._evidence()
        # Ax just fitted the model on all data to propose; ask it about the proposal first (cheap), and about
        # the cells near evidence (the whole grid, 128 x 18 cells, costs ~0.5 s) only if the proposal fails
        one = self._grid_model(self._load, refit=False, cells=[prop])
        near = bool(self._supported([prop], evidence)[0])
        if one is not None and not one["unsafe"][0] and near:
            pend.p_violation = float(one["p_violation"][0])
            return pend
        with _no_warnings():
            self._client.mark_trial_abandoned(trial_index=pend.ax_index)
        if one is None:  # no predictive model (Ax still in its Sobol phase): do not try a random point
            sub = self._safe_start()
            sub.note = "no model to check Ax's proposal; " + sub.note
            return sub
        why = (
            f"Ax proposed {pend.point} with P({_pct_text(self.objective.percentile)} > "
            f"{self.objective.sla_us:g} µs) {one['p_violation'][0]:.3f}"
            + (
                f" > δ {delta:g}"
                if one["unsafe"][0]
                else f", farther than {self.settings.safe_radius:g} from any point measured within the limit "
                f"at this load or above, or next to one measured over the SLA"
            )
        )
        cells = self._near_cells(evidence)
        grid = self._grid_model(self._load, refit=False, cells=cells) if cells else None
        ok = ~grid["unsafe"] if grid is not None else np.zeros(0, dtype=bool)
        if not ok.any():  # no point both modelled safe and near evidence (e.g. a load above any measured)
            sub = self._safe_start(this_retune=True)  # walk the safe line at this load
            at = self._grid_model(self._load, refit=False, cells=[self._cell_of(sub.point)])
            if at is not None:
                sub.p_violation = float(at["p_violation"][0])
            sub.note = (
                f"{why}; no point is within δ and near a point measured safe at this load or above, "
                f"stepping out from the safe corner instead "
                f"(model P {sub.p_violation if sub.p_violation is not None else math.nan:.3f}): "
                + sub.note.split(": ", 1)[-1]
            )
            return sub
        assert grid is not None
        pv = grid["p_violation"]
        coords = self._coords(cells)
        target = self._coords([prop])[0]
        seen = {self._cell_of(r.point) for r in self.retune_trials() if r.status == _STATUS_COMPLETED}
        fresh = ok & np.array([c not in seen for c in cells])
        allowed = fresh if fresh.any() else ok
        incumbent = self._incumbent_w(grid, allowed)
        ei = self._ei(grid, incumbent) * allowed if incumbent is not None else None
        if ei is not None and float(ei.max()) > 0:
            top = ei >= float(ei.max()) * (1 - 1e-9)
            j = acquisition.nearest(coords, target, top, tiebreak=pv)
            note = (
                f"{why}; tried the safe point of largest expected improvement instead "
                f"({float(ei[j]):.3g} W below {incumbent:.1f} W)"
            )
        else:
            j = acquisition.nearest(coords, target, allowed, tiebreak=pv)
            note = f"{why}; tried the closest safe point instead"
        cell = cells[j]
        return _Pending(self._grid_point(cell), 0.0, self._attach(cell), self._load, float(pv[j]), note)

    def _near_cells(self, evidence: tuple[Any, Any, Any, Any]) -> list[tuple[int, int]]:
        """The grid cells `_supported` at this load: the only ones the safety filter may choose, so the only
        ones the model is asked about (and the stopping rule's EI ranges over)."""
        cells = self._grid()
        mask = self._supported(cells, evidence)
        return [c for c, m in zip(cells, mask) if m]

    def _evidence(self) -> tuple[Any, Any, Any, Any]:
        """Every completed trial in the model: normalised knob coordinates (n x 2), load (normalised; 0 without
        context), whether its percentile was within the limit `best` applies (`_met_limit_us`) and whether it
        was over the SLA."""
        import numpy as np
        from ax.core.base_trial import TrialStatus

        exp = self._client._experiment
        done = sorted(exp.trial_indices_by_status[TrialStatus.COMPLETED])
        key = (id(self._client), tuple(done))
        if self._evidence_cache is not None and self._evidence_cache[0] == key:
            return self._evidence_cache[1]
        lat: dict[int, float] = {}
        if done:
            df = exp.lookup_data(trial_indices=done).df
            scale = self._scale
            rows = df[df["metric_name"] == scale.metric]
            lat = {int(t): scale.to_us(float(v)) for t, v in zip(rows["trial_index"], rows["mean"])}
        cells, loads, met, broke = [], [], [], []
        limit = self._met_limit_us()
        sla = self.objective.sla_us
        for ti in done:
            if ti not in lat:
                continue
            params = exp.trials[ti].arm.parameters
            cells.append(self._cell_of(self._to_point(params)))
            loads.append(float(params.get("load", 0.0)))
            met.append(lat[ti] <= limit)
            broke.append(lat[ti] > sla)
        out = (
            self._coords(cells),
            np.array(loads, dtype=float),
            np.array(met, dtype=bool),
            np.array(broke, dtype=bool),
        )
        self._evidence_cache = (key, out)
        return out

    def _supported(self, cells: Sequence[tuple[int, int]], evidence: tuple[Any, Any, Any, Any]) -> Any:
        """Grid `cells` the evidence allows at this retune's load: `acquisition.supported` (near a point measured
        within the limit) and not `acquisition.vetoed` (next to one measured over the SLA); all True when
        `safe_radius` or `safe_delta` is 0."""
        import numpy as np

        from tuner.optimize import acquisition

        if self.settings.safe_radius <= 0 or self.settings.safe_delta <= 0:
            return np.ones(len(cells), dtype=bool)
        ev, ev_load, ev_met, ev_broke = evidence
        coords = self._coords(cells)
        near = acquisition.supported(
            coords, ev, ev_load, ev_met, self._load, self.settings.safe_radius, SAFE_LOAD_TOL, SAFE_ITR_DOWN_WEIGHT
        )
        return near & ~acquisition.vetoed(coords, ev, ev_load, ev_broke, self._load, SAFE_VETO_RADIUS, SAFE_LOAD_TOL)

    def _incumbent_w(self, grid: dict[str, Any], allowed: Any) -> float | None:
        """Power to improve on: the best SLA-meeting power measured in this retune, else the model's lowest
        predicted power among allowed cells likely (P >= 0.5) to meet the SLA; None if neither exists."""
        d = self.best()
        if d.met_sla and d.measurement is not None:
            return float(d.measurement.power_w)
        likely = allowed & (grid["p_unmet"] <= 0.5)
        return float(grid["power"][likely].min()) if likely.any() else None

    def _take_pending(self, index: int) -> _Pending:
        if index in self._records:
            raise TunerError(f"trial {index} was already reported")
        try:
            return self._pending.pop(index)
        except KeyError:
            raise TunerError(f"trial {index} was never suggested") from None

    def metrics(self, m: Measurement) -> dict[str, float | tuple[float, float]]:
        """The (mean, SEM) per Ax metric for a measured window (see the module docstring); a bare mean
        where the SEM is unknown (a latency source without CIs), so Ax infers that noise itself."""
        pct = self.objective.percentile
        p = m.percentile(pct)
        p_sem = latency_sem(m, pct)
        j = m.power_w
        j_sem = power_sem(m)
        if not (math.isfinite(p) and p > 0 and math.isfinite(j) and j > 0):
            raise ValueError(f"non-finite or non-positive measurement: {_pct_text(pct)} {p!r} µs, power {j!r} W")
        scale = self._scale
        data: dict[str, float | tuple[float, float]] = {"power": (j, j_sem), scale.metric: scale.value(p, p_sem)}
        if not self._reward.constrained:
            r = self._reward(j, p, self.objective.sla_us)
            if p_sem is None:
                data["log_reward"] = math.log(r)
            else:
                r_sem = self._reward.sem(j, j_sem, p, p_sem, self.objective.sla_us)
                data["log_reward"] = (math.log(r), max(r_sem / r, 1e-9))
        return data

    def complete(
        self, index: int, measurement: Measurement, qps: float, *, settle: Measurement | None = None
    ) -> TrialRecord:
        """Report trial `index`'s measured window to Ax (metrics with SEMs) and record it.

        A window Ax cannot model (non-finite or zero latency/power) is marked failed instead, with the reason.
        In context mode a trial whose measured load `qps` moved away from the load it was suggested at is
        filed in Ax at its measured load (the suggested Ax trial is marked failed with that reason).
        """
        pend = self._take_pending(index)
        try:
            data = self.metrics(measurement)
        except ValueError as exc:
            self._pending[index] = pend
            return self.fail(index, str(exc), settle=settle, measurement=measurement, qps=qps)
        ax_index = pend.ax_index
        with _no_warnings():
            if (
                self.settings.context
                and math.isfinite(qps)
                and pend.load is not None
                and abs(self.settings.load_of(qps) - pend.load) > LOAD_TOLERANCE
            ):
                moved = self._client.attach_trial(parameters=self._to_params(pend.point, self.settings.load_of(qps)))
                # FAILED, not ABANDONED: Ax keeps abandoned arms as pending points (fantasies) forever
                self._client.mark_trial_failed(
                    trial_index=ax_index, failed_reason=f"re-filed at its measured load as trial {moved}"
                )
                ax_index = moved
            self._client.complete_trial(trial_index=ax_index, raw_data=data)
        value = self._reward(
            measurement.power_w, measurement.percentile(self.objective.percentile), self.objective.sla_us
        )
        rec = TrialRecord(
            index,
            pend.point,
            float(qps),
            _STATUS_COMPLETED,
            _lean(measurement),
            value,
            None,
            _lean(settle),
            pend.compute_s,
            pend.p_violation,
            pend.note,
        )
        self._records[index] = rec
        return rec

    def fail(
        self,
        index: int,
        reason: str,
        *,
        settle: Measurement | None = None,
        measurement: Measurement | None = None,
        qps: float | None = None,
    ) -> TrialRecord:
        """Mark trial `index` failed in Ax (no value is made up for it) and record why."""
        pend = self._take_pending(index)
        reason = " ".join(str(reason).split()) or "failed"
        with _no_warnings():
            self._client.mark_trial_failed(trial_index=pend.ax_index, failed_reason=reason)
        rec = TrialRecord(
            index,
            pend.point,
            math.nan if qps is None else float(qps),
            _STATUS_FAILED,
            _lean(measurement),
            None,
            reason,
            _lean(settle),
            pend.compute_s,
            pend.p_violation,
            pend.note,
        )
        self._records[index] = rec
        return rec

    def trials(self) -> list[TrialRecord]:
        """Every reported trial, in index order."""
        return [self._records[i] for i in sorted(self._records)]

    # -- decisions
    def should_stop(self) -> tuple[bool, str]:
        """Whether the current retune should end, and why (`_should_stop`); its compute time counts in the
        next suggestion's `compute_s`."""
        t0 = time.perf_counter()
        try:
            return self._should_stop()
        finally:
            self._stop_s += time.perf_counter() - t0

    def _should_stop(self) -> tuple[bool, str]:
        """Whether the current retune should end, and why.

        True once `settings.trials` trials of this retune were reported. With `stop_ei_pct` > 0, also after
        `min_trials` when the largest constrained expected improvement of one more trial over the grid at
        this load -- EI of power below the best SLA-meeting power measured in this retune (as `best` judges
        it), times the model's P(percentile within the limit `best` applies: the SLA less `sla_margin_pct`
        with `sla_check="ci"`) -- is below `stop_ei_pct` % of that power. With safe exploration only points
        the safety filter would let us try count.
        """
        from tuner.optimize import acquisition

        n = len(self.retune_trials())
        s = self.settings
        if n >= s.trials:
            return True, f"trial budget reached ({n} of {s.trials})"
        if s.stop_ei_pct <= 0:
            return False, "stopping rule off"
        if n < s.min_trials:
            return False, f"{n} trial(s) of at least {s.min_trials}"
        d = self.best()
        if not d.met_sla or d.measurement is None:
            return False, "no trial of this retune met the SLA yet"
        best_w = d.measurement.power_w
        cells = self._near_cells(self._evidence()) if s.safe_delta > 0 and s.safe_radius > 0 else None
        if cells is not None and not cells:
            return False, "no point near one measured within the limit at this load or above yet"
        grid = self._grid_model(self._load, refit=True, cells=cells)
        if grid is None:
            return False, "no model yet"
        ei = self._ei(grid, best_w)
        k = int(ei.argmax())
        limit = s.stop_ei_pct / 100.0 * best_w
        where = self._grid_point(grid["cells"][k])
        if acquisition.should_stop_ei(float(ei[k]), best_w, s.stop_ei_pct):
            return True, (
                f"expected improvement of one more trial {ei[k]:.3g} W (at {where}) < {s.stop_ei_pct:g} % "
                f"of the best {best_w:.1f} W"
            )
        return False, f"expected improvement {ei[k]:.3g} W at {where} >= {limit:.3g} W"

    def best(self) -> Decision:
        """The best MEASURED point of the current retune that met the SLA (lowest reward); if none did, the
        safest measured point.

        With `sla_check="ci"` (default) a trial meets the SLA when the upper end of its percentile's 95 % CI
        does; if no trial does but some have their point estimate within the SLA, the best of those is taken
        (and the reason says so). "Safest" = lowest measured percentile (ties: lower power). With no completed
        trial at all, the host's safe corner (lowest ITR, highest frequency) is returned, `measurement=None`.
        """
        done = [r for r in self.retune_trials() if r.status == _STATUS_COMPLETED and r.measurement is not None]
        obj = self.objective
        pct = obj.percentile
        label = f"{_pct_text(pct)} <= {obj.sla_us:g} µs"
        met = [r for r in done if obj.met(r.measurement)]  # type: ignore[arg-type]
        strict = replace(obj, sla_us=self._met_limit_us())  # used only with sla_check="ci"
        margin = f" less {self.settings.sla_margin_pct:g} %" if self.settings.sla_margin_pct else ""
        sure = [r for r in met if strict.met_confidently(r.measurement)]  # type: ignore[arg-type]
        pool, how = (sure, f"with its 95 % CI{margin}") if self.settings.sla_check == "ci" and sure else (met, "")
        if self.settings.sla_check == "ci" and not sure and met:
            how = f"by its estimate only: no trial's CI was within the SLA{margin}"
        if pool:
            r = min(pool, key=lambda r: (r.reward, r.measurement.percentile(pct), r.index))  # type: ignore[union-attr]
            m = r.measurement
            assert m is not None
            return Decision(
                r.point,
                m,
                True,
                f"best measured point meeting {label}{' ' + how if how else ''} "
                f"({len(pool)} of {len(done)} trials did): "
                f"{_pct_text(pct)} {m.percentile(pct):.0f} µs, {m.power_w:.1f} W",
            )
        if done:
            r = min(done, key=lambda r: (r.measurement.percentile(pct), r.measurement.power_w, r.index))  # type: ignore[union-attr]
            m = r.measurement
            assert m is not None
            return Decision(
                r.point,
                m,
                False,
                f"no measured point met {label} in {len(done)} trial(s); applying the safest measured "
                f"point ({_pct_text(pct)} {m.percentile(pct):.0f} µs)",
            )
        safe = OperatingPoint(self.space.itr_us[0], self.space.dvfs_ghz[-1])
        n_failed = sum(1 for r in self.retune_trials() if r.status == _STATUS_FAILED)
        return Decision(safe, None, False, f"no trial completed ({n_failed} failed); applying the safe corner {safe}")

    def predict(self, points: Sequence[OperatingPoint], qps: float | None = None) -> list[Prediction]:
        """Model mean and SEM of the objective's percentile latency and power at `points`.

        Context mode predicts at offered load `qps` (default: the current retune's load). Before the GP is
        fitted (Sobol phase) a point that was measured returns its measurement (`from_measured=True`); an
        unmeasured one returns NaNs.
        """
        load = self.settings.load_of(qps) if (self.settings.context and qps is not None) else None
        params = [self._to_params(p, load) for p in points]
        try:
            with _no_warnings(self.settings.torch_threads):
                preds = self._client.predict(params)
        except Exception:  # noqa: BLE001 - Ax raises UnsupportedError/others until a model is fitted
            preds = None
        out: list[Prediction] = []
        measured = {
            r.point: r.measurement for r in self.trials() if r.measurement is not None and r.status == _STATUS_COMPLETED
        }
        scale = self._scale
        for i, point in enumerate(points):
            if preds is not None and scale.metric in preds[i] and "power" in preds[i]:
                mu, s = (float(x) for x in preds[i][scale.metric])
                pw, pw_s = (float(x) for x in preds[i]["power"])
                lat, lat_s = scale.latency_mean_sd(mu, s)
                out.append(Prediction(lat, lat_s, pw, pw_s, False))
            elif point in measured:
                m = measured[point]
                assert m is not None
                sem = latency_sem(m, self.objective.percentile)
                out.append(
                    Prediction(
                        m.percentile(self.objective.percentile),
                        math.nan if sem is None else sem,
                        m.power_w,
                        power_sem(m),
                        True,
                    )
                )
            else:
                out.append(Prediction(math.nan, math.nan, math.nan, math.nan, False))
        return out

    # -- persistence
    def to_json(self) -> str:
        """Full state as JSON: objective, settings, knob space, trial records and the Ax experiment."""
        with _no_warnings():
            snapshot = self._client._to_json_snapshot()
        return json.dumps(
            {
                "version": 1,
                "name": self.name,
                "objective": asdict(self.objective),
                "settings": asdict(self.settings),
                "space": {"itr_us": list(self.space.itr_us), "dvfs_ghz": list(self.space.dvfs_ghz)},
                "trials": [_record_to_dict(r) for r in self.trials()],
                "pending": {
                    str(i): {
                        "itr_us": p.point.itr_us,
                        "dvfs_ghz": p.point.dvfs_ghz,
                        "compute_s": p.compute_s,
                        "ax_index": p.ax_index,
                        "load": p.load,
                        "p_violation": p.p_violation,
                        "note": p.note,
                        "line_t": p.line_t,
                    }
                    for i, p in self._pending.items()
                },
                "next_index": self._next_index,
                "retune": {"start": self._retune_start, "load": self._load},
                "line_t": {str(i): t for i, t in self._line_t.items()},
                "ax": snapshot,
            }
        )

    @classmethod
    def from_json(cls, text: str) -> Optimizer:
        """Rebuild an optimiser saved by `to_json` (the Ax experiment and generation strategy included)."""
        from ax import Client

        _quiet_ax()
        try:
            d = json.loads(text)
            if d.get("version") != 1:
                raise ValueError(f"unsupported version {d.get('version')!r}")
            obj = Objective(**d["objective"])
            # a state saved before `latency_metric` existed holds an experiment on the ln scale
            settings = TunerSettings(**{"latency_metric": "log", **d["settings"]})
            space = KnobSpace(
                tuple(int(x) for x in d["space"]["itr_us"]), tuple(float(x) for x in d["space"]["dvfs_ghz"])
            )
            self = cls.__new__(cls)
            self.space, self.objective, self.settings, self.name = space, obj, settings, str(d["name"])
            self._itr = itr_candidates(space.itr_us, settings.itr_resolution_us)
            self._records = {r.index: r for r in (_record_from_dict(x) for x in d["trials"])}
            self._pending = {
                int(i): _Pending(
                    OperatingPoint(int(p["itr_us"]), float(p["dvfs_ghz"])),
                    float(p["compute_s"]),
                    int(p.get("ax_index", i)),
                    _opt_float(p.get("load")),
                    _opt_float(p.get("p_violation")),
                    str(p.get("note") or ""),
                    _opt_float(p.get("line_t")),
                )
                for i, p in d.get("pending", {}).items()
            }
            used = [*self._records, *self._pending]
            self._next_index = int(d.get("next_index", max(used) + 1 if used else 0))
            retune = d.get("retune") or {}
            self._retune_start = None if retune.get("start") is None else int(retune["start"])
            self._load = _opt_float(retune.get("load"))
            self._line_t = {int(i): float(t) for i, t in (d.get("line_t") or {}).items()}
            self._grid_cache, self._stop_s, self._evidence_cache = None, 0.0, None
            with _no_warnings():
                self._client = Client._from_json_snapshot(d["ax"])
                _small_acqf_batches(self._client)
            self._client._random_seed = settings.seed  # the snapshot does not carry the client's seed
        except TunerError:
            raise
        except Exception as exc:  # noqa: BLE001 - any malformed state is one line for the user
            raise TunerError(f"optimizer state is not valid: {type(exc).__name__}: {exc}") from None
        return self


# ------------------------------------------------------------------------------------------------ retune


def run_trial(host: Host, optimizer: Optimizer, settings: TunerSettings) -> TrialRecord:
    """Suggest a point, apply it, settle (measured), measure a window and report; host errors -> failed trial.

    The window is `settings.window_s` long, or with `window_mode="adaptive"` sized by
    `tuner.optimize.windowing.measure_window`: grown until the percentile's CI is narrow enough (at most `window_s`),
    or ended after `window_min_s` once the estimate is above the limit `best` applies -- such a point can
    never be chosen (its CI's upper end would have to be within the limit), and measuring it longer only
    keeps users over or near the SLA -- or, the guard, after any chunk whose pooled CI is wholly above the SLA.
    """
    measure: Callable[[], Measurement] = lambda: host.measure(settings.window_s)
    if settings.window_mode == "adaptive":
        from tuner.optimize.windowing import WindowPolicy, measure_window

        policy = WindowPolicy.from_settings(
            settings,
            optimizer.objective.percentile,
            stop_above_us=optimizer._met_limit_us(),
            abort_above_us=optimizer.objective.sla_us if settings.window_guard else None,
        )
        measure = lambda: measure_window(host, policy)
    index, point = optimizer.suggest()
    settle: Measurement | None = None
    qps = math.nan
    try:
        qps = float(host.offered_qps())
        apply_point(host, point)
        if settings.settle_s > 0:
            settle = host.measure(settings.settle_s)
        m = measure()
    except Exception as exc:  # noqa: BLE001 - any host failure fails this trial, not the run
        return optimizer.fail(index, f"{type(exc).__name__}: {exc}", settle=settle, qps=qps)
    return optimizer.complete(index, m, qps, settle=settle)


def run_retune(
    host: Host,
    optimizer: Optimizer,
    settings: TunerSettings,
    *,
    on_trial: Callable[[TrialRecord], None] | None = None,
    should_stop: Callable[[], bool] | None = None,
) -> Decision:
    """Start a retune at the host's offered load (`optimizer.begin_retune`), run up to `settings.trials`
    trials of it -- fewer if `should_stop()` or the optimiser's own stopping rule (`Optimizer.should_stop`)
    says so -- then apply `optimizer.best()`.

    Each trial: apply point -> settle for `settle_s` (measured, so its energy is counted) -> measure
    `window_s` -> report. A host exception marks that trial failed in Ax and the retune goes on. The decision
    is applied at the end; if applying it fails, `HostError` is raised.
    """
    try:
        qps = float(host.offered_qps())
    except Exception as exc:  # noqa: BLE001
        if settings.context:
            raise HostError(f"could not read the offered load: {type(exc).__name__}: {exc}") from None
        qps = math.nan
    optimizer.begin_retune(qps)
    for _ in range(settings.trials):
        if should_stop is not None and should_stop():
            break
        if optimizer.should_stop()[0]:
            break
        rec = run_trial(host, optimizer, settings)
        if on_trial is not None:
            on_trial(rec)
    decision = optimizer.best()
    try:
        apply_point(host, decision.point)
    except TunerError:
        raise
    except Exception as exc:  # noqa: BLE001
        raise HostError(f"could not apply the chosen point {decision.point}: {type(exc).__name__}: {exc}") from None
    return decision
