"""Replay: policies end to end on a small fake host, oracle, failures, report files, CLI bad input."""

from __future__ import annotations

import csv
import json
from dataclasses import replace
from pathlib import Path

import pytest

from actuators.abilities import ExpectedModel
from actuators.host import KnobSpace, OperatingPoint
from core.errors import TunerError
from tests.fakes import FailingHost
from tests.replay_fakes import KNOBS, ModelHost, make_model_host, tiny_trace
from tuner.cli.app import main
from tuner.optimize.presets import cold_settings
from tuner.optimize.settings import Objective
from tuner.replay.oracle import oracle_point
from tuner.replay.run import ReplayWindow, parse_policies, replay
from tuner.replay.summary import policy_summary

SETTINGS = cold_settings(trials=4, sobol_trials=2, settle_s=1.0, window_s=10.0, seed=5)
WINDOWS = (ReplayWindow(0, 0.0, 300.0, 150_000.0), ReplayWindow(1, 300.0, 300.0, 250_000.0))


def make_small_failing_host(seed: int | None = None) -> FailingHost:
    return FailingHost(fail_at=2, seed=seed, knobs=KNOBS)


def test_replay_all_policies_accounts_energy_and_beats_baselines() -> None:
    obj = Objective("constrained", 99, 500)
    res = replay(lambda: make_model_host(0), WINDOWS, obj, SETTINGS)
    assert list(res.policies) == ["tuner", "linux-default", "static-performance", "oracle"]
    tw = res.policies["tuner"].windows
    assert [w.index for w in tw] == [0, 1]
    for w in tw:
        assert w.trials == 4
        assert w.explore_s == pytest.approx(4 * 11.0)
        assert w.steady is not None and w.steady.seconds == pytest.approx(300.0 - 44.0)
        assert w.elapsed_s == pytest.approx(300.0)
        assert w.energy_j == pytest.approx(w.explore_energy_j + w.steady.energy_j)
        assert len(w.suggest_s) == 4
    for w in res.policies["linux-default"].windows:
        assert w.point is None and w.elapsed_s == 300.0
    for w in res.policies["static-performance"].windows:
        assert w.point == OperatingPoint(20, 2.9)
    # the oracle is the true grid optimum: no static point meeting the SLA uses less power
    host = make_model_host()
    for w, ow in zip(WINDOWS, res.policies["oracle"].windows):
        pts = [OperatingPoint(i, f) for i in KNOBS.itr_us for f in KNOBS.dvfs_ghz]
        feas = [e.power_w for e in host.expected(pts, w.qps) if e.latency_us[99.0] <= 500]
        assert ow.met_sla and ow.steady.power_w == pytest.approx(min(feas))
    s = policy_summary(res, "tuner")
    assert s["energy_j"] == pytest.approx(sum(w.energy_j for w in tw))
    assert s["ratio_to_oracle"] >= 1.0
    assert s["saved_vs_linux_default_pct"] == pytest.approx(
        100 * (1 - s["energy_j"] / sum(w.energy_j for w in res.policies["linux-default"].windows))
    )
    assert policy_summary(res, "linux-default")["saved_vs_linux_default_pct"] == pytest.approx(0.0)


def test_oracle_unavailable_without_a_model_and_failed_trials_are_counted() -> None:
    obj = Objective("sla-linear", 99, 500)
    res = replay(lambda: make_small_failing_host(1), WINDOWS[:1], obj, SETTINGS, policies=("tuner", "oracle"))
    assert not res.policies["oracle"].available
    assert "oracle unavailable" in res.policies["oracle"].note
    w = res.policies["tuner"].windows[0]
    assert w.trials == 4 and w.failed_trials == 1
    s = policy_summary(res, "tuner")
    assert s["failed_trials"] == 1 and s["ratio_to_oracle"] is None


