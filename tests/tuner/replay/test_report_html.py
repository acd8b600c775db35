"""`tuner replay --out DIR` writes report.html: the command and settings, one summary row per policy with
summary.json's numbers, one row per window with windows.csv's, the two oracles side by side, the figures with
their data -- nothing fetched from outside the file, a trace name shown as text -- and Chromium draws the plots."""

from __future__ import annotations

import csv
import json
import shlex
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from tests.html_pages import DrawnPlots, Page, chromium, dump_dom, external_refs
from tests.replay_fakes import tiny_trace
from tuner.cli.app import main

#: a file name a browser would take for markup if it were pasted in unescaped
TRACE_NAME = "day<img src=x onerror=alert(1)><b>&\"'.csv"
POLICIES = ("tuner", "linux-default", "static-performance", "oracle", "oracle-hourly")


@dataclass(frozen=True)
class Run:
    out: Path
    trace: Path
    page: Page
    summary: dict[str, Any]
    rows: list[dict[str, str]]

    def window(self, policy: str) -> list[dict[str, str]]:
        return [r for r in self.rows if r["policy"] == policy]


@pytest.fixture(scope="module")
def run(tmp_path_factory: pytest.TempPathFactory) -> Run:
    """The tests' shortest replay (3 one-minute windows on the model host, 3 trials each), every policy."""
    tmp = tmp_path_factory.mktemp("report")
    trace = tiny_trace(tmp / TRACE_NAME, 180)
    out = tmp / "out"
    argv = ["replay", str(trace), "--host", "tests.replay_fakes:make_model_host", "--hours", "0.05", "--bin", "60"]
    argv += ["--peak-qps", "200000", "--trials", "3", "--sobol-trials", "2", "--settle", "0.5", "--window", "5"]
    argv += ["--seed", "2", "--policies", ",".join(POLICIES), "--quiet", "--out", str(out)]
    assert main(argv) == 0
    page = Page((out / "report.html").read_text(encoding="utf-8"))
    summary = json.loads((out / "summary.json").read_text())
    rows = list(csv.DictReader((out / "windows.csv").open()))
    return Run(out, trace, page, summary, rows)


def test_command_and_settings(run: Run) -> None:
    p = run.page
    assert p.command.startswith("tuner replay ") and "--seed 2" in p.command and "--trials 3" in p.command
    assert shlex.split(p.command)[2] == str(run.trace)  # quoted for a shell, shown as text
    s = p.settings()
    assert s["trace"] == str(run.trace) and s["seed"] == "2" and s["windows"] == "3"
    assert s["objective"] == "constrained, p99 <= 500 µs" and s["window length (s)"] == "60"
    assert s["tuner.trials"] == "3" and s["tuner.sobol_trials"] == "2" and s["tuner.settle_s"] == "0.5"
    assert s["policies"] == ", ".join(POLICIES)


def test_no_markup_or_resource_from_outside(run: Run) -> None:
    p = run.page
    assert not external_refs(p), external_refs(p)
    # the page's own scripts only: the config, plotly.js, the loader and one JSON block per figure
    assert len(p.scripts) == 3 + len(p.figures)
    assert all(s.get("src") is None for s in p.scripts)
    assert "alert" not in "".join(str(s) for s in p.scripts if int(s.get("_text_len") or 0) < 1_000_000)
    size = (run.out / "report.html").stat().st_size
    assert 3_000_000 < size < 7_000_000  # one copy of plotly.js (~4.8 MB), not one per figure


def test_summary_row_per_policy_with_summary_json_numbers(run: Run) -> None:
    t = run.page.table("Summary per policy (constrained, p99 <= 500 µs)")
    assert [r[0].text for r in t.rows] == list(POLICIES) == list(run.summary["policies"])
    for name, ps in run.summary["policies"].items():
        row = dict(zip(t.header, t.row(name)))
        assert float(row["energy (kJ)"].value or "") == pytest.approx(ps["energy_j"] / 1000, rel=1e-12)
        assert row["energy (kJ)"].text == f"{ps['energy_j'] / 1000:.1f}"
        assert int(row["windows over the SLA"].text) == ps["sla_violating_windows"]
        assert int(row["trials"].text) == ps["trials"]
        for col, key in (("x oracle", "ratio_to_oracle"), ("x hourly oracle", "ratio_to_hourly_oracle")):
            assert row[col].text == f"{ps[key]:.3f}"
    tuner = dict(zip(t.header, t.row("tuner")))
    assert tuner["trials per retune"].text == f"{run.summary['policies']['tuner']['trials_per_retune']:.2f}"


def test_window_rows_with_windows_csv_numbers(run: Run) -> None:
    t = run.page.table("Per window")
    tuner = run.window("tuner")
    assert len(t.rows) == run.summary["windows"] == len(tuner) == 3
    assert [c.text for c in t.column("window")] == [r["window"] for r in tuner]
    for cell, r in zip(t.column("offered kQPS"), tuner):
        assert float(cell.value or "") == pytest.approx(float(r["qps"]) / 1000, abs=1e-5)
    for cell, r in zip(t.column("tuner ITR (µs)"), tuner):
        assert cell.text == r["itr_us"]
    for p in ("tuner", *POLICIES[1:]):
        col = "tuner W" if p == "tuner" else f"{p} W"
        for cell, r in zip(t.column(col), run.window(p)):
            assert float(cell.value or "") == pytest.approx(float(r["power_w"]), abs=1e-4)


