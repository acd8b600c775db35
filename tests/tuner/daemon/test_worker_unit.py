"""The worker's operations alone (no process): points cross the pipe as `OperatingPoint`s, never tuples."""

from __future__ import annotations

import pickle

from actuators.host import OperatingPoint
from tests.daemon_fakes import FakeOptimizer
from tests.fakes import FakeHost
from tuner.daemon.worker import OPERATIONS, Record, _record


def test_suggest_complete_and_best_send_operating_points_that_survive_pickling():
    host = FakeHost()
    opt = FakeOptimizer(host.knobs(), 5000.0, 99.0, 4, 1, "r000001")
    index, point = pickle.loads(pickle.dumps(OPERATIONS["suggest"](opt, ())))
    assert isinstance(point, OperatingPoint)
    host.set_itr(point.itr_us)
    host.set_dvfs(point.dvfs_ghz)
    m = host.measure(1.0)
    row = pickle.loads(pickle.dumps(OPERATIONS["complete"](opt, (index, m, m.offered_qps, None))))
    rec = _record(row, m)
    assert isinstance(rec, Record) and rec.point == point and rec.status == "completed"
    best, _, met, _ = pickle.loads(pickle.dumps(OPERATIONS["best"](opt, ())))
    assert best == point and met
    assert OPERATIONS["begin_retune"](opt, (1e5,)) is None and opt.begun_qps == 1e5
