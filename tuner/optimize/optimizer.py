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

`Optimizer` is the facade: its verbs (`begin_retune`, `suggest`, `complete`/`fail`, `should_stop`, `best`,
`predict`, `add_history`, `to_json`/`from_json`) sit on layers, each a module with one job: `model` (the Ax
experiment over the knob grid and the trial books), `safety` (the safety filter), `stopping` (the stopping
rule); `settings`, `records` and `decision` hold the value types, `retune` drives trials on a host.
"""

from __future__ import annotations

import json
import math
import time
from collections.abc import Sequence
from dataclasses import asdict
from typing import Any

from actuators.host import KnobSpace, Measurement, OperatingPoint
from core.errors import TunerError
from tuner.optimize.axsetup import no_warnings, quiet_ax, small_acqf_batches
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
from tuner.optimize.model import LOAD_TOLERANCE
from tuner.optimize.presets import cold_values
from tuner.optimize.records import (
    STATUS_COMPLETED,
    STATUS_FAILED,
    Pending,
    Prediction,
    TrialRecord,
    latency_sem,
    lean,
    opt_float,
    power_sem,
    record_from_dict,
    record_to_dict,
)
from tuner.optimize.safety import SAFE_LOAD_TOL
from tuner.optimize.settings import Objective, TunerSettings, itr_candidates
from tuner.optimize.stopping import StoppingRule
from tuner.optimize.surrogate import GridPredictor

# the worker process loads `Optimizer`, `Objective` and `TunerSettings` from this module by name
__all__ = ["Objective", "Optimizer", "TunerSettings"]


class Optimizer(StoppingRule):
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
        self._retune_start = self._next_index
        self._load = self.settings.load_of(q) if self.settings.context else None
        self._stop_s = 0.0
        self._refine = None

    def add_history(self, records: Sequence[TrialRecord], *, borrowed: bool = False) -> int:
        """Attach completed past trials (each at its own load) to the experiment as data; returns how many were
        used. Failed ones, ones without a measurement, points the host lacks, and windows Ax cannot model are
        skipped; only the newest `history_max_trials` are kept. Metrics are recomputed for this objective.

        `borrowed`: the trials are other hosts' (a hardware class's, `tuner.store.warm`): they inform the model
        and the safety filter like any, but `hold_verdict` does not count their loads as measured -- a host
        holds without trials only where it measured itself, as the daemon does (its hold rule reads only its
        own trials)."""
        if self._pending:
            raise TunerError("add_history: report the pending trials first")
        usable: list[tuple[dict[str, Any], dict[str, Any]]] = []
        for r in records:
            m = r.measurement
            if r.status != STATUS_COMPLETED or m is None:
                continue
            try:
                point = self.space.check(r.point)
                data = self.metrics(m)
            except (TunerError, ValueError, KeyError):
                continue
            qps = r.qps if math.isfinite(r.qps) else m.offered_qps
            if self.settings.context and not (math.isfinite(qps) and qps >= 0):
                continue
            usable.append((self._to_params(point, self.settings.load_of(qps) if self.settings.context else None), data))
        usable = usable[-self.settings.history_max_trials :]
        with no_warnings():
            for params, data in usable:
                ax_index = self._client.attach_trial(parameters=params)
                self._client.complete_trial(trial_index=ax_index, raw_data=data)
                if borrowed:
                    self._borrowed.add(int(ax_index))
        self._prune()
        return len(usable)

    # -- trials
    def suggest(self) -> tuple[int, OperatingPoint]:
        """Ask Ax for the next point; returns (trial index, point). The trial is pending until completed/failed.

        Context mode pins `load` at the retune's load. With `safe_delta` > 0: before a model exists the point
        is the next step on the safe line (from the lowest-ITR/highest-DVFS corner toward the centre, outward
        while trials meet the limit, bisecting once one broke it) instead of Sobol; afterwards, an Ax proposal
        the safety filter refuses (`_safety_filter`: the model's P of breaking the SLA or the limit `best`
        applies > `safe_delta`, or no measured evidence near it) is abandoned in Ax and the allowed grid point
        of largest constrained expected improvement (as in `should_stop`; ties and no-EI cases: the allowed
        point closest to the proposal in normalised knob coordinates) is attached and tried instead; the
        record's `note` says so and `p_violation` holds the tried point's modelled probability.
        """
        if self.settings.context and self._load is None:
            raise TunerError("context mode: call begin_retune(qps) before suggest()")
        t0 = time.perf_counter()
        self._prune()
        safe = self.settings.safe_delta > 0
        if self._refine is not None:  # the stopping rule asked for one refining trial (`refine_step`)
            pend, self._refine = self._refine, None
            pend.ax_index = self._attach(self._cell_of(pend.point))
        elif safe and len(self._observed()) < self._init_budget():
            pend = self._safe_start()
        else:
            with no_warnings(self.settings.torch_threads):
                if len(self._observed()) >= self._init_budget():
                    self.fit_model()  # hyperparameters only when due (the stopping rule may have done it)
                grid = safe and self.settings.acquisition != "ax" and self._fitted_on is not None
                if grid:
                    trials = {}
                elif self.settings.context:
                    trials = self._client.get_next_trials(max_trials=1, fixed_parameters={"load": self._load})
                else:
                    trials = self._client.get_next_trials(max_trials=1)
            if grid:
                pend = self._safety_filter(None)  # the model's choice among the points it allows
            else:
                if not trials:
                    raise TunerError("Ax generated no trial (search space exhausted?)")
                ((ax_index, params),) = trials.items()
                pend = Pending(self._to_point(params), 0.0, ax_index, self._load)
                if safe:
                    pend = self._safety_filter(pend)
        pend.compute_s = time.perf_counter() - t0 + self._stop_s
        self._stop_s = 0.0
        index = self._next_index
        self._next_index += 1
        self._pending[index] = pend
        if pend.line_t is not None:
            self._line_t[index] = pend.line_t
        return index, pend.point

    def complete(
        self, index: int, measurement: Measurement, qps: float, *, settle: Measurement | None = None
    ) -> TrialRecord:
        """Report trial `index`'s measured window to Ax (metrics with SEMs) and record it.

        A window Ax cannot model (non-finite or zero latency/power) is marked failed instead, with the reason.
        In context mode a trial whose measured load `qps` moved away from the load it was suggested at is
        filed in Ax at its measured load (the suggested Ax trial is marked failed with that reason).
        """
        pend = self._take_pending(index)
        try:
            data = self.metrics(measurement)
        except ValueError as exc:
            self._pending[index] = pend
            return self.fail(index, str(exc), settle=settle, measurement=measurement, qps=qps)
        ax_index = pend.ax_index
        with no_warnings():
            if (
                self.settings.context
                and math.isfinite(qps)
                and pend.load is not None
                and abs(self.settings.load_of(qps) - pend.load) > LOAD_TOLERANCE
            ):
                moved = self._client.attach_trial(parameters=self._to_params(pend.point, self.settings.load_of(qps)))
                # FAILED, not ABANDONED: Ax keeps abandoned arms as pending points (fantasies) forever
                self._client.mark_trial_failed(
                    trial_index=ax_index, failed_reason=f"re-filed at its measured load as trial {moved}"
                )
                ax_index = moved
            self._complete_ax(ax_index, data)
        value = self._reward(
            measurement.power_w, measurement.percentile(self.objective.percentile), self.objective.sla_us
        )
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
            pend.note,
        )
        self._records[index] = rec
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
        pend = self._take_pending(index)
        reason = " ".join(str(reason).split()) or "failed"
        with no_warnings():
            self._client.mark_trial_failed(trial_index=pend.ax_index, failed_reason=reason)
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
        self._records[index] = rec
        return rec

    # -- decisions
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
            cell = self._cell_of(point)
        except (TunerError, ValueError):
            return False  # a point off this host's knobs (another host's safe corner): nothing to veto here
        self._held_broke.append((cell, float(m.offered_qps) / self.settings.context_max_qps))
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
        if not s.context or s.hold_max_p <= 0 or self._load is None:
            return hold_or_retune(qps, (), (), max_p=0.0)
        evidence = self._evidence()
        coords, ev_load, ev_met, _ = evidence
        own = [ti not in self._borrowed for ti in self._evidence_trials()]
        measured = [
            (float(x) * s.context_max_qps, self._grid_point(self._cell_at(tuple(u))))
            for u, x, ok, mine in zip(coords, ev_load, ev_met, own, strict=True)
            if ok and mine
        ]
        if outside_measured(qps, [q for q, _ in measured]) is not None:
            return hold_or_retune(qps, measured, (), max_p=s.hold_max_p)
        # only points measured within the limit at this load or above can be held (`hold_or_retune`)
        floor = qps * (1 - HOLD_LOAD_TOL)
        cells = sorted({self._cell_of(p) for q, p in measured if q >= floor})
        broke = [(self._grid_point(c), q * s.context_max_qps) for c, q in self._held_broke]
        cells = [c for c in cells if not held_over(self._grid_point(c), qps, broke, SAFE_LOAD_TOL)]
        if cells and s.safe_delta > 0 and s.safe_radius > 0:
            cells = [c for c, ok in zip(cells, self._supported(cells, evidence)) if ok]
        grid = self._grid_model(self._load, refit=True, cells=cells) if cells else None
        candidates: list[HoldCandidate] = []
        if grid is not None:
            scale = self._scale
            for k, cell in enumerate(grid["cells"]):
                lat, _ = scale.latency_mean_sd(float(grid["mu"][k]), float(grid["sd"][k]))
                p = max(float(grid["p_unmet"][k]), float(grid["p_violation"][k]))
                candidates.append(HoldCandidate(self._grid_point(cell), lat, p, float(grid["power"][k])))
        return hold_or_retune(qps, measured, candidates, max_p=s.hold_max_p)

    def predict(self, points: Sequence[OperatingPoint], qps: float | None = None) -> list[Prediction]:
        """Model mean and SEM of the objective's percentile latency and power at `points`.

        Context mode predicts at offered load `qps` (default: the current retune's load). Before the GP is
        fitted (Sobol phase) a point that was measured returns its measurement (`from_measured=True`); an
        unmeasured one returns NaNs.
        """
        load = self.settings.load_of(qps) if (self.settings.context and qps is not None) else None
        params = [self._to_params(p, load) for p in points]
        try:
            with no_warnings(self.settings.torch_threads):
                preds = self._client.predict(params)
        except Exception:  # noqa: BLE001 - Ax raises UnsupportedError/others until a model is fitted
            preds = None
        out: list[Prediction] = []
        measured = {
            r.point: r.measurement for r in self.trials() if r.measurement is not None and r.status == STATUS_COMPLETED
        }
        scale = self._scale
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

        return predict_loads(self)

    # -- persistence
    def to_json(self) -> str:
        """Full state as JSON: objective, settings, knob space, trial records and the Ax experiment."""
        with no_warnings():
            snapshot = self._client._to_json_snapshot()
        return json.dumps(
            {
                "version": 1,
                "name": self.name,
                "objective": asdict(self.objective),
                "settings": asdict(self.settings),
                "space": {"itr_us": list(self.space.itr_us), "dvfs_ghz": list(self.space.dvfs_ghz)},
                "trials": [record_to_dict(r) for r in self.trials()],
                "pending": {
                    str(i): {
                        "itr_us": p.point.itr_us,
                        "dvfs_ghz": p.point.dvfs_ghz,
                        "compute_s": p.compute_s,
                        "ax_index": p.ax_index,
                        "load": p.load,
                        "p_violation": p.p_violation,
                        "note": p.note,
                        "line_t": p.line_t,
                    }
                    for i, p in self._pending.items()
                },
                "next_index": self._next_index,
                "retune": {"start": self._retune_start, "load": self._load},
                "line_t": {str(i): t for i, t in self._line_t.items()},
                "borrowed": sorted(self._borrowed),
                "held_broke": [[i, j, q] for (i, j), q in self._held_broke],
                "ax": snapshot,
            }
        )

    @classmethod
    def from_json(cls, text: str) -> Optimizer:
        """Rebuild an optimiser saved by `to_json` (the Ax experiment and generation strategy included)."""
        from ax import Client

        quiet_ax()
        try:
            d = json.loads(text)
            if d.get("version") != 1:
                raise ValueError(f"unsupported version {d.get('version')!r}")
            obj = Objective(**d["objective"])
            # a state saved before `latency_metric` existed holds an experiment on the ln scale; a field it lacks
            # takes the value it had then (the cold tuner's, the dataclass's defaults of that time)
            settings = TunerSettings(**{**cold_values(), "latency_metric": "log", **d["settings"]})
            space = KnobSpace(
                tuple(int(x) for x in d["space"]["itr_us"]), tuple(float(x) for x in d["space"]["dvfs_ghz"])
            )
            self = cls.__new__(cls)
            self.space, self.objective, self.settings, self.name = space, obj, settings, str(d["name"])
            self._itr = itr_candidates(space.itr_us, settings.itr_resolution_us)
            self._records = {r.index: r for r in (record_from_dict(x) for x in d["trials"])}
            self._pending = {
                int(i): Pending(
                    OperatingPoint(int(p["itr_us"]), float(p["dvfs_ghz"])),
                    float(p["compute_s"]),
                    int(p.get("ax_index", i)),
                    opt_float(p.get("load")),
                    opt_float(p.get("p_violation")),
                    str(p.get("note") or ""),
                    opt_float(p.get("line_t")),
                )
                for i, p in d.get("pending", {}).items()
            }
            used = [*self._records, *self._pending]
            self._next_index = int(d.get("next_index", max(used) + 1 if used else 0))
            retune = d.get("retune") or {}
            self._retune_start = None if retune.get("start") is None else int(retune["start"])
            self._load = opt_float(retune.get("load"))
            self._line_t = {int(i): float(t) for i, t in (d.get("line_t") or {}).items()}
            self._borrowed = {int(i) for i in d.get("borrowed") or ()}
            self._held_broke = [((int(i), int(j)), float(q)) for i, j, q in d.get("held_broke") or ()]
            self._grid_cache, self._stop_s, self._evidence_cache, self._refine = None, 0.0, None, None
            self._hyper_fit, self._fitted_on = None, None
            self._predictor, self._reported = GridPredictor(), {}
            with no_warnings():
                self._client = Client._from_json_snapshot(d["ax"])
                small_acqf_batches(self._client)
            self._client._random_seed = settings.seed  # the snapshot does not carry the client's seed
        except TunerError:
            raise
        except Exception as exc:  # noqa: BLE001 - any malformed state is one line for the user
            raise TunerError(f"optimizer state is not valid: {type(exc).__name__}: {exc}") from None
        return self
