"""The fitted Ax model kept across suggestions: warm-started refits and vectorised grid predictions.

Ax's `Client` rebuilds its view of the experiment on every `get_next_trials` / `predict`: it extracts the data,
refits its transforms, and -- when the data changed -- re-optimises the GP's hyperparameters from their
defaults (L-BFGS on the marginal likelihood, most of a suggestion's compute), then runs every prediction
through its transforms one point at a time. The optimiser asks the same model about the same knob grid
several times per trial (the stopping rule, the safety filter, the acquisition), so this module keeps ONE Ax
adapter (the generation strategy's own `TorchAdapter` with its `BoTorchGenerator` and Ax's default surrogate)
and:

* `refit`: on new data, refits that adapter through Ax's own entry points (`_process_and_transform_data`,
  then `TorchAdapter._fit` -> `Surrogate.fit(state_dict=..., refit=...)`) with the hyperparameters
  **warm-started** from the last fit (`refit=True`: L-BFGS to convergence from the last optimum, a few
  iterations when one trial was added) or kept (`refit=False`: the GP conditioned on all data with the last
  hyperparameters, the path Ax's cross-validation takes); Ax's own fit (`GenerationStrategy.fit`, from the
  default hyperparameters) when there is no fitted adapter yet or the caller wants it (`warm=False`).
* `predict`: asks the adapter's BoTorch model for the posterior of many grid points in one batch and reads
  each point's mean and variance (not the dense joint covariance Ax's `predict` builds), with the grid's
  model-space inputs made once per adapter and load by Ax's own transforms, and maps the outcomes back
  through Ax's outcome transforms vectorised (`StandardizeY`, `BilogY` with Ax's own `match_ci_width`);
  a transform it does not know falls back to Ax's own per-point untransform. The result equals
  `Client.predict` (tests/tuner/optimize/test_surrogate.py).

BLAS (scipy's L-BFGS, numpy) runs on the same thread count as torch meanwhile (`axsetup.no_warnings`).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

#: Outcome transforms whose prediction untransform `_untransform` does vectorised; any other transform with a
#: data untransform of its own sends the prediction through Ax's per-point path.
_VECTORISED = ("StandardizeY", "BilogY")


def botorch_adapter(gs: Any) -> Any:
    """The fitted Ax adapter of the generation strategy's current node if it is a BoTorch model, else None."""
    for spec in getattr(gs._curr, "generator_specs", ()):
        adapter = getattr(spec, "_fitted_adapter", None)
        if spec.generator_enum.value == "BoTorch" and adapter is not None:
            return adapter
    return None


def refit(gs: Any, experiment: Any, *, hyper: bool, warm: bool = True, max_iters: int = 0) -> str:
    """Bring the generation strategy's BoTorch adapter up to date with the experiment's data.

    With no fitted adapter yet, or hyperparameters due (`hyper`) without `warm`, Ax's own fit
    (`GenerationStrategy.fit`: leaves the Sobol node when due, hyperparameters from their defaults). Otherwise the
    same adapter is refitted on all data, its hyperparameters warm-started from the last fit and re-optimised
    (`hyper`: to convergence, or by at most `max_iters` L-BFGS iterations if > 0) or kept. Returns what was
    done: "cold", "warm", "kept", "unchanged" or "none" (still no BoTorch model: Ax is in its Sobol phase).
    """
    adapter = botorch_adapter(gs)
    if adapter is None or (hyper and not warm):
        seen = None if adapter is None else adapter._last_experiment_data
        gs.fit(experiment=experiment)
        after = botorch_adapter(gs)
        if after is None:
            return "none"
        return "cold" if (after is not adapter or after._last_experiment_data is not seen) else "unchanged"
    data, space = adapter._process_and_transform_data(experiment=experiment)
    if data == adapter._last_experiment_data:
        return "unchanged"
    state = adapter.generator.surrogate.model.state_dict()
    capped = hyper and max_iters > 0
    adapter._fit(search_space=space, experiment_data=data, state_dict=state, refit=hyper and not capped)
    if capped:  # Ax conditioned its model on all data with the last hyperparameters: a few L-BFGS steps from there
        fit_hyperparameters(adapter.generator.surrogate, max_iters)
    return "warm" if hyper else "kept"


def fit_hyperparameters(surrogate: Any, max_iters: int) -> None:
    """Re-optimise the hyperparameters of Ax's fitted surrogate model in place from their current values, as Ax's
    own fit does (BoTorch `fit_gpytorch_mll` on the model config's marginal likelihood, each sub-model of a model
    list on its own) but with L-BFGS stopped after `max_iters` iterations."""
    from botorch.fit import fit_gpytorch_mll
    from botorch.models.model import ModelList
    from gpytorch.mlls import ExactMarginalLogLikelihood

    config = next(iter(surrogate.surrogate_spec.model_configs), None)  # Ax's default: one ModelConfig
    mll_class = getattr(config, "mll_class", None) or ExactMarginalLogLikelihood
    mll_options = getattr(config, "mll_options", None) or {}
    model = surrogate.model
    for m in model.models if isinstance(model, ModelList) else [model]:
        mll = mll_class(likelihood=m.likelihood, model=m, **mll_options)
        fit_gpytorch_mll(mll, optimizer_kwargs={"options": {"maxiter": max_iters}})


