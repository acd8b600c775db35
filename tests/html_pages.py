"""Reading the HTML pages `tuner.replay.html_page` writes, as a browser would: the stdlib parser for their
structure (sections, tables, figures' JSON, every resource reference), headless Chromium for what they draw."""

from __future__ import annotations

import json
import shutil
import subprocess
from dataclasses import dataclass, field
from html.parser import HTMLParser
from pathlib import Path
from typing import Any

#: attributes through which a page would fetch (or link to) something
_URL_ATTRS = {"src", "href", "srcset", "data", "action", "poster", "background", "xlink:href"}


@dataclass
class Cell:
    text: str
    value: str | None  # the cell's data-value (a number's full repr), None for text cells


@dataclass
class PageTable:
    section: str
    header: list[str] = field(default_factory=list)
    rows: list[list[Cell]] = field(default_factory=list)

    def column(self, name: str) -> list[Cell]:
        i = self.header.index(name)
        return [r[i] for r in self.rows]

    def row(self, first: str) -> list[Cell]:
        (r,) = [r for r in self.rows if r[0].text == first]
        return r


class Page(HTMLParser):
    """Tables by their section's title, the command, the figures' JSON, every URL-like attribute, the scripts."""

    def __init__(self, text: str) -> None:
        super().__init__(convert_charrefs=True)
        self.title = ""
        self.h1 = ""
        self.command = ""
        self.tables: list[PageTable] = []
        self.figures: dict[str, Any] = {}  # div id -> the figure's JSON
        self.plot_divs: list[str] = []
        self.urls: list[tuple[str, str, str]] = []  # (tag, attribute, value)
        self.scripts: list[dict[str, str | None]] = []
        self.styles: list[str] = []
        self.notes = ""  # every `<p class="note">`, joined
        self._in_note = False
        self._stack: list[str] = []
        self._text: list[str] = []
        self._section = ""
        self._cell: dict[str, str | None] | None = None
        self.feed(text)
        self.close()

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        a = dict(attrs)
        for k, v in attrs:
            if k in _URL_ATTRS and v is not None:
                self.urls.append((tag, k, v))
        if tag in ("title", "h1", "h2", "code", "script", "style", "td", "th") or (tag, a.get("class")) == (
            "p",
            "note",
        ):
            self._text = []
            self._in_note = tag == "p"
        if tag == "script":
            self.scripts.append(a)
        if tag == "table":
            self.tables.append(PageTable(self._section))
        if tag == "tr" and self.tables:
            self.tables[-1].rows.append([])
        if tag in ("td", "th"):
            self._cell = a
        if tag == "div" and a.get("data-figure") is not None:
            self.plot_divs.append(str(a.get("id")))
        self._stack.append(tag)

    def handle_data(self, data: str) -> None:
        self._text.append(data)

    def handle_endtag(self, tag: str) -> None:
        text = "".join(self._text)
        if tag == "title":
            self.title = text
        elif tag == "h1":
            self.h1 = text
        elif tag == "h2":
            self._section = text
        elif tag == "code" and "pre" in self._stack:
            self.command = text
        elif tag == "style":
            self.styles.append(text)
        elif tag == "p" and self._in_note:
            self.notes += text + "\n"
            self._in_note = False
        elif tag == "script":
            self._script_end(text)
        elif tag == "th" and self.tables:
            self.tables[-1].header.append(text)
        elif tag == "td" and self.tables and self._cell is not None:
            self.tables[-1].rows[-1].append(Cell(text, self._cell.get("data-value")))
        elif tag == "tr" and self.tables and self.tables[-1].rows and not self.tables[-1].rows[-1]:
            self.tables[-1].rows.pop()  # the header row
        while self._stack and self._stack.pop() != tag:
            pass

    def _script_end(self, text: str) -> None:
        a = self.scripts[-1]
        a["_text_len"] = str(len(text))
        sid = a.get("id") or ""
        if a.get("type") == "application/json" and sid.endswith("-data"):
            self.figures[sid.removesuffix("-data")] = json.loads(text)

    def table(self, section: str) -> PageTable:
        (t,) = [t for t in self.tables if t.section == section]
        return t

    def settings(self) -> dict[str, str]:
        """The settings table's (setting, value) pairs (it lays them out in column pairs)."""
        t = self.table("Settings")
        out = {}
        for r in t.rows:
            for k, v in zip(r[0::2], r[1::2]):
                if k.text:
                    out[k.text] = v.text
        return out


def external_refs(page: Page) -> list[str]:
    """Every reference that would leave the file: URL attributes other than in-page anchors, and CSS urls/imports."""
    bad = [f"<{t} {k}={v!r}>" for t, k, v in page.urls if not v.startswith("#")]
    bad += [f"<style> {s[:60]!r}" for s in page.styles if "url(" in s or "@import" in s]
    return bad


def chromium() -> str | None:
    """The Debian Chromium binary, or None."""
    return shutil.which("chromium")


def dump_dom(binary: str, page: Path, profile: Path, budget_ms: int = 5000) -> str:
    """The DOM of `page` after its scripts ran, as headless Chromium serialises it."""
    cmd = [
        binary,
        "--headless",
        "--disable-gpu",
        "--no-sandbox",
        "--no-first-run",
        f"--user-data-dir={profile}",
        f"--virtual-time-budget={budget_ms}",
        "--dump-dom",
        page.resolve().as_uri(),
    ]
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode == 0, done.stderr[-2000:]
    return done.stdout


class DrawnPlots(HTMLParser):
    """Per plot div (`data-figure`) of a rendered DOM: how many plotly `svg.main-svg` and drawn line paths."""

    def __init__(self, dom: str) -> None:
        super().__init__()
        self.svgs: dict[str, int] = {}
        self.lines: dict[str, int] = {}
        self._plot: str | None = None
        self._depth = 0
        self.feed(dom)
        self.close()

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        a = dict(attrs)
        classes = (a.get("class") or "").split()
        if tag == "div" and self._plot is None and a.get("data-figure") is not None:
            self._plot, self._depth = str(a.get("id")), 0
            self.svgs[self._plot] = self.lines[self._plot] = 0
        if self._plot is None:
            return
        if tag == "div":
            self._depth += 1
        if tag == "svg" and "main-svg" in classes:
            self.svgs[self._plot] += 1
        if tag == "path" and "js-line" in classes and len(a.get("d") or "") > 2:
            self.lines[self._plot] += 1

    def handle_endtag(self, tag: str) -> None:
        if self._plot is not None and tag == "div":
            self._depth -= 1
            if self._depth == 0:
                self._plot = None
