"""The OS-policy baseline per load band and the energy saved against it (with its CI)."""

from __future__ import annotations

import math

import numpy as np
import pytest

from actuators.host import Measurement
from core.errors import InputError
from tuner.daemon.baseline import BandStats, LoadBands, energy_saved


def window(qps: float, watts: float | None, p99: float = 100.0, seconds: float = 10.0) -> Measurement:
    return Measurement(
        seconds=seconds,
        offered_qps=qps,
        achieved_qps=qps,
        requests=int(qps * seconds),
        latency_us={99.0: p99},
        latency_ci_us={99.0: (p99 * 0.9, p99 * 1.1)},
        energy_j=(watts or 0.0) * seconds,
        point=None,
        energy_known=watts is not None,
    )


def test_bands_are_geometric_with_an_idle_band():
    b = LoadBands(20.0)
    assert b.index(0.0) == b.index(99.0) == -1 and b.label(-1) == "0-100"
    assert b.index(100.0) == 0 and b.index(119.0) == 0 and b.index(121.0) == 1
    lo, hi = b.bounds(b.index(50_000))
    assert lo <= 50_000 < hi and hi / lo == pytest.approx(1.2)


def test_savings_ratio_and_ci_cover_the_truth():
    rng = np.random.default_rng(1)
    base, tuned = BandStats(), BandStats()
    for _ in range(30):
        for qps, watts in ((1_000, 60.0), (20_000, 100.0)):
            base.add(window(qps, watts + rng.normal(0, 3)))
            tuned.add(window(qps, 0.7 * watts + rng.normal(0, 3)))
    s = energy_saved(base, tuned)
    assert s is not None and len(s.bands) == 2
    assert s.ratio == pytest.approx(0.30, abs=0.02)
    assert s.lower < 0.30 < s.upper and s.upper - s.lower < 0.05


def test_no_saving_without_power_on_both_sides():
    base, tuned = BandStats(), BandStats()
    for _ in range(5):
        base.add(window(1_000, None))  # a VM: no RAPL
        tuned.add(window(1_000, 50.0))
    assert energy_saved(base, tuned) is None
    assert base.power_w(base.bands.index(1_000)) is None and base.data[base.bands.index(1_000)].windows == 5
    base2 = BandStats()
    base2.add(window(50_000, 80.0))  # another band only
    assert energy_saved(base2, tuned) is None


def test_round_trip_and_refusals(tmp_path):
    s = BandStats()
    for w in (50.0, 52.0, 54.0):
        s.add(window(5_000, w, p99=120.0))
    path = tmp_path / "baseline.json"
    s.save(path)
    back = BandStats.load(path, LoadBands())
    k = s.bands.index(5_000)
    assert back.power_w(k) == pytest.approx(52.0) and back.data[k].latency[99.0].mean == pytest.approx(120.0)
    assert math.isclose(back.data[k].power.sem, s.data[k].power.sem)
    with pytest.raises(InputError, match="bands are 20 % wide"):
        BandStats.load(path, LoadBands(10.0))
    path.write_text("{not json")
    with pytest.raises(InputError, match="cannot read the baseline"):
        BandStats.load(path, LoadBands())
    assert BandStats.load(tmp_path / "absent.json", LoadBands()).data == {}
