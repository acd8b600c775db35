"""Load control for a testbed: a generator process per load level (tuner load or any command template)."""

from __future__ import annotations

import sys
import time

import pytest

from actuators.loadctl import CommandLoad, LoadedHost
from actuators.qps import qps_source_from_spec
from core.errors import HostError
from tuner.hosts import load_controller, make_host


def _wait_for(pred, timeout_s: float = 20.0) -> bool:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if pred():
            return True
        time.sleep(0.05)  # poll interval of a deadline loop, not synchronisation
    return False


def test_template_fields_and_restart(tmp_path) -> None:
    out = tmp_path / "args"
    script = f"import sys,time; open({str(out)!r},'a').write(' '.join(sys.argv[1:])+'\\n'); time.sleep(60)"
    load = CommandLoad(f'{sys.executable} -c "{script}" {{qps}} {{seconds}} {{server}}', server="h:1", seconds=30)
    try:
        load.set_offered_qps(1234.4)
        assert _wait_for(lambda: out.exists() and out.read_text().count("\n") == 1)
        first = load._proc
        load.set_offered_qps(99)
        assert first is not None and first.poll() is not None  # the previous run was stopped
        assert _wait_for(lambda: out.read_text().count("\n") == 2)
        assert out.read_text().splitlines() == ["1234 30 h:1", "99 30 h:1"]
        load.set_offered_qps(0)
        assert not load.running()
    finally:
        load.stop()


def test_a_failing_generator_is_one_line(tmp_path) -> None:
    load = CommandLoad(f"{sys.executable} -c \"import sys; sys.exit('mutilate: cannot reach {{server}}')\" {{qps}}")
    load.set_offered_qps(10)
    assert _wait_for(lambda: not load.running())
    with pytest.raises(HostError, match=r"exited with status 1: mutilate: cannot reach 127.0.0.1:11211"):
        load.check()
    with pytest.raises(HostError, match="placeholder"):
        CommandLoad("mutilate -t {seconds}")
    with pytest.raises(HostError, match="cannot start"):
        CommandLoad("/nonexistent/gen {qps}").set_offered_qps(5)


def test_make_host_wraps_any_host_with_load_control(tmp_path) -> None:
    out = tmp_path / "q"
    load = CommandLoad(f"{sys.executable} -c \"open({str(out)!r},'w').write('{{qps}}')\" {{qps}}")
    host = make_host("sim", seed=1, load=load)
    assert isinstance(host, LoadedHost) and host.knobs().itr_us  # the wrapped host's knobs
    host.set_offered_qps(321)
    assert _wait_for(lambda: out.exists() and out.read_text() == "321")
    host.close()


def test_tuner_load_drives_memcached_at_the_asked_rate(memcached) -> None:
    load = load_controller("tuner", server=memcached.address, seconds=30)
    source = qps_source_from_spec(f"memcached:{memcached.address}")
    try:
        load.set_offered_qps(2000)
        assert _wait_for(lambda: source.total_requests() > 10_000 + 1_000, timeout_s=30)  # after the 10k-key warm-up
        t0, n0 = time.monotonic(), source.total_requests()
        assert _wait_for(lambda: time.monotonic() - t0 >= 2.0)
        rate = (source.total_requests() - n0) / (time.monotonic() - t0)
        assert 1700 < rate < 2300, rate
        load.check()
    finally:
        load.stop()
    assert not load.running()


def test_sweep_drives_the_load_through_the_command_and_stops_it(tmp_path, capsys, monkeypatch) -> None:
    import tuner.hosts
    from tuner.cli.app import main

    made: list[CommandLoad] = []
    real = tuner.hosts.load_controller
    monkeypatch.setattr(tuner.hosts, "load_controller", lambda *a, **k: made.append(real(*a, **k)) or made[-1])
    template = f'{sys.executable} -c "import time; time.sleep(60)" {{qps}} {{server}}'
    rc = main(
        [
            "sweep",
            "--host",
            "tests.fakes:make_fake_host",
            "--qps",
            "1500",
            "--itr",
            "100,200",
            "--dvfs",
            "2.0",
            "--seconds",
            "1",
            "--settle",
            "0",
            "--load-command",
            template,
            "--load-server",
            "h:1",
            "--out",
            str(tmp_path / "sw"),
        ]
    )
    assert rc == 0, capsys.readouterr().err
    assert len(made) == 1 and made[0].qps == 1500 and made[0].argv(1500)[-2:] == ["1500", "h:1"]
    assert not made[0].running()  # stopped when the sweep ended
    assert (
        main(
            [
                "sweep",
                "--host",
                "sim",
                "--qps",
                "10",
                "--load-command",
                "gen -t {seconds}",
                "--out",
                str(tmp_path / "x"),
            ]
        )
        == 2
    )
    assert "placeholder" in capsys.readouterr().err
