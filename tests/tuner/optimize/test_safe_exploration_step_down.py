"""The safe start's walk down in frequency: once the safe line's next step is a cell measured already (its
bisection inside one grid cell, as at a tight SLA), the next trials step the frequency down from the cheapest point
measured within the limit instead of measuring that cell again."""

from __future__ import annotations

from tests.optimize_fakes import MEMBER_SETTINGS as BASE
from tests.optimize_fakes import SMALL, meas
from tuner.optimize.experiment import ExperimentModel
from tuner.optimize.records import TrialRecord
from tuner.optimize.safe_exploration import SafeExploration
from tuner.optimize.settings import Objective, TunerSettings
from tuner.optimize.trial_book import TrialBook

OBJ = Objective("constrained", 99, 500)  # the limit exploration aims within: 475 µs


def _p99(cell: tuple[int, int]) -> float:
    """A plant whose p99 rises steeply with ITR and with 1 / frequency (µs)."""
    i, j = cell
    return (60.0 + 30.0 * i) * (SMALL.dvfs_ghz[-1] / SMALL.dvfs_ghz[j])


def _power(cell: tuple[int, int]) -> float:
    i, j = cell
    return 20.0 + 10.0 * j - 0.1 * i


def _run_safe_start(trials: int, **kw: bool) -> tuple[SafeExploration, list[tuple[tuple[int, int], str]]]:
    settings = TunerSettings(**{**BASE, "safe_delta": 0.05, **kw})
    safety = SafeExploration(ExperimentModel(SMALL, OBJ, settings), TrialBook())
    book, out = safety.book, []
    for _ in range(trials):
        pend = safety.safe_start()
        cell = safety.model.cell_of(pend.point)
        index = book.hand_out(pend)
        book.take_pending(index)
        m = meas(_p99(cell), _power(cell))
        book.records[index] = TrialRecord(index, pend.point, 1e5, "completed", m, m.power_w, None)
        out.append((cell, pend.note))
    return safety, out


def test_a_line_with_nothing_new_to_try_walks_down_in_frequency_instead_of_repeating_a_cell() -> None:
    _, tried = _run_safe_start(8)
    cells = [c for c, _ in tried]
    walked = [(c, n) for c, n in tried if "one frequency step down" in n]
    assert walked, tried  # the line's bisection reached one cell and the walk took over
    first = cells.index(walked[0][0])
    assert len(set(cells[: first + 1])) == first + 1  # no cell measured twice before the walk began
    for cell, _ in walked:
        base = (cell[0], cell[1] + 1)
        assert base in cells[: cells.index(cell)]  # one step below a point measured before it
        assert _p99(base) <= 475.0  # ... within the limit
        # the step the frequency ratio allows: the base's latency x (f / f')^2 within the limit
        assert _p99(base) * (SMALL.dvfs_ghz[base[1]] / SMALL.dvfs_ghz[cell[1]]) ** 2 <= 475.0
    assert all(_p99(c) <= 475.0 for c, _ in walked)  # every step of the walk stayed within the limit
    assert len(walked) == len(set(c for c, _ in walked))  # and measured a new cell each time


def test_the_line_alone_while_it_has_new_cells() -> None:
    _, tried = _run_safe_start(3)
    assert all("on the line from the safe corner" in n for _, n in tried)


def test_without_step_down_the_line_measures_its_last_cell_again() -> None:
    _, tried = _run_safe_start(8, step_down=False)
    cells = [c for c, _ in tried]
    assert all("on the line from the safe corner" in n for _, n in tried)
    assert len(set(cells)) < len(cells)  # the bisection inside one cell: the same cell measured again
