"""The optimiser's model member: the Ax experiment over the host's knob grid.

It owns the Ax `Client` (parameters, objective or outcome constraint, generation strategy), maps operating
points to Ax parameters and grid cells (ITR candidates x frequencies, in normalised coordinates), turns a
measured window into Ax metrics (`metrics`), asks the fitted model about the grid (`grid_model`: latency and
power mean/SD, P(SLA broken), the safety gate's verdict, as a `GridPrediction`) and keeps the model's data
bounded (`prune`). It keeps no trial books and knows no retune: the load to predict at is always an argument.
The safety filter (`safe_exploration`) and the stopping rule (`stopping`) read its predictions.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any, TypedDict

from actuators.host import KnobSpace, Measurement, OperatingPoint
from core.errors import TunerError
from tuner.optimize.axsetup import no_warnings, quiet_ax, small_acqf_batches
from tuner.optimize.latscale import LatencyScale
from tuner.optimize.records import Cell, latency_sem, power_sem
from tuner.optimize.settings import Objective, TunerSettings, itr_candidates, itr_step_us, met_limit_us, pct_text
from tuner.optimize.surrogate import GridPredictor, acquisition_values, botorch_adapter, refit

#: A completed trial whose measured load differs from the load its suggestion was pinned at by more than this
#: (normalised units: 0.5 % of `context_max_qps`) is re-filed in Ax at its measured load.
LOAD_TOLERANCE = 5e-3
#: Abandoned Ax trials (safety substitutions, re-filed loads) tolerated before the experiment is rebuilt without
#: them (`ExperimentModel.prune`).
ABANDONED_MAX = 12


#: `TunerSettings.refit_every`: the GP's hyperparameters are also re-optimised once the data grew by this share,
REFIT_GROWTH = 0.2
#: ... and as soon as a new trial surprised the model: a metric measured more than this many SDs (the model's
#: predictive SD and the measurement's SEM in quadrature) from what the model predicted for it before the refit.
#: The GP is least right next to the latency cliff, where its old length-scales must give way at once.
SURPRISE_Z = 2.0


class GridPrediction(TypedDict):
    """The fitted model's answer about grid cells at one load (numpy arrays, one entry per cell)."""

    cells: list[Cell]
    mu: Any  # the latency metric's mean (`tuner.optimize.latscale`)
    sd: Any  # ... and SD
    power: Any  # W, mean
    power_sd: Any  # W, SD (0 where the model gives none)
    p_violation: Any  # P(SLA broken), SD x `safe_sd_scale`, `safe_model_error` in quadrature
    p_unmet: Any  # P(over the limit `best` applies), SD x `safe_sd_scale`
    unsafe: Any  # the safety gate's verdict (`ExperimentModel.unsafe`)


def residual_z(value: float | tuple[float, float], mu: float, sd: float) -> float | None:
    """SDs by which a reported metric (mean or (mean, SEM)) lies from a prediction N(`mu`, `sd`), both noises
    combined; None when both are 0."""
    mean, sem = value if isinstance(value, tuple) else (value, 0.0)
    scale = math.hypot(sd, float(sem))
    return (float(mean) - mu) / scale if scale > 0 else None


