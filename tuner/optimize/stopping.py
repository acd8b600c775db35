"""The optimiser's stopping rule (`TunerSettings.stop_ei_pct` > 0): a retune ends once one more trial is not
expected to improve on the best measured SLA-meeting power by that %, judged over the model's predictions at
the points the safety filter allows -- but not while a bisecting trial is due between a trial over the SLA and a
held point far above it in frequency, nor (`descend_pct`) while the held point costs that % more than a point
measured within the limit at a load just below and far lower in frequency (one descending trial halfway toward it),
nor (`estimate_guard`) while the point it would hold met the SLA by its estimate only, nor (`refine_step`) before
one refining trial next to the held point, nor (`expand_ei_pct`) before one expanding
trial toward a cell the evidence does not reach yet; the rule leaves that trial in `StoppingRule.refine` for the
next suggestion."""

from __future__ import annotations

import math
import time

from tuner.optimize.decision import Decision, best_decision, exploration_settings
from tuner.optimize.experiment import ExperimentModel, GridPrediction
from tuner.optimize.records import STATUS_COMPLETED, Pending
from tuner.optimize.safe_evidence import SAFE_LOAD_TOL
from tuner.optimize.safe_exploration import PEAK_MAX_P, SafeExploration
from tuner.optimize.settings import TunerSettings, final_limit_us, pct_text
from tuner.optimize.trial_book import TrialBook

#: How an expanding trial's note begins (`StoppingRule._expand_cell`: at most one per retune).
EXPAND_NOTE = "expanding step"
#: `StoppingRule._descend_cell`: a held point this far above the cheaper point in frequency is descended from whatever
#: the model's power says (bundled day, 99 % < 500 µs, seed 4, 525 kQPS: 338 µs @ 2.0 GHz held at 78.8 W, 5 % over the
#: model's power at 258 µs @ 1.6 GHz measured within the limit at 492 kQPS; hours 15-19 at 1.8-2.0 GHz, the day
#: 1.041 x the oracle, 1.024 x with this).
DESCEND_FAR_GHZ = 0.4


