"""The generated configuration references, and a throwaway setting added to the table: it is read from TOML
(with `FILE:LINE: field:` errors), parsed from `tuner replay`'s command line and listed in both references."""

from __future__ import annotations

import argparse
import functools
import re
from dataclasses import replace
from pathlib import Path

import pytest

import tuner.cli.replay as replay_cli
from core.errors import TunerError
from tuner.cli.docs_reference import DOCS, pages, replay_parser, replay_reference
from tuner.cli.replay_settings import add_setting_flags, settings_overrides
from tuner.config.checks import Checker, read_rows
from tuner.config.daemon_reference import daemon_reference, markers, section, splice
from tuner.config.tables import SECTIONS, TUNING_TABLE
from tuner.optimize.table import TUNER_TABLE, Setting

THROWAWAY = Setting("throwaway_knob", float, 0.25, "a setting added by this test", low=0, high=1, shown=True)
TABLE = (*TUNER_TABLE, THROWAWAY)


def test_the_committed_docs_are_the_generated_text() -> None:
    for path, text in pages().items():
        assert path.read_text(encoding="utf-8") == text, f"{path}: run python -m tuner.cli.docs_reference"
    daemon = (DOCS / "daemon.md").read_text(encoding="utf-8")
    for row in TUNING_TABLE:  # every [tuning] key, the daemon's own ones too
        assert f"| `tuning.{row.name}` |" in section(daemon, "configuration reference"), row.name
    assert "`tuning.idle_qps`" in daemon and "`tuning.baseline_every_s`" in daemon


def test_splice_replaces_only_between_the_markers() -> None:
    begin, end = markers("x")
    page = f"before\n{begin}\nold\n{end}\nafter\n"
    assert splice(page, "x", "new\n") == f"before\n{begin}\nnew\n{end}\nafter\n"
    with pytest.raises(ValueError, match="no generated section 'y'"):
        splice(page, "y", "new\n")


def test_a_throwaway_setting_is_read_from_toml(tmp_path: Path) -> None:
    rows = (*TUNING_TABLE, replace(THROWAWAY, optimizer=False, replay=False))
    text = "[tuning]\ntrials = 12\nthrowaway_knob = 0.5\n"
    c = Checker(tmp_path / "t.toml", text)
    values = read_rows(c, {"tuning": {"trials": 12, "throwaway_knob": 0.5}}, "tuning", rows)
    assert values["throwaway_knob"] == 0.5 and values["trials"] == 12 and not c.errors
    assert read_rows(Checker(tmp_path / "t.toml", ""), {}, "tuning", rows)["throwaway_knob"] == 0.25
    bad = Checker(tmp_path / "t.toml", "[tuning]\n\nthrowaway_knob = 2\n")
    read_rows(bad, {"tuning": {"throwaway_knob": 2}}, "tuning", rows)
    assert bad.errors == [f"{tmp_path / 't.toml'}:3: tuning.throwaway_knob: expected 0..1, got 2"]
    # without its row it is an unknown key
    unknown = Checker(tmp_path / "t.toml", text)
    read_rows(unknown, {"tuning": {"throwaway_knob": 0.5}}, "tuning", TUNING_TABLE)
    assert len(unknown.errors) == 1 and "tuning.throwaway_knob: unknown key" in unknown.errors[0]


def test_a_throwaway_setting_is_a_replay_flag() -> None:
    p = argparse.ArgumentParser()
    add_setting_flags(p, TABLE)
    args = p.parse_args(["--throwaway-knob", "0.75", "--trials", "7"])
    assert settings_overrides(args, TABLE) == {"throwaway_knob": 0.75, "trials": 7}
    with pytest.raises(TunerError, match=r"^--throwaway-knob '3': expected 0..1$"):
        settings_overrides(p.parse_args(["--throwaway-knob", "3"]), TABLE)
    assert "--throwaway-knob" in p.format_help()


def test_a_throwaway_setting_is_in_both_references(monkeypatch: pytest.MonkeyPatch) -> None:
    sections = {**SECTIONS, "tuning": (*TUNING_TABLE, THROWAWAY)}
    assert "| `tuning.throwaway_knob` | `0.25` | 0..1 | a setting added by this test |" in daemon_reference(sections)
    assert "throwaway_knob" not in daemon_reference()
    monkeypatch.setattr(replay_cli, "add_setting_flags", functools.partial(add_setting_flags, table=TABLE))
    text = replay_reference(replay_parser(), TABLE)
    assert "| `--throwaway-knob` | `throwaway_knob` | `0.25` | yes | a setting added by this test" in text


def test_the_example_config_names_every_key() -> None:
    """deploy/tuner.example.toml has every declared key (commented where it is only an example)."""
    text = (DOCS.parent / "deploy" / "tuner.example.toml").read_text(encoding="utf-8")
    for name, rows in SECTIONS.items():
        assert f"[{name}]" in text, name
        for row in rows:
            if row.kind is not dict:
                assert re.search(rf"^#?\s*{row.name}\s*=", text, re.M), f"{name}.{row.name}"
