"""A self-contained HTML page a person opens: a title, the command that made it, a settings table, then sections
in order -- tables, interactive plotly figures, paragraphs. The replay's `report.html` is one; a benchmark writes
its own with the same builder:

    from tuner.replay.html_page import Report

    page = Report("Generalisation: plant A, p99 < 200 µs", command="python bench/generalisation.py --seeds 10",
                  settings={"plants": "A, B", "seeds": 10})
    page.table("Per cell", ["plant", "SLA", "median x oracle", "worst x oracle"],
               [["A", "99:200", 1.031, 1.05]], formats={"median x oracle": ".3f", "worst x oracle": ".3f"})
    page.figure("Ratio per seed", {"data": [{"type": "bar", "x": [3, 4, 5], "y": [1.03, 1.02, 1.04]}],
                                   "layout": {"xaxis": {"title": {"text": "seed"}}}})
    page.text("Notes", "Every cell ran the default settings.")
    page.write("out/report.html")

(`write_report(path, title, *sections, command=..., settings=...)` does the same from `Table`, `Figure` and
`Text` values.) Every string is HTML-escaped; a figure's JSON is plotly's own (`plotly.io.to_json`, which writes
`<`, `>` and `/` as \\u escapes, so no text closes its script). plotly.js is inlined once per page (about 4.8 MB
with plotly 7) when the page has a figure, so the page reads offline: no `src`/`href` leaves the file.

Table cells are strings, ints, floats or None: a number is shown with its column's format spec (`formats`,
default `.4g` for floats) and keeps its full value in the cell's `data-value` attribute; None and non-finite
floats show as "-". A figure is a plotly `Figure` or a dict `{"data": [...], "layout": {...}}`.
"""

from __future__ import annotations

import html
import math
import numbers
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

Cell = str | int | float | None

_CSS = """
body { font-family: system-ui, -apple-system, "Segoe UI", Roboto, "Helvetica Neue", Arial, sans-serif;
       margin: 1.5em auto; max-width: 1400px; padding: 0 1em; color: #1b1b1b; line-height: 1.4; }
h1 { font-size: 1.6em; margin-bottom: 0.2em; }
h2 { font-size: 1.25em; margin-top: 1.6em; border-bottom: 1px solid #ddd; padding-bottom: 0.2em; }
pre.command { background: #f4f4f4; padding: 0.6em 0.8em; white-space: pre-wrap; word-break: break-all;
              border-radius: 4px; }
nav ul { columns: 2; margin: 0.3em 0; }
table { border-collapse: collapse; font-size: 0.88em; margin: 0.4em 0; }
th, td { border: 1px solid #d0d0d0; padding: 0.2em 0.55em; }
th { background: #eef1f5; position: sticky; top: 0; }
td.num { text-align: right; font-variant-numeric: tabular-nums; }
tr:nth-child(even) td { background: #fafafa; }
div.scroll { max-height: 75vh; overflow: auto; display: inline-block; max-width: 100%; }
p.note { color: #555; font-size: 0.9em; margin: 0.3em 0; max-width: 60em; }
div.plot { width: 100%; min-height: 420px; }
"""

_LOADER = """
document.querySelectorAll("div.plot[data-figure]").forEach(function (div) {
  var spec = JSON.parse(document.getElementById(div.id + "-data").textContent);
  Plotly.newPlot(div, spec.data || [], spec.layout || {}, {responsive: true, displaylogo: false});
});
"""


@dataclass(frozen=True)
class Table:
    """A table: `columns` headers, `rows` of cells (see the module's docstring), `formats` a format spec per
    column header for its numbers, `note` a line under it."""

    title: str
    columns: Sequence[str]
    rows: Sequence[Sequence[Cell]]
    formats: Mapping[str, str] = field(default_factory=dict)
    note: str = ""


@dataclass(frozen=True)
class Figure:
    """An interactive plotly figure: a plotly `Figure` or a dict with `data` and `layout`."""

    title: str
    figure: Any
    note: str = ""


@dataclass(frozen=True)
class Text:
    """Paragraphs of plain text (split at blank lines)."""

    title: str
    body: str


Section = Table | Figure | Text


def _esc(text: object) -> str:
    return html.escape(str(text), quote=True)


def _cell(value: Cell, spec: str | None) -> str:
    """One `<td>`: numbers (numpy's too) right-aligned with their full value in `data-value`."""
    if value is None or (isinstance(value, numbers.Real) and not math.isfinite(value)):
        return '<td class="num">-</td>'
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        return f"<td>{_esc(value)}</td>"
    exact: int | float = int(value) if isinstance(value, numbers.Integral) else float(value)
    try:
        shown = format(exact, spec if spec is not None else ("d" if isinstance(exact, int) else ".4g"))
    except ValueError:  # a spec for the other kind of number ("d" given a float)
        shown = format(exact, ".4g")
    return f'<td class="num" data-value="{_esc(repr(exact))}">{_esc(shown)}</td>'


def _table_html(t: Table) -> str:
    if any(len(row) != len(t.columns) for row in t.rows):
        raise ValueError(f"table {t.title!r}: every row needs {len(t.columns)} cells")
    specs = [t.formats.get(c) for c in t.columns]
    head = "".join(f'<th scope="col">{_esc(c)}</th>' for c in t.columns)
    body = "\n".join("<tr>" + "".join(_cell(v, s) for v, s in zip(row, specs)) + "</tr>" for row in t.rows)
    note = f'<p class="note">{_esc(t.note)}</p>' if t.note else ""
    return f'<div class="scroll"><table>\n<thead><tr>{head}</tr></thead>\n<tbody>\n{body}\n</tbody></table></div>{note}'