class StoppingRule:
    """`should_stop` of one optimiser, over its model, safety filter and trial books (see the module docstring)."""

    def __init__(self, model: ExperimentModel, safety: SafeExploration, book: TrialBook) -> None:
        self.model = model
        self.safety = safety
        self.book = book
        #: compute of the stopping rule since the last suggestion (it counts in that suggestion's `compute_s`)
        self.compute_s = 0.0
        #: the bisecting or refining trial the rule asked for before stopping; the next suggestion hands it out
        self.refine: Pending | None = None

    @property
    def settings(self) -> TunerSettings:
        return self.model.settings

    def reset(self) -> None:
        """A new retune: no compute carried over, no trial asked for."""
        self.compute_s = 0.0
        self.refine = None

    def take_compute_s(self) -> float:
        """The compute since the last call (for the suggestion being made), and start counting afresh."""
        spent, self.compute_s = self.compute_s, 0.0
        return spent

    def should_stop(self) -> tuple[bool, str]:
        """Whether the current retune should end, and why (`_should_stop`); its compute time counts in the
        next suggestion's `compute_s`."""
        t0 = time.perf_counter()
        try:
            return self._should_stop()
        finally:
            self.compute_s += time.perf_counter() - t0

    def _should_stop(self) -> tuple[bool, str]:
        """Whether the current retune should end, and why.

        True once `settings.trials` trials of this retune were reported. With `stop_ei_pct` > 0, also after
        `min_trials` when the largest constrained expected improvement of one more trial over the grid at
        this load -- EI of power below the best SLA-meeting power measured in this retune (as `best` judges
        it), times the model's P(percentile within the limit `best` applies: the SLA less `sla_margin_pct`
        with `sla_check="ci"`) -- is below `stop_ei_pct` % of that power. With safe exploration only points
        the safety filter would let us try count -- and, as its substitute is a point not yet measured in this
        retune whenever one is allowed, only those then (`SafeExploration.untried`). Before it stops, one
        bisecting trial if `_bisect_cell` finds one (then the descending trial, then with `refine_step` the refining
        one): `judge`.
        """
        n = len(self.book.retune_trials())
        s = self.settings
        if n >= s.trials:
            return True, f"trial budget reached ({n} of {s.trials})"
        if s.stop_ei_pct <= 0:
            return False, "stopping rule off"
        if n < s.min_trials:
            return False, f"{n} trial(s) of at least {s.min_trials}"
        d = best_decision(self.book.retune_trials(), self.model.objective, exploration_settings(s), self.model.space)
        if not d.met_sla or d.measurement is None:
            return False, "no trial of this retune met the SLA yet"
        held = best_decision(self.book.retune_trials(), self.model.objective, s, self.model.space)  # what `best` holds
        if held.by_estimate and (s.estimate_guard or s.refine_step):
            return False, "no trial of this retune met the SLA with its CI and margin yet (only by its estimate)"
        best_w = d.measurement.power_w
        cells = (
            self.safety.rules.near_cells(self.safety.rules.evidence())
            if s.safe_delta > 0 and s.safe_radius > 0
            else None
        )
        if cells is not None and not cells:
            return False, "no point near one measured within the limit at this load or above yet"
        grid = self.model.grid_model(self.book.load, refit=True, cells=cells)
        if grid is None:
            return False, "no model yet"
        return self.judge(grid, best_w, held)

    def judge(self, grid: GridPrediction, best_w: float, held: Decision) -> tuple[bool, str]:
        """Whether to stop on the model's predictions `grid` (the cells the safety filter allows at this load)
        with `best_w` the best SLA-meeting power measured in this retune: stop when the largest constrained EI
        of one more trial, over the cells untried in this retune (with safe exploration), is below `stop_ei_pct`
        % of it -- unless a bisecting, descending or refining trial next to `held` (the point `best` would hold)
        is due first; that trial is left in `refine`."""
        from tuner.optimize import acquisition

        s = self.settings
        ei = self.safety.ei(grid, best_w)
        if s.safe_delta > 0:
            ei = ei * self.safety.untried(grid["cells"], ~grid["unsafe"])
        k = int(ei.argmax())
        limit = s.stop_ei_pct / 100.0 * best_w
        where = self.model.grid_point(grid["cells"][k])
        if acquisition.should_stop_ei(float(ei[k]), best_w, s.stop_ei_pct):
            why = (
                f"expected improvement of one more trial {ei[k]:.3g} W (at {where}) < {s.stop_ei_pct:g} % "
                f"of the best {best_w:.1f} W"
            )
            bisect = self._bisect_cell(held) if s.safe_delta > 0 else None
            if bisect is not None:
                self.refine = bisect
                return False, f"{why}; one bisecting trial first: {bisect.note}"
            descend = self._descend_cell(held) if s.descend_pct > 0 and s.safe_delta > 0 else None
            if descend is not None:
                self.refine = descend
                return False, f"{why}; one descending trial first: {descend.note}"
            refine = self._refine_cell(held) if s.refine_step and s.safe_delta > 0 else None
            if refine is not None:
                self.refine = refine
                return False, f"{why}; one refining trial first: {refine.note}"
            expand = self._expand_cell(best_w, held)
            if expand is None:
                return True, why
            self.refine = expand
            return False, f"{why}; one expanding trial first: {expand.note}"
        return False, f"expected improvement {ei[k]:.3g} W at {where} >= {limit:.3g} W"

    def _bisect_cell(self, held: Decision) -> Pending | None:
        """The bisecting trial before a retune stops. When a trial of this retune read over the SLA at a lower
        frequency than the point the retune would hold, and more than one frequency step lies between the held
        point and the highest lower frequency a trial read over the final choice's limit at: the frequency halfway
        between them (rounded toward the held point; the next one up if that has a trial of this retune or no
        candidate), at the ITR halfway between the held point's and those of the trials over the limit there
        (rounded toward the held point's), if that point is not next to one measured over the SLA
        (`EvidenceRules.vetoed`) and its P(SLA broken), as the gate computes it, is at most PEAK_MAX_P. Nearness to
        evidence is waived: the point lies between one that met the limit and one over it. None otherwise.

        Why: a first trial over the SLA at a new peak load vetoes its neighbours, the safety filter's substitute
        goes far up in frequency, the expected improvement over the points near what was measured there falls
        under `stop_ei_pct`, and the far point is held for hours (bundled day, seed 2, 600 kQPS: 226 µs @ 1.6 GHz
        read 597 µs, 306 µs @ 2.0 GHz held at 1.09 x the oracle). The middle ITR, not the model's choice: the
        model's largest expected improvement sat at the longest ITR of the range (seed 5: read 495 µs) or, with
        no range, past anything measured (610 µs @ 1.8 GHz read 829 µs). One trial per frequency keeps the
        bisection within the steps between. Pure of Ax: the trial is attached when `suggest` hands it out."""
        if held.measurement is None or not held.met_sla or held.by_estimate:
            return None
        pct, sla = self.model.objective.percentile, self.model.objective.sla_us
        limit = final_limit_us(sla, self.settings)
        hi, hj = self.model.cell_of(held.point)
        done = [r for r in self.book.retune_trials() if r.status == STATUS_COMPLETED and r.measurement is not None]
        below = [(self.model.cell_of(r.point), r.measurement.percentile(pct)) for r in done]  # type: ignore[union-attr]
        below = [(c, lat) for c, lat in below if c[1] < hj]
        if not any(lat > sla for _, lat in below):
            return None
        bad = [c for c, lat in below if lat > limit]
        top = max((j for _, j in bad), default=-1)
        if top < 0 or hj - top <= 1:
            return None
        itrs = [hi] + [i for i, j in bad if j == top]
        lo_i, hi_i = min(itrs), max(itrs)
        seen = {self.model.cell_of(r.point) for r in done}
        evidence = self.safety.rules.evidence()
        cols = {j for _, j in seen}
        for j in range((top + hj + 1) // 2, hj):
            cells = [] if j in cols else [(i, j) for i in range(lo_i, hi_i + 1)]
            if cells:
                veto = self.safety.rules.vetoed(cells, evidence)
                cells = [c for c, v in zip(cells, veto) if not v]
            grid = self.model.grid_model(self.book.load, refit=False, cells=cells) if cells else None
            if grid is None:
                continue
            pv = grid["p_violation"]
            mid = (lo_i + hi_i + 1) // 2 if hi_i == hi else (lo_i + hi_i) // 2
            at = [c[0] for c in cells]
            if mid not in at or not float(pv[at.index(mid)]) <= PEAK_MAX_P:
                continue
            k = at.index(mid)
            point = self.model.grid_point(cells[k])
            note = (
                f"bisecting step: {point}, halfway between {held.point} (held) and a trial over the limit "
                f"{limit:.0f} µs at {self.model.space.dvfs_ghz[top]:g} GHz (one over the SLA at or below it), "
                f"P({pct_text(pct)} > {sla:g} µs) {float(pv[k]):.3f} <= {PEAK_MAX_P:g}"
            )
            return Pending(point, 0.0, -1, self.book.load, float(pv[k]), note)
        return None

    def _descend_cell(self, held: Decision) -> Pending | None:
        """The descending trial before a retune stops (`TunerSettings.descend_pct`). When the held point's measured
        power is more than that % above the model's power, at this load, of the cheapest point measured within the
        limit at a load at most SAFE_LOAD_TOL below this one (not in this retune, more than one frequency step below
        the held point), or when the held point is DESCEND_FAR_GHZ or more above that point in frequency: the cell
        halfway between the two in frequency (rounded toward the held point; on up if that one is measured in this
        retune, vetoed or its P(SLA broken), as the gate computes it, is over PEAK_MAX_P) and in ITR. Repeated while
        the rule holds; within the retune's trial budget. None otherwise.

        Why: at a load a few % above the last, the gate's doubled SD refuses the cells next to the cheap points just
        measured, the allowed ones lie at a high frequency, their EI falls under `stop_ei_pct` and the retune holds
        there (bundled day, 99 % < 200 µs, seed 0, 492 kQPS: 122 µs @ 2.8 GHz held, 105.8 W, while 66 µs @ 1.6 GHz had
        read 181 µs at 464 kQPS; hours 14-21 at 2.8 GHz, the day 1.134 x the oracle, 1.040 x with this trial). One
        trial halfway moves the evidence toward the cheap side; the next retune's trials start from it. Pure of Ax."""
        import numpy as np

        if held.measurement is None or not held.met_sla or held.by_estimate or self.book.load is None:
            return None
        load = self.book.load
        evidence = self.safety.rules.evidence()
        ev, ev_load, ev_met, _ = evidence
        seen = self.safety.seen_cells()
        hi, hj = self.model.cell_of(held.point)
        near = ev_met & (ev_load >= load * (1 - SAFE_LOAD_TOL))
        cands = sorted({self.model.cell_at(tuple(u)) for u in np.asarray(ev)[near]} - seen)
        cands = [c for c in cands if c[1] < hj - 1]
        grid = self.model.grid_model(load, refit=False, cells=cands) if cands else None
        if grid is None:
            return None
        k = int(np.argmin(grid["power"]))
        power = float(grid["power"][k])
        ni, nj = cands[k]
        ghz = self.model.space.dvfs_ghz
        far = ghz[hj] - ghz[nj] >= DESCEND_FAR_GHZ - 1e-9
        if not (far or held.measurement.power_w > power * (1 + self.settings.descend_pct / 100.0)):
            return None
        mid_i = (ni + hi + 1) // 2 if hi > ni else (ni + hi) // 2
        path = [(mid_i, j) for j in range((nj + hj + 1) // 2, hj) if (mid_i, j) not in seen]
        found = self.safety.first_likely(path, evidence)
        if found is None:
            return None
        cell, pv = found
        point, there = self.model.grid_point(cell), self.model.grid_point(cands[k])
        note = (
            f"descending step: {point}, halfway from {held.point} (held, {held.measurement.power_w:.1f} W) toward "
            f"{there} (measured within the limit at a load at most {SAFE_LOAD_TOL:.0%} below, {power:.1f} W here "
            f"by the model), P({pct_text(self.model.objective.percentile)} > {self.model.objective.sla_us:g} µs) "
            f"{pv:.3f} <= {PEAK_MAX_P:g}"
        )
        return Pending(point, 0.0, -1, load, pv, note)

    def _refine_cell(self, held: Decision) -> Pending | None:
        """The refining trial before a retune stops (`TunerSettings.refine_step`): the next longer ITR of the grid
        at the frequency of the point the retune would hold -- the point the safety gate's scaled SD usually keeps
        untried one step short of the final choice's limit -- if it was not measured in this retune, the evidence
        supports it (`_supported`: near a point measured within the limit, not next to one over the SLA), its
        P(SLA broken) as the gate computes it (`safe_sd_scale`, `safe_model_error`) is at most `safe_delta` --
        only the gate's other half, P(over the limit exploration aims within) <= delta, is waived -- and the
        held point's MEASURED percentile times the model's ratio between the two points, at its upper 1 - delta
        bound with the SD scaled as the gate scales it, is within the limit the final choice applies
        (`final_limit_us`): the model's step on the reading, so a model that sits under the measurements does not
        carry its bias into the step, and a step the model is unsure of is not taken (replay, 524 kQPS, seed 0:
        the model's mean step 471 -> 482 µs passed without the bound, and the trial read 510). None otherwise. Pure of
        Ax: the trial is attached when `suggest` hands it out."""
        from statistics import NormalDist

        if held.measurement is None or not held.met_sla or held.by_estimate:
            return None
        i, j = self.model.cell_of(held.point)
        if i + 1 >= len(self.model.itr):
            return None
        cell = (i + 1, j)
        seen = {self.model.cell_of(r.point) for r in self.book.retune_trials() if r.status == STATUS_COMPLETED}
        if cell in seen or not bool(self.safety.rules.supported([cell], self.safety.rules.evidence())[0]):
            return None
        grid = self.model.grid_model(self.book.load, refit=False, cells=[(i, j), cell])
        if grid is None:
            return None
        s, scale = self.settings, self.model.scale
        base, _ = scale.latency_mean_sd(float(grid["mu"][0]), float(grid["sd"][0]))
        lat, lat_sd = scale.latency_mean_sd(float(grid["mu"][1]), float(grid["sd"][1]))
        if not (base > 0 and lat > 0 and math.isfinite(base) and math.isfinite(lat) and math.isfinite(lat_sd)):
            return None
        measured = held.measurement.percentile(self.model.objective.percentile)
        # the step's upper (1 - delta) bound, with the SD scaled as the gate scales it
        z = NormalDist().inv_cdf(1.0 - s.safe_delta)
        step = measured * lat / base * math.exp(z * s.safe_sd_scale * lat_sd / lat)
        limit = final_limit_us(self.model.objective.sla_us, s)
        pv = float(grid["p_violation"][1])  # as the gate computes it: the SD times `safe_sd_scale`
        if not (step <= limit and pv <= s.safe_delta):
            return None
        point = self.model.grid_point(cell)
        note = (
            f"refining step: {point}, the next longer ITR of {held.point}, expected {step:.0f} µs at most (measured "
            f"{measured:.0f} µs x the model's {lat / base:.3f}, upper {1 - s.safe_delta:g} bound) <= {limit:.0f} µs, "
            f"P({pct_text(self.model.objective.percentile)} > {self.model.objective.sla_us:g} µs) {pv:.3f} <= δ {s.safe_delta:g}"
        )
        return Pending(point, 0.0, -1, self.book.load, pv, note)

    def _expand_cell(self, best_w: float, held: Decision) -> Pending | None:
        """The expanding trial before a retune stops (`TunerSettings.expand_ei_pct`): where the model (not gated:
        its constrained EI, the improvement times P(within the limit)) expects an improvement of at least that % of
        `best_w` at a cell the evidence does not reach yet (`EvidenceRules.supported`), the allowed cell untried in
        this retune nearest to it, if that is nearer to it than the held point -- one step of SafeOpt's expansion
        toward what the stopping rule, judging only the cells allowed now, cannot see. At most one per retune. None
        otherwise."""
        import numpy as np

        from tuner.optimize import acquisition

        s = self.settings
        if s.expand_ei_pct <= 0 or s.safe_delta <= 0 or s.safe_radius <= 0 or held.measurement is None:
            return None
        if any(r.note.startswith(EXPAND_NOTE) for r in self.book.retune_trials()):
            return None
        full = self.model.grid_model(self.book.load, refit=False)
        if full is None:
            return None
        cells = full["cells"]
        allowed = np.asarray(self.safety.rules.supported(cells, self.safety.rules.evidence()), dtype=bool)
        # the model's own constrained EI, not gated: outside the evidence's reach the gate rules out every cell
        ei = np.asarray(
            acquisition.constrained_ei(full["power"], full["power_sd"], best_w, full["p_unmet"]), dtype=float
        )
        outside = ~allowed & (ei >= s.expand_ei_pct / 100.0 * best_w)
        if not outside.any():
            return None
        t = int(np.argmax(np.where(outside, ei, -np.inf)))
        seen = self.safety.seen_cells()
        step = allowed & ~np.asarray(full["unsafe"], dtype=bool) & np.array([c not in seen for c in cells])
        if not step.any():
            return None
        coords = np.asarray(self.model.coords(cells), dtype=float)
        dist = np.hypot(*(coords - coords[t]).T)
        k = int(np.argmin(np.where(step, dist, np.inf)))
        from_held = math.dist(np.asarray(self.model.coords([self.model.cell_of(held.point)]))[0], coords[t])
        if not dist[k] < from_held:
            return None
        point, target = self.model.grid_point(cells[k]), self.model.grid_point(cells[t])
        note = (
            f"{EXPAND_NOTE}: {point}, the allowed point nearest {target}, where the model expects an improvement of "
            f"{ei[t]:.3g} W >= {s.expand_ei_pct:g} % of the best {best_w:.1f} W but no measured point reaches yet"
        )
        return Pending(point, 0.0, -1, self.book.load, float(full["p_violation"][k]), note)
