"""`ModelTables` alone: a retune's predictions over the knob grid, kept on disk and read back without a model."""

from __future__ import annotations

from actuators.host import OperatingPoint
from tests.daemon_fakes import FakeOptimizer, loop_context
from tuner.daemon.model_tables import MODEL_TABLES, ModelTables
from tuner.daemon.plain import ModelTable


def test_a_built_table_predicts_every_measured_point_and_loads_back_from_disk(tmp_path):
    ctx = loop_context(tmp_path)
    space = ctx.knob_space
    opt = FakeOptimizer(space, 500.0, 99.0, 4, 1, "r000001")
    idx, point = opt.suggest()
    ctx.apply(point)
    opt.complete(idx, ctx.live_host.measure(1.0), 100_000.0)
    ctx.state.trials.append({"status": "completed", "point": point})
    ctx.state.experiments.append("r000001")
    models = ModelTables(ctx)
    models.build("r000001", opt, 100_000.0, 99.0)
    (table,) = models.tables()
    assert table.retune_id == "r000001" and point in table.points  # a measured point can be held from the model
    assert len(table.points) == len(table.latency_us) == len(table.power_w) > len(space.dvfs_ghz)
    fresh = ModelTables(ctx)
    fresh.prepare()  # plain JSON: no optimiser needed
    assert fresh.tables() == [table]
    ctx.store.release()


def test_only_the_newest_tables_are_kept(tmp_path):
    ctx = loop_context(tmp_path)
    models = ModelTables(ctx)
    p = OperatingPoint(50, 2.0)
    for i in range(MODEL_TABLES + 3):
        models.put(ModelTable(f"r{i:06d}", 1.0, 99.0, (p,), (1.0,), (0.0,), (1.0,), (0.0,)))
    ids = [t.retune_id for t in models.tables()]
    assert ids == [f"r{i:06d}" for i in range(3, MODEL_TABLES + 3)]
    ctx.store.release()
