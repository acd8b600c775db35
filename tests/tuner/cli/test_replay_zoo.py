"""`tuner replay --plant NAME --day NAME`: the flags select the zoo's plant (the sim host's option) and day."""

from __future__ import annotations

import pytest

import tuner.cli.replay as replay_cli
from tuner.cli.app import main


@pytest.fixture
def captured(monkeypatch):
    seen: dict = {}

    def fake_execute(host, schedule, objective, settings, policies, out, **kw):
        seen.update(host=host, schedule=schedule, **kw)
        return 0

    monkeypatch.setattr(replay_cli, "execute", fake_execute)
    return seen


def test_plant_and_day_select_the_member(captured, tmp_path):
    assert main(["replay", "--plant", "silo", "--day", "flat-high", "--hours", "3", "--out", str(tmp_path)]) == 0
    assert captured["host_options"]["plant"] == "silo"
    windows = captured["schedule"].windows
    assert len(windows) == 3
    assert max(w.qps for w in windows) <= 200_000.0  # the silo plant's peak
    assert "flat-high" in captured["source"]


def test_without_the_flags_the_bundled_plant_and_day(captured, tmp_path):
    assert main(["replay", "--out", str(tmp_path)]) == 0
    assert "plant" not in captured["host_options"]
    assert len(captured["schedule"].windows) == 24 and "bundled sample" in captured["source"]


def test_a_multi_day_day_gives_all_its_days(captured, tmp_path):
    assert main(["replay", "--day", "noisy-3", "--out", str(tmp_path)]) == 0
    assert len(captured["schedule"].windows) == 72


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--plant", "nope"], "plant 'nope': expected one of bundled"),
        (["--day", "nope"], "--day 'nope': expected one of sample, two-peaks"),
        (["--plant", "silo", "--host", "real"], "--plant silo: only with --host sim"),
    ],
)
def test_bad_names_are_one_line(captured, tmp_path, argv, message, capsys):
    code = main(["replay", *argv, "--out", str(tmp_path)])
    assert code != 0
    assert message in capsys.readouterr().err