def test_oracle_point_falls_back_to_lowest_latency() -> None:
    host = make_model_host()
    p, why = oracle_point(host, Objective("constrained", 99, 1.0), 150_000.0)
    assert "no point meets the SLA" in why
    lat = {
        q: host.expected([q], 150_000.0)[0].latency_us[99.0]
        for q in (OperatingPoint(i, f) for i in KNOBS.itr_us for f in KNOBS.dvfs_ghz)
    }
    assert lat[p] == min(lat.values())


def test_cli_short_replay_writes_report(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    trace = tiny_trace(tmp_path / "t.csv", 180)
    out = tmp_path / "out"
    rc = main(
        [
            "replay",
            str(trace),
            "--host",
            "tests.replay_fakes:make_model_host",
            "--hours",
            "0.05",
            "--bin",
            "60",
            "--peak-qps",
            "200000",
            "--trials",
            "3",
            "--sobol-trials",
            "2",
            "--settle",
            "0.5",
            "--window",
            "5",
            "--seed",
            "2",
            "--out",
            str(out),
        ]
    )
    assert rc == 0
    text = capsys.readouterr().out
    assert "summary" in text and "oracle" in text
    s = json.loads((out / "summary.json").read_text())
    assert s["windows"] == 3 and s["peak_qps"] == pytest.approx(200_000)
    # windows under an hour: the hourly oracle (the hour's best static point, held) by default
    assert set(s["policies"]) == {"tuner", "linux-default", "static-performance", "oracle-hourly"}
    # the default tuner is the warm preset (the 3-day benchmark chose it): contextual, stopping rule, safety, adaptive
    # windows, holding from the model -- so at most the 3 trials per window, at least min_trials (2) in a window that
    # retunes (the first does: nothing is measured yet), none in one it holds
    assert s["settings"]["context"] is True and s["settings"]["window_mode"] == "adaptive"
    assert s["settings"]["safe_delta"] == 0.05 and s["settings"]["stop_ei_pct"] == 0.5
    tuner = s["policies"]["tuner"]
    assert 2 * (3 - tuner["held_windows"]) <= tuner["trials"] <= 3 * (3 - tuner["held_windows"])
    rows = list(csv.DictReader((out / "windows.csv").open()))
    assert len(rows) == 12 and {"p99_us", "itr_us", "dvfs_ghz", "energy_j", "sla_met"} <= set(rows[0])
    for name in ("power.png", "latency.png", "knobs.png"):
        data = (out / name).read_bytes()
        assert data[:8] == b"\x89PNG\r\n\x1a\n" and len(data) > 5000


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        (["--reward", "energy"], "unknown reward 'energy'"),
        (["--percentile", "98"], "unknown percentile 98.0"),
        (["--sla-us", "0"], "SLA must be a positive number of µs"),
        (["--sla-us", "-3"], "SLA must be a positive number of µs"),
        (["--policies", "tuner,magic"], "unknown policy 'magic'"),
        (["--host", "no_such_module:make"], "cannot import 'no_such_module'"),
        (["--host", "tests.fakes:make_not_a_host"], "does not implement the Host protocol"),
        (["--host", "tests.fakes:make_fixed_load_host"], "cannot set its offered load"),
        (["--bin", "600"], "shorter than one 600"),
        (["--days", "0"], "--days '0': expected a number >= 1"),
        (["--days", "1.5"], "--days '1.5': expected an integer"),
        (["--day-noise", "2"], "--day-noise '2': expected a fraction in [0, 1]"),
        (["--day-noise", "-0.1"], "--day-noise '-0.1': expected a number >= 0"),
        (["--tuner", "hot"], "--preset 'hot': expected one of cold, warm"),
        (["--window-mode", "auto"], "--window-mode 'auto': expected one of 'fixed', 'adaptive'"),
        (["--safe-delta", "1"], "--safe-delta '1': expected a probability in [0, 1)"),
        (["--safe-radius", "2.5"], "--safe-radius '2.5': expected a normalised knob distance in [0, 2]"),
        (["--safe-model-error", "-1"], "--safe-model-error '-1': expected an SD of ln latency in [0, 1]"),
        (["--safe-sd-scale", "0.5"], "--safe-sd-scale '0.5': expected a factor in [1, 10]"),
        (["--safe-sd-scale", "12"], "--safe-sd-scale '12': expected a factor in [1, 10]"),
        (["--latency-metric", "raw"], "--latency-metric 'raw': expected one of 'log', 'headroom'"),
        (["--stop-ei-pct", "x"], "--stop-ei-pct 'x': expected a number"),
        (["--min-trials", "0"], "--min-trials 0: expected 1..1000"),
        (["--context-max-qps", "0"], "--context-max-qps '0': expected a value > 0"),
        (["--window-ci-pct", "-1"], "--window-ci-pct '-1': expected a percentage in (0, 100)"),
        (["--window-min-s", "30"], "window_min_s (30 s) must not exceed window_s"),
        (["--history", "h.jsonl", "--tuner", "cold"], "--history needs the contextual tuner"),
        (["--history", "nope.jsonl", "--context", ""], "--history nope.jsonl: no such file"),
    ],
)
def test_cli_bad_input_is_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], extra: list[str], message: str
) -> None:
    trace = tiny_trace(tmp_path / "t.csv", 180)
    argv = [
        "replay",
        str(trace),
        "--host",
        "tests.replay_fakes:make_model_host",
        "--hours",
        "0.05",
        "--bin",
        "60",
        "--trials",
        "2",
        "--out",
        str(tmp_path / "o"),
    ]
    if "--window-min-s" in extra:
        argv += ["--window-mode", "adaptive"]
    for i in range(0, len(extra), 2):
        if extra[i + 1] == "":
            argv.append(extra[i])
        elif extra[i] in argv:
            argv[argv.index(extra[i]) + 1] = extra[i + 1]
        else:
            argv += extra[i : i + 2]
    rc = main(argv)
    err = capsys.readouterr().err
    assert rc == 2
    assert message in err
    assert err.count("\n") == 1 and "Traceback" not in err
    assert not (tmp_path / "o").exists()


