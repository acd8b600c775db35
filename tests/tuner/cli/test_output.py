"""Output that fits its pipe: tables print whole when stdout is not a terminal, and `--json` where a table is
something to script against (replay, sweep, trace stats)."""

from __future__ import annotations

import io
import json
from pathlib import Path

import pytest

from tests.replay_fakes import tiny_trace
from tuner.cli.app import main
from tuner.cli.output import PIPE_WIDTH, is_terminal, table_console


def _replay_argv(tmp_path: Path, *extra: str) -> list[str]:
    trace = tiny_trace(tmp_path / "t.csv", 180)
    return [
        "replay",
        str(trace),
        "--host",
        "tests.replay_fakes:make_model_host",
        "--hours",
        "0.05",
        "--bin",
        "60",
        "--peak-qps",
        "200000",
        "--trials",
        "3",
        "--sobol-trials",
        "2",
        "--settle",
        "0.5",
        "--window",
        "5",
        "--seed",
        "2",
        "--out",
        str(tmp_path / "out"),
        *extra,
    ]


def test_console_is_wide_and_plain_off_a_terminal(monkeypatch):
    monkeypatch.setattr("sys.stdout", io.StringIO())
    c = table_console()
    assert c.width == PIPE_WIDTH and c.no_color
    assert not is_terminal(io.StringIO())


def test_replay_tables_are_not_cut_in_a_pipe(tmp_path, capsys):
    assert main(_replay_argv(tmp_path)) == 0
    out = capsys.readouterr().out
    # headers a 80-column console would cut to "linu…" / "orac…", and no ellipsis anywhere
    assert "linux-default W" in out and "oracle-hourly W" in out and "static-performance" in out
    assert "…" not in out
    assert "\x1b[" not in out  # no colour codes in a pipe


def test_replay_json_is_the_summary(tmp_path, capsys):
    assert main(_replay_argv(tmp_path, "--json", "-q")) == 0
    cap = capsys.readouterr()
    doc = json.loads(cap.out)  # stdout is JSON only; the "wrote ..." line went to stderr
    assert "wrote" in cap.err
    on_disk = json.loads((tmp_path / "out" / "summary.json").read_text())
    assert doc["policies"].keys() == on_disk["policies"].keys()
    assert doc["policies"]["tuner"]["energy_j"] == pytest.approx(on_disk["policies"]["tuner"]["energy_j"])
    assert doc["windows"] == 3


def test_sweep_json(tmp_path, capsys):
    out = tmp_path / "sw"
    argv = ["sweep", "--host", "tests.fakes:make_fake_host", "--qps", "120000", "--itr", "100,300"]
    argv += ["--dvfs", "1.2,2.9", "--seconds", "2", "--settle", "0.5", "--seed", "7", "--out", str(out), "--json"]
    assert main(argv) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["points"] == 4 and doc["measured_now"] == 4
    assert doc["best"] == json.loads((out / "best.json").read_text())


def test_trace_stats_table_whole_in_a_pipe(tmp_path, capsys):
    path = tmp_path / "a-rather-long-trace-file-name-so-the-title-would-not-fit-in-80-columns.csv"
    path.write_text("".join(f"{t},k{t},10,{t},1,{'get' if t % 2 else 'set'},0\n" for t in range(30)))
    assert main(["trace", "stats", str(path), "--bin", "10", "--peak-qps", "1000"]) == 0
    out = capsys.readouterr().out
    assert "scaled QPS" in out and "op mix %" in out and "…" not in out
    assert str(path) in "".join(out.split())  # the title may wrap to the table's width, never lose characters
