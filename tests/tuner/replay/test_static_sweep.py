"""`tuner sweep`: range parsing, Pareto front, SLA optimum (hand-checked), the sweep loop and the CLI end to end."""

from __future__ import annotations

import json
import math
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from actuators.host import PERCENTILES, KnobSpace, OperatingPoint
from core.errors import HostError, KnobRangeError, TunerError
from tuner.replay.static_sweep import (
    SweepConfig,
    SweepPoint,
    best_under_sla,
    pareto_front,
    parse_dvfs_spec,
    parse_itr_spec,
    parse_percentile,
    percentile_key,
    run_sweep,
    summarize_best,
    sweep_pareto,
)

REPO = Path(__file__).resolve().parents[3]
sys.path.insert(0, str(REPO))  # so `tests.fakes` resolves as a `--host module:factory` spec
from tests import fakes  # noqa: E402
from tests.fakes import DVFS_GHZ, FakeHost  # noqa: E402

KNOBS = KnobSpace.ixgbe(DVFS_GHZ)


# --------------------------------------------------------------------------- range parsing


def test_itr_full_ixgbe_range_and_coarse_step():
    full = parse_itr_spec("2:1022:2", KNOBS)
    assert len(full) == 511 and full[0] == 2 and full[-1] == 1022
    coarse = parse_itr_spec("2:1022:20", KNOBS)
    assert len(coarse) == 52 and coarse[:3] == (2, 22, 42) and coarse[-1] == 1022


@pytest.mark.parametrize(
    "spec,expected",
    [
        ("100:105:2", (100, 102, 104)),  # HI off the grid: stop below it
        ("10:16", (10, 12, 14, 16)),  # LO:HI -> the host's own values in range
        ("9:15", (10, 12, 14)),
        ("300", (300,)),
        (" 300, 2 ", (300, 2)),  # list order kept
        ("ALL", tuple(range(2, 1023, 2))),
    ],
)
def test_itr_forms(spec, expected):
    assert parse_itr_spec(spec, KNOBS) == expected


@pytest.mark.parametrize(
    "spec,exc,fragment",
    [
        ("", TunerError, "expected 'all'"),
        ("2:1022:0", TunerError, "STEP must be a positive integer"),
        ("2:1022:-2", TunerError, "STEP must be a positive integer"),
        ("100:2:2", TunerError, "LO 100 is greater than HI 2"),
        ("2:4:6:8", TunerError, "expected LO:HI or LO:HI:STEP"),
        ("a:b", TunerError, "'a' is not an integer"),
        ("1.5", TunerError, "'1.5' is not an integer"),
        ("2:1022:2.5", TunerError, "'2.5' is not an integer"),
        ("300,300", TunerError, "listed twice"),
        ("3", KnobRangeError, "ITR 3 µs is not supported"),  # odd: ixgbe steps of 2
        ("0:10:2", KnobRangeError, "ITR 0 µs is not supported"),
        ("1000:1100:10", KnobRangeError, "ITR 1030 µs"),  # runs past 1022 -> refused, not clipped
        ("2000:3000", KnobRangeError, "supports no ITR in 2000..3000"),
    ],
)
def test_itr_bad_specs_are_one_line_errors(spec, exc, fragment):
    with pytest.raises(exc) as info:
        parse_itr_spec(spec, KNOBS)
    msg = str(info.value)
    assert fragment in msg and "\n" not in msg and msg.startswith("--itr")


def test_dvfs_decimal_range_is_exact():
    got = parse_dvfs_spec("1.2:2.9:0.1", KNOBS)
    assert got == DVFS_GHZ and len(got) == 18  # float accumulation would lose 2.9 or duplicate a value
    assert parse_dvfs_spec("1.2:2.0:0.4", KNOBS) == (1.2, 1.6, 2.0)
    assert parse_dvfs_spec("1.2:1.5", KNOBS) == (1.2, 1.3, 1.4, 1.5)
    assert parse_dvfs_spec("all", KNOBS) == DVFS_GHZ
    assert parse_dvfs_spec("2.9,1.2", KNOBS) == (2.9, 1.2)
    # values come back as the host's own floats, not the parsed ones
    assert parse_dvfs_spec("1.30", KNOBS)[0] is KNOBS.dvfs_ghz[1]