def test_parse_policies() -> None:
    assert parse_policies("tuner, oracle") == ("tuner", "oracle")
    with pytest.raises(Exception, match="listed twice"):
        parse_policies("tuner,tuner")


@pytest.mark.parametrize("qps", [120_000.0, 260_000.0])
def test_boundary_oracle_matches_exhaustive(qps: float) -> None:
    host = ModelHost(knobs=KnobSpace.ixgbe((1.2, 1.6, 2.0, 2.4, 2.9)))
    obj = Objective("constrained", 99, 500)
    fast, how = oracle_point(host, obj, qps)
    full, _ = oracle_point(host, obj, qps, exhaustive=True)
    assert "largest feasible ITR per frequency" in how
    assert fast == full


class _SubGrid(ExpectedModel):
    """The simulated host's model on a smaller knob grid (so the exhaustive oracle stays cheap in a test)."""

    def __init__(self, host: object, knobs: KnobSpace) -> None:
        self._host, self._knobs = host, knobs

    def knobs(self) -> KnobSpace:
        return self._knobs

    def expected(self, points, qps):
        return self._host.expected(points, qps)


@pytest.mark.parametrize(("qps", "sla"), [(560_000.0, 500.0), (560_000.0, 200.0)])
def test_boundary_oracle_matches_exhaustive_on_the_simulated_model(qps: float, sla: float) -> None:
    """On the simulated host's Monte-Carlo cells (not an idealised curve): same point, far fewer cells."""
    from actuators.sim.host import SimHost

    host = _SubGrid(SimHost(seed=0), KnobSpace.ixgbe((1.2, 1.4, 1.6, 2.0, 2.9), lo=100, hi=500))
    obj = Objective("constrained", 99, sla)
    fast, how = oracle_point(host, obj, qps)
    full, _ = oracle_point(host, obj, qps, exhaustive=True)
    assert fast == full
    used = int(how.split(" over ")[1].split(" of ")[0])
    assert used < 0.25 * 201 * 5


