"""GetPowerCurve over a range of loads through a real gRPC channel to a running daemon (context mode, the light
optimiser's made-up multi-load model, `tests.daemon_fakes.FakeOptimizer.predict_loads`): loads inside, between
and outside the retunes' loads, bad ranges, `tuner ctl curve`, and the answer after a restart."""

from __future__ import annotations

import grpc
import pytest

from tests.daemon_fakes import Running, read_state, wait_for, write_config
from tests.fakes import FakeHost
from tuner.cli.app import main
from tuner.daemon.service import protos

TUNING = "context = true\ncontext_max_qps = 1000000.0\nhold_max_p = 0"


def _decisions(tmp):
    return read_state(tmp).get("decisions", [])


@pytest.fixture(scope="module")
def tuned(tmp_path_factory):
    """A daemon that retuned at 300k and then at 420k QPS (the second retune's model saw both loads)."""
    tmp = tmp_path_factory.mktemp("curve")
    cfg = write_config(tmp, sla_us=500.0, tuning=TUNING)
    host = FakeHost(qps=300_000.0)
    r = Running(cfg, host=host)
    wait_for(lambda: r.daemon.status().state == "holding" and len(_decisions(tmp)) == 1)
    host.set_offered_qps(420_000.0)  # out of the 20 % band: a retune (hold_max_p = 0: never held from the model)
    wait_for(lambda: len(_decisions(tmp)) == 2 and r.daemon.status().state == "holding")
    yield tmp, cfg, r
    if r.thread.is_alive():
        r.stop()


def _stub(r):
    pb, services = protos()
    ch = grpc.insecure_channel(r.daemon.grpc_address)
    return pb, services.TunerStub(ch), ch


def _curve(r, **fields):
    pb, stub, ch = _stub(r)
    try:
        return stub.GetPowerCurve(pb.GetPowerCurveRequest(**fields), timeout=5)
    finally:
        ch.close()


def test_range_inside_between_and_outside_the_measured_loads(tuned):
    tmp, _, r = tuned
    rid = _decisions(tmp)[-1]["retune_id"]
    exp = tmp / "state" / "experiments"
    assert sorted(f.name for f in exp.glob("*.loads.json")) == [f"{rid}.loads.json"]  # the newest retune's only
    assert (exp / f"{_decisions(tmp)[0]['retune_id']}.table.json").is_file()  # the per-retune tables stay
    c = _curve(r, qps_min=100_000.0, qps_max=600_000.0, points=11)  # every 50k
    assert (c.sla_us, c.percentile) == (500.0, 99.0) and c.note == ""
    assert (c.measured_qps_min, c.measured_qps_max) == pytest.approx((300_000.0, 420_000.0))
    by_qps = {round(p.qps): p for p in c.points}
    assert list(by_qps) == [100_000 + 50_000 * k for k in range(11)]
    # 300k (a grid load and the first retune's), 350k (between the retunes: interpolated), 400k: inside
    at, mid, top = by_qps[300_000], by_qps[350_000], by_qps[400_000]
    assert at.source == f"model {rid} at 300000 QPS" and not at.extrapolated
    assert mid.source == f"model {rid}, interpolated 300000..400000 QPS" and not mid.extrapolated
    for p in (at, mid, top):
        assert p.meets_sla and p.predicted_latency_us + 1.645 * p.latency_sem_us <= 500.0
    assert at.predicted_power_w < mid.predicted_power_w < top.predicted_power_w  # more load costs more power
    # outside 300k..420k the model extrapolates: flagged, and its latency uncertainty is relatively larger
    low, high = by_qps[100_000], by_qps[450_000]
    assert low.extrapolated and high.extrapolated and not by_qps[400_000].extrapolated
    assert low.latency_sem_us / low.predicted_latency_us > 2 * (mid.latency_sem_us / mid.predicted_latency_us)
    # nothing meets the SLA where the made-up host saturates (580k QPS at 2.9 GHz): reported, no point
    assert not by_qps[600_000].meets_sla and not by_qps[600_000].HasField("point") and by_qps[500_000].meets_sla