@pytest.mark.parametrize(
    "spec,exc,fragment",
    [
        ("", TunerError, "expected 'all'"),
        ("1.25", KnobRangeError, "not available"),
        ("1.2:2.9:0", TunerError, "STEP must be positive"),
        ("1.2:2.9:-0.1", TunerError, "STEP must be positive"),
        ("2.9:1.2:0.1", TunerError, "greater than HI"),
        ("nan", TunerError, "not a finite number"),
        ("inf,1.2", TunerError, "not a finite number"),
        ("fast", TunerError, "not a number"),
        ("1.2,1.20", TunerError, "listed twice"),
        ("1.0:1.1", KnobRangeError, "no frequency in"),
        ("1.2:3.0:0.1", KnobRangeError, "DVFS 3.0 GHz is not available"),
    ],
)
def test_dvfs_bad_specs_are_one_line_errors(spec, exc, fragment):
    with pytest.raises(exc) as info:
        parse_dvfs_spec(spec, KNOBS)
    msg = str(info.value)
    assert fragment in msg and "\n" not in msg and msg.startswith("--dvfs")


def test_percentile_parsing_and_keys():
    assert parse_percentile("99") == 99.0 and parse_percentile("99.9") == 99.9
    assert [percentile_key(p) for p in PERCENTILES] == ["p50_us", "p90_us", "p95_us", "p99_us", "p999_us"]
    for bad in ("98", "x", "", "nan"):
        with pytest.raises(TunerError, match="expected one of 50, 90, 95, 99, 99.9"):
            parse_percentile(bad)


# --------------------------------------------------------------------------- pure analysis


def test_pareto_front_hand_checked():
    pts = [(1, 10), (2, 5), (3, 5), (2, 8), (4, 1), (4, 1), (5, 2), (math.inf, 0), (6, math.nan), (0.5, 12)]
    # (3,5) and (2,8) are dominated by (2,5); (5,2) by (4,1); the duplicate (4,1) is kept (neither
    # dominates the other); non-finite objectives are left out; result ordered by the first objective.
    assert pareto_front(pts, lambda p: p) == [(0.5, 12), (1, 10), (2, 5), (4, 1), (4, 1)]
    assert pareto_front([], lambda p: p) == []
    assert pareto_front([(3, 3)], lambda p: p) == [(3, 3)]
    # same first objective: only the lowest second survives
    assert pareto_front([(1, 3), (1, 2), (1, 4)], lambda p: p) == [(1, 2)]


def _pt(itr, ghz, p99, energy, qps=100.0, achieved=100.0, p50=None, ci=None):
    lat = {p: p99 for p in PERCENTILES}
    if p50 is not None:
        lat[50.0] = p50
    return SweepPoint(
        itr,
        ghz,
        qps,
        achieved,
        lat,
        {99.0: ci or (p99 * 0.9, p99 * 1.1)},
        energy,
        energy / 20,
        20.0,
        int(achieved * 20),
    )


def test_best_under_sla_hand_checked():
    a = _pt(100, 2.9, p99=200, energy=1500)
    b = _pt(300, 1.3, p99=480, energy=1100)  # the answer at SLA 500
    c = _pt(400, 1.2, p99=650, energy=900)  # cheaper but over the SLA
    d = _pt(450, 1.2, p99=300, energy=800, achieved=50.0)  # cheapest, "meets" SLA, but drops half the load
    e = _pt(350, 1.3, p99=499, energy=1100)  # ties b on energy with higher latency
    pts = [a, b, c, d, e]
    assert best_under_sla(pts, 500, 99) is b
    assert best_under_sla(pts, 700, 99) is c
    assert best_under_sla(pts, 250, 99) is a
    assert best_under_sla(pts, 100, 99) is None
    assert best_under_sla(pts, 500, 99, min_load_ratio=0.5) is d  # if dropping half is acceptable
    # the percentile matters: at p50 the cheap point c is fine
    c50 = _pt(400, 1.2, p99=650, energy=900, p50=120)
    assert best_under_sla([a, b, c50], 500, 50) is c50
    # the Pareto front over points that keep up: d excluded; b beats e; c is the low-energy end
    assert sweep_pareto(pts, 99) == [a, b, c]


