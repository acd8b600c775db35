"""The expanding trial before a retune stops (`TunerSettings.expand_ei_pct`): one step, among the points the
safety filter allows, toward a point no measurement reaches yet where the model expects an improvement."""

from __future__ import annotations

import math
import re

from actuators.host import OperatingPoint
from tests.optimize_fakes import SMALL, retune_to_stop, seeded
from tuner.optimize.decision import best_decision

QPS = 120_000.0


def _retune(**kw):
    opt, s = seeded(stop_ei_pct=50.0, min_trials=1, trials=8, safe_radius=0.05, **kw)
    return opt, s, retune_to_stop(opt, s, QPS)


def _points(note: str) -> tuple[OperatingPoint, OperatingPoint]:
    (a, b) = re.findall(r"ITR (\d+) µs @ ([\d.]+) GHz", note)[:2]
    return OperatingPoint(int(a[0]), float(a[1])), OperatingPoint(int(b[0]), float(b[1]))


def test_one_expanding_trial_steps_toward_what_the_evidence_does_not_reach() -> None:
    opt, _, reasons = _retune(expand_ei_pct=0.01)
    recs = opt.retune_trials()
    expanded = [r for r in recs if r.note.startswith("expanding step")]
    assert len(expanded) == 1, reasons  # at most one per retune, and this surface leaves one to take
    assert sum("one expanding trial first" in w for w in reasons) == 1
    r = expanded[0]
    step, target = _points(r.note)
    assert step == r.point and target != step
    assert r.point not in [x.point for x in recs if x.index < r.index]  # untried in this retune
    cell = opt.model.cell_of(r.point)
    assert bool(opt.safety.rules.supported([cell], opt.safety.rules.evidence())[0])  # a point the filter allows
    # nearer the target than the point the retune held when it asked for the step
    held = best_decision([x for x in recs if x.index < r.index], opt.objective, opt.settings, SMALL).point
    u = opt.model.coords([opt.model.cell_of(p) for p in (step, target, held)])
    assert math.dist(u[0], u[1]) < math.dist(u[2], u[1])


def test_off_no_expanding_trial() -> None:
    opt, _, reasons = _retune()
    assert not any(r.note.startswith("expanding step") for r in opt.retune_trials())
    assert not any("expanding" in w for w in reasons)
