"""The refining trial before a retune stops (`TunerSettings.refine_step`): the next longer ITR of the point the
retune would hold, tried only when the held point's reading times the model's step is within the final choice's
limit and its P(SLA broken), as the safety gate computes it, is within delta; and the incumbent exploration
improves on stays the one of the margin it aims within."""

from __future__ import annotations

from tests.optimize_fakes import OBJ, SMALL, retune_to_stop, seeded
from tuner.optimize.settings import final_limit_us

QPS = 120_000.0


def _retune(**kw):
    opt, s = seeded(stop_ei_pct=50.0, min_trials=1, trials=8, **kw)
    return opt, s, retune_to_stop(opt, s, QPS)


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
        # the model's step applied to the held point's reading is within the final choice's limit
        expected = float(r.note.split("expected ")[1].split(" µs at most")[0])
        assert expected <= final_limit_us(OBJ.sla_us, s)


def test_without_the_flag_or_with_no_room_under_the_limit_the_retune_stops_as_before() -> None:
    opt, _, reasons = _retune()
    assert not any(r.note.startswith("refining step") for r in opt.retune_trials())
    assert not any("refining" in w for w in reasons)
    # a final limit far under every point (99 % margin: 5 µs) leaves nothing to refine toward
    opt, _, reasons = _retune(refine_step=True, final_margin_pct=99.0)
    assert not any(r.note.startswith("refining step") for r in opt.retune_trials())


def test_exploration_keeps_its_own_incumbent_when_the_final_choice_is_looser() -> None:
    """A trial within the final choice's limit (1 % + 2 x CI) but not exploration's (5 %) is what `best` holds,
    yet the stopping rule's incumbent is still the point exploration's rule takes."""
    from tests.optimize_fakes import meas
    from tuner.optimize.decision import best_decision, exploration_settings

    opt, s = seeded(stop_ei_pct=1.0, min_trials=1, final_margin_pct=1.0, final_margin_ci=1.0, refine_step=True)
    opt.begin_retune(QPS)
    for p99, power in [(440.0, 30.0), (480.0, 25.0)]:  # CI +-2 %: 480 + 2 x 9.6 = 499.2 > 495; 448.8 <= 475
        i, _ = opt.suggest()
        opt.complete(i, meas(p99, power, qps=QPS), QPS)
    assert opt.best().measurement.power_w == 30.0
    opt2, _ = seeded(stop_ei_pct=1.0, min_trials=1, final_margin_pct=1.0, final_margin_ci=0.5, refine_step=True)
    opt2.begin_retune(QPS)
    for p99, power in [(440.0, 30.0), (470.0, 25.0)]:  # 470 + 1.5 x 9.4 = 484.1 <= 495, but 479.4 > 475
        i, _ = opt2.suggest()
        opt2.complete(i, meas(p99, power, qps=QPS), QPS)
    held = opt2.best()
    explore = best_decision(opt2.retune_trials(), OBJ, exploration_settings(opt2.settings), SMALL)
    assert held.measurement.power_w == 25.0 and explore.measurement.power_w == 30.0
    assert opt2.safety.incumbent_w({}, None) == 30.0
    assert exploration_settings(s).final_margin_pct == s.sla_margin_pct == 5.0


def test_a_point_met_by_its_estimate_only_is_not_where_a_guarded_or_refining_retune_stops() -> None:
    """With `estimate_guard` or `refine_step` (both off by default) a retune whose held point met the SLA by its estimate
    only (no trial passed the CI rule) goes on; the same trials with neither stop as before (a replay held such a
    point at 496 µs and measured 502 µs over the hour)."""
    from tests.optimize_fakes import meas

    def after(**kw):
        opt, _ = seeded(stop_ei_pct=99.0, min_trials=1, final_margin_pct=1.0, final_margin_ci=1.0, **kw)
        opt.begin_retune(QPS)
        i, _ = opt.suggest()
        opt.complete(i, meas(496.0, 25.0, qps=QPS), QPS)  # CI +-2 %: within the SLA by its estimate only
        d = opt.best()
        assert d.met_sla and d.by_estimate
        return opt.should_stop()

    for flag in ("estimate_guard", "refine_step"):
        stop, why = after(**{flag: True})
        assert not stop and "only by its estimate" in why, flag
    stop, why = after()
    assert "only by its estimate" not in why


def test_the_guard_is_off_by_default_and_on_in_its_preset() -> None:
    from tuner.optimize.presets import preset_settings
    from tuner.optimize.settings import TunerSettings

    assert not TunerSettings().estimate_guard
    assert not preset_settings("cold").estimate_guard and not preset_settings("warm").estimate_guard
    assert preset_settings("warm-estimate-guard").estimate_guard
