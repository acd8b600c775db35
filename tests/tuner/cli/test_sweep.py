"""`tuner sweep` end to end, in process: its output files, bad arguments, errors, interrupts, resume, signals."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[3]
sys.path.insert(0, str(REPO))  # so `tests.fakes` resolves as a `--host module:factory` spec
from tests import fakes  # noqa: E402


def cli(*argv: str) -> int:
    from tuner.cli.app import main

    return main(["sweep", *argv])


def read_points(out: Path) -> list[dict]:
    return [json.loads(line) for line in (out / "points.jsonl").read_text().splitlines()]


SLOW_HOST = """
import os, time
from tests.fakes import FakeHost

class SlowHost(FakeHost):
    def measure(self, seconds):
        open(os.environ["FAKE_STATE"] + ".measuring", "w").close()
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:   # a long window; a signal ends it
            time.sleep(0.02)
        raise AssertionError("no signal arrived")

    def restore(self):
        super().restore()
        open(os.environ["FAKE_STATE"] + ".restored", "w").close()

def make(seed=None):
    return SlowHost(seed=seed)
"""


def test_cli_end_to_end_on_fake_host(tmp_path, capsys):
    out = tmp_path / "sw"
    rc = cli(
        "--host",
        "tests.fakes:make_fake_host",
        "--qps",
        "120000",
        "--itr",
        "100:500:100",
        "--dvfs",
        "1.2,2.0,2.9",
        "--seconds",
        "5",
        "--settle",
        "0.5",
        "--seed",
        "7",
        "--out",
        str(out),
    )
    assert rc == 0
    host = fakes.LAST["fake"]
    assert host.seed == 7
    assert host.calls[0] == ("set_offered_qps", 120000.0)  # load set before any knob
    assert host.calls[-1] == ("restore", None) and host.point() is None

    rows = read_points(out)
    assert len(rows) == 15
    assert {(r["itr_us"], r["dvfs_ghz"]) for r in rows} == {
        (i, f) for i in (100, 200, 300, 400, 500) for f in (1.2, 2.0, 2.9)
    }
    for r in rows:
        for k in (
            "qps",
            "achieved_qps",
            "p50_us",
            "p90_us",
            "p95_us",
            "p99_us",
            "p999_us",
            "p99_ci_us",
            "energy_j",
            "power_w",
            "seconds",
            "requests",
        ):
            assert k in r
        lat, _, _ = host.model(r["itr_us"], r["dvfs_ghz"], 120000)
        assert r["p99_us"] == pytest.approx(lat[99.0]) and r["qps"] == 120000.0 and r["seconds"] == 5
        assert r["power_w"] == pytest.approx(r["energy_j"] / 5)

    # best.json: brute force over the model, independently of best_under_sla
    feasible = [r for r in rows if r["p99_us"] <= 500]
    expect = min(feasible, key=lambda r: r["energy_j"])
    best = json.loads((out / "best.json").read_text())
    assert best["met"] and (best["best"]["itr_us"], best["best"]["dvfs_ghz"]) == (expect["itr_us"], expect["dvfs_ghz"])
    assert best["points_meeting_sla"] == len(feasible) and 0 < len(feasible) < 15

    # pareto.json: no front point is dominated by any measured point; every off-front point is dominated
    front = json.loads((out / "pareto.json").read_text())["front"]
    key = lambda r: (r["itr_us"], r["dvfs_ghz"])
    on = {key(r) for r in front}
    dominates = lambda a, b: (
        a["p99_us"] <= b["p99_us"]
        and a["energy_j"] <= b["energy_j"]
        and (a["p99_us"] < b["p99_us"] or a["energy_j"] < b["energy_j"])
    )
    for r in rows:
        assert any(dominates(o, r) for o in rows) == (key(r) not in on)
    assert [r["p99_us"] for r in front] == sorted(r["p99_us"] for r in front)

    png = (out / "heatmap.png").read_bytes()
    assert png[:8] == b"\x89PNG\r\n\x1a\n" and len(png) > 20_000
    meta = json.loads((out / "sweep.json").read_text())
    assert meta["itr_us"] == [100, 200, 300, 400, 500] and meta["points"] == 15 and meta["qps"] == 120000.0
    stdout = capsys.readouterr().out
    assert f"ITR {expect['itr_us']} µs @ {expect['dvfs_ghz']:g} GHz" in stdout


def test_cli_no_point_meets_sla(tmp_path, capsys):
    out = tmp_path / "sw"
    assert (
        cli(
            "--host",
            "tests.fakes:make_fake_host",
            "--itr",
            "100,200",
            "--dvfs",
            "1.2,2.9",
            "--sla-us",
            "5",
            "--out",
            str(out),
        )
        == 0
    )
    best = json.loads((out / "best.json").read_text())
    assert best["met"] is False and "no measured point met p99 <= 5 µs" in best["message"]
    assert "best: no measured point met" in capsys.readouterr().out
    assert (out / "heatmap.png").exists()


def test_cli_qps_needs_load_control_and_host_load_is_recorded(tmp_path, capsys):
    out = tmp_path / "sw"
    assert (
        cli(
            "--host",
            "tests.fakes:make_fixed_load_host",
            "--qps",
            "1000",
            "--itr",
            "100",
            "--dvfs",
            "1.2",
            "--out",
            str(out),
        )
        == 2
    )
    err = capsys.readouterr().err.strip()
    assert err.startswith("tuner: error: --qps: host 'fake' cannot set its offered load") and "\n" not in err
    host = fakes.LAST["fixed"]
    assert [c for c in host.calls if c[0] != "restore"] == [] and host.restore_count == 1
    assert not out.exists()
    # without --qps: the host's own load is measured and recorded
    assert cli("--host", "tests.fakes:make_fixed_load_host", "--itr", "100", "--dvfs", "1.2", "--out", str(out)) == 0
    assert read_points(out)[0]["qps"] == 100_000.0


@pytest.mark.parametrize(
    "argv,fragment",
    [
        (["--itr", "2:1022:0"], "--itr '2:1022:0': STEP must be a positive integer"),
        (["--itr", "600"], "--itr '600': ITR 600 µs is not supported"),  # small host: 100..500 only
        (["--dvfs", "1.3"], "--dvfs '1.3': DVFS 1.3 GHz is not available"),
        (["--seconds", "0"], "--seconds '0': expected a positive number"),
        (["--settle", "-1"], "--settle '-1': expected a non-negative number"),
        (["--qps", "-5"], "--qps '-5': expected a positive number"),
        (["--sla-us", "abc"], "--sla-us 'abc': expected a positive number"),
        (["--percentile", "98"], "--percentile '98': expected one of"),
        (["--min-load", "1.5"], "--min-load '1.5': expected a positive number <= 1"),
    ],
)
def test_cli_bad_arguments_refused_before_anything_is_set(tmp_path, capsys, argv, fragment):
    fakes.LAST.pop("small", None)
    out = tmp_path / "sw"
    assert cli("--host", "tests.fakes:make_small_host", "--out", str(out), *argv) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and fragment in err and "Traceback" not in err
    host = fakes.LAST.get("small")
    if host is not None:  # built only when the arguments themselves were fine
        assert all(c[0] == "restore" for c in host.calls)
    assert not out.exists()


def test_cli_host_error_mid_sweep_keeps_points_and_restores(tmp_path, capsys):
    out = tmp_path / "sw"
    assert (
        cli(
            "--host",
            "tests.fakes:make_failing_host",
            "--itr",
            "100:500:100",
            "--dvfs",
            "1.2",
            "--settle",
            "0",
            "--out",
            str(out),
        )
        == 2
    )
    err = capsys.readouterr().err
    assert "tuner: error: fake host: measurement failed" in err and "Traceback" not in err
    assert len(read_points(out)) == 2  # points 1-2 kept, 3rd failed
    assert fakes.LAST["failing"].restore_count == 1 and fakes.LAST["failing"].point() is None
    assert json.loads((out / "best.json").read_text())["points_measured"] == 2


def test_cli_interrupt_then_resume(tmp_path, capsys):
    out = tmp_path / "sw"
    args = [
        "--host",
        "tests.fakes:make_interrupted_host",
        "--itr",
        "100:500:100",
        "--dvfs",
        "1.2",
        "--settle",
        "0",
        "--out",
        str(out),
    ]
    assert cli(*args) == 130
    first = fakes.LAST["interrupted"]
    assert first.restore_count == 1 and first.point() is None
    assert "interrupted after 2 of 5 points; host restored" in capsys.readouterr().err
    assert [r["itr_us"] for r in read_points(out)] == [100, 200]

    # without --resume an existing sweep is not overwritten
    assert cli(*args) == 2
    assert "already holds a sweep: pass --resume" in capsys.readouterr().err
    # a different window length would make energies incomparable
    assert cli(*args, "--resume", "--seconds", "10") == 2
    assert "--resume: seconds 10.0 differs from 20.0" in capsys.readouterr().err

    # resume: the new host (interrupted again at its 3rd measurement) measures only what is missing
    assert cli(*args, "--resume") == 130
    second = fakes.LAST["interrupted"]
    assert [c[1] for c in second.calls if c[0] == "set_itr"] == [300, 400, 500]
    assert [r["itr_us"] for r in read_points(out)] == [100, 200, 300, 400]


def test_cli_resume_drops_torn_last_line_and_rejects_corrupt_line(tmp_path, capsys):
    out = tmp_path / "sw"
    base = ["--host", "tests.fakes:make_fake_host", "--itr", "100:300:100", "--dvfs", "1.2", "--out", str(out)]
    assert cli(*base) == 0
    lines = (out / "points.jsonl").read_text().splitlines(keepends=True)
    (out / "points.jsonl").write_text(lines[0] + lines[1][:40])  # killed mid-write
    assert cli(*base, "--resume") == 0
    assert "dropping an incomplete last record" in capsys.readouterr().err
    assert [r["itr_us"] for r in read_points(out)] == [100, 200, 300]
    (out / "points.jsonl").write_text(lines[0] + "{not json}\n" + lines[2])
    assert cli(*base, "--resume") == 2
    err = capsys.readouterr().err
    assert f"{out / 'points.jsonl'}:2: expected a sweep record" in err and err.count("\n") == 1


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM])
def test_signal_during_measurement_restores_host(tmp_path, sig):
    (tmp_path / "slowhost.py").write_text(SLOW_HOST)
    state = tmp_path / "state"
    env = {**os.environ, "PYTHONPATH": f"{tmp_path}{os.pathsep}{REPO}", "FAKE_STATE": str(state)}
    # as from a terminal: SIGINT at its default in the child even when the test run itself was started in the
    # background (a non-interactive shell's `&` ignores SIGINT, and an ignored signal is inherited across exec)
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "tuner.cli",
            "sweep",
            "--host",
            "slowhost:make",
            "--itr",
            "100",
            "--dvfs",
            "1.2",
            "--out",
            str(tmp_path / "sw"),
        ],
        env=env,
        stderr=subprocess.PIPE,
        text=True,
        cwd=REPO,
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
    )
    try:
        deadline = time.monotonic() + 20
        while not Path(f"{state}.measuring").exists():
            assert proc.poll() is None and time.monotonic() < deadline, "sweep never started measuring"
            time.sleep(0.02)
        proc.send_signal(sig)
        _, err = proc.communicate(timeout=20)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 130
    assert Path(f"{state}.restored").exists()
    assert "host restored" in err and "Traceback" not in err


def test_cli_on_simulated_host_is_deterministic_per_seed(tmp_path):
    pytest.importorskip("actuators.sim.host")
    base = [
        "--host",
        "sim",
        "--qps",
        "200000",
        "--itr",
        "100:500:200",
        "--dvfs",
        "1.2,2.9",
        "--seconds",
        "2",
        "--settle",
        "0.2",
    ]
    texts = []
    for name, seed in (("a", "5"), ("b", "5"), ("c", "6")):
        assert cli(*base, "--seed", seed, "--out", str(tmp_path / name)) == 0
        texts.append((tmp_path / name / "points.jsonl").read_text())
    assert texts[0] == texts[1] and texts[0] != texts[2]
    rows = [json.loads(line) for line in texts[0].splitlines()]
    assert [(r["itr_us"], r["dvfs_ghz"]) for r in rows] == [
        (100, 1.2),
        (300, 1.2),
        (500, 1.2),
        (100, 2.9),
        (300, 2.9),
        (500, 2.9),
    ]
    for r in rows:
        assert r["qps"] == pytest.approx(200000, rel=0.05) and r["seconds"] == 2
        assert r["p50_us"] <= r["p99_us"] <= r["p999_us"] and r["energy_j"] > 0 and r["requests"] > 100_000
    best = json.loads((tmp_path / "a" / "best.json").read_text())
    assert best["met"] == any(r["p99_us"] <= 500 for r in rows)


def test_progress_without_terminal_prints_plain_status_lines(capsys):
    from tuner.cli.sweep import _progress

    with _progress(total=4, done=1, every_s=0.0) as update:
        update("measuring ITR 2 µs @ 1.2 GHz")  # no advance: no line
        update("last 2 µs @ 1.2 GHz", advance=1)
    err = capsys.readouterr().err  # capsys: stderr is not a TTY
    assert err == "sweep: 2/4 points; last 2 µs @ 1.2 GHz\n"