# ------------------------------------------------------------------------------------- multi-day, warm vs cold


def _days(n: int, noise: float = 0.05) -> tuple[ReplayWindow, ...]:
    from traces.schedule import Schedule, Window, repeat_days

    one = Schedule(tuple(Window(w.index, w.start_s, w.seconds, w.qps) for w in WINDOWS), "t", 1.0, 1.0)
    return tuple(
        ReplayWindow(w.index, w.start_s, w.seconds, w.qps, w.day)
        for w in repeat_days(one, n, noise=noise, seed=3).windows
    )


def test_multi_day_cold_replay_reports_per_day(tmp_path: Path) -> None:
    from tuner.replay.report import summary, window_rows, write_files

    cold = replace(SETTINGS, trials=2, sobol_trials=2)
    res = replay(
        lambda: make_model_host(0),
        _days(2),
        Objective("constrained", 99, 500),
        cold,
        policies=("tuner", "linux-default", "oracle"),
    )
    tw = res.policies["tuner"].windows
    assert [(w.index, w.day) for w in tw] == [(0, 0), (1, 0), (2, 1), (3, 1)]
    assert len(res.policies["tuner"].trials) == 8
    s = summary(res)
    assert s["days"] == 2 and [d["day"] for d in s["per_day"]] == [0, 1]
    total = s["policies"]["tuner"]
    per = [d["policies"]["tuner"] for d in s["per_day"]]
    assert sum(p["energy_j"] for p in per) == pytest.approx(total["energy_j"])
    assert [p["windows"] for p in per] == [2, 2] and [p["trials_per_retune"] for p in per] == [2.0, 2.0]
    for d, p in zip(s["per_day"], per):
        o = sum(w.energy_j for w in res.policies["oracle"].windows if w.day == d["day"])
        assert p["ratio_to_oracle"] == pytest.approx(p["energy_j"] / o)
        explore = sum(w.explore_s for w in tw if w.day == d["day"])
        assert p["explore_above_sla_pct"] == pytest.approx(100 * p["explore_above_sla_s"] / explore)
        assert p["explore_above_sla_pct_of_time"] == pytest.approx(100 * p["explore_above_sla_s"] / 600.0)
        assert p["window_saved_s"] == 0.0 and p["window_saved_pct"] == pytest.approx(0.0)  # fixed windows
    assert d["policies"]["oracle"]["trials_per_retune"] is None
    rows = window_rows(res)
    assert [r["day"] for r in rows if r["policy"] == "tuner"] == [0, 0, 1, 1]
    paths = write_files(res, tmp_path)
    assert tmp_path / "trials.jsonl" in paths
    from tuner.store.history import read_trials

    back = read_trials(tmp_path / "trials.jsonl", space=KNOBS)
    assert [(r.point, r.qps) for r in back] == [(r.point, r.qps) for r in res.policies["tuner"].trials]


def test_history_needs_context() -> None:
    with pytest.raises(TunerError, match="needs the contextual tuner"):
        replay(lambda: make_model_host(0), WINDOWS, Objective(), SETTINGS, policies=("tuner",), history=[object()])  # type: ignore[list-item]


def test_presets() -> None:
    from tuner.replay.run import preset_settings

    cold = preset_settings("cold", replace(SETTINGS, trials=4))
    assert (cold.trials, cold.context, cold.stop_ei_pct, cold.safe_delta, cold.window_mode) == (
        30,
        False,
        0.0,
        0.0,
        "fixed",
    )
    warm = preset_settings("warm", SETTINGS, safe_delta=0.0)
    assert warm.context and warm.stop_ei_pct > 0 and warm.window_mode == "adaptive" and warm.safe_delta == 0.0
    assert warm.window_s == SETTINGS.window_s and warm.seed == SETTINGS.seed
    with pytest.raises(TunerError, match="unknown tuner preset 'hot'"):
        preset_settings("hot")


