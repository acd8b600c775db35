"""Synthetic completed trials for trial-store tests (no simulation: fields chosen, every one valid)."""

from __future__ import annotations

import sys

from actuators.host import PERCENTILES, Measurement, OperatingPoint
from tuner.optimize.optimizer import Objective, TrialRecord
from tuner.store.history import HistoryEntry


def entry(
    i: int,
    host: str = "h1/sim",
    hw_class: str = "c1",
    *,
    qps: float = 200_000.0,
    itr: int = 100,
    ghz: float = 2.0,
    power_w: float = 80.0,
    p99_us: float = 300.0,
    time: float | None = None,
    seconds: float = 10.0,
) -> HistoryEntry:
    """Trial `i` (its energy differs by i, so every i is a distinct trial)."""
    lat = {p: p99_us * (0.5 + 0.5 * p / 99.0) for p in PERCENTILES}
    m = Measurement(
        seconds=seconds,
        offered_qps=qps,
        achieved_qps=qps,
        requests=int(qps * seconds),
        latency_us=lat,
        latency_ci_us={p: (v * 0.95, v * 1.05) for p, v in lat.items()},
        energy_j=power_w * seconds + i * 1e-3,
        point=OperatingPoint(itr, ghz),
    )
    rec = TrialRecord(i, OperatingPoint(itr, ghz), qps, "completed", m, m.power_w, None)
    return HistoryEntry(rec, host, float(i if time is None else time), Objective(), hw_class)


def writer_main(kind: str, target: str, state_dir: str, host: str) -> None:
    """Child process: add one trial at a time forever, printing each index once its add returned."""
    from tuner.store.open import open_store

    store = open_store(target if kind == "pg" else f"sqlite://{target}", state_dir)
    i = 0
    while True:
        store.add([entry(i, host)])
        sys.stdout.write(f"{i}\n")
        sys.stdout.flush()
        i += 1


if __name__ == "__main__":
    writer_main(*sys.argv[1:5])
