"""Safe exploration's evidence rules: what the measured trials of the model vouch for at this retune's load (near a
point measured within the limit `best` applies) and what they rule out (next to a point measured over the SLA).
It reads the model's Ax experiment and the trial books; `SafeExploration` and the stopping rule ask it."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from tuner.optimize.experiment import ExperimentModel
from tuner.optimize.records import Cell
from tuner.optimize.settings import TunerSettings
from tuner.optimize.trial_book import TrialBook

#: `acquisition.supported`: moving to a LOWER ITR than the measured point counts this many times its distance.
#: At a fixed frequency a lower ITR means more interrupts and more CPU per request, so latency climbs into
#: saturation steeply that way, while a higher ITR only adds a bounded batching delay (dissertation ch. 5).
SAFE_ITR_DOWN_WEIGHT = 3.0
#: `acquisition.vetoed`: a point measured over the SLA rules out the points within this normalised ITR distance
#: (0.06 of the range: ~60 µs on ixgbe) at its frequency or below, at its load or above.
SAFE_VETO_RADIUS = 0.06
#: Safe exploration's evidence rule (`TunerSettings.safe_radius`): a point measured within the limit at load L'
#: vouches for its neighbourhood at loads up to L' / (1 - SAFE_LOAD_TOL), ~11 % above (day-to-day noise).
SAFE_LOAD_TOL = 0.10

#: Measured evidence (`EvidenceRules.evidence`): normalised knob coordinates (n x 2), normalised loads, within
#: the limit `best` applies, over the SLA.
Evidence = tuple[Any, Any, Any, Any]


class EvidenceRules:
    """The evidence rules of one optimiser, over its model and its trial books (see the module docstring)."""

    def __init__(self, model: ExperimentModel, book: TrialBook) -> None:
        self.model = model
        self.book = book
        self._evidence_cache: tuple[Any, Evidence, tuple[int, ...]] | None = None

    @property
    def settings(self) -> TunerSettings:
        return self.model.settings

    def near_cells(self, evidence: Evidence) -> list[Cell]:
        """The grid cells `supported` at this load: the only ones the safety filter may choose, so the only
        ones the model is asked about (and the stopping rule's EI ranges over)."""
        cells = self.model.grid()
        mask = self.supported(cells, evidence)
        return [c for c, m in zip(cells, mask) if m]

    def evidence(self) -> Evidence:
        """Every completed trial in the model: normalised knob coordinates (n x 2), load (normalised; 0 without
        context), whether its percentile was within the limit `best` applies (`met_limit_us`) and whether it
        was over the SLA; then each held window that was over the SLA (`TrialBook.held_broke`: never within the
        limit, always over)."""
        import numpy as np
        from ax.core.base_trial import TrialStatus

        model = self.model
        exp = model.client._experiment
        done = sorted(exp.trial_indices_by_status[TrialStatus.COMPLETED])
        key = (id(model.client), tuple(done), len(self.book.held_broke))
        if self._evidence_cache is not None and self._evidence_cache[0] == key:
            return self._evidence_cache[1]
        lat: dict[int, float] = {}
        if done:
            df = exp.lookup_data(trial_indices=done).df
            scale = model.scale
            rows = df[df["metric_name"] == scale.metric]
            lat = {int(t): scale.to_us(float(v)) for t, v in zip(rows["trial_index"], rows["mean"])}
        cells, loads, met, broke, used = [], [], [], [], []
        limit = model.met_limit_us()
        sla = model.objective.sla_us
        for ti in done:
            if ti not in lat:
                continue
            used.append(ti)
            params = exp.trials[ti].arm.parameters
            cells.append(model.cell_of(model.to_point(params)))
            loads.append(float(params.get("load", 0.0)))
            met.append(lat[ti] <= limit)
            broke.append(lat[ti] > sla)
        for k, (cell, load) in enumerate(self.book.held_broke):
            used.append(-1 - k)  # not an Ax trial: a held window (never borrowed, never within the limit)
            cells.append(cell)
            loads.append(load)
            met.append(False)
            broke.append(True)
        out = (
            model.coords(cells),
            np.array(loads, dtype=float),
            np.array(met, dtype=bool),
            np.array(broke, dtype=bool),
        )
        self._evidence_cache = (key, out, tuple(used))
        return out

    def evidence_trials(self) -> tuple[int, ...]:
        """The Ax trial index of each row of `evidence()`, in its order (held windows: negative)."""
        self.evidence()
        assert self._evidence_cache is not None
        return self._evidence_cache[2]

    def reported_since(self, first: int) -> Any:
        """Mask over `evidence()`'s rows: trials numbered `first` or later (held windows and other hosts' trials,
        which have no number of this optimiser, count as such)."""
        import numpy as np

        own = {a: i for i, a in self.book.ax_of.items()}
        return np.array([own.get(ti, first) >= first for ti in self.evidence_trials()], dtype=bool)

    def supported(self, cells: Sequence[Cell], evidence: Evidence) -> Any:
        """Grid `cells` the evidence allows at this retune's load: `acquisition.supported` (near a point measured
        within the limit) and not `acquisition.vetoed` (next to one measured over the SLA); all True when
        `safe_radius` or `safe_delta` is 0."""
        import numpy as np

        from tuner.optimize import acquisition

        s, load = self.settings, self.book.load
        if s.safe_radius <= 0 or s.safe_delta <= 0:
            return np.ones(len(cells), dtype=bool)
        ev, ev_load, ev_met, ev_broke = evidence
        coords = self.model.coords(cells)
        near = acquisition.supported(
            coords, ev, ev_load, ev_met, load, s.safe_radius, SAFE_LOAD_TOL, SAFE_ITR_DOWN_WEIGHT
        )
        return near & ~self.vetoed(cells, evidence)

    def vetoed(self, cells: Sequence[Cell], evidence: Evidence) -> Any:
        """Mask over `cells`: next to a point the evidence measured over the SLA at this retune's load or below
        (`acquisition.vetoed`, SAFE_VETO_RADIUS) -- ruled out whether or not the evidence rule is on."""
        from tuner.optimize import acquisition

        ev, ev_load, _, ev_broke = evidence
        coords = self.model.coords(cells)
        return acquisition.vetoed(coords, ev, ev_load, ev_broke, self.book.load, SAFE_VETO_RADIUS, SAFE_LOAD_TOL)