def test_cli_multi_day_replay_and_save_trials(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    trace = tiny_trace(tmp_path / "t.csv", 180)
    out = tmp_path / "out"
    rc = main(
        [
            "replay",
            str(trace),
            "--host",
            "tests.replay_fakes:make_model_host",
            "--hours",
            str(2 / 60),
            "--bin",
            "60",
            "--peak-qps",
            "200000",
            "--tuner",
            "cold",
            "--trials",
            "2",
            "--sobol-trials",
            "2",
            "--settle",
            "0.5",
            "--window",
            "5",
            "--days",
            "3",
            "--day-noise",
            "0.1",
            "--policies",
            "tuner,oracle",
            "--out",
            str(out),
            "--save-trials",
            str(tmp_path / "t" / "trials.jsonl"),
            "-q",
        ]
    )
    assert rc == 0
    text = capsys.readouterr().out
    assert "tuner per day" in text and "saved 12 completed tuner trial(s)" in text
    s = json.loads((out / "summary.json").read_text())
    assert s["windows"] == 6 and s["days"] == 3 and s["day_noise"] == 0.1
    assert s["settings"]["trials"] == 2 and s["settings"]["context"] is False
    assert [d["policies"]["tuner"]["trials_per_retune"] for d in s["per_day"]] == [2.0, 2.0, 2.0]
    rows = [r for r in csv.DictReader((out / "windows.csv").open()) if r["policy"] == "tuner"]
    assert [r["day"] for r in rows] == ["0", "0", "1", "1", "2", "2"]
    qps = [float(r["qps"]) for r in rows]
    assert qps[:2] != qps[2:4] != qps[4:] and max(qps) <= 200_000.0 + 1e-6
    assert (tmp_path / "t" / "trials.jsonl").read_text() == (out / "trials.jsonl").read_text()
    assert len((out / "trials.jsonl").read_text().splitlines()) == 12


def test_context_mode_uses_one_optimizer_and_a_retune_per_window(monkeypatch: pytest.MonkeyPatch) -> None:
    import tuner.replay.run as tr

    made: list = []
    loads: list[float] = []

    class Spy(tr.Optimizer):
        def __init__(self, *a, **kw):  # type: ignore[no-untyped-def]
            super().__init__(*a, **kw)
            made.append(self)

        def begin_retune(self, qps: float) -> None:
            loads.append(qps)
            super().begin_retune(qps)

    monkeypatch.setattr(tr, "Optimizer", Spy)
    warm = replace(SETTINGS, trials=2, sobol_trials=2, context=True, context_max_qps=400_000.0)
    windows = _days(2)
    res = replay(lambda: make_model_host(0), windows, Objective("constrained", 99, 500), warm, policies=("tuner",))
    assert len(made) == 1  # one experiment for all windows of all days
    assert loads == pytest.approx([w.qps for w in windows])
    pr = res.policies["tuner"]
    assert [r.index for r in pr.trials] == list(range(8))  # trial numbers continue across windows
    assert [w.trials for w in pr.windows] == [2, 2, 2, 2]
    for w, start in zip(pr.windows, range(0, 8, 2)):
        assert [r.qps for r in pr.trials[start : start + 2]] == pytest.approx([w.qps] * 2)
    assert "contextual tuner, one experiment for 4 windows" in pr.note
    made.clear()
    cold = replay(
        lambda: make_model_host(0),
        windows,
        Objective("constrained", 99, 500),
        replace(warm, context=False),
        policies=("tuner",),
    )
    assert len(made) == 4 and [r.index for r in cold.policies["tuner"].trials] == [0, 1] * 4


def test_context_mode_seeded_from_history(tmp_path: Path) -> None:
    from tuner.replay.report import write_files
    from tuner.store.history import read_trials

    obj = Objective("constrained", 99, 500)
    first = replay(
        lambda: make_model_host(0), WINDOWS, obj, replace(SETTINGS, trials=3, sobol_trials=2), policies=("tuner",)
    )
    write_files(first, tmp_path)
    history = read_trials(tmp_path / "trials.jsonl", space=KNOBS)
    assert len(history) == 6
    warm = replace(SETTINGS, trials=3, sobol_trials=2, context=True, context_max_qps=400_000.0)
    res = replay(lambda: make_model_host(1), WINDOWS[:1], obj, warm, policies=("tuner",), history=history)
    pr = res.policies["tuner"]
    assert pr.history_used == 6 and "seeded with 6 of 6 history trials" in pr.note
    assert pr.windows[0].trials == 3 and len(pr.trials) == 3  # history is data, not this replay's trials
    from tuner.replay.summary import policy_summary

    assert policy_summary(res, "tuner")["history_trials_used"] == 6


def test_adaptive_window_time_saved_is_accounted(monkeypatch: pytest.MonkeyPatch) -> None:
    import tuner.optimize.windowing as win

    monkeypatch.setattr(win, "measure_window", lambda host, policy: host.measure(policy.min_s + 1.0))
    s = replace(SETTINGS, trials=3, sobol_trials=2, window_mode="adaptive", window_min_s=2.0)
    res = replay(lambda: make_model_host(0), WINDOWS, Objective("constrained", 99, 500), s, policies=("tuner",))
    for w in res.policies["tuner"].windows:
        assert w.trial_window_s == pytest.approx(3 * 3.0) and w.fixed_window_s == pytest.approx(3 * 10.0)
        assert w.explore_s == pytest.approx(3 * (1.0 + 3.0))
    ps = policy_summary(res, "tuner")
    assert ps["window_saved_s"] == pytest.approx(2 * 3 * 7.0) and ps["window_saved_pct"] == pytest.approx(70.0)


def test_cli_warm_preset_with_overrides(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    trace = tiny_trace(tmp_path / "t.csv", 180)
    out = tmp_path / "out"
    rc = main(
        [
            "replay",
            str(trace),
            "--host",
            "tests.replay_fakes:make_model_host",
            "--hours",
            str(2 / 60),
            "--bin",
            "60",
            "--peak-qps",
            "200000",
            "--tuner",
            "warm",
            "--trials",
            "3",
            "--sobol-trials",
            "2",
            "--settle",
            "0.5",
            "--window",
            "5",
            "--window-min-s",
            "1",
            "--no-context",
            "--safe-delta",
            "0",
            "--days",
            "2",
            "--policies",
            "tuner",
            "--out",
            str(out),
            "-q",
        ]
    )
    assert rc == 0
    assert "tuner per day (cold" in capsys.readouterr().out  # --no-context overrides the preset
    st = json.loads((out / "summary.json").read_text())["settings"]
    assert (st["context"], st["window_mode"], st["safe_delta"], st["window_min_s"], st["trials"]) == (
        False,
        "adaptive",
        0.0,
        1.0,
        3,
    )
    assert st["stop_ei_pct"] > 0


def test_the_safety_filters_calibration_is_counted_from_its_trials() -> None:
    s = replace(SETTINGS, trials=6, sobol_trials=2, context=True, context_max_qps=400_000.0, safe_delta=0.2)
    obj = Objective("constrained", 99, 500)
    res = replay(lambda: make_model_host(0), WINDOWS, obj, s, policies=("tuner",))
    recs = res.policies["tuner"].trials
    gated = [r for r in recs if r.p_violation is not None and r.status == "completed"]
    assert gated, "the model passed no trial: nothing checked"
    ps = policy_summary(res, "tuner")
    assert ps["gated_trials"] == len(gated) < len(recs)  # the safe-start trials carry no model P
    assert ps["gated_expected_over"] == pytest.approx(sum(r.p_violation for r in gated))
    assert ps["gated_over"] == sum(1 for r in gated if r.measurement.percentile(99.0) > 500)
