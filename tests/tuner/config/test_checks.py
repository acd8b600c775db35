"""Where a config problem is reported and how its value is echoed (`tuner.config.checks`)."""

from __future__ import annotations

import pytest

from core.errors import InputError
from tuner.config import load_config
from tuner.config.checks import locate, shown


def _errors(text: str, tmp_path) -> list[str]:
    path = tmp_path / "t.toml"
    path.write_text(text)
    with pytest.raises(InputError) as e:
        load_config(path)
    return str(e.value).splitlines()


def test_sub_tables_and_arrays_of_tables_are_found_at_their_header():
    lines = ["[host]", 'spec = "sim"', "", "[x.y]", "z = 1", "[[a]]", "q = 2", "[ host.options . load ]"]
    assert locate(lines, "", "x") == 4
    assert locate(lines, "", "a") == 6
    assert locate(lines, "host.options", "load") == 8
    assert locate(lines, "host", "options") == 8  # [host.options.load] makes host.options a table too


def test_unknown_sub_table_array_and_top_level_key_are_reported_at_their_line(tmp_path):
    lines = _errors('a = 1\n\n[x.y]\nz = 1\n\n[[arr]]\nq = 2\n\n[state]\ndir = "s"\n', tmp_path)
    f = tmp_path / "t.toml"
    assert any(line.startswith(f"{f}:1: a: unknown top-level key: expected one of the tables ") for line in lines)
    assert any(line.startswith(f"{f}:3: x: unknown table: ") for line in lines)
    assert any(line.startswith(f"{f}:6: arr: unknown table: ") for line in lines)
    assert len(lines) == 3, lines


def test_a_known_table_given_as_an_array_of_tables_is_reported_at_its_header(tmp_path):
    lines = _errors('[state]\ndir = "s"\n\n[[tuning]]\ntrials = 3\n', tmp_path)
    assert lines == [f"{tmp_path / 't.toml'}:4: tuning: expected a table [tuning], got list"]


def test_dates_and_times_are_echoed_as_written_in_iso_text(tmp_path):
    lines = _errors(
        "[tuning]\ntrials = 1979-05-27T07:32:00Z\nwindow_s = [1979-05-27, 07:32:00]\nseed = 1979-05-27T00:32:00.5\n",
        tmp_path,
    )
    f = tmp_path / "t.toml"
    assert f"{f}:2: tuning.trials: expected an integer, got 1979-05-27T07:32:00+00:00" in lines
    assert f"{f}:3: tuning.window_s: expected a number, got [1979-05-27, 07:32:00]" in lines
    assert f"{f}:4: tuning.seed: expected an integer, got 1979-05-27T00:32:00.500000" in lines
    assert not any("datetime" in line for line in lines)


def test_shown_keeps_reprs_and_shortens_past_80_characters():
    assert shown("a") == "'a'" and shown([1, "b"]) == "[1, 'b']" and shown({"k": 1}) == "{'k': 1}"
    long = shown("x" * 5000)
    assert len(long) < 100 and long.endswith("(5000 long)")


@pytest.mark.parametrize("path", ["/run/t.sock,", "/run/a,b.sock", "/run/t.sock?x", "/run/t#1.sock", "/run/t%20.sock"])
def test_a_unix_socket_path_a_grpc_client_cannot_name_is_refused_at_its_line(tmp_path, path):
    """A gRPC client reads its target as a URI (',' separates addresses, '?' starts a query): a daemon serving
    on such a path could never be reached, so the config is refused instead."""
    lines = _errors(f'[state]\ndir = "s"\n\n[grpc]\nlisten = "unix://{path}"\n', tmp_path)
    assert len(lines) == 1, lines
    assert lines[0].startswith(f"{tmp_path / 't.toml'}:5: grpc.listen: ")
    assert "without ',', '?', '#', '%' or control characters" in lines[0]


def test_an_ordinary_unix_socket_path_is_accepted(tmp_path):
    path = tmp_path / "t.toml"
    path.write_text(f'[state]\ndir = "{tmp_path / "s"}"\n\n[grpc]\nlisten = "unix://{tmp_path}/tuner-1.sock"\n')
    assert load_config(path).grpc.listen == f"unix://{tmp_path}/tuner-1.sock"
