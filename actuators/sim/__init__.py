"""The simulated host: a calibrated model of a memcached server under ITR x DVFS (`host`), the queueing and
power model it evaluates (`model`), and the calibration targets it is judged by (`calibration`)."""
