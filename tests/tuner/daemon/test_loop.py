"""The daemon's control loop, in process (fake host and light optimiser, 50 ms windows)."""

from __future__ import annotations

import json
import os
import threading

import pytest

from actuators.host import OperatingPoint
from core.errors import InputError, TunerError
from tests.daemon_fakes import Running, make_file_host, read_state, wait_for, write_config
from tuner.config import KnobBounds
from tuner.daemon.plain import bounded_space, safe_corner, validate_policy
from tuner.daemon.state import DaemonState, StateStore, atomic_write


def _state(tmp_path):
    return read_state(tmp_path)


def _knobs(tmp_path):
    return json.loads((tmp_path / "knobs.json").read_text())


def test_first_retune_persists_every_trial_and_decision_then_stop_restores(tmp_path):
    cfg = write_config(tmp_path, sla_us=900.0)
    with Running(cfg, serve=False) as r:
        wait_for(lambda: r.daemon.status().state == "holding")
        st = _state(tmp_path)
        assert [t["index"] for t in st["trials"]] == [0, 1, 2, 3]
        assert all(t["measurement"]["latency_us"]["99"] > 0 for t in st["trials"])
        assert st["held"]["reason"] == "startup" and st["current_retune"] is None
        assert (tmp_path / "state" / "experiments" / f"{st['held']['retune_id']}.json").is_file()
        held = OperatingPoint(*st["held"]["point"])
        assert r.host.point() == held and _knobs(tmp_path)["itr"] == held.itr_us
        assert st["knobs_dirty"] is True
        assert r.stop() == 0
    k = _knobs(tmp_path)
    assert (k["itr"], k["dvfs"], k["originals"]) == ("adaptive", "schedutil", None)
    assert _state(tmp_path)["knobs_dirty"] is False


def test_guardrail_reverts_within_one_window_when_load_jumps(tmp_path):
    # a high SLA makes the first decision a slow (cheap) point; then the load triples
    cfg = write_config(tmp_path, sla_us=2000.0, window_s=0.05)
    with Running(cfg, serve=False) as r:
        wait_for(lambda: r.daemon.status().state == "holding")
        before = r.host.point()
        windows = r.host.measure_count
        r.host.set_offered_qps(900_000.0)
        wait_for(lambda: r.daemon.status().guardrail_reverts_total >= 1, timeout=5)
        # the revert happened at the end of the first window measured at the new load
        assert r.host.measure_count - windows <= 2
        st = _state(tmp_path)
        revert = [d for d in st["decisions"] if d["reason"] == "guardrail"][0]
        assert revert["qps"] == 900_000.0
        assert OperatingPoint(*revert["point"]) != before
        # nothing was measured good at >= 900k QPS, so it fell back to the safe corner
        assert OperatingPoint(*revert["point"]) == safe_corner(r.daemon.space)
        assert r.daemon.metrics.reverts._value.get() >= 1
        # and the load trigger starts a retune for the new band
        wait_for(lambda: st_reason(tmp_path, "load"), timeout=5)


def st_reason(tmp_path, reason):
    return any(d["reason"] == reason for d in _state(tmp_path)["decisions"])


def test_fallback_prefers_last_point_known_good_at_this_load(tmp_path):
    cfg = write_config(tmp_path, sla_us=2000.0)
    with Running(cfg, serve=False) as r:
        wait_for(lambda: r.daemon.status().state == "holding")
        good = OperatingPoint(100, 2.9)
        m = r.daemon.state.windows
        m.append(
            {
                "point": good,
                "qps": 300_000.0,
                "measurement": {"latency_us": {"99": 400.0}, "offered_qps": 300_000.0},
                "time": 4e9,
            }
        )
        assert r.daemon.guardrail.fallback_point(250_000.0, exclude=None)[0] == good
        # not good enough for a higher load, nor when it is the point that just failed
        assert r.daemon.guardrail.fallback_point(400_000.0, exclude=None)[0] == safe_corner(r.daemon.space)
        assert r.daemon.guardrail.fallback_point(250_000.0, exclude=good)[0] != good


