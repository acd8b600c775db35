"""Start-up checks (`tuner.daemon.startup`): every problem one `FILE:LINE: field: ...` line at the key it comes
from, found in dry run by `check_startup` (what `tuner daemon --check` and `tuner doctor --config` run)."""

from __future__ import annotations

import pytest

from core.errors import StartupError
from tuner.config import Config, load_config
from tuner.daemon.startup import build_host, check_startup, clipped, host_problem, locate_problem


def _config(tmp_path, text: str):
    path = tmp_path / "tuner.toml"
    path.write_text(f'[state]\ndir = "st"\n\n[host]\nspec = "sim"\n{text}')
    return load_config(path)


def test_a_problem_is_located_at_the_option_it_names_as_a_word(tmp_path):
    cfg = _config(tmp_path, "[host.options]\ncores = 4\nseed = 2\n")
    f = tmp_path / "tuner.toml"
    assert host_problem(cfg, "sim: seed 2: bad") == f"{f}:8: host.options.seed: seed 2: bad"
    assert host_problem(cfg, "sim: give cores or seed") == f"{f}:7: host.options.cores: give cores or seed"
    # inside a path or a flag it is not the option: the problem is the host's
    assert host_problem(cfg, "itr: no /sys/cores/x under --seed") == f"{f}:4: host: itr: no /sys/cores/x under --seed"


def test_the_hosts_own_refusal_is_a_startup_error_at_the_option(tmp_path):
    cfg = _config(tmp_path, "[host.options]\ncores = 0\n")
    with pytest.raises(StartupError) as e:
        build_host(cfg)
    assert e.value.problems == (
        f"{tmp_path / 'tuner.toml'}:7: host.options.cores: cores 0: expected a positive integer",
    )


def test_an_empty_knob_space_is_located_at_knobs(tmp_path):
    cfg = _config(tmp_path, "[knobs]\nitr_us = [3000, 4000]\n")
    (problem,) = check_startup(cfg)
    assert problem.startswith(f"{tmp_path / 'tuner.toml'}:6: knobs: ")


def test_check_startup_finds_the_state_dir_and_the_host_and_writes_nothing(tmp_path):
    cfg = _config(tmp_path, '[host.options]\nqps = 5\nload_schedule = { shape = "steps", levels = [1], step_s = 1 }\n')
    assert [p.split(": ")[1] for p in check_startup(cfg)] == ["host.options.qps"]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["tuner.toml"]


def test_a_config_not_read_from_a_file_names_the_field_alone_and_long_text_is_clipped():
    assert locate_problem(Config(), "state", "dir", "why") == "state.dir: why"
    text = clipped("x" * 1000 + "\n" + "tail")
    assert len(text) < 400 and text.endswith("xx tail (1005 characters)") and "\n" not in text


def test_a_sqlite_trial_store_sqlite_cannot_open_is_refused_at_history_url(tmp_path):
    cfg = _config(tmp_path, f'[history]\nurl = "sqlite:///{tmp_path}/{"s" * 500}.sqlite"\n')
    assert [p.split(": ")[1] for p in check_startup(cfg)] == ["history.url"]
    assert check_startup(_config(tmp_path, f'[history]\nurl = "sqlite:///{tmp_path}/t.sqlite"\n')) == []
