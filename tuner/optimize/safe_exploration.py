"""The optimiser's safety filter (`TunerSettings.safe_delta` > 0): it vets every point before it is tried. A safe start
on a line from the safe corner while there is no model, then Ax's proposal only if the model's P(SLA broken) is
within δ and its P(over the limit `best` applies) within `safe_limit_delta` (`ExperimentModel.unsafe`, the gate) and
it is near evidence measured within the limit (`acquisition.supported`) and not next to a point measured over the
SLA (`acquisition.vetoed`); otherwise the allowed grid point of largest constrained expected improvement. It reads
the model's predictions and the trial books; it decides, the facade (`optimizer.Optimizer`) books."""

from __future__ import annotations

import math
from typing import Any

from actuators.host import Measurement
from tuner.optimize.axsetup import no_warnings
from tuner.optimize.decision import HOLD_LOAD_TOL, best_decision, exploration_settings
from tuner.optimize.experiment import ExperimentModel, GridPrediction
from tuner.optimize.records import STATUS_COMPLETED, Cell, Pending
from tuner.optimize.safe_evidence import SAFE_LOAD_TOL, Evidence, EvidenceRules
from tuner.optimize.settings import TunerSettings, pct_text
from tuner.optimize.trial_book import TrialBook

#: `TunerSettings.peak_step`: trials within this share below the highest load measured within the limit count as
#: measured at it (the best of them is the new peak's starting point).
PEAK_LOAD_BAND = 0.02
#: ... and when the model passes no point of the step's path within δ, the first it gives at most this P(SLA broken).
PEAK_MAX_P = 0.5
#: A proven point's trial note when it read over the SLA (`SafeExploration.proof_failed`).
PROOF_FAILED = "a proven point read over the SLA: the readings before it prove no point from now on"


#: `monotone.step_down` (the safe start's walk down in frequency once its line repeats a cell): a step is taken
#: only while the base's latency, scaled by the square of the frequency ratio, stays within this share of the limit.
STEP_DOWN_HEADROOM = 1.0


