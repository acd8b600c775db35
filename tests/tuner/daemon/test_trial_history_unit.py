"""`TrialHistory` alone: a retune's completed trials go to the trial store, and warm-start the next optimiser."""

from __future__ import annotations

from actuators.host import OperatingPoint
from tests.daemon_fakes import FakeOptimizer, loop_context
from tuner.daemon.plain import measurement_dict
from tuner.daemon.trial_history import TrialHistory


def test_completed_trials_are_appended_and_seed_a_new_optimiser(tmp_path):
    ctx = loop_context(tmp_path, trials=4, extra="[history]\nwarm_start = true\n")
    history = TrialHistory(ctx)
    host = ctx.live_host
    points = [OperatingPoint(ctx.knob_space.itr_us[i], ctx.knob_space.dvfs_ghz[-1]) for i in (0, 5, 10)]
    for i, p in enumerate(points):
        ctx.apply(p)
        m = host.measure(1.0)
        ctx.state.trials.append(
            {
                "retune_id": "r000001",
                "index": i,
                "point": p,
                "status": "completed" if i < 2 else "failed",
                "measurement": measurement_dict(m, 1.7e9 + i),
                "time": 1.7e9 + i,
            }
        )
    history.append("r000001")
    opt = FakeOptimizer(ctx.knob_space, 500.0, 99.0, 4, 1, "r000002")
    used = history.seed(opt, "r000002", host.offered_qps())
    assert used == 2 and len(opt.history) == 2  # the failed trial is not history
    history.close()
    ctx.store.release()