def test_load_change_triggers_retune_but_small_drift_does_not(tmp_path):
    cfg = write_config(tmp_path, sla_us=5000.0)
    with Running(cfg, serve=False) as r:
        wait_for(lambda: r.daemon.status().state == "holding")
        r.host.set_offered_qps(110_000.0)  # +10 % < 20 % band
        n = r.host.measure_count
        wait_for(lambda: r.host.measure_count >= n + 5)
        assert r.daemon.status().state == "holding" and not st_reason(tmp_path, "load")
        r.host.set_offered_qps(50_000.0)  # -50 %
        wait_for(lambda: st_reason(tmp_path, "load"), timeout=5)
        assert r.daemon.status().tuned_qps == pytest.approx(50_000.0)
        assert r.daemon.metrics.retunes.labels(reason="load")._value.get() == 1


def test_retune_request_and_schedule(tmp_path):
    cfg = write_config(tmp_path, sla_us=5000.0, period_s=1.0)
    with Running(cfg, serve=False) as r:
        wait_for(lambda: r.daemon.status().state == "holding")
        ok, _ = r.daemon.request_retune("rpc")
        assert ok
        wait_for(lambda: st_reason(tmp_path, "rpc"), timeout=5)
        wait_for(lambda: st_reason(tmp_path, "schedule"), timeout=5)


def test_sighup_reload_keeps_old_config_when_invalid_and_applies_valid(tmp_path, caplog):
    cfg = write_config(tmp_path, sla_us=5000.0)
    with Running(cfg, serve=False) as r:
        wait_for(lambda: r.daemon.status().state == "holding")
        good = cfg.read_text()
        cfg.write_text(good.replace("sla_us = 5000.0", "sla_us = -1").replace("trials = 4", 'trials = "x"'))
        with caplog.at_level("ERROR", logger="tuner.daemon.loop"):
            r.daemon.request_reload()
            wait_for(lambda: sum("reload rejected" in m for m in caplog.messages) >= 2)
        assert r.daemon.policy().sla_us == 5000.0
        assert any("tuner.toml:7: policy.sla_us: expected a value > 0, got -1" in m for m in caplog.messages)
        assert any("tuner.toml:10: tuning.trials: expected an integer" in m for m in caplog.messages)
        cfg.write_text(good.replace("sla_us = 5000.0", "sla_us = 3000.0"))
        r.daemon.request_reload()
        wait_for(lambda: st_reason(tmp_path, "config"), timeout=5)
        assert r.daemon.policy().sla_us == 3000.0


def test_set_policy_validates_and_retunes(tmp_path):
    cfg = write_config(tmp_path, sla_us=5000.0)
    with Running(cfg, serve=False) as r:
        wait_for(lambda: r.daemon.status().state == "holding")
        for bad in ({"sla_us": float("nan")}, {"sla_us": -3.0}, {"percentile": 42.0}, {"reward": "money"}):
            with pytest.raises(InputError):
                r.daemon.set_policy(bad.get("sla_us"), bad.get("percentile"), bad.get("reward"))
        p = r.daemon.set_policy(800.0, 99.9, None)
        assert (p.sla_us, p.percentile) == (800.0, 99.9)
        wait_for(lambda: st_reason(tmp_path, "policy"), timeout=5)
        assert _state(tmp_path)["policy_override"]["sla_us"] == 800.0


def test_stop_mid_retune_abandons_trial_and_restart_resumes_without_loss(tmp_path):
    cfg = write_config(tmp_path, trials=30, sobol=2, window_s=0.05)
    r = Running(cfg, serve=False)
    wait_for(lambda: len(_state(tmp_path).get("trials", [])) >= 3)
    assert r.stop() == 0
    st = _state(tmp_path)
    done = [t["index"] for t in st["trials"]]
    assert st["current_retune"] is not None and len(json.loads(st["current_retune"]["optimizer"])["rows"]) == len(done)
    assert _knobs(tmp_path)["originals"] is None  # restored
    r2 = Running(cfg, serve=False)
    try:
        wait_for(lambda: len(_state(tmp_path)["trials"]) >= len(done) + 2)
        st2 = _state(tmp_path)
        assert [t["index"] for t in st2["trials"]][: len(done)] == done  # nothing lost, no index reused
        assert st2["current_retune"]["id"] == st["current_retune"]["id"]
        assert r2.optimizers.loaded == 1 and r2.optimizers.created == 0
    finally:
        r2.stop()


