"""Bayesian optimisation of the operating point: the Ax facade (`optimizer`), the safety filter and
acquisition helpers (`acquisition`), the latency scale the model fits (`latscale`), statistically sized
measurement windows (`windowing`)."""
