"""Twitter cache traces: parse (`parser`, `format`, `compression`), per-second series and bins (`series`),
load schedules for replay (`schedule`), cluster statistics (`clusters`) and a synthetic generator (`synth`).

Kept import-light: nothing is imported here, so `tuner --help` does not pay for numpy.
"""