def test_restart_undoes_dead_runs_knob_writes_first(tmp_path):
    cfg = write_config(tmp_path)
    host = make_file_host(str(tmp_path / "knobs.json"))
    host.set_itr(300)  # a "previous run" wrote the knobs and died
    store = StateStore(tmp_path / "state")
    store.ensure()
    store.save(DaemonState(knobs_dirty=True))
    store.release()
    order: list[str] = []
    h2 = make_file_host(str(tmp_path / "knobs.json"))
    orig_restore, orig_set = h2.restore, h2.set_itr
    h2.restore = lambda: (order.append("restore"), orig_restore())[1]
    h2.set_itr = lambda v: (order.append("set_itr"), orig_set(v))[1]
    with Running(cfg, host=h2, serve=False) as r:
        wait_for(lambda: "set_itr" in order)
        assert order[0] == "restore"
        r.stop()


def test_atomic_write_never_leaves_partial_file(tmp_path):
    p = tmp_path / "s.json"
    atomic_write(p, b"old")

    class Boom(bytes):
        pass

    with pytest.raises(TypeError):
        atomic_write(p, None)  # type: ignore[arg-type]  # fails mid-write
    assert p.read_bytes() == b"old"
    assert [x.name for x in tmp_path.iterdir()] == ["s.json"]


def test_corrupt_state_is_a_clear_error(tmp_path):
    (tmp_path / "state.json").write_text("{not json")
    with pytest.raises(TunerError, match="corrupt state"):
        StateStore(tmp_path).load()


def test_bounds_and_policy_helpers():
    from tests.fakes import FakeHost

    space = FakeHost().knobs()
    b = bounded_space(space, KnobBounds(itr_us=(10, 20), dvfs_ghz=(2.0, 2.5)))
    assert b.itr_us == (10, 12, 14, 16, 18, 20) and b.dvfs_ghz == (2.0, 2.1, 2.2, 2.3, 2.4, 2.5)
    with pytest.raises(TunerError, match="knobs.itr_us"):
        bounded_space(space, KnobBounds(itr_us=(5000, 6000)))
    assert validate_policy(500, 99, "constrained").percentile == 99.0
    with pytest.raises(InputError, match="percentile"):
        validate_policy(500, True, "constrained")


def test_sdnotify_sends_ready_and_watchdog_to_abstract_socket():
    import socket

    from tuner.daemon.sdnotify import Notifier

    name = f"tuner-test-{os.getpid()}-{threading.get_ident()}"
    with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM) as srv:
        srv.bind("\0" + name)
        srv.settimeout(2)
        n = Notifier({"NOTIFY_SOCKET": "@" + name, "WATCHDOG_USEC": "2000000", "WATCHDOG_PID": str(os.getpid())})
        assert n.enabled and n.watchdog_s == 2.0
        assert n.ready("ok") and n.watchdog() and n.stopping()
        assert srv.recv(100) == b"READY=1\nSTATUS=ok"
        assert srv.recv(100) == b"WATCHDOG=1"
        assert srv.recv(100) == b"STOPPING=1"
    off = Notifier({})
    assert not off.enabled and off.ready() is False and off.watchdog_s is None
    assert Notifier({"NOTIFY_SOCKET": "@x", "WATCHDOG_USEC": "5", "WATCHDOG_PID": "1"}).watchdog_s is None


def test_stop_interrupts_the_window_in_flight_and_abandons_its_trial(tmp_path):
    from tests.daemon_fakes import BlockingHost

    cfg = write_config(tmp_path, trials=10, window_s=0.05)
    host = BlockingHost(block_from=3)
    r = Running(cfg, host=host, serve=False)
    assert host.blocking.wait(10)  # the 3rd trial is measuring
    import time as _t

    t0 = _t.monotonic()
    assert r.stop() == 0
    assert _t.monotonic() - t0 < 5 and host.interrupts == 1
    st = _state(tmp_path)
    assert [t["status"] for t in st["trials"]] == ["completed", "completed"]  # not reported as failed
    assert host.point() is None and host.restore_count >= 2  # restored on the way out
    assert r.daemon.metrics.trials.labels(status="abandoned")._value.get() == 1