def test_summarize_best_met_and_not_met():
    good = _pt(300, 1.3, p99=480, energy=1000, ci=(470, 510))
    worst = _pt(2, 2.9, p99=60, energy=2000)
    s = summarize_best([good, worst], 500, 99)
    assert s["met"] is True and s["best"]["itr_us"] == 300 and s["points_meeting_sla"] == 2
    assert s["sla_met_at_ci_upper_bound"] is False  # 510 > 500: the point estimate may be lucky
    assert s["energy_saved_vs_worst_point"] == pytest.approx(0.5)
    none = summarize_best([good, worst], 50, 99)
    assert none["met"] is False and "best" not in none
    assert "no measured point met p99 <= 50 µs" in none["message"]
    assert none["lowest_latency"]["itr_us"] == 2


def test_record_round_trip_with_unmeasured_latency():
    p = _pt(10, 1.5, p99=math.inf, energy=10)
    d = p.to_json()
    assert d["p99_us"] is None and d["p99_ci_us"][1] is None
    text = json.dumps(d, allow_nan=False)  # strict JSON: no NaN/Infinity tokens
    back = SweepPoint.from_json(json.loads(text))
    assert back.latency(99) == math.inf and back.itr_us == 10 and back.dvfs_ghz == 1.5
    assert SweepPoint.from_json(_pt(10, 1.5, 300, 10).to_json()) == _pt(10, 1.5, 300, 10)
    with pytest.raises(TypeError):
        SweepPoint.from_json({**d, "itr_us": 10.5})


# --------------------------------------------------------------------------- the loop


def test_run_sweep_sets_settles_measures_in_order():
    host = FakeHost()
    records = []
    pts = [OperatingPoint(100, 1.2), OperatingPoint(200, 1.2), OperatingPoint(100, 2.9)]
    out = run_sweep(host, pts, SweepConfig(seconds=5, settle=0.5), records.append)
    assert out == records and [(r.itr_us, r.dvfs_ghz) for r in out] == [(100, 1.2), (200, 1.2), (100, 2.9)]
    assert host.calls[:4] == [("set_itr", 100), ("set_dvfs", 1.2), ("measure", 0.5), ("measure", 5)]
    assert len(host.calls) == 12 and host.restore_count == 0  # restoring is the caller's job
    lat, _, _ = host.model(200, 1.2, 100_000)
    assert out[1].latency(99) == pytest.approx(lat[99.0]) and out[1].seconds == 5


def test_run_sweep_refuses_whole_grid_before_setting_anything():
    host = FakeHost()
    with pytest.raises(KnobRangeError):
        run_sweep(host, [OperatingPoint(100, 1.2), OperatingPoint(101, 1.2)], SweepConfig(), lambda r: None)
    assert host.calls == []


def test_run_sweep_detects_host_that_did_not_apply_the_point():
    class Liar(FakeHost):
        def set_dvfs(self, ghz):
            super().set_dvfs(1.2)

    with pytest.raises(HostError, match="measured at ITR 100 µs @ 1.2 GHz after being set to ITR 100 µs @ 2.9"):
        run_sweep(Liar(), [OperatingPoint(100, 2.9)], SweepConfig(settle=0), lambda r: None)


def test_sweep_config_validation():
    for kw in ({"seconds": 0}, {"seconds": math.nan}, {"settle": -1}, {"seconds": math.inf}):
        with pytest.raises(TunerError):
            SweepConfig(**kw)


# --------------------------------------------------------------------------- CLI end to end (in process)


def cli(*argv: str) -> int:
    from tuner.cli.app import main

    return main(["sweep", *argv])


def read_points(out: Path) -> list[dict]:
    return [json.loads(line) for line in (out / "points.jsonl").read_text().splitlines()]


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


# --------------------------------------------------------------------------- the real simulator


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


def test_run_sweep_on_simulated_host_then_restore():
    sim = pytest.importorskip("actuators.sim.host")
    host = sim.make_sim_host(seed=1, qps=100_000)
    out = run_sweep(host, [OperatingPoint(200, 1.5)], SweepConfig(seconds=1, settle=0), lambda r: None)
    assert host.point() == OperatingPoint(200, 1.5) and out[0].itr_us == 200
    host.restore()
    assert host.point() is None


def test_progress_without_terminal_prints_plain_status_lines(capsys):
    from tuner.cli.sweep import _progress

    with _progress(total=4, done=1, every_s=0.0) as update:
        update("measuring ITR 2 µs @ 1.2 GHz")  # no advance: no line
        update("last 2 µs @ 1.2 GHz", advance=1)
    err = capsys.readouterr().err  # capsys: stderr is not a TTY
    assert err == "sweep: 2/4 points; last 2 µs @ 1.2 GHz\n"
