"""The stopping rule (`TunerSettings.stop_ei_pct` > 0): a retune ends once one more trial is not expected to
improve on the best measured SLA-meeting power by that %, judged over the points safe exploration allows -- but
not while a bisecting trial is due between a trial over the SLA and a held point far above it in frequency."""

from __future__ import annotations

import time

from tuner.optimize.decision import Decision, best_decision, exploration_settings
from tuner.optimize.records import STATUS_COMPLETED, Pending
from tuner.optimize.safety import PEAK_MAX_P, SAFE_LOAD_TOL, SAFE_VETO_RADIUS, SafeExploration
from tuner.optimize.settings import final_limit_us, pct_text


class StoppingRule(SafeExploration):
    """`should_stop` over the safety layer (see the module docstring)."""

    def should_stop(self) -> tuple[bool, str]:
        """Whether the current retune should end, and why (`_should_stop`); its compute time counts in the
        next suggestion's `compute_s`."""
        t0 = time.perf_counter()
        try:
            return self._should_stop()
        finally:
            self._stop_s += time.perf_counter() - t0

    def _should_stop(self) -> tuple[bool, str]:
        """Whether the current retune should end, and why.

        True once `settings.trials` trials of this retune were reported. With `stop_ei_pct` > 0, also after
        `min_trials` when the largest constrained expected improvement of one more trial over the grid at
        this load -- EI of power below the best SLA-meeting power measured in this retune (as `best` judges
        it), times the model's P(percentile within the limit `best` applies: the SLA less `sla_margin_pct`
        with `sla_check="ci"`) -- is below `stop_ei_pct` % of that power. With safe exploration only points
        the safety filter would let us try count -- and, as its substitute is a point not yet measured in this
        retune whenever one is allowed, only those then (`_untried`). Before it stops, one bisecting trial if
        `_bisect_cell` finds one (then, with `refine_step`, the refining trial).
        """
        from tuner.optimize import acquisition

        n = len(self.retune_trials())
        s = self.settings
        if n >= s.trials:
            return True, f"trial budget reached ({n} of {s.trials})"
        if s.stop_ei_pct <= 0:
            return False, "stopping rule off"
        if n < s.min_trials:
            return False, f"{n} trial(s) of at least {s.min_trials}"
        d = best_decision(self.retune_trials(), self.objective, exploration_settings(s), self.space)
        if not d.met_sla or d.measurement is None:
            return False, "no trial of this retune met the SLA yet"
        held = best_decision(self.retune_trials(), self.objective, s, self.space)  # what `best` would hold
        if held.by_estimate and s.refine_step:
            return False, "no trial of this retune met the SLA with its CI and margin yet (only by its estimate)"
        best_w = d.measurement.power_w
        cells = self._near_cells(self._evidence()) if s.safe_delta > 0 and s.safe_radius > 0 else None
        if cells is not None and not cells:
            return False, "no point near one measured within the limit at this load or above yet"
        grid = self._grid_model(self._load, refit=True, cells=cells)
        if grid is None:
            return False, "no model yet"
        ei = self._ei(grid, best_w)
        if s.safe_delta > 0:
            ei = ei * self._untried(grid["cells"], ~grid["unsafe"])
        k = int(ei.argmax())
        limit = s.stop_ei_pct / 100.0 * best_w
        where = self._grid_point(grid["cells"][k])
        if acquisition.should_stop_ei(float(ei[k]), best_w, s.stop_ei_pct):
            why = (
                f"expected improvement of one more trial {ei[k]:.3g} W (at {where}) < {s.stop_ei_pct:g} % "
                f"of the best {best_w:.1f} W"
            )
            bisect = self._bisect_cell(held) if s.safe_delta > 0 else None
            if bisect is not None:
                self._refine = bisect
                return False, f"{why}; one bisecting trial first: {bisect.note}"
            refine = self._refine_cell(held) if s.refine_step and s.safe_delta > 0 else None
            if refine is None:
                return True, why
            self._refine = refine
            return False, f"{why}; one refining trial first: {refine.note}"
        return False, f"expected improvement {ei[k]:.3g} W at {where} >= {limit:.3g} W"

    def _bisect_cell(self, held: Decision) -> Pending | None:
        """The bisecting trial before a retune stops. When a trial of this retune read over the SLA at a lower
        frequency than the point the retune would hold, and more than one frequency step lies between the held
        point and the highest lower frequency a trial read over the final choice's limit at: the frequency halfway
        between them (rounded toward the held point; the next one up if that has a trial of this retune or no
        candidate), at the ITR halfway between the held point's and those of the trials over the limit there
        (rounded toward the held point's), if that point is not next to one measured over the SLA
        (`acquisition.vetoed`) and its P(SLA broken), as the gate computes it, is at most PEAK_MAX_P. Nearness to
        evidence is waived: the point lies between one that met the limit and one over it. None otherwise.

        Why: a first trial over the SLA at a new peak load vetoes its neighbours, the safety filter's substitute
        goes far up in frequency, the expected improvement over the points near what was measured there falls
        under `stop_ei_pct`, and the far point is held for hours (bundled day, seed 2, 600 kQPS: 226 µs @ 1.6 GHz
        read 597 µs, 306 µs @ 2.0 GHz held at 1.09 x the oracle). The middle ITR, not the model's choice: the
        model's largest expected improvement sat at the longest ITR of the range (seed 5: read 495 µs) or, with
        no range, past anything measured (610 µs @ 1.8 GHz read 829 µs). One trial per frequency keeps the
        bisection within the steps between. Pure of Ax: the trial is attached when `suggest` hands it out."""
        from tuner.optimize import acquisition

        if held.measurement is None or not held.met_sla or held.by_estimate:
            return None
        pct, sla = self.objective.percentile, self.objective.sla_us
        limit = final_limit_us(sla, self.settings)
        hi, hj = self._cell_of(held.point)
        done = [r for r in self.retune_trials() if r.status == STATUS_COMPLETED and r.measurement is not None]
        below = [(self._cell_of(r.point), r.measurement.percentile(pct)) for r in done]  # type: ignore[union-attr]
        below = [(c, lat) for c, lat in below if c[1] < hj]
        if not any(lat > sla for _, lat in below):
            return None
        bad = [c for c, lat in below if lat > limit]
        top = max((j for _, j in bad), default=-1)
        if top < 0 or hj - top <= 1:
            return None
        itrs = [hi] + [i for i, j in bad if j == top]
        lo_i, hi_i = min(itrs), max(itrs)
        seen = {self._cell_of(r.point) for r in done}
        ev, ev_load, _, ev_broke = self._evidence()
        cols = {j for _, j in seen}
        for j in range((top + hj + 1) // 2, hj):
            cells = [] if j in cols else [(i, j) for i in range(lo_i, hi_i + 1)]
            if cells:
                veto = acquisition.vetoed(
                    self._coords(cells), ev, ev_load, ev_broke, self._load, SAFE_VETO_RADIUS, SAFE_LOAD_TOL
                )
                cells = [c for c, v in zip(cells, veto) if not v]
            grid = self._grid_model(self._load, refit=False, cells=cells) if cells else None
            if grid is None:
                continue
            pv = grid["p_violation"]
            mid = (lo_i + hi_i + 1) // 2 if hi_i == hi else (lo_i + hi_i) // 2
            at = [c[0] for c in cells]
            if mid not in at or not float(pv[at.index(mid)]) <= PEAK_MAX_P:
                continue
            k = at.index(mid)
            point = self._grid_point(cells[k])
            note = (
                f"bisecting step: {point}, halfway between {held.point} (held) and a trial over the limit "
                f"{limit:.0f} µs at {self.space.dvfs_ghz[top]:g} GHz (one over the SLA at or below it), "
                f"P({pct_text(pct)} > {sla:g} µs) {float(pv[k]):.3f} <= {PEAK_MAX_P:g}"
            )
            return Pending(point, 0.0, -1, self._load, float(pv[k]), note)
        return None

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
        import math
        from statistics import NormalDist

        if held.measurement is None or not held.met_sla or held.by_estimate:
            return None
        i, j = self._cell_of(held.point)
        if i + 1 >= len(self._itr):
            return None
        cell = (i + 1, j)
        seen = {self._cell_of(r.point) for r in self.retune_trials() if r.status == STATUS_COMPLETED}
        if cell in seen or not bool(self._supported([cell], self._evidence())[0]):
            return None
        grid = self._grid_model(self._load, refit=False, cells=[(i, j), cell])
        if grid is None:
            return None
        s, scale = self.settings, self._scale
        base, _ = scale.latency_mean_sd(float(grid["mu"][0]), float(grid["sd"][0]))
        lat, lat_sd = scale.latency_mean_sd(float(grid["mu"][1]), float(grid["sd"][1]))
        if not (base > 0 and lat > 0 and math.isfinite(base) and math.isfinite(lat) and math.isfinite(lat_sd)):
            return None
        measured = held.measurement.percentile(self.objective.percentile)
        # the step's upper (1 - delta) bound, with the SD scaled as the gate scales it
        z = NormalDist().inv_cdf(1.0 - s.safe_delta)
        step = measured * lat / base * math.exp(z * s.safe_sd_scale * lat_sd / lat)
        limit = final_limit_us(self.objective.sla_us, s)
        pv = float(grid["p_violation"][1])  # as the gate computes it: the SD times `safe_sd_scale`
        if not (step <= limit and pv <= s.safe_delta):
            return None
        point = self._grid_point(cell)
        note = (
            f"refining step: {point}, the next longer ITR of {held.point}, expected {step:.0f} µs at most (measured "
            f"{measured:.0f} µs x the model's {lat / base:.3f}, upper {1 - s.safe_delta:g} bound) <= {limit:.0f} µs, "
            f"P({pct_text(self.objective.percentile)} > {self.objective.sla_us:g} µs) {pv:.3f} <= δ {s.safe_delta:g}"
        )
        return Pending(point, 0.0, -1, self._load, pv, note)

    def _untried(self, cells: list, allowed: object) -> object:
        """Mask over `cells`: True at those not measured in this retune, or everywhere if no `allowed` cell is
        untried -- the choice the safety filter's substitution makes (`SafeExploration._safety_filter`). Without
        it the largest EI can sit at a point already measured just under the limit (its P of meeting it near
        0.5), which the filter never retries: the retune ran its whole budget on untried points of ~0 EI
        (bench/fleet.py, p99 < 200 µs: 30 trials in one window)."""
        import numpy as np

        seen = {self._cell_of(r.point) for r in self.retune_trials() if r.status == STATUS_COMPLETED}
        fresh = np.array([c not in seen for c in cells], dtype=bool)
        return fresh if bool((fresh & np.asarray(allowed, dtype=bool)).any()) else np.ones(len(cells), dtype=bool)
