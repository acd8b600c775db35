"""Bayesian optimisation of ITR x DVFS with Ax's `Client` API (Ax >= 1.x; Sobol start, then a BoTorch GP).

One trial = apply a point -> settle (measured; its energy counts) -> measure a window -> report metrics
with their standard errors to Ax. What Ax models depends on the reward (`reward.REGISTRY`):

* `constrained`: two metrics, `power` (W, minimised) and `log_latency` (ln µs of the chosen percentile),
  with the SLA as the outcome constraint `log_latency <= ln(SLA)`;
* the penalised rewards (`sla-linear`, `edp`, `latency`): one metric `log_reward` = ln R (minimised), plus
  `power` and `log_latency` as tracking metrics so `predict` works for every reward.

Logs are sent because tail latency spans orders of magnitude (an overloaded point is 10^4 x the SLA) and a
GP on the raw values is dominated by those outliers; ln is monotone, so the optimum is unchanged, and the
SEM maps by the delta method (sem / value). ITR is an integer range over the INDEX into the host's ITR list
thinned to `TunerSettings.itr_resolution_us` (default 8 µs: 2, 10, ..., 1018 -> index 0..127; 2 gives every
value of 2..1022), DVFS an ordered choice of the host's frequencies.

Ax is imported lazily (it costs seconds); its INFO logging and numerical warnings are kept off the terminal.
"""

from __future__ import annotations

import json
import math
import time
import warnings
from collections.abc import Callable, Sequence
from contextlib import contextmanager
from dataclasses import asdict, dataclass, replace
from typing import Any, Iterator

from actuators.host import PERCENTILES, Host, KnobSpace, Measurement, OperatingPoint, apply_point
from reward import DEFAULT_REWARD  # chosen by bench/replay.py (README section "replay")
from tuner.errors import HostError, TunerError

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

    def __post_init__(self) -> None:
        if isinstance(self.trials, bool) or not isinstance(self.trials, int) or self.trials < 1:
            raise TunerError(f"trials must be an integer >= 1, got {self.trials!r}")
        if isinstance(self.sobol_trials, bool) or not isinstance(self.sobol_trials, int) or self.sobol_trials < 1:
            raise TunerError(f"sobol_trials must be an integer >= 1, got {self.sobol_trials!r}")
        if not (self.settle_s >= 0 and math.isfinite(self.settle_s)):
            raise TunerError(f"settle_s must be >= 0 seconds, got {self.settle_s!r}")
        if not (self.window_s > 0 and math.isfinite(self.window_s)):
            raise TunerError(f"window_s must be > 0 seconds, got {self.window_s!r}")
        if isinstance(self.seed, bool) or not isinstance(self.seed, int):
            raise TunerError(f"seed must be an integer, got {self.seed!r}")
        if isinstance(self.itr_resolution_us, bool) or not isinstance(self.itr_resolution_us, int) \
                or self.itr_resolution_us < 1:
            raise TunerError(f"itr_resolution_us must be an integer >= 1, got {self.itr_resolution_us!r}")
        if isinstance(self.torch_threads, bool) or not isinstance(self.torch_threads, int) or self.torch_threads < 1:
            raise TunerError(f"torch_threads must be an integer >= 1, got {self.torch_threads!r}")
        if not (0.0 <= self.sla_margin_pct < 100.0):
            raise TunerError(f"sla_margin_pct must be in [0, 100), got {self.sla_margin_pct!r}")
        if self.sla_check not in SLA_CHECKS:
            raise TunerError(f"sla_check {self.sla_check!r}: expected one of {', '.join(SLA_CHECKS)}")


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
    energy and time count against the exploration), `compute_s` the time Ax took to suggest the point.
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
    global _QUIETED  # noqa: PLW0603 - Ax's logging is process-global by design; this only lowers its noise
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
    )


# --------------------------------------------------------------------------------------------- optimiser