def test_oracles_side_by_side(run: Run) -> None:
    t = run.page.table("The per-window and the hourly oracle")
    assert len(t.rows) == 3
    for who, policy in (("oracle", "oracle"), ("hourly", "oracle-hourly")):
        for cell, r in zip(t.column(f"{who} W"), run.window(policy)):
            assert float(cell.value or "") == pytest.approx(float(r["power_w"]), abs=1e-4)
        assert [c.text for c in t.column(f"{who} ITR (µs)")] == [r["itr_us"] for r in run.window(policy)]
    energy = {p: [float(r["energy_j"]) for r in run.window(p)] for p in ("oracle", "oracle-hourly")}
    ratio = [h / o for h, o in zip(energy["oracle-hourly"], energy["oracle"])]
    assert [float(c.value or "") for c in t.column("hourly / oracle energy")] == pytest.approx(ratio, rel=1e-6)


def test_figures_carry_the_data(run: Run) -> None:
    p = run.page
    assert len(p.plot_divs) == 3 and set(p.plot_divs) == set(p.figures)
    power, latency, knobs = (p.figures[d] for d in p.plot_divs)
    traces = {t["name"]: t for t in power["data"]}
    assert set(POLICIES) <= set(traces)
    for policy in POLICIES:
        y = traces[policy]["y"][:-1]  # the last point repeats the last window (the step's end)
        assert y == pytest.approx([float(r["power_w"]) for r in run.window(policy)], abs=1e-4)
    lat = {t["name"]: t for t in latency["data"]}
    assert lat["tuner"]["y"][:-1] == pytest.approx([float(r["p99_us"]) for r in run.window("tuner")], abs=1e-3)
    assert latency["layout"]["shapes"][0]["y0"] == 500
    assert {t["name"] for t in knobs["data"]} == set(POLICIES) - {"linux-default"}


def test_chromium_draws_the_plots(run: Run, tmp_path: Path) -> None:
    binary = chromium()
    if binary is None:
        pytest.skip("chromium not installed (Debian package `chromium`)")
    drawn = DrawnPlots(dump_dom(binary, run.out / "report.html", tmp_path / "profile"))
    assert set(drawn.svgs) == set(run.page.plot_divs)
    assert all(n >= 1 for n in drawn.svgs.values()), drawn.svgs
    power, latency, knobs = (drawn.lines[d] for d in run.page.plot_divs)
    # every policy's line and the offered load are drawn; knobs: ITR and GHz for each policy with a point
    assert power >= len(POLICIES) + 1 and latency >= len(POLICIES) + 1 and knobs >= 2 * (len(POLICIES) - 1)


def _result(days: int, oracle_available: bool) -> Any:
    """A hand-made result: 2 windows per day, tuner/linux-default/oracle, no steady states (percentiles unknown)."""
    from actuators.host import OperatingPoint
    from tuner.optimize.settings import Objective, TunerSettings
    from tuner.replay.run import PolicyResult, ReplayResult, ReplayWindow, WindowResult

    windows = tuple(ReplayWindow(i, 3600.0 * i, 3600.0, 100_000.0 * (1 + i), day=i // 2) for i in range(2 * days))

    def run(policy: str, watts: float, trials: int = 0) -> PolicyResult:
        point = None if policy == "linux-default" else OperatingPoint(100, 1.2)
        ws = [
            WindowResult(
                policy,
                w.index,
                w.start_s,
                w.seconds,
                w.qps,
                point,
                None,
                watts * w.seconds,
                w.seconds,
                trials,
                day=w.day,
            )
            for w in windows
        ]
        return PolicyResult(policy, ws)

    oracle = run("oracle", 50.0) if oracle_available else PolicyResult("oracle", available=False, note="no model")
    policies = {"tuner": run("tuner", 60.0, trials=2), "linux-default": run("linux-default", 120.0), "oracle": oracle}
    return ReplayResult(Objective(), TunerSettings(), "fake", 0, "t.csv", windows, policies)


def test_per_day_table_and_day_column_on_a_multi_day_schedule() -> None:
    from tuner.replay.report_html import replay_page

    p = Page(replay_page(_result(days=2, oracle_available=True)).html())
    t = p.table("The tuner per day")
    assert [c.text for c in t.column("day")] == ["0", "1"] and [c.text for c in t.column("x oracle")] == ["1.200"] * 2
    assert [c.text for c in t.column("energy (kJ)")] == ["432.0", "432.0"]  # 2 h at 60 W
    w = p.table("Per window")
    assert [c.text for c in w.column("day")] == ["0", "0", "1", "1"]
    assert [c.text for c in w.column("tuner p99 (µs)")] == ["-"] * 4  # no steady state: unknown, not 0
    assert "The per-window and the hourly oracle" not in [t.section for t in p.tables]  # only one oracle ran


def test_an_unavailable_policy_is_a_row_of_dashes_with_its_note() -> None:
    from tuner.replay.report_html import replay_page

    p = Page(replay_page(_result(days=1, oracle_available=False)).html())
    t = p.table("Summary per policy (constrained, p99 <= 500 µs)")
    assert {c.text for c in t.row("oracle")[1:]} == {"-"}
    assert "The tuner per day" not in [t.section for t in p.tables]
    w = p.table("Per window")
    assert "day" not in w.header and "oracle W" not in w.header and len(w.rows) == 2
    assert "oracle: no model" in p.notes
