"""The optimiser's trial books: every trial it handed out (pending) and had reported (records), where the
current retune began and at which load, and the evidence kept beside Ax's trials (safe-line positions, other
hosts' trials, held windows measured over the SLA). Plain data with a few lookups; no Ax."""

from __future__ import annotations

from dataclasses import dataclass, field

from core.errors import TunerError
from tuner.optimize.drift import Cusum
from tuner.optimize.records import STATUS_COMPLETED, Cell, Pending, TrialRecord


@dataclass
class TrialBook:
    """What one optimiser handed out and was told, in its own trial numbers (`TrialRecord.index`)."""

    records: dict[int, TrialRecord] = field(default_factory=dict)
    pending: dict[int, Pending] = field(default_factory=dict)
    #: safe-start trials: their position on the safe line (`SafeExploration.safe_start`)
    line_t: dict[int, float] = field(default_factory=dict)
    #: Ax trials of other hosts (`Optimizer.add_history(borrowed=True)`)
    borrowed: set[int] = field(default_factory=set)
    #: held windows measured over the SLA: (cell, load normalised as the model's `load`), evidence of danger
    #: beside the trials (`Optimizer.note_held_window`)
    held_broke: list[tuple[Cell, float]] = field(default_factory=list)
    next_index: int = 0
    #: the first trial number of the current retune (None: `begin_retune` never called)
    retune_start: int | None = None
    #: the current retune's load, normalised as the model's `load` (None outside context mode)
    load: float | None = None
    #: own trial number -> its Ax trial (completed ones; `Optimizer.retire` finds the Ax trials to drop by it)
    ax_of: dict[int, int] = field(default_factory=dict)
    #: trials numbered up to this one are retired: the host changed since (`tuner.optimize.drift`); -1: none
    retired_through: int = -1
    #: the faster-host CUSUM over the trials since the last alarm (`tuner.optimize.drift`)
    drift: Cusum = field(default_factory=Cusum)
    #: readings of trials numbered before this one prove no point (`SafeExploration.proof_failed`); 0: all do
    proof_from: int = 0

    def live(self) -> list[TrialRecord]:
        """Every reported trial that is not retired, in index order."""
        return [r for r in self.trials() if r.index > self.retired_through]

    def remap_ax(self, moved: dict[int, int]) -> None:
        """Follow a rebuilt experiment (`ExperimentModel.rebuild`: old Ax index -> new); trials it dropped
        leave `ax_of` and `borrowed`."""
        self.ax_of = {i: moved[a] for i, a in self.ax_of.items() if a in moved}
        self.borrowed = {moved[a] for a in self.borrowed if a in moved}

    def trials(self) -> list[TrialRecord]:
        """Every reported trial, in index order."""
        return [self.records[i] for i in sorted(self.records)]

    def retune_trials(self) -> list[TrialRecord]:
        """Trials reported since the last `begin_retune` (all of them if it was never called), not retired."""
        start = max(self.retune_start or 0, self.retired_through + 1)
        return [r for r in self.trials() if r.index >= start]

    def completed_this_retune(self) -> list[TrialRecord]:
        """This retune's completed trials."""
        return [r for r in self.retune_trials() if r.status == STATUS_COMPLETED]

    def hand_out(self, pend: Pending) -> int:
        """Book `pend` as the next pending trial; its trial number."""
        index = self.next_index
        self.next_index += 1
        self.pending[index] = pend
        if pend.line_t is not None:
            self.line_t[index] = pend.line_t
        return index

    def take_pending(self, index: int) -> Pending:
        """Remove and return pending trial `index`; TunerError if it was reported or never handed out."""
        if index in self.records:
            raise TunerError(f"trial {index} was already reported")
        try:
            return self.pending.pop(index)
        except KeyError:
            raise TunerError(f"trial {index} was never suggested") from None
