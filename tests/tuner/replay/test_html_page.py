"""The self-contained page builder: sections in order, numbers with their full value, every string escaped (no
markup from a title, a setting, a cell or a figure's trace name), plotly.js inlined once, nothing fetched."""

from __future__ import annotations

import math
from pathlib import Path

import pytest

from tests.html_pages import Page, external_refs
from tuner.replay.html_page import Figure, Report, Table, Text, write_report

EVIL = '</script><script>alert(1)</script><img src="http://x.invalid/a.png" onerror="alert(2)">&amp;'


def _fig(name: str, ys: list[float]) -> dict:
    return {"data": [{"type": "scatter", "name": name, "x": list(range(len(ys))), "y": ys}], "layout": {}}


def test_sections_numbers_and_settings_round_trip() -> None:
    page = Report(
        "A bench", command="python bench/x.py --seeds 3", settings={"plants": ["A", "B"], "run": {"seeds": 3}}
    )
    page.table("Cells", ["cell", "ratio", "n"], [["A", 1.0312345, 10], ["B", math.nan, None]], formats={"ratio": ".3f"})
    page.figure("Ratios", _fig("A", [1.03, 1.02]), note="per seed")
    page.text("Notes", "first\n\nsecond")
    p = Page(page.html())
    assert p.title == p.h1 == "A bench" and p.command == "python bench/x.py --seeds 3"
    assert p.settings() == {"plants": "A, B", "run.seeds": "3"}
    t = p.table("Cells")
    assert t.header == ["cell", "ratio", "n"]
    assert [c.text for c in t.rows[0]] == ["A", "1.031", "10"]
    assert float(t.rows[0][1].value or "") == 1.0312345  # the full value stays in data-value
    assert [c.text for c in t.rows[1]] == ["B", "-", "-"] and t.rows[1][1].value is None
    assert list(p.figures.values()) == [_fig("A", [1.03, 1.02])] and p.plot_divs == list(p.figures)
    assert not external_refs(p)


def test_every_string_is_escaped(tmp_path: Path) -> None:
    path = write_report(
        tmp_path / "sub" / "page.html",
        EVIL,
        Table(EVIL, [EVIL, "x"], [[EVIL, 1.5]]),
        Figure(EVIL, _fig(EVIL, [1.0]), note=EVIL),
        Text(EVIL, EVIL),
        command=EVIL,
        settings={EVIL: EVIL},
    )
    p = Page(path.read_text())
    # the only scripts are the page's own: the config, plotly.js, the loader and the figure's JSON
    assert len(p.scripts) == 4 and not [u for u in p.urls if not u[2].startswith("#")]
    assert p.title == p.h1 == p.command == EVIL
    assert p.settings() == {EVIL: EVIL}
    t = p.table(EVIL)
    assert t.header == [EVIL, "x"] and t.rows[0][0].text == EVIL
    (fig,) = p.figures.values()
    assert fig["data"][0]["name"] == EVIL  # back intact from JSON with <, > and / escaped
    assert "<img" not in path.read_text().split("<script")[0]


def test_plotly_js_inlined_once_and_only_with_a_figure() -> None:
    with_figs = Report("t").figure("a", _fig("a", [1.0])).figure("b", _fig("b", [2.0])).html()
    p = Page(with_figs)
    big = [s for s in p.scripts if int(s.get("_text_len") or 0) > 1_000_000]
    assert len(big) == 1 and big[0].get("src") is None
    assert 3_000_000 < len(with_figs.encode()) < 7_000_000
    assert len(p.figures) == 2
    no_figs = Report("t").table("x", ["a"], [[1]]).html()
    assert "<script" not in no_figs and len(no_figs) < 10_000


def test_numpy_numbers_and_a_spec_of_the_other_kind() -> None:
    import numpy as np

    p = Page(Report("t").table("x", ["a", "b"], [[np.float64(0.5), np.int64(7)], [2.5, 3]], formats={"a": "d"}).html())
    t = p.table("x")
    assert [(c.text, c.value) for c in t.rows[0]] == [("0.5", "0.5"), ("7", "7")]
    assert [(c.text, c.value) for c in t.rows[1]] == [("2.5", "2.5"), ("3", "3")]


def test_rows_must_fit_the_header() -> None:
    with pytest.raises(ValueError, match="every row needs 2 cells"):
        Report("t").table("bad", ["a", "b"], [[1]]).html()