def test_default_range_beyond_the_model_and_other_percentiles(tuned):
    _, _, r = tuned
    c = _curve(r, points=20)  # qps_min/qps_max 0: the model's loads above 0 (100k .. 1M)
    assert [round(p.qps) for p in c.points] == pytest.approx([100_000 + 900_000 * k / 19 for k in range(20)], abs=1)
    beyond = _curve(r, qps_min=2_000_000.0).points
    assert len(beyond) == 1 and not beyond[0].meets_sla and "beyond its loads (0..1000000 QPS)" in beyond[0].source
    other = _curve(r, percentile=90.0, qps_max=400_000.0)
    assert list(other.points) == [] and "predicts p99 only" in other.note
    # all range fields 0: the per-retune answer, one point per retune load
    assert [round(p.qps) for p in _curve(r).points] == [300_000, 420_000]


@pytest.mark.parametrize(
    "fields, word",
    [
        ({"qps_min": 400_000.0, "qps_max": 300_000.0}, "qps_min: expected at most qps_max"),
        ({"qps_min": -1.0}, "qps_min: expected a finite load"),
        ({"qps_max": float("inf")}, "qps_max: expected a finite load"),
        ({"qps_min": 1e5, "qps_max": 2e5, "points": 201}, "points: expected a count in [0, 200]"),
        ({"qps_min": 1e5, "qps_max": 2e5, "points": 1}, "points: expected >= 2"),
    ],
)
def test_bad_ranges_are_invalid_argument_with_one_line(tuned, fields, word):
    _, _, r = tuned
    with pytest.raises(grpc.RpcError) as err:
        _curve(r, **fields)
    assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert err.value.details().startswith(word) and "\n" not in err.value.details()


def test_ctl_curve(tuned, capsys):
    tmp, _, r = tuned
    addr = r.daemon.grpc_address
    assert main(["ctl", "--address", addr, "curve", "--qps-min", "100000", "--qps-max", "400000", "--points", "4"]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0] == "p99 <= 500 µs; this host measured 300000..420000 QPS"
    assert len(out) == 2 + 4 and out[2].strip().startswith("100000") and out[2].endswith("[extrapolated]")
    assert out[4].strip().startswith("300000") and not out[4].endswith("[extrapolated]")
    assert main(["ctl", "--address", addr, "curve", "--qps-min", "5", "--qps-max", "1"]) == 2
    assert "INVALID_ARGUMENT: qps_min: expected at most qps_max" in capsys.readouterr().err
    assert main(["ctl", "--address", addr, "curve", "--points", "-1"]) == 2


def test_a_restarted_daemon_answers_from_the_saved_table(tuned):
    tmp, cfg, r = tuned
    before = _curve(r, qps_min=200_000.0, qps_max=450_000.0, points=6)
    assert r.stop() == 0
    with Running(cfg, host=FakeHost(qps=420_000.0)) as again:
        wait_for(lambda: again.daemon.status().state == "holding")
        after = _curve(again, qps_min=200_000.0, qps_max=450_000.0, points=6)
    assert len(_decisions(tmp)) == 2  # no retune since: the answer is the saved table's
    assert [(p.qps, p.point.itr_us, p.point.dvfs_ghz, p.extrapolated, p.source) for p in after.points] == [
        (p.qps, p.point.itr_us, p.point.dvfs_ghz, p.extrapolated, p.source) for p in before.points
    ]
    assert [p.predicted_power_w for p in after.points] == pytest.approx([p.predicted_power_w for p in before.points])
    assert (after.measured_qps_min, after.measured_qps_max) == (before.measured_qps_min, before.measured_qps_max)


def test_no_multi_load_model_is_an_empty_answer_with_a_note(tmp_path):
    # an optimiser without `predict_loads` (the real one outside context mode returns None the same way)
    cfg = write_config(tmp_path, sla_us=500.0, tuning=TUNING)
    with Running(cfg, host=FakeHost(qps=300_000.0), optimizers=_NoTable()) as r:
        wait_for(lambda: r.daemon.status().state == "holding")
        c = _curve(r, qps_min=1e5, qps_max=2e5, points=2)
    assert list(c.points) == [] and c.note.startswith("no multi-load model yet")


class _NoTable:
    """`FakeOptimizers` whose optimisers have no `predict_loads` (an optimiser outside context mode)."""

    def __init__(self) -> None:
        from tests.daemon_fakes import FakeOptimizers

        self._inner = FakeOptimizers()

    def create(self, *args):
        opt = self._inner.create(*args)
        opt.predict_loads = None  # not callable: the daemon asks only optimisers that have it
        return opt

    def load(self, text):
        return self._inner.load(text)
