"""bench/generalisation.py and bench/ablation.py end to end on a tiny configuration (one member, one hour, one
seed, two trials per retune), in this process: they run, print the JSON document, and with --html write a
self-contained page holding the same numbers."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path
from typing import Any

import pytest

from tests.html_pages import DrawnPlots, Page, chromium, dump_dom, external_refs

REPO = Path(__file__).resolve().parents[2]
TINY = ["--members", "ebbrt-sample", "--seeds", "1", "--slas", "99:500", "--hours", "1", "--trials", "2"]


def _bench(name: str) -> Any:
    spec = importlib.util.spec_from_file_location(f"zoo_bench_{name}", REPO / "bench" / f"{name}.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _run(name: str, capsys, *argv: str) -> dict:
    assert _bench(name).main(list(argv)) == 0
    return json.loads(capsys.readouterr().out)


def test_ablation_pairs_each_ablation_with_the_default_and_generalisation_reports_cells(capsys):
    doc = _run("ablation", capsys, *TINY, "--ablations", "warm-no-peak-step")
    assert [a["variant"] for a in doc["ablations"]] == ["warm", "warm-no-peak-step"]
    assert doc["ablations"][0]["delta_vs_warm_median"] == 0.0
    assert doc["ablations"][1]["runs"] == 1 and doc["engine"] == "serial"
    # the same run through the generalisation bench (the cells already computed are reused in this process)
    doc = _run("generalisation", capsys, *TINY)
    assert doc["engine"] == "serial" and doc["replays"] == 1
    (c,) = doc["cells"]
    assert c["member"] == "ebbrt-sample" and c["plant"] == "ebbrt"
    assert c["ratio_to_oracle"]["median"] > 0.9
    assert set(c["met"]) == {
        "ratio_median",
        "ratio_worst",
        "no_violating_windows",
        "above_sla_every_run",
        "trials_after_day1",
    }
    assert set(doc["halves"]) == {"tuning"}


def test_a_bad_member_is_one_line(capsys):
    assert _bench("generalisation").main(["--members", "nope"]) == 2
    assert "zoo member 'nope'" in capsys.readouterr().err


def _page(path: Path) -> Page:
    page = Page(path.read_text(encoding="utf-8"))
    assert external_refs(page) == []
    assert len(page.figures) == 1 and len(page.plot_divs) == 1
    return page


def _cell_rows_match(page: Page, doc: dict) -> None:
    """The page's per-cell table holds the JSON's cells, number for number (full values in data-value)."""
    table = page.table("Per cell")
    assert len(table.rows) == len(doc["cells"])
    for c in doc["cells"]:
        (row,) = [r for r in table.rows if r[0].text == c["member"] and r[3].text == c["variant"]]
        got = dict(zip(table.header, row))
        assert float(got["median x oracle"].value or "nan") == c["ratio_to_oracle"]["median"]
        assert float(got["worst x oracle"].value or "nan") == c["ratio_to_oracle"]["worst"]
        assert float(got["trials / retune"].value or "nan") == c["trials_per_retune"]["median"]
        above = c["explore_above_sla_pct_of_trial_time"]["worst"]
        assert float(got["worst trial time > SLA (%)"].value or "nan") == above
        assert int(got["sig. violating windows"].value or "-1") == c["sla_violating_windows_significant"]["total"]
        marks = {True: "met", False: "not met", None: "-"}
        assert got["median met"].text == marks[c["met"]["ratio_median"]]
        assert got["worst met"].text == marks[c["met"]["ratio_worst"]]
        assert got["trial time met"].text == marks[c["met"]["above_sla_every_run"]]
        assert got["violating met"].text == marks[c["met"]["no_violating_windows"]]


def test_generalisation_page_holds_the_cells_and_a_multi_day_member_measures_trials_after_day_one(capsys, tmp_path):
    html = tmp_path / "gen" / "report.html"
    argv = ["--members", "cliff-noisy-3", "--seeds", "1", "--slas", "99:500", "--hours", "1"]
    doc = _run("generalisation", capsys, *argv, "--days", "2", "--trials", "2", "--html", str(html))
    (cell,) = doc["cells"]
    after = cell["trials_per_retune_after_day1"]
    assert after["worst"] is not None and after["worst"] > 0 and after["reason"] is None
    assert cell["met"]["trials_after_day1"] == (after["worst"] <= 3)

    page = _page(html)
    assert page.command == doc["command"] and "--html" in page.command
    assert page.settings()["options.days"] == "2"
    _cell_rows_match(page, doc)
    got = dict(zip(page.table("Per cell").header, page.table("Per cell").row("cliff-noisy-3")))
    assert float(got["trials / retune after day 1 (worst)"].value or "nan") == after["worst"]
    runs = page.table("Per run")
    assert sorted(float(c.value or "nan") for c in runs.column("x oracle")) == sorted(
        r["summary"]["ratio_to_oracle"] for r in doc["runs"]
    )
    (fig,) = page.figures.values()
    assert sorted(y for t in fig["data"] for y in t["y"]) == sorted(
        r["summary"]["ratio_to_oracle"] for r in doc["runs"]
    )
    assert {s["y0"] for s in fig["layout"]["shapes"]} == {1.02, 1.04}  # the 99:500 targets


def test_the_first_day_only_says_why_there_is_no_figure_after_day_one(capsys):
    doc = _run("generalisation", capsys, *TINY[2:], "--members", "cliff-noisy-3")
    (c,) = doc["cells"]
    assert c["trials_per_retune_after_day1"]["worst"] is None and c["met"]["trials_after_day1"] is None
    assert "--days" in c["trials_per_retune_after_day1"]["reason"]


def test_ablation_page_holds_each_preset_and_the_cells(capsys, tmp_path):
    html = tmp_path / "ablation.html"
    doc = _run("ablation", capsys, *TINY, "--ablations", "warm-no-peak-step", "--html", str(html))
    page = _page(html)
    assert page.command == doc["command"]
    table = page.table("Per ablation")
    for a in doc["ablations"]:
        got = dict(zip(table.header, table.row(a["variant"])))
        assert float(got["median x oracle"].value or "nan") == a["ratio_median"]
        assert int(got["runs"].value or "-1") == a["runs"]
    _cell_rows_match(page, doc)
    cells = page.table("Per cell")
    one_day = doc["cells"][0]["trials_per_retune_after_day1"]  # ebbrt-sample: the bundled day, one day
    assert one_day["worst"] is None and "one day" in one_day["reason"]
    assert cells.column("trials / retune after day 1 (worst)")[0].text == one_day["reason"]
    assert cells.column("after day 1 met")[0].text == "-"
    (fig,) = page.figures.values()
    assert [t["x"] for t in fig["data"]] == [["warm", "warm-no-peak-step"]]
    _drawn(html, page, tmp_path, points=len(doc["runs"]))


def _drawn(html: Path, page: Page, tmp_path: Path, points: int) -> None:
    """Headless Chromium draws the figure: plotly's svg, a box and a point per run."""
    binary = chromium()
    if binary is None:
        pytest.skip("chromium not installed (Debian package `chromium`)")
    dom = dump_dom(binary, html, tmp_path / "profile")
    assert set(DrawnPlots(dom).svgs) == set(page.plot_divs) and all(DrawnPlots(dom).svgs.values())
    assert dom.count('class="box"') >= 1 and dom.count('class="point"') == points