def test_second_daemon_on_same_state_dir_or_socket_is_refused(tmp_path):
    from tests.daemon_fakes import FakeOptimizers
    from tuner.config import load_config
    from tuner.daemon.loop import Daemon

    cfg = write_config(tmp_path, sla_us=5000.0)
    with Running(cfg) as r:
        wait_for(lambda: r.daemon.status().state != "starting")
        with pytest.raises(TunerError, match="in use by another tuner daemon"):
            Daemon(load_config(cfg), optimizers=FakeOptimizers()).start()
        other = tmp_path / "other"
        other.mkdir()
        text = cfg.read_text().replace('dir = "state"', 'dir = "other/state"')
        (other / "tuner.toml").write_text(text)
        d = Daemon(load_config(other / "tuner.toml"), optimizers=FakeOptimizers())
        with pytest.raises(TunerError, match="is in use by a running process"):
            d.start()
        d._shutdown()
        assert r.daemon.status().state in ("retuning", "holding")  # the first one is unharmed


def test_host_bug_in_a_trial_fails_the_trial_not_the_daemon(tmp_path):
    from tests.fakes import FailingHost

    host = FailingHost(fail_at=2, exc=ZeroDivisionError("division by zero in the host"))
    with Running(write_config(tmp_path, sla_us=5000.0), host=host, serve=False) as r:
        wait_for(lambda: r.daemon.status().state == "holding")
        st = _state(tmp_path)
        assert [t["status"] for t in st["trials"]] == ["completed", "failed", "completed", "completed"]
        assert st["trials"][1]["error"] == "ZeroDivisionError: division by zero in the host"
        assert r.thread.is_alive()


def test_operating_point_counts_every_window_not_only_good_ones(tmp_path):
    cfg = write_config(tmp_path, sla_us=2000.0)
    with Running(cfg, serve=False) as r:
        wait_for(lambda: r.daemon.status().state == "holding")
        r.stop()

        def win(point, lat, power):
            return {
                "point": OperatingPoint(*point),
                "qps": 300_000.0,
                "time": 1.0,
                "measurement": {
                    "offered_qps": 300_000.0,
                    "power_w": power,
                    "latency_us": {"99": lat},
                    "latency_ci_us": {"99": [lat * 0.99, lat * 1.01]},
                },
            }

        flaky, steady = (100, 1.2), (50, 2.9)
        r.daemon.state.windows[:] = [win(flaky, lat, 10.0) for lat in (400, 800) * 5] + [
            win(steady, 500, 30.0) for _ in range(10)
        ]
        a = r.daemon.operating_point(300_000.0, sla_us=700.0, percentile=99)
        # the flaky point meets 700 µs in half its windows (mean 600 µs): its upper bound does not
        assert (a.point.itr_us, a.point.dvfs_ghz) == steady and a.from_measured
        assert a.latency_us == 500 and a.power_w == 30.0 and a.source == "10 measured window(s)"
        assert r.daemon.operating_point(300_000.0, sla_us=1000.0, percentile=99).point.itr_us == 100


from hypothesis import given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

_ANY = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(),
    st.floats(allow_nan=True, allow_infinity=True),
    st.text(max_size=20),
    st.lists(st.integers(), max_size=2),
)


@settings(max_examples=300, deadline=None)
@given(sla=_ANY, pct=_ANY, reward=_ANY)
def test_fuzz_validate_policy_only_raises_input_error(sla, pct, reward):
    try:
        p = validate_policy(sla, pct, reward)
    except InputError as exc:
        assert "\n" not in str(exc) and str(exc).split(":")[0] in ("sla_us", "percentile", "reward")
    else:
        assert 0 < p.sla_us <= 1e9 and p.percentile in (50.0, 90.0, 95.0, 99.0, 99.9) and isinstance(p.reward, str)


def test_file_host_fake_survives_two_writers_at_once(tmp_path):
    # two daemons in one test share the fake's knob file (the second-daemon refusal test): their writes
    # must neither rename each other's temp file away nor lose an update
    import threading

    from tests.daemon_fakes import FileHost, read_knobs

    hosts = [FileHost(knob_file=str(tmp_path / "knobs.json")) for _ in range(2)]
    itrs = hosts[0].knobs().itr_us[:50]
    errors: list[BaseException] = []

    def hammer(h: FileHost) -> None:
        try:
            for itr in itrs:
                h.set_itr(itr)
        except BaseException as exc:  # noqa: BLE001 - reported by the assertion below
            errors.append(exc)

    threads = [threading.Thread(target=hammer, args=(h,)) for h in hosts]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    assert read_knobs(tmp_path)["writes"] == 2 * len(itrs)


