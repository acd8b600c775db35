"""Bayesian optimisation of ITR x DVFS with Ax's `Client` API (Ax >= 1.x; Sobol start, then a BoTorch GP).

One trial = apply a point -> settle (measured; its energy counts) -> measure a window -> report metrics
with their standard errors to Ax. What Ax models depends on the reward (`reward.REGISTRY`):

* `constrained`: two metrics, `power` (W, minimised) and the latency metric of `tuner.optimize.latscale` (default
  `log_latency` = ln µs of the chosen percentile, capped at 4 x SLA; `latency_metric="headroom"`:
  `latency_headroom` = SLA / µs), with the SLA as its outcome constraint;
* the penalised rewards (`sla-linear`, `edp`, `latency`): one metric `log_reward` = ln R (minimised), plus
  `power` and the latency metric as tracking metrics so `predict` works for every reward.

Not raw µs: tail latency spans orders of magnitude (an overloaded point is 10^4 x the SLA) and a GP on the raw
values is dominated by those outliers; both scales are monotone, so the optimum is unchanged, and the SEM maps
by the delta method. ITR is an integer range over the INDEX into the host's ITR list
thinned to `TunerSettings.itr_resolution_us` (8 µs in the cold preset: 2, 10, ..., 1018 -> index 0..127; 2 gives every
value of 2..1022), DVFS an ordered choice of the host's frequencies.

The long-lived tuner's options (on in `TunerSettings()`, the defaults `tuner replay` and the daemon run, chosen by the
3-day replay benchmark; off in the `cold` preset, `tuner.optimize.presets`):

* `context`: a third parameter `load` = min(qps / context_max_qps, 1), pinned per retune with
  `get_next_trials(fixed_parameters=...)`; one `Optimizer` persists across retunes (`begin_retune(qps)`) and
  past trials (`add_history`, attached with `attach_trial`) count toward Ax's Sobol budget, so a warm
  experiment proposes from the GP at once. The model keeps at most `history_max_trials` (oldest dropped).
* `stop_ei_pct`: `should_stop()` ends a retune once the best constrained expected improvement over the grid at
  this load is below that % of the best measured SLA-meeting power (`tuner.optimize.acquisition`).
* `safe_delta`: safe start on a line from the safe corner, then no point whose modelled P(percentile > the
  limit `best` applies, i.e. the SLA less `sla_margin_pct`) exceeds delta is tried, and (`safe_radius`) none
  away from points measured within that limit at this load or above or next to one measured over the SLA
  (`acquisition.supported` / `vetoed`); Ax's proposal is abandoned and the allowed grid point of largest
  constrained EI is tried instead. `safe_sd_scale` multiplies the model's SD in those probabilities.
* `window_mode="adaptive"`: windows sized by `tuner.optimize.windowing.measure_window`; `window_guard` ends one after
  any chunk whose CI is wholly above the SLA.

Ax is imported lazily (it costs seconds); its INFO logging and numerical warnings are kept off the terminal.

`Optimizer` is a thin facade over four members, each built and tested alone, as Ax's `Client` holds its
experiment, generation strategy and early-stopping strategy: `model` (`experiment.ExperimentModel`: the Ax
experiment over the knob grid, its fit and its predictions), `book` (`trial_book.TrialBook`: the trials handed
out and reported, the current retune), `safety` (`safe_exploration.SafeExploration`: vets or chooses each point
from the model's predictions and the measured evidence) and `stopping` (`stopping.StoppingRule`: ends a retune
on the model's predictions over the points the safety filter allows). Its verbs (`begin_retune`, `suggest`,
`complete`/`fail`, `should_stop`, `best`, `predict`, `add_history`, `to_json`/`from_json`) route a trial
through them; `settings`, `records` and `decision` hold the value types, `retune` drives trials on a host.
"""

from __future__ import annotations

import math
import time
from collections.abc import Sequence
from dataclasses import replace
from typing import Any