def test_margin_cost_pairs_the_oracle_at_the_limit_with_the_oracle_at_the_sla(capsys):
    doc = _run("margin_cost", capsys, "--members", "ebbrt-sample", "--seeds", "1", "--slas", "99:500", "--hours", "1")
    (r,) = doc["runs"]
    assert (r["member"], r["sla"], r["limit_us"]) == ("ebbrt-sample", "99:500", 475.0)
    # a limit 5 % tighter holds a point at least as fast, so at least as dear (at this hour: dearer)
    assert r["limit_oracle_j"] > r["oracle_j"] > 0
    assert r["ratio"] == r["limit_oracle_j"] / r["oracle_j"]
    assert doc["summary"]["halves"]["tuning 99:500"]["median"] == r["ratio"]
    assert doc["engine"] == "serial" and doc["margin_pct"] == 5.0


def test_margin_cost_refuses_a_margin_outside_0_to_100_in_one_line(capsys):
    assert _bench("margin_cost").main(["--members", "ebbrt-sample", "--margin-pct", "0"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "--margin-pct 0: expected a percentage in (0, 100)" in err


def test_grid_floor_prices_the_itr_grid_and_the_margin_against_the_whole_itr_list(capsys):
    doc = _run(
        "grid_floor",
        capsys,
        "--members",
        "ebbrt-sample,drift-spiky",
        "--slas",
        "99:500",
        "--hours",
        "1",
        "--resolutions",
        "16,2",
    )
    assert doc["skipped_drifting"] == ["drift-spiky"] and doc["resolutions"] == [2, 16]
    (c,) = doc["cells"]
    assert (c["member"], c["sla"], c["limit_us"], c["windows_left_out"]) == ("ebbrt-sample", "99:500", 475.0, 0)
    # the simulated host's ITR values are 2 µs apart: a 2 µs grid is the whole list, so only the margin is left
    assert c["grid"]["2"] == 1.0 and c["floor"]["2"] == c["margin"] > 1.0
    # a coarser grid and a tighter limit can only hold dearer points
    assert c["grid"]["16"] >= 1.0 and c["floor"]["16"] >= max(c["floor"]["2"], c["grid"]["16"])
    assert doc["summary"]["tuning 99:500"]["floor 16"]["median"] == c["floor"]["16"]


def test_grid_floor_refuses_a_resolution_that_is_not_whole_microseconds_in_one_line(capsys):
    assert _bench("grid_floor").main(["--members", "ebbrt-sample", "--resolutions", "8,x"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "--resolutions '8,x': expected µs,... (whole numbers)" in err
