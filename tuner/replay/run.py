"""Replay a load schedule (a binned trace) against a host under several policies (dissertation ch. 7.3).

Per window of the schedule, each policy sets the host's offered load to the window's QPS and then:

* `tuner`: an Ax retune (`run_retune`) whose trials -- settle and window -- count in the window's energy and
  time, then holds the chosen point for the rest of the window (the steady state). With
  `settings.context` false (the dissertation's cold tuner) every window is a fresh experiment; with it true ONE
  optimiser lives through the whole replay (all windows, all days), the offered QPS is a model input and
  each window's retune starts from everything learnt before (`Optimizer.begin_retune` via `run_retune`),
  optionally seeded with earlier trials (`history`, `Optimizer.add_history`);
* `linux-default`: `host.restore()` (adaptive ITR + the OS governor) and measures the whole window;
* `static-performance`: ITR = the host's lowest, DVFS = its highest, the whole window;
* `oracle`: the best static point under the SLA for the window's load over the full knob grid, from the
  host's noise-free model `host.expected(points, qps)` (`tuner.replay.oracle`; the simulated host has one), then measures
  the whole window there. A host without `expected` has no oracle: the policy is reported as unavailable
  (a measured grid would cost hours per window and still be a noisy estimate, not an oracle).
* `oracle-hourly`: the best static point of each clock hour, held for all of that hour's windows: the oracle at the
  hour's highest window load (the percentile rises with load, so that point meets the SLA in every window of the
  hour). With hourly windows it is `oracle`; with finer windows it is the static hourly point a tuner that
  follows the load within the hour can beat, and one oracle computation per hour instead of per window.

Every policy runs on its own host built from the same spec and seed, so each compares like with like.
A multi-day schedule (`traces.schedule.repeat_days`) carries each window's `day`; summaries are per day too.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from actuators.abilities import ExpectedModel
from actuators.host import Host, LoadControl, Measurement, OperatingPoint, apply_point
from core.errors import TunerError
from tuner.optimize.optimizer import Optimizer
from tuner.optimize.presets import TUNER_PRESETS as TUNER_PRESETS  # re-exported: the presets' old home
from tuner.optimize.presets import WARM_ABLATIONS as WARM_ABLATIONS
from tuner.optimize.presets import preset_settings as preset_settings
from tuner.optimize.records import TrialRecord
from tuner.optimize.retune import run_retune
from tuner.optimize.settings import Objective, TunerSettings
from tuner.replay.oracle import oracle_point

POLICIES: tuple[str, ...] = ("tuner", "linux-default", "static-performance", "oracle", "oracle-hourly")
#: The policies a replay runs unless told (`default_policies`): windows of an hour or more get the per-window
#: oracle; finer windows the hourly one (the per-window oracle costs ~1-4 s of model cells per window, which for
#: 288 five-minute windows is most of the replay; add it with `--policies ...,oracle`).
HOURLY_POLICIES: tuple[str, ...] = ("tuner", "linux-default", "static-performance", "oracle")
FINE_POLICIES: tuple[str, ...] = ("tuner", "linux-default", "static-performance", "oracle-hourly")
HOUR_S = 3600.0
#: `hold_max_p` of the contextual tuner in windows under an hour unless set (`fine_window_hold`): a load inside those
#: measured within the limit holds the model's best point without trials when its P(over the limit) <= 5 % (the
#: safety filter's delta). In hourly windows every window retunes, as before: a retune's trials are ~2 % of an hour,
#: and on the bundled day (seed 0, 99 % < 500 µs) holding there cut trials 71 -> 42 and energy 1.016 -> 1.014 x the
#: oracle, but left the same 1.7 s over the SLA in 45 % less trial time (0.8 -> 1.2 % of it, over the 1 % target).
FINE_HOLD_MAX_P = 0.05


def fine_window_hold(settings: TunerSettings, bin_s: float, explicit: bool = False) -> TunerSettings:
    """`settings` with `hold_max_p = FINE_HOLD_MAX_P` for a contextual tuner in windows under an hour, unless
    `explicit` (the user set `hold_max_p`)."""
    if explicit or not settings.context or bin_s >= HOUR_S or settings.hold_max_p > 0:
        return settings
    return replace(settings, hold_max_p=FINE_HOLD_MAX_P)


@dataclass(frozen=True)
class ReplayWindow:
    """One window of the schedule to replay (a `traces.schedule.Window` fits)."""

    index: int
    start_s: float
    seconds: float
    qps: float
    day: int = 0


@dataclass(frozen=True)
class WindowResult:
    """What one policy did in one window.

    `energy_j` counts everything in the window (exploration trials incl. settle, plus the hold);
    `steady` is the hold measurement (the rest of the window at the chosen point) and decides `met_sla`.
    `trial_window_s` is the trials' measured windows (settle excluded) and `fixed_window_s` what they would
    have taken at the fixed `settings.window_s` each (the adaptive windows' saving is the difference).
    """

    policy: str
    index: int
    start_s: float
    seconds: float
    qps: float
    point: OperatingPoint | None
    steady: Measurement | None
    energy_j: float
    elapsed_s: float
    trials: int = 0
    failed_trials: int = 0
    explore_s: float = 0.0
    explore_energy_j: float = 0.0
    explore_above_sla_s: float = 0.0
    suggest_s: tuple[float, ...] = ()
    met_sla: bool | None = None
    note: str = ""
    error: str | None = None
    day: int = 0
    trial_window_s: float = 0.0
    fixed_window_s: float = 0.0
    # the safety filter's calibration: completed trials it passed with a modelled P(SLA broken) (`p_violation`),
    # the sum of those P (the violations the model expected) and how many measured over the SLA
    gated_trials: int = 0
    gated_p_sum: float = 0.0
    gated_over: int = 0
    # the tuner held the model's point without a trial (`Optimizer.hold_verdict`); `decide_s`: the compute of that
    # decision when held, else of the retune's suggestions
    held: bool = False
    decide_s: float = 0.0

    @property
    def power_w(self) -> float:
        """Mean power over the whole window (exploration included)."""
        return self.energy_j / self.elapsed_s if self.elapsed_s > 0 else math.nan

    def latency_us(self, pct: float) -> float:
        """The steady-state percentile (NaN if there was no steady state)."""
        return self.steady.percentile(pct) if self.steady is not None else math.nan


@dataclass
class PolicyResult:
    """One policy's windows; for `tuner` also every trial it ran (`trials`, in order, for `--save-trials`)."""

    policy: str
    windows: list[WindowResult] = field(default_factory=list)
    wall_s: float = 0.0
    available: bool = True
    note: str = ""
    trials: list[TrialRecord] = field(default_factory=list)
    history_used: int = 0


@dataclass
class ReplayResult:
    objective: Objective
    settings: TunerSettings
    host: str
    seed: int
    source: str
    windows: tuple[ReplayWindow, ...]
    policies: dict[str, PolicyResult]
    wall_s: float = 0.0
    meta: dict[str, Any] = field(default_factory=dict)


#: `progress(policy, window_index, trial_record_or_None)`: called after each trial and after each window.
Progress = Callable[[str, int, TrialRecord | None], None]


def parse_policies(text: str | Sequence[str]) -> tuple[str, ...]:
    """Policy names from `a,b,c` (or a list); one-line error for unknown or repeated names."""
    items = [s.strip() for s in (text.split(",") if isinstance(text, str) else text) if s.strip()]
    if not items:
        raise TunerError(f"--policies: expected a comma list of {', '.join(POLICIES)}")
    for s in items:
        if s not in POLICIES:
            raise TunerError(f"--policies: unknown policy {s!r}: expected some of {', '.join(POLICIES)}")
    if len(set(items)) != len(items):
        raise TunerError("--policies: a policy is listed twice")
    return tuple(items)


def _met(objective: Objective, m: Measurement | None) -> bool | None:
    return None if m is None else objective.met(m)


def _above_sla_s(objective: Objective, m: Measurement | None) -> float:
    return m.seconds if m is not None and not objective.met(m) else 0.0


def _set_load(host: Host, qps: float) -> None:
    if not isinstance(host, LoadControl):
        raise TunerError(
            f"host {host.name!r} cannot set its offered load (no set_offered_qps): "
            "replay needs a host with load control, e.g. --host sim"
        )
    host.set_offered_qps(qps)


def _run_tuner_window(
    host: Host,
    w: ReplayWindow,
    objective: Objective,
    settings: TunerSettings,
    progress: Progress | None,
    opt: Optimizer,
) -> tuple[WindowResult, list[TrialRecord]]:
    """One window of the `tuner` policy with optimiser `opt` (fresh or persistent): retune, then hold.

    The retune also stops when its trials have used up the window (`should_stop`); `run_retune` calls
    `opt.begin_retune(qps)`, so in context mode only this window's trials count here.
    """
    used = {"s": 0.0}
    recs: list[TrialRecord] = []

    def on_trial(rec: TrialRecord) -> None:
        recs.append(rec)
        for m in (rec.settle, rec.measurement):
            if m is not None:
                used["s"] += m.seconds
        if progress is not None:
            progress("tuner", w.index, rec)

    t0 = time.perf_counter()
    decision = run_retune(host, opt, settings, on_trial=on_trial, should_stop=lambda: used["s"] >= w.seconds)
    decide_s = time.perf_counter() - t0  # held: the decision's compute (applying a point costs nothing here)
    explore_e = sum(m.energy_j for r in recs for m in (r.settle, r.measurement) if m is not None)
    explore_s = sum(m.seconds for r in recs for m in (r.settle, r.measurement) if m is not None)
    above = sum(_above_sla_s(objective, m) for r in recs for m in (r.settle, r.measurement))
    measured = [r.measurement for r in recs if r.measurement is not None]
    gated = [r for r in recs if r.p_violation is not None and r.status == "completed" and r.measurement is not None]
    remaining = w.seconds - explore_s
    steady = None
    error = None
    if remaining > 0:
        try:
            steady = host.measure(remaining)
        except Exception as exc:  # noqa: BLE001 - report, do not abort the replay
            error = f"hold measurement failed: {type(exc).__name__}: {exc}"
        else:
            opt.note_held_window(decision.point, steady)  # over the SLA: not held (or tried) there again
    energy = explore_e + (steady.energy_j if steady is not None else 0.0)
    elapsed = explore_s + (steady.seconds if steady is not None else 0.0)
    return WindowResult(
        policy="tuner",
        index=w.index,
        start_s=w.start_s,
        seconds=w.seconds,
        qps=w.qps,
        point=decision.point,
        steady=steady,
        energy_j=energy,
        elapsed_s=elapsed,
        trials=len(recs),
        failed_trials=sum(1 for r in recs if r.status == "failed"),
        explore_s=explore_s,
        explore_energy_j=explore_e,
        explore_above_sla_s=above,
        suggest_s=tuple(r.compute_s for r in recs),
        met_sla=_met(objective, steady),
        note=decision.reason,
        error=error,
        day=w.day,
        trial_window_s=sum(m.seconds for m in measured),
        fixed_window_s=len(measured) * settings.window_s,
        gated_trials=len(gated),
        gated_p_sum=sum(float(r.p_violation) for r in gated if r.p_violation is not None),
        gated_over=sum(1 for r in gated if r.measurement is not None and not objective.met(r.measurement)),
        held=decision.held,
        decide_s=decide_s if decision.held else sum(r.compute_s for r in recs),
    ), recs


def hour_loads(windows: Sequence[ReplayWindow]) -> dict[tuple[int, int], float]:
    """The highest window load of each (day, clock hour) of the schedule: the load `oracle-hourly` is computed at."""
    out: dict[tuple[int, int], float] = {}
    for w in windows:
        key = hour_of(w)
        out[key] = max(out.get(key, 0.0), w.qps)
    return out


def hour_of(w: ReplayWindow) -> tuple[int, int]:
    """(day, clock hour of the window's start): the group `oracle-hourly` holds one point for."""
    return w.day, int(math.floor(w.start_s / HOUR_S + 1e-9))


def default_policies(bin_s: float) -> tuple[str, ...]:
    """`HOURLY_POLICIES` for windows of an hour or more, else `FINE_POLICIES`."""
    return HOURLY_POLICIES if bin_s >= HOUR_S else FINE_POLICIES


def _run_static_window(
    policy: str,
    host: Host,
    w: ReplayWindow,
    objective: Objective,
    oracle_exhaustive: bool = False,
    oracle_memo: dict | None = None,
    oracle_qps: float | None = None,
) -> WindowResult:
    """One window of a static policy; `oracle_qps`: the load the oracle is computed at (default the window's)."""
    note = ""
    point: OperatingPoint | None
    if policy == "linux-default":
        host.restore()
        point = None
        note = "adaptive ITR + OS governor"
    elif policy == "static-performance":
        k = host.knobs()
        point = apply_point(host, OperatingPoint(k.itr_us[0], k.dvfs_ghz[-1]))
        note = "lowest ITR, highest frequency"
    elif policy in ("oracle", "oracle-hourly"):
        at = w.qps if oracle_qps is None else oracle_qps
        key = (round(at, 6), objective.percentile, objective.sla_us)
        if oracle_memo is not None and key in oracle_memo:
            point, note = oracle_memo[key]
        else:
            point, note = oracle_point(host, objective, at, exhaustive=oracle_exhaustive)
            if oracle_memo is not None:
                oracle_memo[key] = (point, note)
        if policy == "oracle-hourly":
            note = f"hourly oracle: best static point at the hour's highest window load {at:.0f} QPS, held; {note}"
        apply_point(host, point)
    else:  # pragma: no cover - parse_policies guards this
        raise TunerError(f"unknown policy {policy!r}")
    try:
        m = host.measure(w.seconds)
    except Exception as exc:  # noqa: BLE001
        return WindowResult(
            policy,
            w.index,
            w.start_s,
            w.seconds,
            w.qps,
            point,
            None,
            0.0,
            0.0,
            note=note,
            error=f"measurement failed: {type(exc).__name__}: {exc}",
            day=w.day,
        )
    return WindowResult(
        policy,
        w.index,
        w.start_s,
        w.seconds,
        w.qps,
        point,
        m,
        m.energy_j,
        m.seconds,
        met_sla=objective.met(m),
        note=note,
        day=w.day,
    )


def replay(
    make_host: Callable[[], Host],
    windows: Sequence[ReplayWindow],
    objective: Objective,
    settings: TunerSettings,
    *,
    policies: Sequence[str] = HOURLY_POLICIES,
    progress: Progress | None = None,
    host_label: str = "",
    source: str = "",
    oracle_exhaustive: bool = False,
    oracle_memo: dict | None = None,
    history: Sequence[TrialRecord] = (),
    borrowed_history: Sequence[TrialRecord] = (),
) -> ReplayResult:
    """Replay `windows` under each policy, each on a fresh host from `make_host()`; hosts are restored after.

    `oracle_memo` (optional) caches oracle points by (window QPS, percentile, SLA) across replays of the same
    host type -- they depend on the host's noise-free model only, not on the seed. `history`: earlier trials
    (e.g. `tuner.store.history.read_trials`) that seed the persistent contextual tuner; refused without
    `settings.context` (a cold per-window experiment has no load input to place them at). `borrowed_history`:
    other hosts' trials (a hardware class's) seeding it too, but never a reason to hold without trials
    (`Optimizer.add_history(borrowed=True)`).
    """
    if not windows:
        raise TunerError("the schedule has no window to replay")
    context = bool(getattr(settings, "context", False))
    if (history or borrowed_history) and not context:
        raise TunerError(
            "trial history needs the contextual tuner (settings.context / --context): the cold "
            "tuner starts a fresh experiment per window with no load input"
        )
    t_all = time.perf_counter()
    result = ReplayResult(
        objective,
        settings,
        host_label,
        settings.seed,
        source,
        tuple(ReplayWindow(w.index, w.start_s, w.seconds, w.qps, getattr(w, "day", 0)) for w in windows),
        {},
    )
    result.meta["started_unix"] = time.time()
    memo = {} if oracle_memo is None else oracle_memo  # the hourly oracle asks once per hour, not per window
    for policy in policies:
        host = make_host()
        pr = PolicyResult(policy)
        result.policies[policy] = pr
        if policy in ("oracle", "oracle-hourly") and not isinstance(host, ExpectedModel):
            pr.available = False
            pr.note = f"oracle unavailable: host {host.name!r} has no noise-free model (expected())"
            for w in result.windows:
                if progress is not None:
                    progress(policy, w.index, None)
            continue
        persistent = None
        if policy == "tuner" and context:
            persistent = _PersistentTuner(objective, settings, history, borrowed_history)
        _replay_policy(host, pr, result.windows, objective, settings, persistent, progress, oracle_exhaustive, memo)
    result.wall_s = time.perf_counter() - t_all
    return result


@dataclass(frozen=True)
class _PersistentTuner:
    """What the contextual tuner's one experiment across all windows starts from."""

    objective: Objective
    settings: TunerSettings
    history: Sequence[TrialRecord]
    borrowed_history: Sequence[TrialRecord]

    def start(self, host: Host, pr: PolicyResult, n_windows: int) -> Optimizer:
        """The experiment, seeded with the history trials (counted in `pr`, which also gets its note)."""
        opt = Optimizer(host.knobs(), self.objective, self.settings, name="replay")
        history, borrowed = self.history, self.borrowed_history
        if history:
            pr.history_used = opt.add_history(history)
        if borrowed:
            pr.history_used += opt.add_history(borrowed, borrowed=True)
        pr.note = f"contextual tuner, one experiment for {n_windows} windows" + (
            f", seeded with {pr.history_used} of {len(history) + len(borrowed)} history trials"
            if history or borrowed
            else ""
        )
        return opt


def _replay_policy(
    host: Host,
    pr: PolicyResult,
    windows: Sequence[ReplayWindow],
    objective: Objective,
    settings: TunerSettings,
    persistent: _PersistentTuner | None,
    progress: Progress | None,
    oracle_exhaustive: bool,
    memo: dict,
) -> None:
    """Every window under `pr.policy` on `host` (restored after, also on error); fills `pr`."""
    policy = pr.policy
    hours = hour_loads(windows)
    t0 = time.perf_counter()
    try:
        opt: Optimizer | None = persistent.start(host, pr, len(windows)) if persistent is not None else None
        for w in windows:
            _set_load(host, w.qps)
            if policy == "tuner":
                window_opt = opt or Optimizer(
                    host.knobs(),
                    objective,
                    replace(settings, seed=settings.seed + w.index),
                    name=f"replay-w{w.index}",
                )
                wr, recs = _run_tuner_window(host, w, objective, settings, progress, window_opt)
                pr.trials.extend(recs)
            else:
                at = hours[hour_of(w)] if policy == "oracle-hourly" else None
                wr = _run_static_window(policy, host, w, objective, oracle_exhaustive, memo, at)
            pr.windows.append(wr)
            if progress is not None:
                progress(policy, w.index, None)
    finally:
        try:
            host.restore()
        finally:
            pr.wall_s = time.perf_counter() - t0


# ----------------------------------------------------------------------------------------------- summary
