"""Bayesian optimisation of the operating point. The facade `optimizer.Optimizer` holds four members, one job
each: `experiment` (`ExperimentModel`: the Ax experiment over the knob grid and its predictions), `trial_book`
(`TrialBook`: the trials handed out and reported), `safe_exploration` (`SafeExploration`: the safety filter) and
`stopping` (`StoppingRule`); `optimizer_state` saves and restores them. `settings` (`Objective`,
`TunerSettings`), `records` (`TrialRecord`, `Prediction`) and `decision` (`Decision`, the best measured point)
are its value types, `retune` runs trials on a host. Helpers: `acquisition` (EI and the evidence rules),
`latscale` (the latency scale the model fits), `surrogate` (the fitted GP kept across suggestions), `loadtable`
(predictions over a grid of loads), `windowing` (statistically sized measurement windows), `axsetup` (Ax's
logging, warnings and batch size)."""