class SafeExploration:
    """The safety filter of one optimiser, over its model and its trial books (see the module docstring)."""

    def __init__(self, model: ExperimentModel, book: TrialBook) -> None:
        self.model = model
        self.book = book
        self.rules = EvidenceRules(model, book)

    @property
    def settings(self) -> TunerSettings:
        return self.model.settings

    # -- before the model: the safe line
    def safe_start(self, this_retune: bool = False) -> Pending:
        """The next safe-line point (no model yet), attached to Ax as a trial of its own; `this_retune`: step
        from this retune's own line trials only (the model has no safe point at this load)."""
        from tuner.optimize import acquisition

        model, book = self.model, self.book
        tried = []
        limit = model.met_limit_us()  # a step over it could never be chosen: it bounds the line like the SLA
        start = (book.retune_start or 0) if this_retune else -1
        for i, t in sorted(book.line_t.items()):
            if i < start or i <= book.retired_through:
                continue
            r = book.records.get(i)
            if r is not None and r.status == STATUS_COMPLETED and r.measurement is not None:
                ratio = r.measurement.percentile(model.objective.percentile) / limit
                tried.append((t, ratio <= 1.0, ratio))
        n = model.init_budget()
        t = acquisition.next_line_t(tried, 1.0 / max(n - 1, 1))
        cell = model.cell_at(acquisition.line_point(t))
        seen = self._cells_since(start) if self.settings.step_down else set()
        down = self._step_down(start, limit, seen) if cell in seen else None
        if down is not None:  # the line has nothing new here: walk down in frequency from its cheapest point
            base, cell = down
            note = (
                f"safe start (no model yet): the line's next step, t={t:.3f}, was measured already; one frequency "
                f"step down from {model.grid_point(base)}, measured within the limit"
            )
            return Pending(model.grid_point(cell), 0.0, model.attach(cell, book.load), book.load, None, note)
        ax_index = model.attach(cell, book.load)
        note = (
            f"safe start (no model yet): step {len(tried) + 1} of {n} on the line from the safe corner "
            f"toward the centre, t={t:.3f}"
        )
        return Pending(model.grid_point(cell), 0.0, ax_index, book.load, None, note, t)

    def _measured_since(self, start: int) -> list[tuple[Cell, Measurement]]:
        """(cell, measurement) of each completed trial numbered `start` or later."""
        return [
            (self.model.cell_of(r.point), r.measurement)
            for r in self.book.live()
            if r.index >= start and r.status == STATUS_COMPLETED and r.measurement is not None
        ]

    def _cells_since(self, start: int) -> set[Cell]:
        """The cells of the completed trials numbered `start` or later."""
        return {cell for cell, _ in self._measured_since(start)}

    def _step_down(self, start: int, limit: float, tried: set[Cell]) -> tuple[Cell, Cell] | None:
        """(base, cell) of `monotone.step_down` over the completed trials numbered `start` or later (`tried`: their
        cells, `_cells_since`); None when no base qualifies."""
        from tuner.optimize import monotone

        pct = self.model.objective.percentile
        met = []
        for cell, m in self._measured_since(start):
            ratio = m.percentile(pct) / limit
            if ratio <= 1.0:
                met.append((cell, float(m.power_w), ratio))
        down = monotone.step_down(met, tried, self.model.space.dvfs_ghz, STEP_DOWN_HEADROOM)
        if down is None:
            return None
        base = min((m for m in met if m[0] == (down[0], down[1] + 1)), key=lambda m: m[1])[0]
        return base, down

    # -- with the model: vet Ax's proposal, or choose
    def filter(self, pend: Pending | None) -> Pending:
        """Keep Ax's proposal if the gate passes it (`ExperimentModel.unsafe`) and it is near evidence
        (`EvidenceRules.supported`), else substitute the allowed cell of largest constrained EI (or the closest
        allowed one). Without a proposal (`acquisition="grid"`: Ax was not asked) that cell is the choice (ties: the one
        nearest the safe corner). Before either, when on: `break_step` after a retune's first trials over the
        SLA, (`peak_first`) the new-peak step as the first trial at a load above every one measured, and
        (`first_proven`) the cheapest point the orderings prove within the limit as a retune's first trial."""
        evidence = self.rules.evidence()
        step = self.break_step(evidence) if self.settings.break_step else None
        if step is None and self.settings.peak_first and self.settings.peak_step and not self.seen_cells():
            # nothing measured at a lower load proves a point at a higher one (`monotone`): the step, not the EI
            step = self.peak_step(
                "the retune's first trial at a load above every one measured within the limit", PEAK_LOAD_BAND
            )
        if step is None and self.settings.first_proven and not self.seen_cells():
            step = self._proven("the retune's first trial", evidence)
        if step is not None:
            if pend is not None:
                with no_warnings():
                    self.model.client.mark_trial_abandoned(trial_index=pend.ax_index)
            return step
        if pend is None:
            return self._substitute(None, None, "grid acquisition over the points safe exploration allows", evidence)
        verdict = self._vet(pend, evidence)
        if isinstance(verdict, Pending):
            return verdict
        return self._substitute(pend, self.model.cell_of(pend.point), verdict, evidence)

    def _vet(self, pend: Pending, evidence: Evidence) -> Pending | str:
        """Ax's proposal `pend` if the gate passes it and it is near evidence; else it is abandoned in Ax and
        the result is why (or, with no model to ask, the next safe-line point instead)."""
        model, s = self.model, self.settings
        prop = model.cell_of(pend.point)
        # Ax just fitted the model on all data to propose; ask it about the proposal first (cheap), and about
        # the cells near evidence (the whole grid, 128 x 18 cells, costs ~0.5 s) only if the proposal fails
        one = model.grid_model(self.book.load, refit=False, cells=[prop])
        near = bool(self.rules.supported([prop], evidence)[0])
        if one is not None and not one["unsafe"][0] and near:
            pend.p_violation = float(one["p_violation"][0])
            return pend
        with no_warnings():
            model.client.mark_trial_abandoned(trial_index=pend.ax_index)
        if one is None:  # no predictive model (Ax still in its Sobol phase): do not try a random point
            sub = self.safe_start()
            sub.note = "no model to check Ax's proposal; " + sub.note
            return sub
        return (
            f"Ax proposed {pend.point} with P({pct_text(model.objective.percentile)} > "
            f"{model.objective.sla_us:g} µs) {one['p_violation'][0]:.3f}"
            + (
                f" > δ {s.safe_delta:g}"
                if one["unsafe"][0]
                else f", farther than {s.safe_radius:g} from any point measured within the limit "
                f"at this load or above, or next to one measured over the SLA"
            )
        )

    def _substitute(self, pend: Pending | None, prop: Cell | None, why: str, evidence: Evidence) -> Pending:
        """The allowed cell to try instead of `prop` (None: no proposal), or, with none allowed, a step toward
        safety from the best point of the highest load measured (`peak_step`), the cheapest cell the orderings prove
        within the limit (`_proven`), or out from the safe corner."""
        import numpy as np

        cells = self.rules.near_cells(evidence)
        grid = self.model.grid_model(self.book.load, refit=False, cells=cells) if cells else None
        ok = ~grid["unsafe"] if grid is not None else np.zeros(0, dtype=bool)
        if not ok.any() and self.settings.peak_step:  # a load above any measured within the limit
            step = self.peak_step(why)
            if step is not None:
                return step
        if not ok.any():  # no point both modelled safe and near evidence (e.g. a load above any measured)
            near = f"{why}; no point is within δ and near a point measured safe at this load or above"
            return self._proven(near, evidence) or self._step_out(why)
        assert grid is not None
        return self._choose(pend, prop, why, grid, ok)

    def _proven(self, why: str, evidence: Evidence) -> Pending | None:
        """The cheapest cell (model power) the orderings prove within the limit at this load (`monotone.known_safe`,
        HOLD_LOAD_TOL), untried in this retune, not next to one measured over the SLA; else None. A retune's first
        trial (`first_proven`: first trials the model only expected to meet the SLA were 4 of the 10 over it in 4
        tuning-half runs at 99:500), and before the walk from the safe corner (a model gone wrong refuses every cell
        near evidence: cliff plant, 99:500, 509 kQPS, 15 trials along 2.9 GHz, the hour at 1.32 x the oracle)."""
        import numpy as np

        from tuner.optimize import monotone

        model, load = self.model, self.book.load
        ev, ev_load, ev_met, _ = evidence
        if self.book.proof_from > 0:
            ev_met = ev_met & self.rules.reported_since(self.book.proof_from)
        seen = self.seen_cells()
        cells = [c for c in model.grid() if c not in seen]
        coords = np.asarray(model.coords(cells), dtype=float).reshape(-1, 2)
        keep = monotone.known_safe(coords, ev, ev_load, ev_met, load, HOLD_LOAD_TOL)
        keep &= ~self.rules.vetoed(cells, evidence)
        cells = [c for c, k in zip(cells, keep) if k]
        grid = model.grid_model(load, refit=False, cells=cells) if cells else None
        if grid is None:
            return None
        k = int(np.argmin(grid["power"]))
        pv = float(grid["p_violation"][k])
        note = (
            f"{why}: the cheapest point the orderings prove within the limit (its ITR measured within it at this "
            f"frequency or a lower one, at this load or above), model P {pv:.3f}"
        )
        return Pending(model.grid_point(cells[k]), 0.0, model.attach(cells[k], load), load, pv, note, proven=True)

    def proof_failed(self, index: int, pend: Pending, m: Measurement) -> bool:
        """`proof_reset`: whether trial `index`, a point the orderings proved (`_proven`), read over the SLA; if so,
        the readings before it prove no point from now on (`TrialBook.proof_from`). A proof the host broke (it
        slowed since the readings: a release, a co-tenant) would otherwise send every later first trial to another
        stale proof; the readings stay in the model and as evidence near which to explore."""
        if not (self.settings.proof_reset and pend.proven):
            return False
        objective = self.model.objective
        if not m.percentile(objective.percentile) > objective.sla_us:
            return False
        self.book.proof_from = index
        return True

    def _step_out(self, why: str) -> Pending:
        """This retune's next safe-line point, with the model's P(SLA broken) there and `why` in its note."""
        sub = self.safe_start(this_retune=True)  # walk the safe line at this load
        at = self.model.grid_model(self.book.load, refit=False, cells=[self.model.cell_of(sub.point)])
        if at is not None:
            sub.p_violation = float(at["p_violation"][0])
        sub.note = (
            f"{why}; no point is within δ and near a point measured safe at this load or above, "
            f"stepping out from the safe corner instead "
            f"(model P {sub.p_violation if sub.p_violation is not None else math.nan:.3f}): "
            + sub.note.split(": ", 1)[-1]
        )
        return sub

    def _choose(self, pend: Pending | None, prop: Cell | None, why: str, grid: GridPrediction, ok: Any) -> Pending:
        """Among `grid`'s `ok` cells (untried in this retune if any is): Ax's acquisition at its largest (grid
        acquisition, no proposal), else the largest constrained EI (ties: nearest `prop`, or the safe corner),
        else the one nearest `prop`; attached to Ax."""
        import numpy as np

        from tuner.optimize import acquisition

        model, load = self.model, self.book.load
        cells = grid["cells"]
        pv = grid["p_violation"]
        coords = model.coords(cells)
        target = model.coords([prop])[0] if prop is not None else (0.0, 1.0)  # else: the safe corner
        seen = self.seen_cells()
        fresh = ok & np.array([c not in seen for c in cells])
        allowed = fresh if fresh.any() else ok
        if prop is None and self.settings.acquisition == "grid":  # Ax's acquisition function over the allowed points
            k = model.acquire(cells, allowed, load)
            if k is not None:
                note = f"{why}: Ax's acquisition at its largest of {int(allowed.sum())} allowed points"
                cell = cells[k]
                return Pending(model.grid_point(cell), 0.0, model.attach(cell, load), load, float(pv[k]), note)
        incumbent = self.incumbent_w(grid, allowed)
        ei = self.ei(grid, incumbent) * allowed if incumbent is not None else None
        if ei is not None and float(ei.max()) > 0:
            top = ei >= float(ei.max()) * (1 - 1e-9)
            j = acquisition.nearest(coords, target, top, tiebreak=pv)
            note = (
                f"{why}; tried the safe point of largest expected improvement{' instead' if pend else ''} "
                f"({float(ei[j]):.3g} W below {incumbent:.1f} W)"
            )
        else:
            j = acquisition.nearest(coords, target, allowed, tiebreak=pv)
            note = f"{why}; tried the closest safe point{' instead' if pend else ' to the safe corner'}"
        cell = cells[j]
        return Pending(model.grid_point(cell), 0.0, model.attach(cell, load), load, float(pv[j]), note)

    def peak_step(self, why: str, band: float = 0.0) -> Pending | None:
        """At a load above every load measured within the limit: the best point measured at the highest such
        load, moved toward safety -- the frequency raised at least in proportion to the load (a core's service
        rate scales with its clock, so the utilisation stays where it was measured), then, past the highest
        frequency, the ITR shortened by what the frequency could not give -- and on along that path (frequency
        first, ITR second) to the first point the model deems within δ at this load (none: the first it expects
        to meet the SLA, P <= PEAK_MAX_P). None (the caller walks the safe line) if this load is not above every
        measured one by more than `band` (a share of it), or no point on the path passes either test."""
        import numpy as np

        model, load = self.model, self.book.load
        limit = model.met_limit_us()
        pct = model.objective.percentile
        met = [
            r
            for r in self.book.live()
            if r.status == STATUS_COMPLETED
            and r.measurement is not None
            and math.isfinite(r.qps)
            and r.measurement.percentile(pct) <= limit
        ]
        if not met or load is None:
            return None
        top_q = max(r.qps for r in met)
        top_load = self.settings.load_of(top_q)
        if load <= top_load * (1 + band) or top_load <= 0:  # `band`: a load within it counts as measured
            return None
        at_top = [r for r in met if r.qps >= top_q * (1 - PEAK_LOAD_BAND)]
        base = min(at_top, key=lambda r: (r.measurement.power_w, r.index))  # type: ignore[union-attr]
        ratio = load / top_load
        i0, j0 = model.cell_of(base.point)
        freqs = model.space.dvfs_ghz
        want = base.point.dvfs_ghz * ratio
        path = [(i0, j) for j in range(j0, len(freqs)) if freqs[j] >= want - 1e-9]
        itr_max = model.itr[i0] * freqs[-1] / want if want > freqs[-1] else model.itr[i0]
        path += [(i, len(freqs) - 1) for i in range(i0 - 1, -1, -1) if model.itr[i] <= itr_max]
        # on past the last point of the path a trial of this retune read over the limit at: the path runs toward
        # safety, so it and what lies before it are no step (cliff plant, 99.9:500, expand_ei_pct 1: one point
        # tried three times, 490, 504 and 520 µs, before the next frequency)
        over = {
            model.cell_of(r.point)
            for r in self.book.completed_this_retune()
            if r.measurement is not None and r.measurement.percentile(pct) > limit
        }
        path = path[max((k + 1 for k, c in enumerate(path) if c in over), default=0) :]
        if not path:
            return None
        grid = model.grid_model(load, refit=False, cells=path)
        if grid is None:
            k = 0
        else:
            ok = np.flatnonzero(~grid["unsafe"])
            # the model extrapolates to this load: if it passes no point of the path within δ, the first one it
            # expects to meet the SLA (P <= PEAK_MAX_P) is still a measured point's load-proportional step
            likely = np.flatnonzero(grid["p_violation"] <= PEAK_MAX_P)
            if not ok.size and not likely.size:
                return None
            k = int(ok[0]) if ok.size else int(likely[0])
        cell = path[k]
        pv = None if grid is None else float(grid["p_violation"][k])
        note = (
            f"{why}; load {ratio:.3f} x the highest measured within the limit: stepped from {base.point} "
            f"(best there) toward safety, frequency first, to the first point the model deems within δ"
        )
        return Pending(model.grid_point(cell), 0.0, model.attach(cell, load), load, pv, note)

    def break_step(self, evidence: Evidence) -> Pending | None:
        """`break_step`: while no trial of this retune is within the limit and its latest read over the SLA, the
        next trial is one frequency step up at that trial's ITR (`monotone.step_path`: up past the cells measured
        in this retune or condemned by the orderings, `monotone.known_unsafe`, or next to a trial over the SLA,
        `acquisition.vetoed`; and not past a cell the orderings prove within the limit, `monotone.known_safe`,
        which only costs more power), the first whose P(SLA broken) as the gate computes it is at most PEAK_MAX_P. A
        first trial over the SLA at a new peak thus moves the search one step, where the safety filter's
        substitute (the gate refuses what the doubled SD leaves uncertain next to it) went several steps up and
        the stopping rule held it (docs/optimizer-final-choice.md). None when the rule does not apply."""
        from tuner.optimize import monotone

        model, load = self.model, self.book.load
        done = [r for r in self.book.completed_this_retune() if r.measurement is not None]
        pct, limit = model.objective.percentile, model.met_limit_us()
        if not done or any(r.measurement.percentile(pct) <= limit for r in done):  # type: ignore[union-attr]
            return None
        last = max(done, key=lambda r: r.index)
        if last.measurement.percentile(pct) <= model.objective.sla_us:  # type: ignore[union-attr]
            return None
        path = monotone.step_path(model.cell_of(last.point), len(model.space.dvfs_ghz), self.seen_cells())
        if not path:
            return None
        ev, ev_load, ev_met, ev_broke = evidence
        coords = model.coords(path)
        proven = monotone.known_safe(coords, ev, ev_load, ev_met, load)
        if proven.any():  # beyond a cell proven within the limit at this load every step costs power for nothing
            path, coords = path[: int(proven.argmax()) + 1], coords[: int(proven.argmax()) + 1]
        found = self.first_likely(
            path, evidence, monotone.known_unsafe(coords, ev, ev_load, ev_broke, load, SAFE_LOAD_TOL)
        )
        if found is None:
            return None
        cell, pv = found
        note = (
            f"one step up from {last.point}, read over the SLA with no trial of this retune within the limit: "
            f"{model.grid_point(cell)}, P({pct_text(pct)} > {model.objective.sla_us:g} µs) {pv:.3f}"
        )
        return Pending(model.grid_point(cell), 0.0, model.attach(cell, load), load, pv, note)

    def first_likely(self, path: list[Cell], evidence: Evidence, bad: Any = None) -> tuple[Cell, float] | None:
        """The first cell of `path`, not in `bad` nor `EvidenceRules.vetoed`, whose P(SLA broken) at this load (as the
        gate computes it) is at most PEAK_MAX_P, with that P; else None (`break_step`, the descending trial)."""
        if not path:
            return None
        skip = self.rules.vetoed(path, evidence)
        if bad is not None:
            skip = skip | bad
        path = [c for c, b in zip(path, skip) if not b]
        grid = self.model.grid_model(self.book.load, refit=False, cells=path) if path else None
        if grid is None:
            return None
        likely = [k for k, p in enumerate(grid["p_violation"]) if float(p) <= PEAK_MAX_P]
        return (path[likely[0]], float(grid["p_violation"][likely[0]])) if likely else None

    # -- what is worth trying
    def seen_cells(self) -> set[Cell]:
        """The cells of this retune's completed trials."""
        return {self.model.cell_of(r.point) for r in self.book.completed_this_retune()}

    def untried(self, cells: list[Cell], allowed: Any) -> Any:
        """Mask over `cells`: True at those not measured in this retune, or everywhere if no `allowed` cell is
        untried -- the choice the filter's substitution makes (`_choose`). The stopping rule's EI ranges over it:
        without it the largest EI can sit at a point already measured just under the limit (its P of meeting it
        near 0.5), which the filter never retries, and the retune ran its whole budget on untried points of ~0
        EI (bench/fleet.py, p99 < 200 µs: 30 trials in one window)."""
        import numpy as np

        seen = self.seen_cells()
        fresh = np.array([c not in seen for c in cells], dtype=bool)
        return fresh if bool((fresh & np.asarray(allowed, dtype=bool)).any()) else np.ones(len(cells), dtype=bool)

    def ei(self, grid: GridPrediction, best_w: float) -> Any:
        """Constrained EI of one more trial per grid cell: EI of power below `best_w` x P(percentile within the
        limit `best` applies); with safe exploration, 0 at cells the filter would never let us try."""
        from tuner.optimize import acquisition

        ei = acquisition.constrained_ei(grid["power"], grid["power_sd"], best_w, grid["p_unmet"])
        if self.settings.safe_delta > 0:
            ei = ei * ~grid["unsafe"]
        return ei

    def incumbent_w(self, grid: GridPrediction, allowed: Any) -> float | None:
        """Power to improve on: the best SLA-meeting power measured in this retune, else the model's lowest
        predicted power among allowed cells likely (P >= 0.5) to meet the SLA; None if neither exists."""
        model = self.model
        d = best_decision(self.book.retune_trials(), model.objective, exploration_settings(self.settings), model.space)
        if d.met_sla and d.measurement is not None:
            return float(d.measurement.power_w)
        likely = allowed & (grid["p_unmet"] <= 0.5)
        return float(grid["power"][likely].min()) if likely.any() else None