def _figure_json(figure: Any) -> str:
    """The figure as JSON with `<`, `>` and `/` escaped (plotly's serialiser does that)."""
    import plotly.io

    return str(plotly.io.to_json(figure, validate=False))


def _flatten(settings: Mapping[str, Any], prefix: str = "") -> list[tuple[str, Any]]:
    out: list[tuple[str, Any]] = []
    for k, v in settings.items():
        if isinstance(v, Mapping):
            out.extend(_flatten(v, f"{prefix}{k}."))
        else:
            out.append((f"{prefix}{k}", v))
    return out


def _settings_cell(value: Any) -> Cell:
    if value is None or isinstance(value, str | int | float):
        return value
    if isinstance(value, list | tuple):
        return ", ".join(str(v) for v in value)
    return str(value)


def _settings_html(settings: Mapping[str, Any], pairs: int = 3) -> str:
    """The settings as a table of `pairs` (setting, value) column pairs, filled column-wise."""
    items = [(k, _settings_cell(v)) for k, v in _flatten(settings)]
    n = -(-len(items) // pairs)
    rows: list[list[Cell]] = []
    for i in range(n):
        row: list[Cell] = []
        for j in range(pairs):
            k, v = items[j * n + i] if j * n + i < len(items) else ("", "")
            row += [k, v]
        rows.append(row)
    cols = [c for j in range(pairs) for c in (f"setting{' ' * j}", f"value{' ' * j}")]
    return _table_html(Table("Settings", cols, rows, {c: ".6g" for c in cols if c.startswith("value")}))


class Report:
    """A page under construction: sections are added in order (each `table`/`figure`/`text` call returns the
    report), `html()` renders it and `write(path)` saves it (parent directories created)."""

    def __init__(self, title: str, *, command: str | None = None, settings: Mapping[str, Any] | None = None) -> None:
        self.title = title
        self.command = command
        self.settings = dict(settings or {})
        self.sections: list[Section] = []

    def add(self, section: Section) -> Report:
        self.sections.append(section)
        return self

    def table(
        self,
        title: str,
        columns: Sequence[str],
        rows: Sequence[Sequence[Cell]],
        *,
        formats: Mapping[str, str] | None = None,
        note: str = "",
    ) -> Report:
        return self.add(Table(title, list(columns), [list(r) for r in rows], dict(formats or {}), note))

    def figure(self, title: str, figure: Any, *, note: str = "") -> Report:
        return self.add(Figure(title, figure, note))

    def text(self, title: str, body: str) -> Report:
        return self.add(Text(title, body))

    def _section_html(self, i: int, s: Section) -> str:
        head = f'<section id="s{i}">\n<h2>{_esc(s.title)}</h2>\n'
        if isinstance(s, Table):
            return head + _table_html(s) + "\n</section>"
        if isinstance(s, Text):
            paras = [p.strip() for p in s.body.split("\n\n") if p.strip()]
            return head + "\n".join(f"<p>{_esc(p)}</p>" for p in paras) + "\n</section>"
        data = _figure_json(s.figure)
        note = f'<p class="note">{_esc(s.note)}</p>' if s.note else ""
        return (
            head + f'<div class="plot" id="fig{i}" data-figure="{i}"></div>\n'
            f'<script type="application/json" id="fig{i}-data">{data}</script>\n{note}\n</section>'
        )

    def _top_html(self) -> str:
        parts = [f"<h1>{_esc(self.title)}</h1>"]
        if self.command:
            parts.append(f'<p>Command:</p>\n<pre class="command"><code>{_esc(self.command)}</code></pre>')
        if self.sections:
            links = "".join(f'<li><a href="#s{i}">{_esc(s.title)}</a></li>' for i, s in enumerate(self.sections))
            parts.append(f"<nav><ul>{links}</ul></nav>")
        if self.settings:
            parts.append('<section id="settings">\n<h2>Settings</h2>\n' + _settings_html(self.settings) + "</section>")
        return "\n".join(parts)

    def html(self) -> str:
        """The whole page as one string."""
        body = [self._top_html(), *(self._section_html(i, s) for i, s in enumerate(self.sections))]
        scripts = ""
        if any(isinstance(s, Figure) for s in self.sections):
            from plotly.offline import get_plotlyjs

            scripts = (
                '<script type="text/javascript">window.PlotlyConfig = {MathJaxConfig: "local"};</script>\n'
                f'<script type="text/javascript">{get_plotlyjs()}</script>\n'
                f'<script type="text/javascript">{_LOADER}</script>\n'
            )
        return (
            '<!DOCTYPE html>\n<html lang="en">\n<head>\n<meta charset="utf-8">\n'
            '<meta name="viewport" content="width=device-width, initial-scale=1">\n'
            f"<title>{_esc(self.title)}</title>\n<style>{_CSS}</style>\n</head>\n<body>\n"
            + "\n".join(body)
            + f"\n{scripts}</body>\n</html>\n"
        )

    def write(self, path: str | Path) -> Path:
        out = Path(path)
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(self.html(), encoding="utf-8")
        return out


def write_report(
    path: str | Path,
    title: str,
    *sections: Section,
    command: str | None = None,
    settings: Mapping[str, Any] | None = None,
) -> Path:
    """Write a page of `sections` (`Table`, `Figure`, `Text`, in order) under `title`, with the `command` and a
    `settings` table (nested mappings flattened to dotted keys) on top; returns the path."""
    page = Report(title, command=command, settings=settings)
    for s in sections:
        page.add(s)
    return page.write(path)