class Optimizer:
    """An Ax experiment over a host's knob space for one objective; records every trial it hands out."""

    def __init__(self, space: KnobSpace, objective: Objective, settings: TunerSettings, name: str = "tuner") -> None:
        self.space = space
        self.objective = objective
        self.settings = settings
        self.name = name
        self._itr = itr_candidates(space.itr_us, settings.itr_resolution_us)
        self._records: dict[int, TrialRecord] = {}
        self._pending: dict[int, tuple[OperatingPoint, float]] = {}
        self._client: Any = None
        self._client = self._new_client()

    # -- Ax set-up
    def _parameters(self) -> list[Any]:
        from ax import ChoiceParameterConfig, RangeParameterConfig

        params: list[Any] = []
        if len(self._itr) > 1:
            params.append(RangeParameterConfig(name="itr_index", bounds=(0, len(self._itr) - 1),
                                               parameter_type="int"))
        if len(self.space.dvfs_ghz) > 1:
            params.append(ChoiceParameterConfig(name="dvfs_ghz", values=[float(f) for f in self.space.dvfs_ghz],
                                                parameter_type="float", is_ordered=True))
        if not params:
            raise TunerError("the host offers a single ITR value and a single frequency: nothing to tune")
        return params

    def _new_client(self) -> Any:
        from ax import Client

        _quiet_ax()
        client = Client(random_seed=self.settings.seed)
        with _no_warnings():
            client.configure_experiment(parameters=self._parameters(), name=self.name)
            log_sla = math.log(self.objective.sla_us)
            if self._reward.constrained:
                client.configure_optimization(objective="-power", outcome_constraints=[f"log_latency <= {log_sla!r}"])
            else:
                client.configure_optimization(objective="-log_reward")
                client.configure_tracking_metrics(["power", "log_latency"])
            client.configure_generation_strategy(
                method="fast",
                initialization_budget=min(self.settings.sobol_trials, self.settings.trials),
                initialization_random_seed=self.settings.seed,
                initialize_with_center=False,
                allow_exceeding_initialization_budget=True,
            )
        return client

    @property
    def _reward(self) -> Any:
        from reward import get_reward

        return get_reward(self.objective.reward)

    def _to_point(self, params: dict[str, Any]) -> OperatingPoint:
        itr = self._itr[int(params["itr_index"])] if "itr_index" in params else self._itr[0]
        dvfs = self.space.check_dvfs(params["dvfs_ghz"]) if "dvfs_ghz" in params else self.space.dvfs_ghz[0]
        return OperatingPoint(itr, dvfs)

    def _to_params(self, point: OperatingPoint) -> dict[str, Any]:
        checked = self.space.check(point)
        params: dict[str, Any] = {}
        if len(self._itr) > 1:  # off-grid ITR values are predicted at the nearest grid value
            params["itr_index"] = min(range(len(self._itr)), key=lambda i: (abs(self._itr[i] - checked.itr_us), i))
        if len(self.space.dvfs_ghz) > 1:
            params["dvfs_ghz"] = float(checked.dvfs_ghz)
        return params

    # -- trials
    def suggest(self) -> tuple[int, OperatingPoint]:
        """Ask Ax for the next point; returns (trial index, point). The trial is pending until completed/failed."""
        t0 = time.perf_counter()
        with _no_warnings(self.settings.torch_threads):
            trials = self._client.get_next_trials(max_trials=1)
        compute_s = time.perf_counter() - t0
        if not trials:
            raise TunerError("Ax generated no trial (search space exhausted?)")
        (index, params), = trials.items()
        point = self._to_point(params)
        self._pending[index] = (point, compute_s)
        return index, point

    def _take_pending(self, index: int) -> tuple[OperatingPoint, float]:
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
        data: dict[str, float | tuple[float, float]] = {
            "power": (j, j_sem), "log_latency": math.log(p) if p_sem is None else (math.log(p), p_sem / p)}
        if not self._reward.constrained:
            r = self._reward(j, p, self.objective.sla_us)
            if p_sem is None:
                data["log_reward"] = math.log(r)
            else:
                r_sem = self._reward.sem(j, j_sem, p, p_sem, self.objective.sla_us)
                data["log_reward"] = (math.log(r), max(r_sem / r, 1e-9))
        return data

    def complete(self, index: int, measurement: Measurement, qps: float, *,
                 settle: Measurement | None = None) -> TrialRecord:
        """Report trial `index`'s measured window to Ax (metrics with SEMs) and record it.

        A window Ax cannot model (non-finite or zero latency/power) is marked failed instead, with the reason.
        """
        point, compute_s = self._take_pending(index)
        try:
            data = self.metrics(measurement)
        except ValueError as exc:
            self._pending[index] = (point, compute_s)
            return self.fail(index, str(exc), settle=settle, measurement=measurement, qps=qps)
        with _no_warnings():
            self._client.complete_trial(trial_index=index, raw_data=data)
        value = self._reward(measurement.power_w, measurement.percentile(self.objective.percentile),
                             self.objective.sla_us)
        rec = TrialRecord(index, point, float(qps), _STATUS_COMPLETED, measurement, value, None, settle, compute_s)
        self._records[index] = rec
        return rec

    def fail(self, index: int, reason: str, *, settle: Measurement | None = None,
             measurement: Measurement | None = None, qps: float | None = None) -> TrialRecord:
        """Mark trial `index` failed in Ax (no value is made up for it) and record why."""
        point, compute_s = self._take_pending(index)
        reason = " ".join(str(reason).split()) or "failed"
        with _no_warnings():
            self._client.mark_trial_failed(trial_index=index, failed_reason=reason)
        rec = TrialRecord(index, point, math.nan if qps is None else float(qps), _STATUS_FAILED, measurement,
                          None, reason, settle, compute_s)
        self._records[index] = rec
        return rec

    def trials(self) -> list[TrialRecord]:
        """Every reported trial, in index order."""
        return [self._records[i] for i in sorted(self._records)]

    # -- decisions
    def best(self) -> Decision:
        """The best MEASURED point that met the SLA (lowest reward); if none did, the safest measured point.

        With `sla_check="ci"` (default) a trial meets the SLA when the upper end of its percentile's 95 % CI
        does; if no trial does but some have their point estimate within the SLA, the best of those is taken
        (and the reason says so). "Safest" = lowest measured percentile (ties: lower power). With no completed
        trial at all, the host's safe corner (lowest ITR, highest frequency) is returned, `measurement=None`.
        """
        done = [r for r in self.trials() if r.status == _STATUS_COMPLETED and r.measurement is not None]
        obj = self.objective
        pct = obj.percentile
        label = f"{_pct_text(pct)} <= {obj.sla_us:g} µs"
        met = [r for r in done if obj.met(r.measurement)]  # type: ignore[arg-type]
        strict = replace(obj, sla_us=obj.sla_us * (1 - self.settings.sla_margin_pct / 100.0))
        margin = f" less {self.settings.sla_margin_pct:g} %" if self.settings.sla_margin_pct else ""
        sure = [r for r in met if strict.met_confidently(r.measurement)]  # type: ignore[arg-type]
        pool, how = (sure, f"with its 95 % CI{margin}") if self.settings.sla_check == "ci" and sure else (met, "")
        if self.settings.sla_check == "ci" and not sure and met:
            how = f"by its estimate only: no trial's CI was within the SLA{margin}"
        if pool:
            r = min(pool, key=lambda r: (r.reward, r.measurement.percentile(pct), r.index))  # type: ignore[union-attr]
            m = r.measurement
            assert m is not None
            return Decision(r.point, m, True,
                            f"best measured point meeting {label}{' ' + how if how else ''} "
                            f"({len(pool)} of {len(done)} trials did): "
                            f"{_pct_text(pct)} {m.percentile(pct):.0f} µs, {m.power_w:.1f} W")
        if done:
            r = min(done, key=lambda r: (r.measurement.percentile(pct), r.measurement.power_w, r.index))  # type: ignore[union-attr]
            m = r.measurement
            assert m is not None
            return Decision(r.point, m, False,
                            f"no measured point met {label} in {len(done)} trial(s); applying the safest measured "
                            f"point ({_pct_text(pct)} {m.percentile(pct):.0f} µs)")
        safe = OperatingPoint(self.space.itr_us[0], self.space.dvfs_ghz[-1])
        n_failed = sum(1 for r in self.trials() if r.status == _STATUS_FAILED)
        return Decision(safe, None, False,
                        f"no trial completed ({n_failed} failed); applying the safe corner {safe}")

    def predict(self, points: Sequence[OperatingPoint]) -> list[Prediction]:
        """Model mean and SEM of the objective's percentile latency and power at `points`.

        Before the GP is fitted (Sobol phase) a point that was measured returns its measurement
        (`from_measured=True`); an unmeasured one returns NaNs.
        """
        params = [self._to_params(p) for p in points]
        try:
            with _no_warnings(self.settings.torch_threads):
                preds = self._client.predict(params)
        except Exception:  # noqa: BLE001 - Ax raises UnsupportedError/others until a model is fitted
            preds = None
        out: list[Prediction] = []
        measured = {r.point: r.measurement for r in self.trials() if r.measurement is not None
                    and r.status == _STATUS_COMPLETED}
        for i, point in enumerate(points):
            if preds is not None and "log_latency" in preds[i] and "power" in preds[i]:
                mu, s = (float(x) for x in preds[i]["log_latency"])
                pw, pw_s = (float(x) for x in preds[i]["power"])
                lat = math.exp(mu)
                out.append(Prediction(lat, lat * s, pw, pw_s, False))
            elif point in measured:
                m = measured[point]
                assert m is not None
                sem = latency_sem(m, self.objective.percentile)
                out.append(Prediction(m.percentile(self.objective.percentile),
                                      math.nan if sem is None else sem, m.power_w, power_sem(m), True))
            else:
                out.append(Prediction(math.nan, math.nan, math.nan, math.nan, False))
        return out

    # -- persistence
    def to_json(self) -> str:
        """Full state as JSON: objective, settings, knob space, trial records and the Ax experiment."""
        with _no_warnings():
            snapshot = self._client._to_json_snapshot()
        return json.dumps({
            "version": 1,
            "name": self.name,
            "objective": asdict(self.objective),
            "settings": asdict(self.settings),
            "space": {"itr_us": list(self.space.itr_us), "dvfs_ghz": list(self.space.dvfs_ghz)},
            "trials": [_record_to_dict(r) for r in self.trials()],
            "pending": {str(i): {"itr_us": p.itr_us, "dvfs_ghz": p.dvfs_ghz, "compute_s": c}
                        for i, (p, c) in self._pending.items()},
            "ax": snapshot,
        })

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
            settings = TunerSettings(**d["settings"])
            space = KnobSpace(tuple(int(x) for x in d["space"]["itr_us"]), tuple(float(x) for x in d["space"]["dvfs_ghz"]))
            self = cls.__new__(cls)
            self.space, self.objective, self.settings, self.name = space, obj, settings, str(d["name"])
            self._itr = itr_candidates(space.itr_us, settings.itr_resolution_us)
            self._records = {r.index: r for r in (_record_from_dict(x) for x in d["trials"])}
            self._pending = {int(i): (OperatingPoint(int(p["itr_us"]), float(p["dvfs_ghz"])), float(p["compute_s"]))
                             for i, p in d.get("pending", {}).items()}
            with _no_warnings():
                self._client = Client._from_json_snapshot(d["ax"])
            self._client._random_seed = settings.seed  # the snapshot does not carry the client's seed
        except TunerError:
            raise
        except Exception as exc:  # noqa: BLE001 - any malformed state is one line for the user
            raise TunerError(f"optimizer state is not valid: {type(exc).__name__}: {exc}") from None
        return self


# ------------------------------------------------------------------------------------------------ retune


def run_trial(host: Host, optimizer: Optimizer, settings: TunerSettings) -> TrialRecord:
    """Suggest a point, apply it, settle (measured), measure a window and report; host errors -> failed trial."""
    index, point = optimizer.suggest()
    settle: Measurement | None = None
    qps = math.nan
    try:
        qps = float(host.offered_qps())
        apply_point(host, point)
        if settings.settle_s > 0:
            settle = host.measure(settings.settle_s)
        m = host.measure(settings.window_s)
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
    """Run up to `settings.trials` trials (fewer if `should_stop()` turns true), then apply `optimizer.best()`.

    Each trial: apply point -> settle for `settle_s` (measured, so its energy is counted) -> measure
    `window_s` -> report. A host exception marks that trial failed in Ax and the retune goes on. The decision
    is applied at the end; if applying it fails, `HostError` is raised.
    """
    done = len(optimizer.trials())
    for _ in range(max(settings.trials - done, 0)):
        if should_stop is not None and should_stop():
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
