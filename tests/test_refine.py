"""The refining trial before a retune stops (`TunerSettings.refine_step`): the next longer ITR of the point the
retune would hold, tried only when the model's mean there is within the final choice's limit and its P(SLA
broken) with the model's own SD is within delta."""

from __future__ import annotations

from tests.fakes import FakeHost
from tests.test_contextual import OBJ, SMALL
from tests.test_safe_evidence import seeded
from tuner.optimize.retune import run_trial
from tuner.optimize.settings import final_limit_us

QPS = 120_000.0


def _retune(**kw):
    opt, s = seeded(stop_ei_pct=50.0, min_trials=1, trials=8, **kw)
    host = FakeHost(knobs=SMALL, seed=1)
    host.set_offered_qps(QPS)
    opt.begin_retune(QPS)
    reasons = []
    while True:
        stop, why = opt.should_stop()
        reasons.append(why)
        if stop:
            return opt, s, reasons
        run_trial(host, opt, s)


def test_a_refining_trial_is_the_next_longer_itr_of_the_held_point_and_within_the_limits() -> None:
    opt, s, reasons = _retune(refine_step=True, final_margin_pct=1.0, final_margin_ci=1.0)
    recs = opt.retune_trials()
    refined = [k for k, r in enumerate(recs) if r.note.startswith("refining step")]
    assert refined, reasons  # the fake host's surface leaves room above the first held point
    for k in refined:
        r = recs[k]
        asked = [w for w in reasons if "one refining trial first" in w]
        assert asked
        # the tried point is one ITR step (16 µs) above a point measured earlier in this retune, same frequency
        earlier = [x.point for x in recs[:k]]
        assert any(p.dvfs_ghz == r.point.dvfs_ghz and r.point.itr_us - p.itr_us == 16 for p in earlier)
        assert r.point not in earlier
        assert r.p_violation is not None and r.p_violation <= s.safe_delta
        predicted = float(r.note.split("predicted ")[1].split(" µs")[0])
        assert predicted <= final_limit_us(OBJ.sla_us, s)


def test_without_the_flag_or_with_no_room_under_the_limit_the_retune_stops_as_before() -> None:
    opt, _, reasons = _retune()
    assert not any(r.note.startswith("refining step") for r in opt.retune_trials())
    assert not any("refining" in w for w in reasons)
    # a final limit far under every point (99 % margin: 5 µs) leaves nothing to refine toward
    opt, _, reasons = _retune(refine_step=True, final_margin_pct=99.0)
    assert not any(r.note.startswith("refining step") for r in opt.retune_trials())
