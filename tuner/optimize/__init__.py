"""Bayesian optimisation of the operating point. The Ax facade `optimizer.Optimizer` sits on layers, one job
each: `model` (the Ax experiment over the knob grid), `safety` (the safety filter), `stopping` (the stopping
rule); `settings` (`Objective`, `TunerSettings`), `records` (`TrialRecord`, `Prediction`) and `decision`
(`Decision`, the best measured point) are its value types, `retune` runs trials on a host. Helpers:
`acquisition` (EI and the evidence rules), `latscale` (the latency scale the model fits), `windowing`
(statistically sized measurement windows), `axsetup` (Ax's logging, warnings and batch size)."""