class _MovedRetune:
    """A retune whose load moved from `first` to `last` QPS; its best point met the SLA at `first`."""

    def __init__(self, measurement, first: float, last: float) -> None:
        from types import SimpleNamespace

        self.measurement = measurement
        self._trials = [SimpleNamespace(qps=q, status="completed") for q in (first, last, last)]

    def best(self):
        from tuner.optimize.decision import Decision

        return Decision(self.measurement.point, self.measurement, True, "best measured point meeting the SLA")

    def retune_trials(self):
        return self._trials

    def to_json(self) -> str:
        return "{}"

    def predict(self, points):
        raise RuntimeError("no model in this stub")


@pytest.mark.parametrize("last_qps,moved", [(600_000.0, True), (110_000.0, False), (60_000.0, False)])
def test_a_point_met_at_a_load_the_retune_left_is_not_held(tmp_path, last_qps, moved):
    # the load moved 100K -> 600K during a retune and the only point that met the SLA was measured at 100K:
    # holding it at 600K broke the SLA by 40x until the guardrail reverted; the daemon holds the safe corner
    # and retunes at once instead (a drift within the load band keeps the decision, and so does a fall: a point
    # that met the SLA at a higher load vouches for a lower one)
    from tests.daemon_fakes import FakeOptimizers
    from tuner.config import load_config
    from tuner.daemon.loop import Daemon

    d = Daemon(load_config(write_config(tmp_path, sla_us=5000.0)), optimizers=FakeOptimizers(), serve=False)
    d.start()
    try:
        chosen = OperatingPoint(d.space.itr_us[-1], d.space.dvfs_ghz[0])
        d.host.set_itr(chosen.itr_us)
        d.host.set_dvfs(chosen.dvfs_ghz)
        m = d.host.measure(0.05)
        d.retune_driver.decide(_MovedRetune(m, m.offered_qps, last_qps), "r000042", "load")
        held = d.state.held
        if moved:
            corner = safe_corner(d.space)
            assert held["point"] == corner and held["met_sla"] is False
            assert "load moved during the retune" in held["detail"]
            assert d.state.tuned_qps == last_qps and d.ctx.requests.load is True
        else:
            assert held["point"] == chosen and held["met_sla"] is True
            assert d.ctx.requests.load is False
    finally:
        d._shutdown()


def test_a_daemon_refused_for_a_busy_grpc_address_never_touches_its_host(tmp_path):
    """A second daemon (own state dir, the first one's socket) is refused before it restores or writes any
    knob: on a real host both would share the saved originals, and a restore would undo the first one's point."""
    from tests.daemon_fakes import FakeOptimizers
    from tuner.config import load_config
    from tuner.daemon.loop import Daemon

    class SpyHost:
        def __getattr__(self, name):
            raise AssertionError(f"the refused daemon used its host: {name}")

    cfg = write_config(tmp_path, sla_us=5000.0)
    with Running(cfg) as r:
        wait_for(lambda: r.daemon.status().state != "starting")
        other = tmp_path / "other"
        other.mkdir()
        (other / "tuner.toml").write_text(cfg.read_text().replace('dir = "state"', 'dir = "other/state"'))
        d = Daemon(load_config(other / "tuner.toml"), host=SpyHost(), optimizers=FakeOptimizers())  # type: ignore[arg-type]
        with pytest.raises(TunerError, match="is in use by a running process"):
            d.start()
        d.ctx.host = None
        d._shutdown()
        assert r.daemon.status().state in ("retuning", "holding")


def test_a_tcp_grpc_address_in_use_is_refused_before_the_host(tmp_path):
    import socket

    from tuner.daemon.service import check_listen_free

    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen(1)
        port = busy.getsockname()[1]
        with pytest.raises(TunerError, match=f"grpc.listen: 127.0.0.1:{port} is in use"):
            check_listen_free(f"127.0.0.1:{port}")
    check_listen_free(f"127.0.0.1:{port}")  # free again: no error