from actuators.host import KnobSpace, Measurement, OperatingPoint
from core.errors import TunerError
from tuner.optimize.axsetup import no_warnings
from tuner.optimize.decision import (
    HOLD_LOAD_TOL,
    Decision,
    HoldCandidate,
    HoldVerdict,
    best_decision,
    held_over,
    hold_or_retune,
    outside_measured,
)
from tuner.optimize.drift import Cusum, alarmed, cusum_step
from tuner.optimize.experiment import LOAD_TOLERANCE, ExperimentModel
from tuner.optimize.records import (
    STATUS_COMPLETED,
    STATUS_FAILED,
    Pending,
    Prediction,
    TrialRecord,
    latency_sem,
    lean,
    power_sem,
)
from tuner.optimize.safe_evidence import SAFE_LOAD_TOL
from tuner.optimize.safe_exploration import PROOF_FAILED, SafeExploration
from tuner.optimize.settings import Objective, TunerSettings
from tuner.optimize.stopping import StoppingRule
from tuner.optimize.trial_book import TrialBook

# the worker process loads `Optimizer`, `Objective` and `TunerSettings` from this module by name
__all__ = ["Objective", "Optimizer", "TrialRecord", "TunerSettings"]


class Optimizer:
    """An Ax experiment over a host's knob space for one objective; records every trial it hands out.

    Default settings: one experiment per retune (create a fresh one each time), exactly the dissertation's
    cold tuner. With `settings.context` the offered load is a third model input, `load` in [0, 1], pinned
    at the retune's load on every suggestion: one optimiser then persists across retunes and every earlier
    trial, at any load, informs the model (retunes after the first start from the GP, not Sobol, because
    Ax counts existing trials toward its initialisation budget). `add_history` seeds it with past trials.
    `settings.stop_ei_pct` turns on the stopping rule (`should_stop`), `settings.safe_delta` the safety
    filter (see `suggest`).

    Trial numbers (`TrialRecord.index`) are this optimiser's own, counted from 0 per `suggest`; they equal
    Ax's trial indices unless history, safety substitutions or data pruning added Ax trials of their own.
    """

    def __init__(self, space: KnobSpace, objective: Objective, settings: TunerSettings, name: str = "tuner") -> None:
        self._compose(ExperimentModel(space, objective, settings, name), TrialBook())

    def _compose(self, model: ExperimentModel, book: TrialBook) -> None:
        self.model = model
        self.book = book
        self.safety = SafeExploration(model, book)
        self.stopping = StoppingRule(model, self.safety, book)

    @property
    def space(self) -> KnobSpace:
        return self.model.space

    @property
    def objective(self) -> Objective:
        return self.model.objective

    @property
    def settings(self) -> TunerSettings:
        return self.model.settings

    @property
    def name(self) -> str:
        return self.model.name

    # -- retunes
    def begin_retune(self, qps: float) -> None:
        """Start a retune at offered load `qps`: `best`/`retune_trials`/`should_stop` consider only trials from
        here on; in context mode every suggestion is pinned at load = min(qps / context_max_qps, 1)."""
        try:
            q = float(qps)
        except (TypeError, ValueError):
            q = math.nan
        if self.settings.context and not (math.isfinite(q) and q >= 0):
            raise TunerError(f"begin_retune needs the offered load in requests/s (>= 0), got {qps!r}")
        self.book.retune_start = self.book.next_index
        self.book.load = self.settings.load_of(q) if self.settings.context else None
        self.stopping.reset()

    def add_history(self, records: Sequence[TrialRecord], *, borrowed: bool = False) -> int:
        """Attach completed past trials (each at its own load) to the experiment as data; returns how many were
        used. Failed ones, ones without a measurement, points the host lacks, and windows Ax cannot model are
        skipped; only the newest `history_max_trials` are kept. Metrics are recomputed for this objective.

        `borrowed`: the trials are other hosts' (a hardware class's, `tuner.store.warm`): they inform the model
        and the safety filter like any, but `hold_verdict` does not count their loads as measured -- a host
        holds without trials only where it measured itself, as the daemon does (its hold rule reads only its
        own trials)."""
        if self.book.pending:
            raise TunerError("add_history: report the pending trials first")
        model, s = self.model, self.settings
        usable: list[tuple[dict[str, Any], dict[str, Any]]] = []
        for r in records:
            m = r.measurement
            if r.status != STATUS_COMPLETED or m is None:
                continue
            try:
                point = self.space.check(r.point)
                data = model.metrics(m)
            except (TunerError, ValueError, KeyError):
                continue
            qps = r.qps if math.isfinite(r.qps) else m.offered_qps
            if s.context and not (math.isfinite(qps) and qps >= 0):
                continue
            usable.append((model.to_params(point, s.load_of(qps) if s.context else None), data))
        usable = usable[-s.history_max_trials :]
        with no_warnings():
            for params, data in usable:
                ax_index = model.client.attach_trial(parameters=params)
                model.client.complete_trial(trial_index=ax_index, raw_data=data)
                if borrowed:
                    self.book.borrowed.add(int(ax_index))
        self._prune()
        return len(usable)

    # -- trials
    def suggest(self) -> tuple[int, OperatingPoint]:
        """Ask Ax for the next point; returns (trial index, point). The trial is pending until completed/failed.

        Context mode pins `load` at the retune's load. With `safe_delta` > 0: before a model exists the point
        is the next step on the safe line (from the lowest-ITR/highest-DVFS corner toward the centre, outward
        while trials meet the limit, bisecting once one broke it) instead of Sobol; afterwards, an Ax proposal
        the safety filter refuses (`SafeExploration.filter`: the model's P of breaking the SLA or the limit
        `best` applies > `safe_delta`, or no measured evidence near it) is abandoned in Ax and the allowed grid
        point of largest constrained expected improvement (as in `should_stop`; ties and no-EI cases: the
        allowed point closest to the proposal in normalised knob coordinates) is attached and tried instead;
        the record's `note` says so and `p_violation` holds the tried point's modelled probability.
        """
        if self.settings.context and self.book.load is None:
            raise TunerError("context mode: call begin_retune(qps) before suggest()")
        t0 = time.perf_counter()
        if not self.book.pending:
            self._prune()
        pend = self._propose()
        pend.compute_s = time.perf_counter() - t0 + self.stopping.take_compute_s()
        return self.book.hand_out(pend), pend.point

    def _propose(self) -> Pending:
        """The next trial: the stopping rule's refining trial, a safe-line step, or Ax's proposal (or, with grid
        acquisition, the model's choice) through the safety filter."""
        model, load = self.model, self.book.load
        safe = self.settings.safe_delta > 0
        if self.stopping.refine is not None:  # the stopping rule asked for one refining trial (`refine_step`)
            pend, self.stopping.refine = self.stopping.refine, None
            pend.ax_index = model.attach(model.cell_of(pend.point), load)
            return pend
        if safe and len(model.observed()) < model.init_budget():
            return self.safety.safe_start()
        with no_warnings(self.settings.torch_threads):
            if len(model.observed()) >= model.init_budget():
                model.fit_model()  # hyperparameters only when due (the stopping rule may have done it)
            grid = safe and self.settings.acquisition != "ax" and model.fitted
            if grid:
                trials = {}
            elif self.settings.context:
                trials = model.client.get_next_trials(max_trials=1, fixed_parameters={"load": load})
            else:
                trials = model.client.get_next_trials(max_trials=1)
        if grid:
            return self.safety.filter(None)  # the model's choice among the points it allows
        if not trials:
            raise TunerError("Ax generated no trial (search space exhausted?)")
        ((ax_index, params),) = trials.items()
        pend = Pending(model.to_point(params), 0.0, ax_index, load)
        return self.safety.filter(pend) if safe else pend

    def complete(
        self, index: int, measurement: Measurement, qps: float, *, settle: Measurement | None = None
    ) -> TrialRecord:
        """Report trial `index`'s measured window to Ax (metrics with SEMs) and record it.

        A window Ax cannot model (non-finite or zero latency/power) is marked failed instead, with the reason.
        In context mode a trial whose measured load `qps` moved away from the load it was suggested at is
        filed in Ax at its measured load (the suggested Ax trial is marked failed with that reason).
        """
        model, s = self.model, self.settings
        pend = self.book.take_pending(index)
        try:
            data = model.metrics(measurement)
        except ValueError as exc:
            self.book.pending[index] = pend
            return self.fail(index, str(exc), settle=settle, measurement=measurement, qps=qps)
        z = self._surprise(pend, qps, data)
        ax_index = pend.ax_index
        with no_warnings():
            if (
                s.context
                and math.isfinite(qps)
                and pend.load is not None
                and abs(s.load_of(qps) - pend.load) > LOAD_TOLERANCE
            ):
                moved = model.client.attach_trial(parameters=model.to_params(pend.point, s.load_of(qps)))
                # FAILED, not ABANDONED: Ax keeps abandoned arms as pending points (fantasies) forever
                model.client.mark_trial_failed(
                    trial_index=ax_index, failed_reason=f"re-filed at its measured load as trial {moved}"
                )
                ax_index = moved
            model.complete_ax(ax_index, data)
        self.book.ax_of[index] = int(ax_index)
        value = model.reward(
            measurement.power_w, measurement.percentile(self.objective.percentile), self.objective.sla_us
        )
        broke = self.safety.proof_failed(index, pend, measurement)  # marks the book when a proof broke
        rec = TrialRecord(
            index,
            pend.point,
            float(qps),
            STATUS_COMPLETED,
            lean(measurement),
            value,
            None,
            lean(settle),
            pend.compute_s,
            pend.p_violation,
            pend.note + ("; " + PROOF_FAILED if broke else ""),
        )
        self.book.records[index] = rec
        return self._follow_drift(rec, z)

    def _prune(self) -> None:
        """`ExperimentModel.prune`, the books following its rebuilt experiment."""
        moved = self.model.prune()
        if moved is not None:
            self.book.remap_ax(moved)

    def _surprise(self, pend: Pending, qps: float, data: dict[str, float | tuple[float, float]]) -> float | None:
        """With `drift_h` in context mode: the SDs by which the window lies from the model's prediction at its
        point and measured load, before it is reported (`ExperimentModel.latency_z`); None otherwise."""
        s = self.settings
        if not s.context or s.drift_h <= 0 or not math.isfinite(qps):
            return None
        return self.model.latency_z(self.model.to_params(pend.point, s.load_of(qps)), data)

    def _follow_drift(self, rec: TrialRecord, z: float | None) -> TrialRecord:
        """Step the faster-host CUSUM (`tuner.optimize.drift`) with `rec`'s z; when it passes `drift_h`, retire
        the trials before the run began -- the model is rebuilt from the run's trials on, the held windows over
        the SLA are forgotten -- and say so in `rec`'s note. `rec` as it is otherwise (or with trials pending)."""
        book = self.book
        if z is None or not math.isfinite(z):
            return rec
        book.drift = cusum_step(book.drift, rec.index, z)
        start = book.drift.start
        if not alarmed(book.drift, self.settings.drift_h) or book.pending or start is None:
            return rec
        book.drift = Cusum()
        first = book.ax_of.get(start)
        if first is None:
            return rec
        book.remap_ax(self.model.rebuild([t for t in self.model.observed() if t >= first]))
        book.retired_through = start - 1
        book.held_broke.clear()
        rec = replace(
            rec,
            note=f"{rec.note}; the host runs faster than the model predicts since trial {start}: the trials "
            f"before it retired",
        )
        book.records[rec.index] = rec
        return rec

    def fail(
        self,
        index: int,
        reason: str,
        *,
        settle: Measurement | None = None,
        measurement: Measurement | None = None,
        qps: float | None = None,
    ) -> TrialRecord:
        """Mark trial `index` failed in Ax (no value is made up for it) and record why."""
        pend = self.book.take_pending(index)
        reason = " ".join(str(reason).split()) or "failed"
        with no_warnings():
            self.model.client.mark_trial_failed(trial_index=pend.ax_index, failed_reason=reason)
        rec = TrialRecord(
            index,
            pend.point,
            math.nan if qps is None else float(qps),
            STATUS_FAILED,
            lean(measurement),
            None,
            reason,
            lean(settle),
            pend.compute_s,
            pend.p_violation,
            pend.note,
        )
        self.book.records[index] = rec
        return rec

    def trials(self) -> list[TrialRecord]:
        """Every reported trial, in index order."""
        return self.book.trials()

    def retune_trials(self) -> list[TrialRecord]:
        """Trials reported since the last `begin_retune` (all of them if it was never called)."""
        return self.book.retune_trials()

    def metrics(self, m: Measurement) -> dict[str, float | tuple[float, float]]:
        """The (mean, SEM) per Ax metric for a measured window (`ExperimentModel.metrics`)."""
        return self.model.metrics(m)

    # -- decisions
    def should_stop(self) -> tuple[bool, str]:
        """Whether the current retune should end, and why (`StoppingRule.should_stop`)."""
        return self.stopping.should_stop()

    def best(self) -> Decision:
        """The best MEASURED point of the current retune that met the SLA (lowest reward); if none did, the
        safest measured point.

        With `sla_check="ci"` (default) a trial meets the SLA when the upper end of its percentile's 95 % CI
        does; if no trial does but some have their point estimate within the SLA, the best of those is taken
        (and the reason says so). "Safest" = lowest measured percentile (ties: lower power). With no completed
        trial at all, the host's safe corner (lowest ITR, highest frequency) is returned, `measurement=None`.
        """
        return best_decision(self.retune_trials(), self.objective, self.settings, self.space)

    def note_held_window(self, point: OperatingPoint, m: Measurement) -> bool:
        """Keep a window measured while `point` was held (a model hold or a retune's decision) as evidence when its
        percentile was over the SLA: the safety filter then treats it as it treats a trial over the SLA (no point
        at its frequency or below, near its ITR, is held or tried at its load or above, `acquisition.vetoed`).
        A held window is a long measurement, often far longer than the trials that vouched for the point: a
        trial that read within the limit near saturation must not let the same point be held again and again
        over the SLA. Context mode only; True when the window was kept."""
        if not self.settings.context or not m.offered_qps > 0 or self.objective.met(m):
            return False
        try:
            cell = self.model.cell_of(point)
        except (TunerError, ValueError):
            return False  # a point off this host's knobs (another host's safe corner): nothing to veto here
        self.book.held_broke.append((cell, float(m.offered_qps) / self.settings.context_max_qps))
        return True

    def hold_verdict(self, qps: float) -> HoldVerdict:
        """Whether the retune begun at `qps` (`begin_retune`) can hold the model's point without trials:
        `decision.hold_or_retune` with `settings.hold_max_p`, over the model's trials measured within the limit
        `best` applies on this host (not `add_history(borrowed=True)` ones: another host's trials inform the model
        but never hold a point untried here) and, only if `qps` is inside their loads, the points among them
        measured at this load or above that the safety filter would allow (not next to one over the SLA) as the
        model predicts them -- P(over the limit) with the SD scaled by `safe_sd_scale`, as the safety filter
        computes it. Needs `context`."""
        s = self.settings
        if not s.context or s.hold_max_p <= 0 or self.book.load is None:
            return hold_or_retune(qps, (), (), max_p=0.0)
        evidence = self.safety.rules.evidence()
        coords, ev_load, ev_met, _ = evidence
        own = [ti not in self.book.borrowed for ti in self.safety.rules.evidence_trials()]
        measured = [
            (float(x) * s.context_max_qps, self.model.grid_point(self.model.cell_at(tuple(u))))
            for u, x, ok, mine in zip(coords, ev_load, ev_met, own, strict=True)
            if ok and mine
        ]
        if outside_measured(qps, [q for q, _ in measured]) is not None:
            return hold_or_retune(qps, measured, (), max_p=s.hold_max_p)
        # only points measured within the limit at this load or above can be held (`hold_or_retune`)
        floor = qps * (1 - HOLD_LOAD_TOL)
        cells = sorted({self.model.cell_of(p) for q, p in measured if q >= floor})
        broke = [(self.model.grid_point(c), q * s.context_max_qps) for c, q in self.book.held_broke]
        cells = [c for c in cells if not held_over(self.model.grid_point(c), qps, broke, SAFE_LOAD_TOL)]
        if cells and s.safe_delta > 0 and s.safe_radius > 0:
            cells = [c for c, ok in zip(cells, self.safety.rules.supported(cells, evidence)) if ok]
        grid = self.model.grid_model(self.book.load, refit=True, cells=cells) if cells else None
        candidates: list[HoldCandidate] = []
        if grid is not None:
            scale = self.model.scale
            for k, cell in enumerate(grid["cells"]):
                lat, _ = scale.latency_mean_sd(float(grid["mu"][k]), float(grid["sd"][k]))
                p = max(float(grid["p_unmet"][k]), float(grid["p_violation"][k]))
                candidates.append(HoldCandidate(self.model.grid_point(cell), lat, p, float(grid["power"][k])))
        return hold_or_retune(qps, measured, candidates, max_p=s.hold_max_p)

    def predict(self, points: Sequence[OperatingPoint], qps: float | None = None) -> list[Prediction]:
        """Model mean and SEM of the objective's percentile latency and power at `points`.

        Context mode predicts at offered load `qps` (default: the current retune's load). Before the GP is
        fitted (Sobol phase) a point that was measured returns its measurement (`from_measured=True`); an
        unmeasured one returns NaNs.
        """
        load = self.settings.load_of(qps) if (self.settings.context and qps is not None) else self.book.load
        params = [self.model.to_params(p, load) for p in points]
        try:
            with no_warnings(self.settings.torch_threads):
                preds = self.model.client.predict(params)
        except Exception:  # noqa: BLE001 - Ax raises UnsupportedError/others until a model is fitted
            preds = None
        out: list[Prediction] = []
        measured = {
            r.point: r.measurement for r in self.trials() if r.measurement is not None and r.status == STATUS_COMPLETED
        }
        scale = self.model.scale
        for i, point in enumerate(points):
            if preds is not None and scale.metric in preds[i] and "power" in preds[i]:
                mu, s = (float(x) for x in preds[i][scale.metric])
                pw, pw_s = (float(x) for x in preds[i]["power"])
                lat, lat_s = scale.latency_mean_sd(mu, s)
                out.append(Prediction(lat, lat_s, pw, pw_s, False))
            elif point in measured:
                m = measured[point]
                assert m is not None
                sem = latency_sem(m, self.objective.percentile)
                out.append(
                    Prediction(
                        m.percentile(self.objective.percentile),
                        math.nan if sem is None else sem,
                        m.power_w,
                        power_sem(m),
                        True,
                    )
                )
            else:
                out.append(Prediction(math.nan, math.nan, math.nan, math.nan, False))
        return out

    def predict_loads(self) -> dict[str, Any] | None:
        """Context mode: the model's predictions over every grid point at a grid of loads up to `context_max_qps`
        (`tuner.optimize.loadtable`), for the daemon's power curve; None before the GP is fitted."""
        from tuner.optimize.loadtable import predict_loads

        return predict_loads(self.model, self.book.borrowed)

    # -- persistence
    def to_json(self) -> str:
        """Full state as JSON: objective, settings, knob space, trial records and the Ax experiment."""
        from tuner.optimize.optimizer_state import dump_state

        return dump_state(self.model, self.book)

    @classmethod
    def from_json(cls, text: str) -> Optimizer:
        """Rebuild an optimiser saved by `to_json` (the Ax experiment and generation strategy included)."""
        from tuner.optimize.optimizer_state import load_state

        model, book = load_state(text)
        self = cls.__new__(cls)
        self._compose(model, book)
        return self
