"""`tuner replay --preset NAME` and `--config FILE` ([replay] table): precedence default < preset < file < CLI,
and a bad config is one line naming file, line and key."""

from __future__ import annotations

from pathlib import Path

import pytest

import tuner.cli.replay as replay_cli
from tests.replay_fakes import tiny_trace
from tuner.cli.app import main
from tuner.replay.run import TUNER_PRESETS, WARM_ABLATIONS


@pytest.fixture
def captured(monkeypatch):
    """Replace the replay itself: record what `execute` would have run."""
    seen: dict = {}

    def fake_execute(host, schedule, objective, settings, policies, out, **kw):
        seen.update(host=host, schedule=schedule, objective=objective, settings=settings, policies=policies, out=out)
        seen.update(kw)
        return 0

    monkeypatch.setattr(replay_cli, "execute", fake_execute)
    return seen


def _trace(tmp_path: Path) -> str:
    return str(tiny_trace(tmp_path / "t.csv", 180))


def _run(tmp_path: Path, *argv: str) -> int:
    return main(["replay", _trace(tmp_path), "--bin", "60", "--hours", "0.05", *argv])


def _config(tmp_path: Path, body: str) -> str:
    path = tmp_path / "replay.toml"
    path.write_text(body)
    return str(path)


def test_defaults_are_the_warm_preset(tmp_path, captured):
    assert _run(tmp_path) == 0
    s, o = captured["settings"], captured["objective"]
    assert s.context and s.window_mode == "adaptive" and s.itr_resolution_us == 16 and s.safe_sd_scale == 2.0
    assert s.sobol_trials == 8 and s.settle_s == 1.0 and s.window_s == 20.0 and s.seed == 0
    assert (o.reward, o.percentile, o.sla_us) == ("constrained", 99.0, 500.0)
    assert captured["out"] == Path("out") and len(captured["policies"]) == 4


@pytest.mark.parametrize("name", sorted(WARM_ABLATIONS))
def test_each_ablation_is_a_preset(tmp_path, captured, name):
    assert _run(tmp_path, "--preset", name) == 0
    s = captured["settings"]
    for field, value in TUNER_PRESETS[name].items():
        assert getattr(s, field) == value
    for field, value in WARM_ABLATIONS[name].items():
        assert getattr(s, field) == value != TUNER_PRESETS["warm"].get(field, object())


def test_tuner_is_an_alias_of_preset(tmp_path, captured):
    assert _run(tmp_path, "--tuner", "cold") == 0
    assert not captured["settings"].context and captured["settings"].itr_resolution_us == 8


def test_config_file_over_preset_and_cli_over_file(tmp_path, captured):
    cfg = _config(
        tmp_path,
        """# a replay variant
[replay]
preset = "cold"
sla_us = 200
percentile = 90
trials = 12
safe_delta = 0.02      # over the cold preset's 0
window_guard = false
policies = ["tuner", "oracle"]
out = "results"
""",
    )
    assert _run(tmp_path, "--config", cfg, "--trials", "7", "--preset", "warm") == 0
    s, o = captured["settings"], captured["objective"]
    assert (o.sla_us, o.percentile) == (200.0, 90.0)  # file
    assert s.trials == 7  # CLI over file
    assert s.context and s.itr_resolution_us == 16  # CLI preset warm over the file's preset cold
    assert s.safe_delta == 0.02 and s.window_guard is False  # file over preset
    assert captured["policies"] == ("tuner", "oracle")
    assert captured["out"] == tmp_path / "results"  # relative to the config file


def test_config_only_preset(tmp_path, captured):
    cfg = _config(tmp_path, '[replay]\npreset = "warm-no-stop"\n')
    assert _run(tmp_path, "--config", cfg) == 0
    assert captured["settings"].stop_ei_pct == 0.0 and captured["settings"].context


def test_help_hides_rare_flags_but_they_work(tmp_path, captured, capsys):
    with pytest.raises(SystemExit):
        main(["replay", "--help"])
    text = capsys.readouterr().out
    assert "--preset" in text and "--config" in text and "--sla-us" in text
    for hidden in ("--safe-delta", "--window-ci-pct", "--sobol-trials", "--context-max-qps"):
        assert hidden not in text
    assert _run(tmp_path, "--safe-delta", "0.1", "--sobol-trials", "3") == 0
    assert captured["settings"].safe_delta == 0.1 and captured["settings"].sobol_trials == 3


@pytest.mark.parametrize(
    ("body", "line", "message"),
    [
        ("[replay]\nsla_us = 500\nsafe_delta = 2\n", 3, "replay.safe_delta '2': expected a probability in [0, 1)"),
        ("[replay]\n\nfoo = 1\n", 3, "replay.foo: unknown key"),
        ("[replay]\ncontext = 1\n", 2, "replay.context: expected true or false, got 1"),
        ("[replay]\nseed = 1.5\n", 2, "replay.seed: expected an integer, got 1.5"),
        ('[replay]\nsla_us = "fast"\n', 2, "replay.sla_us 'fast': expected a positive number of µs"),
        ('[replay]\n\n\nreward = "energy"\n', 4, "replay.reward: unknown reward 'energy'"),
        ('[replay]\npreset = "hot"\n', 2, "replay.preset 'hot': expected one of cold, warm"),
        ('[replay]\npolicies = "tuner,magic"\n', 2, "replay.policies: unknown policy 'magic'"),
        ("[replay]\ndays = 0\n", 2, "replay.days '0': expected a number >= 1"),
        ("[replay]\nsla_us = \n", 2, "invalid TOML"),
        ("[other]\nx = 1\n", 1, "no [replay] table"),
    ],
)
def test_bad_config_is_one_line_with_file_line_key(tmp_path, captured, capsys, body, line, message):
    cfg = _config(tmp_path, body)
    assert _run(tmp_path, "--config", cfg) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "Traceback" not in err
    assert err.startswith(f"tuner: error: {cfg}:{line}: ") and message in err, err


def test_a_cli_value_is_not_blamed_on_the_file(tmp_path, captured, capsys):
    cfg = _config(tmp_path, "[replay]\nsafe_delta = 0.5\n")
    assert _run(tmp_path, "--config", cfg, "--safe-delta", "3") == 2
    err = capsys.readouterr().err
    assert "--safe-delta '3'" in err and str(cfg) not in err


def test_unreadable_config_is_one_line(tmp_path, captured, capsys):
    assert _run(tmp_path, "--config", str(tmp_path / ("x" * 3000))) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "cannot read config" in err
