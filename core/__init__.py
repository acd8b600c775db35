"""The project's bottom layer: errors, crash-safe file writes and order-statistic CIs, shared by every package.

It imports nothing of the project, so `actuators`, `traces`, `reward` and `tuner` can all stand on it.
"""