class ExperimentModel:
    """The Ax experiment and the knob grid of one optimiser (see the module docstring)."""

    def __init__(
        self, space: KnobSpace, objective: Objective, settings: TunerSettings, name: str = "tuner", client: Any = None
    ) -> None:
        """A fresh experiment, or (`client`: an Ax `Client` restored from a snapshot) the one it holds."""
        self.space = space
        self.objective = objective
        self.settings = settings
        self.name = name
        step = itr_step_us(settings.itr_resolution_us, settings.itr_resolution_sla_pct, objective.sla_us)
        self.itr = itr_candidates(space.itr_us, step)
        self._grid_cache: tuple[Any, GridPrediction | None] | None = None  # (key, last full-grid prediction)
        self._hyper_fit: tuple[int, int] | None = None  # (client id, trials) at the last hyperparameter fit
        self._fitted_on: tuple[int, tuple[int, ...]] | None = None  # (client id, completed trials) of the last fit
        self._predictor = GridPredictor()  # batched grid predictions of the fitted adapter (`grid_model`)
        self._reported: dict[int, dict[str, Any]] = {}  # Ax trial -> its metrics, until the next fit (`_surprised`)
        self.client: Any = self.new_client() if client is None else client

    # -- Ax set-up
    def parameters(self) -> list[Any]:
        """Ax's parameter configs: the ITR index and the frequency (each only if the host offers a choice), and
        the normalised `load` in context mode."""
        from ax import ChoiceParameterConfig, RangeParameterConfig

        params: list[Any] = []
        if len(self.itr) > 1:
            params.append(RangeParameterConfig(name="itr_index", bounds=(0, len(self.itr) - 1), parameter_type="int"))
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

    def init_budget(self) -> int:
        """Completed trials before Ax leaves its Sobol phase for the GP."""
        return min(self.settings.sobol_trials, self.settings.trials)

    def new_client(self) -> Any:
        """A new Ax `Client` configured for this objective and settings, with no trials."""
        from ax import Client

        quiet_ax()
        client = Client(random_seed=self.settings.seed)
        with no_warnings():
            client.configure_experiment(parameters=self.parameters(), name=self.name)
            scale = self.scale
            if self.reward.constrained:
                client.configure_optimization(objective="-power", outcome_constraints=[scale.constraint()])
            else:
                client.configure_optimization(objective="-log_reward")
                client.configure_tracking_metrics(["power", scale.metric])
            # Existing (attached, earlier-retune) trials count toward the Sobol budget
            # (use_existing_trials_for_initialization, Ax's default), so a warm experiment starts from the GP.
            client.configure_generation_strategy(
                method="fast",
                initialization_budget=self.init_budget(),
                initialization_random_seed=self.settings.seed,
                initialize_with_center=False,
                use_existing_trials_for_initialization=True,
                allow_exceeding_initialization_budget=True,
            )
            small_acqf_batches(client)
        return client

    @property
    def scale(self) -> LatencyScale:
        """The latency scale the model fits (`tuner.optimize.latscale`)."""
        return LatencyScale(self.settings.latency_metric, self.objective.sla_us)

    @property
    def reward(self) -> Any:
        """The objective's reward function (`reward.get_reward`)."""
        from reward import get_reward

        return get_reward(self.objective.reward)

    def to_point(self, params: dict[str, Any]) -> OperatingPoint:
        """The operating point of Ax parameters."""
        itr = self.itr[int(params["itr_index"])] if "itr_index" in params else self.itr[0]
        dvfs = self.space.check_dvfs(params["dvfs_ghz"]) if "dvfs_ghz" in params else self.space.dvfs_ghz[0]
        return OperatingPoint(itr, dvfs)

    def to_params(self, point: OperatingPoint, load: float | None) -> dict[str, Any]:
        """Ax parameters of `point` at normalised `load` (context mode; None: 0)."""
        checked = self.space.check(point)
        params: dict[str, Any] = {}
        if len(self.itr) > 1:  # off-grid ITR values are predicted at the nearest grid value
            params["itr_index"] = min(range(len(self.itr)), key=lambda i: (abs(self.itr[i] - checked.itr_us), i))
        if len(self.space.dvfs_ghz) > 1:
            params["dvfs_ghz"] = float(checked.dvfs_ghz)
        if self.settings.context:
            params["load"] = float(load) if load is not None else 0.0
        return params

    # -- grid (ITR candidates x frequencies) in normalised coordinates
    def grid(self) -> list[Cell]:
        """Every grid cell, ITR-major."""
        return [(i, j) for i in range(len(self.itr)) for j in range(len(self.space.dvfs_ghz))]

    def grid_point(self, cell: Cell) -> OperatingPoint:
        """The operating point of a grid cell."""
        return OperatingPoint(self.itr[cell[0]], self.space.dvfs_ghz[cell[1]])

    def coords(self, cells: Sequence[Cell]) -> Any:
        """Normalised (itr, dvfs) coordinates in [0, 1] of `cells` (n x 2)."""
        import numpy as np

        ni, nj = max(len(self.itr) - 1, 1), max(len(self.space.dvfs_ghz) - 1, 1)
        return np.array([(i / ni, j / nj) for i, j in cells], dtype=float).reshape(-1, 2)

    def cell_at(self, u: tuple[float, float]) -> Cell:
        """The grid cell nearest normalised coordinates `u`."""
        ni, nj = len(self.itr) - 1, len(self.space.dvfs_ghz) - 1
        return int(round(u[0] * ni)), int(round(u[1] * nj))

    def cell_of(self, point: OperatingPoint) -> Cell:
        """The grid cell of `point` (its ITR rounded to the nearest candidate)."""
        i = min(range(len(self.itr)), key=lambda k: (abs(self.itr[k] - point.itr_us), k))
        j = self.space.dvfs_ghz.index(self.space.check_dvfs(point.dvfs_ghz))
        return i, j

    def cell_params(self, cell: Cell, load: float | None) -> dict[str, Any]:
        """Ax parameters of a grid cell at normalised `load` (context mode; None: 0)."""
        params: dict[str, Any] = {}
        if len(self.itr) > 1:
            params["itr_index"] = cell[0]
        if len(self.space.dvfs_ghz) > 1:
            params["dvfs_ghz"] = float(self.space.dvfs_ghz[cell[1]])
        if self.settings.context:
            params["load"] = float(load if load is not None else 0.0)
        return params

    # -- the fitted model
    def grid_model(self, load: float | None, *, refit: bool, cells: list[Cell] | None = None) -> GridPrediction | None:
        """Model predictions over the grid (or `cells` of it) at `load` (`GridPrediction`); with `refit`, the model
        is fitted on all data first (`fit_model`). None while no predictive model is fitted (Sobol phase)."""
        import numpy as np

        observed = tuple(self.observed())
        # the whole grid at one load is asked twice per trial (stopping rule, then safety filter) of the same
        # fit: Ax refits only when the data changed, so the data (with the load and the cells) key the answer
        key = (
            (id(self.client), observed, load, None if cells is None else tuple(cells))
            if cells is None or len(cells) > 1
            else None
        )
        if key is not None and self._grid_cache is not None and self._grid_cache[0] == key:
            return self._grid_cache[1]
        with no_warnings(self.settings.torch_threads):
            if refit:
                if len(observed) < self.init_budget():
                    return None  # Ax would still be in its Sobol phase: no model to ask
                self.fit_model()
            cells = self.grid() if cells is None else list(cells)
            adapter = botorch_adapter(self.client._generation_strategy)
            if adapter is None or not cells:
                return None  # no predictive model yet
            preds = self._predictor.predict(adapter, [self.cell_params(c, load) for c in cells])
        scale = self.scale
        if scale.metric not in preds or "power" not in preds:
            return None
        mu, sd = preds[scale.metric]
        pw, pw_sd = preds["power"]
        # both from the model's SD times `safe_sd_scale`; P(SLA broken) also with `safe_model_error` added in
        # quadrature; P(over the limit `best` applies) is also the constrained EI's feasibility
        sdk = sd * self.settings.safe_sd_scale
        pv = scale.prob_over(mu, sdk, self.objective.sla_us, self.settings.safe_model_error)
        p_unmet = scale.prob_over(mu, sdk, self.met_limit_us())
        out = GridPrediction(
            cells=cells,
            mu=mu,
            sd=sd,
            power=pw,
            power_sd=np.nan_to_num(pw_sd, nan=0.0),
            p_violation=pv,
            p_unmet=p_unmet,
            unsafe=self.unsafe(pv, p_unmet),
        )
        if key is not None:
            self._grid_cache = (key, out)
        return out

    @property
    def fitted(self) -> bool:
        """Whether `fit_model` left a fitted GP (False in the Sobol phase and before the first fit)."""
        return self._fitted_on is not None

    @property
    def hyper_fit(self) -> tuple[int, int] | None:
        """(client id, completed trials) when the GP's hyperparameters were last optimised, None before."""
        return self._hyper_fit

    def fit_model(self) -> None:
        """Fit the model the next suggestion, the safety filter and the stopping rule all use, on all data.

        One Ax adapter is kept and refitted on new data (`tuner.optimize.surrogate.refit`). With
        `settings.refit_every` = 1 the hyperparameters are re-optimised by Ax's own fit on every new trial (Ax's
        behaviour); with N > 1 they are warm-started from the last fit and re-optimised every N new trials,
        once the data grew by `REFIT_GROWTH` since, when a new trial surprised the model (`SURPRISE_Z`) and after
        a rebuilt experiment; in between conditioned on all data with the last ones. With `settings.hyper_iters`
        = N > 0 every re-optimisation is warm-started and stopped after N L-BFGS iterations (with refit_every 1:
        on every new trial). The next `get_next_trials` finds the data unchanged and reuses that model as it is.
        """
        gs = self.client._generation_strategy
        exp = self.client._experiment
        observed = self.observed()
        n = len(observed)
        key = (id(self.client), tuple(observed))
        if key == self._fitted_on and botorch_adapter(gs) is not None:
            return  # nothing new since the last fit (Ax's own check costs a pass over the experiment's data)
        last = self._hyper_fit
        due = (
            last is None
            or last[0] != id(self.client)
            or n - last[1] >= self.settings.refit_every
            or n > last[1] * (1 + REFIT_GROWTH)
            or self._surprised(observed)
        )
        self._reported = {}  # judged (or not needed) for this fit
        # refit_every = 1 is Ax's own behaviour, cold hyperparameters every trial (the replay's numbers were chosen
        # with it; warm-started ones every trial moved the trajectory, docs/optimizer-compute.md); past that, or with
        # hyper_iters (then at most that many L-BFGS iterations), warm-started
        iters = self.settings.hyper_iters
        how = refit(gs, exp, hyper=due, warm=self.settings.refit_every > 1 or iters > 0, max_iters=iters)
        if how in ("cold", "warm"):
            self._hyper_fit = (id(self.client), n)
        self._fitted_on = key if botorch_adapter(gs) is not None else None

    def complete_ax(self, ax_index: int, data: dict[str, float | tuple[float, float]]) -> None:
        """Complete Ax trial `ax_index` with `data` (metric -> mean or (mean, SEM)), kept for `_surprised`."""
        self.client.complete_trial(trial_index=ax_index, raw_data=data)
        self._reported[ax_index] = data

    def _surprised(self, observed: Sequence[int]) -> bool:
        """Whether a trial reported since the last fit lies more than `SURPRISE_Z` SDs from the fitted model's
        prediction for it, in any modelled metric (False with no fitted model or nothing new)."""
        adapter = botorch_adapter(self.client._generation_strategy)
        fitted = self._fitted_on
        reported = self._reported
        if adapter is None or fitted is None or fitted[0] != id(self.client):
            return False
        new = [t for t in sorted(set(observed) - set(fitted[1])) if t in reported]
        if not new:
            return False
        exp = self.client._experiment
        preds = self._predictor.predict(adapter, [dict(exp.trials[t].arm.parameters) for t in new])
        for k, t in enumerate(new):
            for metric, value in reported[t].items():
                if metric not in preds:
                    continue
                mu, sd = preds[metric]
                z = residual_z(value, float(mu[k]), float(sd[k]))
                if z is not None and abs(z) > SURPRISE_Z:
                    return True
        return False

    def latency_z(self, params: dict[str, Any], data: dict[str, float | tuple[float, float]]) -> float | None:
        """How many SDs the latency metric in `data` (a window about to be reported at `params`) lies from the
        fitted model's prediction there, signed (positive: higher latency); None with no fitted model."""
        adapter = botorch_adapter(self.client._generation_strategy)
        metric = self.scale.metric
        if adapter is None or self._fitted_on is None or metric not in data:
            return None
        try:
            with no_warnings(self.settings.torch_threads):
                preds = self._predictor.predict(adapter, [params])
        except Exception:  # noqa: BLE001 - Ax's internals moved: no verdict
            return None
        if metric not in preds:
            return None
        mu, sd = preds[metric]
        z = residual_z(data[metric], float(mu[0]), float(sd[0])) or 0.0
        return z if self.scale.kind == "log" else -z  # headroom = SLA / latency: higher latency, lower metric

    def met_limit_us(self) -> float:
        """`met_limit_us` of this objective and settings. Used by the expected improvement, the safety filter
        and the adaptive window: exploring a point likely over this limit can only cost (`best` would never
        take it), and on the simulated host gating on the SLA itself let ~10-25 % of the warm tuner's trial
        time run above the SLA (docs/optimizer.md)."""
        return met_limit_us(self.objective.sla_us, self.settings)

    def unsafe(self, pv: Any, p_unmet: Any) -> Any:
        """The safety gate's verdict per cell: P(SLA broken) > δ (`safe_delta`) or P(over the limit `best` applies)
        > `safe_limit_delta` (trying a point `best` could never take only costs), as `grid_model` computes them
        (`safe_sd_scale`, `safe_model_error`); all False with `safe_delta` 0."""
        import numpy as np

        delta = self.settings.safe_delta
        if delta <= 0:
            return np.zeros(np.shape(pv), dtype=bool)
        return (pv > delta) | (p_unmet > self.settings.safe_limit_delta)

    def acquire(self, cells: Sequence[Cell], allowed: Any, load: float | None) -> int | None:
        """Index (into `cells`) of the allowed cell where Ax's own acquisition function is largest at `load`
        (`surrogate.acquisition_values`: one batch over the allowed cells only, not Ax's pass over the whole
        grid); None with no fitted model, nothing allowed, or if Ax cannot evaluate it."""
        import numpy as np

        idx = np.flatnonzero(np.asarray(allowed, dtype=bool))
        adapter = botorch_adapter(self.client._generation_strategy)
        if adapter is None or idx.size == 0:
            return None
        params = [self.cell_params(cells[int(k)], load) for k in idx]
        try:
            with no_warnings(self.settings.torch_threads):
                vals = acquisition_values(adapter, self._predictor, params)
        except Exception:  # noqa: BLE001 - Ax's internals moved: the caller falls back to the constrained EI
            return None
        if vals.shape != (idx.size,) or not np.isfinite(vals).any():
            return None
        return int(idx[int(np.nanargmax(np.where(np.isfinite(vals), vals, -np.inf)))])

    # -- the experiment's trials
    def observed(self) -> list[int]:
        """The completed Ax trials, in index order."""
        from ax.core.base_trial import TrialStatus

        return sorted(self.client._experiment.trial_indices_by_status[TrialStatus.COMPLETED])

    def prune(self) -> dict[int, int] | None:
        """Keep the model's data within `history_max_trials`: past the bound, rebuild the experiment from the
        newest 3/4 of the bound (oldest dropped first; the slack amortises the rebuild). Also rebuilt (same
        trials) when more than `ABANDONED_MAX` abandoned safety substitutions piled up: Ax keeps abandoned arms
        as pending points forever, and each one is a fantasy in every later acquisition. Call it only with no
        trial pending (their Ax trials would be lost). The rebuild's old -> new Ax index, None if none."""
        from ax.core.base_trial import TrialStatus

        bound = self.settings.history_max_trials
        done = self.observed()
        abandoned = len(self.client._experiment.trial_indices_by_status[TrialStatus.ABANDONED])
        if len(done) <= bound and abandoned <= ABANDONED_MAX:
            return None
        return self.rebuild(done[-max(1, (3 * bound) // 4) :] if len(done) > bound else done)

    def rebuild(self, keep: Sequence[int]) -> dict[int, int]:
        """Replace the experiment by a new one holding only the completed Ax trials `keep`, in their order and
        with the data they were reported with; old -> new Ax index. Only with no trial pending."""
        exp = self.client._experiment
        df = exp.lookup_data(trial_indices=list(keep)).df if keep else None
        client = self.new_client()
        moved: dict[int, int] = {}
        with no_warnings():
            for ti in keep:
                rows = df[df["trial_index"] == ti]  # type: ignore[index]
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
                moved[int(ti)] = int(ni)
        self.client = client
        return moved

    def attach(self, cell: Cell, load: float | None) -> int:
        """Attach grid `cell` at normalised `load` to Ax as a trial of our own choosing; its Ax index."""
        with no_warnings():
            return int(self.client.attach_trial(parameters=self.cell_params(cell, load)))

    def metrics(self, m: Measurement) -> dict[str, float | tuple[float, float]]:
        """The (mean, SEM) per Ax metric for a measured window (`tuner.optimize.optimizer`'s docstring); a bare
        mean where the SEM is unknown (a latency source without CIs), so Ax infers that noise itself. ValueError
        for a window Ax cannot model (non-finite or non-positive latency or power)."""
        pct = self.objective.percentile
        p = m.percentile(pct)
        p_sem = latency_sem(m, pct)
        j = m.power_w
        j_sem = power_sem(m)
        if not (math.isfinite(p) and p > 0 and math.isfinite(j) and j > 0):
            raise ValueError(f"non-finite or non-positive measurement: {pct_text(pct)} {p!r} µs, power {j!r} W")
        scale = self.scale
        data: dict[str, float | tuple[float, float]] = {"power": (j, j_sem), scale.metric: scale.value(p, p_sem)}
        if not self.reward.constrained:
            r = self.reward(j, p, self.objective.sla_us)
            if p_sem is None:
                data["log_reward"] = math.log(r)
            else:
                r_sem = self.reward.sem(j, j_sem, p, p_sem, self.objective.sla_us)
                data["log_reward"] = (math.log(r), max(r_sem / r, 1e-9))
        return data