class GridPredictor:
    """Batched predictions of one adapter's model over grid points (see the module docstring). The model-space
    inputs of the points asked about are cached per adapter, transform pipeline and point."""

    def __init__(self) -> None:
        self._key: tuple[Any, ...] | None = None
        self._rows: dict[tuple[tuple[str, Any], ...], Any] = {}

    def predict(
        self, adapter: Any, params: Sequence[dict[str, Any]], *, marginal: bool = False
    ) -> dict[str, tuple[Any, Any]]:
        """{metric: (means, SDs)} (numpy arrays, one entry per parameterisation in `params`) on the metrics' own
        scale, as `Client.predict` gives them. `marginal`: ask the model for n one-point posteriors (a batch)
        instead of one n-point posterior, so no n x n test covariance is formed even lazily -- the same means and
        variances (to ~1e-11), ~3x less CPU on a 1152-point grid; for tens of thousands of points at once."""
        import numpy as np
        import torch

        X = self._inputs(adapter, params)
        model = adapter.generator.surrogate.model
        with torch.no_grad():
            # only the marginals are read
            post = model.posterior(X.unsqueeze(-2) if marginal else X)
            mean = post.mean.detach().cpu().numpy().astype(float)
            var = post.variance.detach().cpu().numpy().astype(float)
        outcomes = list(adapter.outcomes)
        mean = mean.reshape(len(params), len(outcomes))
        var = np.clip(var.reshape(len(params), len(outcomes)), 0.0, None)
        out = _untransform(adapter, outcomes, mean, var, params)
        return {m: (mu, np.sqrt(np.clip(v, 0.0, None))) for m, (mu, v) in out.items()}

    def _inputs(self, adapter: Any, params: Sequence[dict[str, Any]]) -> Any:
        """The model-space input rows of `params` (n x d tensor), each made once by Ax's own transforms."""
        import torch
        from ax.core.observation import ObservationFeatures

        key = (id(adapter), tuple(type(t).__name__ for t in adapter.transforms.values()), tuple(adapter.parameters))
        if key != self._key:
            self._key, self._rows = key, {}
        names = [tuple(sorted(p.items())) for p in params]
        todo = [(n, p) for n, p in zip(names, params) if n not in self._rows]
        if todo:
            feats = [ObservationFeatures(parameters=dict(p)) for _, p in todo]
            for t in adapter.transforms.values():
                feats = t.transform_observation_features(feats)
            rows = adapter._transform_observation_features(feats)
            for (n, _), row in zip(todo, rows):
                self._rows[n] = row
        return torch.stack([self._rows[n] for n in names])


def acquisition_values(adapter: Any, predictor: GridPredictor, params: Sequence[dict[str, Any]]) -> Any:
    """Ax's own acquisition function for this adapter (what `get_next_trials` would optimise: the generator's
    default, qLogNEI with the experiment's objective and outcome constraint), evaluated at `params` in one
    batch; a numpy array, larger is better. Instantiated once per call (its baseline is the data just fitted)."""
    import torch
    from ax.core.observation import ObservationFeatures

    fixed = {k: v for k, v in params[0].items() if all(p.get(k) == v for p in params)} if params else {}
    ssd, toc = adapter._get_transformed_model_gen_args(
        search_space=adapter._search_space,
        pending_observations={},
        fixed_features=ObservationFeatures(parameters={k: v for k, v in fixed.items() if k == "load"}),
        optimization_config=adapter._optimization_config,
    )
    X = predictor._inputs(adapter, params).unsqueeze(-2)  # n candidates of one point each
    with torch.no_grad():
        vals = adapter.generator.evaluate_acquisition_function(X=X, search_space_digest=ssd, torch_opt_config=toc)
    return vals.detach().cpu().numpy().astype(float).reshape(-1)


def _has_data_untransform(t: Any) -> bool:
    from ax.adapter.transforms.base import Transform

    cls = type(t)
    return (
        cls._untransform_observation_data is not Transform._untransform_observation_data
        or cls.untransform_observations is not Transform.untransform_observations
    )


def _untransform(
    adapter: Any, outcomes: list[str], mean: Any, var: Any, params: Sequence[dict[str, Any]]
) -> dict[str, tuple[Any, Any]]:
    """Model-space (means, variances) per outcome back through the adapter's outcome transforms, last first."""
    import numpy as np
    from ax.adapter.transforms.bilog_y import inv_bilog_transform
    from ax.adapter.transforms.utils import match_ci_width

    steps = [t for t in reversed(list(adapter.transforms.values())) if _has_data_untransform(t)]
    if any(type(t).__name__ not in _VECTORISED for t in steps):
        return _untransform_per_point(adapter, params)
    cols = {m: (mean[:, i].copy(), var[:, i].copy()) for i, m in enumerate(outcomes)}
    for t in steps:
        name = type(t).__name__
        for m, (mu, v) in list(cols.items()):
            if name == "StandardizeY" and m in t.Ymean:
                s = float(t.Ystd[m])
                cols[m] = (mu * s + float(t.Ymean[m]), v * s * s)
            elif name == "BilogY" and m in t.metric_to_bound:
                bound = t.metric_to_bound[m]
                new_mu, new_v = match_ci_width(
                    mean=mu, sem=None, variance=v, transform=lambda y, bound=bound: inv_bilog_transform(y, bound)
                )
                cols[m] = (np.asarray(new_mu, dtype=float), np.asarray(new_v, dtype=float))
    return cols


def _untransform_per_point(adapter: Any, params: Sequence[dict[str, Any]]) -> dict[str, tuple[Any, Any]]:
    """Ax's own prediction, one point at a time through every transform (slow; for transforms `_untransform`
    does not know)."""
    import numpy as np
    from ax.core.observation import ObservationFeatures

    mean, cov = adapter.predict([ObservationFeatures(parameters=dict(p)) for p in params])
    return {m: (np.asarray(mean[m], dtype=float), np.asarray(cov[m][m], dtype=float)) for m in mean}
