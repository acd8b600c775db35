"""The simulated host's moving load: shapes, clocks, trace files, and one-line errors for bad options."""

from __future__ import annotations

import math

import pytest

from actuators.host import OperatingPoint
from actuators.sim import host as sim_host
from actuators.sim.load import LoadSchedule, parse_load
from core.errors import TunerError
from tuner.hosts import make_host, parse_load_option


def test_steps_cycle_and_time_scale_compresses():
    s = parse_load({"shape": "steps", "levels": [100_000, 600_000, 300_000], "step_s": 240})
    assert [s.qps_at(t) for t in (0, 239.9, 240, 480, 720, 961)] == [
        100_000,
        100_000,
        600_000,
        300_000,
        100_000,
        600_000,
    ]
    fast = parse_load({"shape": "steps", "levels": [1, 2], "step_s": 60, "time_scale": 60})
    assert (fast.qps_at(0.5), fast.qps_at(1.0), fast.span_s) == (1.0, 2.0, 2.0)


def test_sine_starts_low_peaks_at_half_period():
    s = parse_load({"shape": "sine", "low": 100_000, "high": 600_000, "period_s": 600})
    assert s.qps_at(0) == pytest.approx(100_000)
    assert s.qps_at(300) == pytest.approx(600_000)
    assert s.qps_at(150) == pytest.approx(350_000)
    assert s.qps_at(600) == pytest.approx(100_000)


def test_sim_clock_moves_the_load_with_the_simulated_windows():
    host = make_host(
        "sim", seed=2, load_schedule={"shape": "steps", "levels": [100_000, 500_000], "step_s": 30, "clock": "sim"}
    )
    host.set_itr(100)
    host.set_dvfs(2.0)
    loads = [host.measure(10.0).offered_qps for _ in range(6)]  # windows start at 0, 10, ..., 50 s
    assert [round(q, -5) for q in loads] == [100_000, 100_000, 100_000, 500_000, 500_000, 500_000]
    assert host.offered_qps() == pytest.approx(100_000, rel=0.02)  # 60 s: the cycle starts again


def test_wall_clock_follows_real_time(monkeypatch):
    now = [1000.0]
    monkeypatch.setattr(sim_host.time, "monotonic", lambda: now[0])
    host = make_host("sim", load_schedule={"shape": "sine", "low": 100_000, "high": 300_000, "period_s": 100})
    assert host.offered_qps() == pytest.approx(100_000, rel=0.02)
    now[0] += 50.0
    assert host.offered_qps() == pytest.approx(300_000, rel=0.02)
    host.set_itr(100)
    host.set_dvfs(2.0)
    assert host.measure(1.0).offered_qps == pytest.approx(300_000, rel=0.1)


def test_trace_file_becomes_a_scaled_series_of_bins():
    host = make_host(
        "sim", load_schedule={"shape": "trace", "bin_s": 300, "hours": 2, "time_scale": 300, "clock": "sim"}
    )
    load = host.load_schedule
    assert isinstance(load, LoadSchedule) and load.shape == "series"
    assert len(load.levels) == 24 and load.step_s == 300
    assert max(load.levels) == pytest.approx(600_000)  # scaled like `tuner replay` (busiest bin = 600K)
    assert load.source.endswith(".csv.zst")
    assert math.isclose(load.span_s, 24.0)  # 2 h of trace in 24 s of clock


@pytest.mark.parametrize(
    "load,message",
    [
        ("fast", "sim: load_schedule 'fast': expected a table"),
        ({"shape": "square"}, "sim: load_schedule.shape 'square': expected one of steps, sine, series, trace"),
        ({"shape": "steps", "levels": [], "step_s": 5}, "sim: load_schedule.levels []: expected a non-empty list"),
        (
            {"shape": "steps", "levels": [1e5, -1], "step_s": 5},
            "sim: load_schedule.levels[1] -1: expected a finite number >= 0",
        ),
        ({"shape": "steps", "levels": [1e5], "step_s": 0}, "sim: load_schedule.step_s 0: expected a finite number > 0"),
        ({"shape": "steps", "levels": [1e5]}, "sim: load_schedule (steps): missing step_s"),
        (
            {"shape": "sine", "low": 2, "high": 1, "period_s": 9},
            "sim: load_schedule.high 1 is below load_schedule.low 2",
        ),
        (
            {"shape": "sine", "low": 1, "high": 2, "period_s": 9, "step_s": 1},
            "sim: load_schedule (sine): unknown key(s) step_s",
        ),
        (
            {"shape": "sine", "low": 1, "high": 2, "period_s": 9, "clock": "cpu"},
            "sim: load_schedule.clock 'cpu': expected",
        ),
        ({"shape": "sine", "low": 1, "high": 2, "period_s": 9, "time_scale": "x"}, "sim: load_schedule.time_scale 'x'"),
        (
            {"shape": "trace", "path": "/no/such/trace.csv"},
            "sim: load_schedule.path: /no/such/trace.csv: cannot read trace",
        ),
        ({"shape": "trace", "bin_s": -1}, "sim: load_schedule.bin_s -1: expected a finite number >= 0"),
        ({"shape": "trace", "speed": 2}, "sim: load_schedule (trace): unknown key(s) speed"),
    ],
)
def test_bad_load_options_are_one_line_errors(load, message):
    with pytest.raises(TunerError) as err:
        make_host("sim", load_schedule=load)
    assert message in str(err.value) and "\n" not in str(err.value)


def test_a_scheduled_host_refuses_a_fixed_load_and_qps_with_load():
    host = make_host("sim", load_schedule={"shape": "steps", "levels": [1e5], "step_s": 5})
    with pytest.raises(TunerError, match="follows the host's load_schedule"):
        host.set_offered_qps(200_000)
    with pytest.raises(TunerError, match="give qps .* or load_schedule"):
        make_host("sim", qps=1e5, load_schedule={"shape": "steps", "levels": [1e5], "step_s": 5})


def test_command_line_load_is_a_toml_inline_table():
    assert parse_load_option('{shape="sine", low=1, high=2, period_s=3}') == {
        "shape": "sine",
        "low": 1,
        "high": 2,
        "period_s": 3,
    }
    with pytest.raises(TunerError, match=r"--load-schedule 'steps': expected a TOML inline table"):
        parse_load_option("steps")


def test_sweep_records_the_moving_load_each_point_ran_at(tmp_path):
    import json

    from tuner.cli.app import main

    load = '{shape="steps", levels=[100000, 400000], step_s=5, clock="sim"}'
    argv = ["sweep", "--itr", "100,200", "--dvfs", "2.0", "--seconds", "5", "--settle", "0", "--out", str(tmp_path)]
    assert main([*argv, "--load-schedule", load]) == 0
    rows = [json.loads(line) for line in (tmp_path / "points.jsonl").read_text().splitlines()]
    assert sorted(round(r["qps"], -5) for r in rows) == [100_000, 400_000]
    assert json.loads((tmp_path / "sweep.json").read_text())["load_schedule"] == load
    assert main([*argv[:-1], str(tmp_path / "b"), "--load-schedule", load, "--qps", "1e5"]) == 2


def test_a_moving_load_point_measures_at_its_start_load():
    host = make_host(
        "sim", seed=4, load_schedule={"shape": "steps", "levels": [100_000, 600_000], "step_s": 20, "clock": "sim"}
    )
    host.set_itr(200)
    host.set_dvfs(1.6)
    low, high = host.measure(20.0), host.measure(20.0)
    assert high.energy_j > low.energy_j * 1.5  # the second window ran at 600K
    assert host.point() == OperatingPoint(200, 1.6)
