"""`tuner daemon --check` runs the daemon's start-up checks: what it refuses, the daemon refuses with the same
`FILE:LINE: field: ...` lines and exit status 78; what it accepts, the daemon starts with."""

from __future__ import annotations

from pathlib import Path

import pytest

from core.errors import EXIT_CONFIG
from tests.fuzzkit import run_cli

BASE = """[host]
spec = "sim"
{options}
[state]
dir = {state}

[grpc]
listen = "unix://{tmp}/t.sock"

[metrics]
listen = "off"
"""
BAD_LEVELS = '[host.options.load_schedule]\nshape = "steps"\nlevels = [1, -1, "x"]\nstep_s = 10\n'
WITH_QPS = '[host.options]\nqps = 1000\n\n[host.options.load_schedule]\nshape = "steps"\nlevels = [1]\nstep_s = 5\n'


def _config(tmp: Path, *, options: str = "", state: str = '"st"') -> Path:
    path = tmp / "tuner.toml"
    path.write_text(BASE.format(options=options, state=state, tmp=tmp))
    return path


def _both(cfg: Path) -> tuple[list[str], list[str]]:
    """The error lines of `--check` and of the daemon itself on `cfg`, both asserted to exit 78."""
    lines = []
    for argv in (["daemon", "--check", "--config", str(cfg)], ["daemon", "--config", str(cfg)]):
        code, out, err = run_cli(argv)
        assert code == EXIT_CONFIG, (argv, code, err)
        assert out == "" and "Traceback" not in err
        lines.append(err.removeprefix("tuner: error: ").splitlines())
    return lines[0], lines[1]


@pytest.mark.parametrize(
    ("options", "line", "field", "why"),
    [
        (BAD_LEVELS, 3, "host.options.load_schedule", "load_schedule.levels[1] -1: expected a finite number >= 0"),
        (WITH_QPS, 4, "host.options.qps", "give qps (a fixed load) or load_schedule, not both"),
    ],
)
def test_a_host_option_the_host_refuses_is_refused_by_check_at_its_line(tmp_path, options, line, field, why):
    check, daemon = _both(_config(tmp_path, options=options))
    assert check == daemon == [f"{tmp_path / 'tuner.toml'}:{line}: {field}: {why}"]


@pytest.mark.parametrize(
    ("state", "why"),
    [
        ('"/tmp/' + "a" * 5000 + '"', "File name too long"),
        ('"' + "/".join(["d" * 100] * 42) + '"', "File name too long"),
        ('"/dev/null"', "Not a directory"),
        ('"in-a-file/state"', "Not a directory"),
    ],
)
def test_an_unusable_state_dir_is_one_shortened_line_and_exit_78_from_check_and_daemon(tmp_path, state, why):
    (tmp_path / "in-a-file").write_text("x")
    check, daemon = _both(_config(tmp_path, state=state))
    assert check == daemon and len(check) == 1
    line = check[0]
    assert line.startswith(f"{tmp_path / 'tuner.toml'}:5: state.dir: expected a directory the daemon can create")
    assert why in line and len(line) < 400  # the value shortened, not echoed whole
    assert not (tmp_path / "d").exists()  # --check and the refused start created nothing


def test_check_accepts_a_state_dir_still_to_be_made_and_makes_nothing(tmp_path):
    cfg = _config(tmp_path, state='"deep/er/st"')
    code, out, err = run_cli(["daemon", "--check", "--config", str(cfg)])
    assert (code, out, err) == (0, f"{cfg}: OK\n", "")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["tuner.toml"]  # no state directory, no socket


def test_check_reports_every_problem_of_file_state_and_host_at_once(tmp_path):
    cfg = _config(tmp_path, options=BAD_LEVELS, state='"/dev/null"')
    code, _, err = run_cli(["daemon", "--check", "--config", str(cfg)])
    lines = err.removeprefix("tuner: error: ").splitlines()
    assert code == EXIT_CONFIG and [line.split(": ")[1] for line in lines] == [
        "state.dir",
        "host.options.load_schedule",
    ]


def test_a_socket_directory_or_token_the_servers_cannot_use_is_refused_by_check_and_daemon_alike(tmp_path):
    (tmp_path / "in-a-file").write_text("x")
    (tmp_path / "empty-token").write_text("\n")
    cfg = _config(tmp_path)
    text = cfg.read_text().replace(f"unix://{tmp_path}/t.sock", f"unix://{tmp_path}/in-a-file/t.sock")
    cfg.write_text(text.replace("[metrics]", 'token_file = "empty-token"\n\n[metrics]'))
    check, daemon = _both(cfg)
    assert check == daemon and len(check) == 2
    assert check[0].startswith(f"{cfg}:8: grpc.listen: cannot create the socket's directory ")
    assert check[0].endswith("in-a-file': Not a directory")
    assert check[1].startswith(f"{cfg}:10: grpc.token_file: expected a non-empty token in ")
    assert not (tmp_path / "st").exists()  # refused before the state directory was made


def test_a_sqlite_trial_store_path_too_long_for_sqlite_is_refused_by_check_and_daemon_alike(tmp_path):
    cfg = _config(tmp_path)
    cfg.write_text(cfg.read_text() + f'\n[history]\nurl = "sqlite:///{tmp_path}/{"s" * 500}.sqlite"\n')
    check, daemon = _both(cfg)
    assert check == daemon and len(check) == 1 and check[0].startswith(f"{cfg}:14: history.url: expected a path SQLite")
