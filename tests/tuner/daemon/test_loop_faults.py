"""Faults at run time: a permanent one (the errno says a retry cannot help) stops tuning once -- the OS's
settings back, the reason in the log, GetStatus, a metric and systemd's STATUS= -- instead of a retry loop; and
the loop keeps measuring with the guardrail on while an optimiser worker starts (Ax takes seconds to import)."""

from __future__ import annotations

import errno
import logging
import queue
import threading
from typing import Any

import pytest

from actuators.linux import hwio, msr
from core.errors import HostError, is_permanent
from tests import fakefs
from tests.daemon_fakes import FakeOptimizers, registry_samples, wait_for, write_config
from tests.fakes import FakeHost
from tuner.config import load_config
from tuner.daemon.loop import Daemon
from tuner.daemon.plain import safe_corner
from tuner.daemon.sdnotify import Notifier


class RecordingNotifier(Notifier):
    """sd_notify messages kept in a list; `degraded` is set by the first `STATUS=degraded: ...`."""

    def __init__(self) -> None:
        super().__init__(environ={})
        self.sent: list[str] = []
        self.degraded = threading.Event()

    def notify(self, message: str) -> bool:
        self.sent.append(message)
        if message.startswith("STATUS=degraded"):
            self.degraded.set()
        return True


class LosesCoalescing(FakeHost):
    """Its NIC loses interrupt coalescing after `ok_writes` ITR writes (EOPNOTSUPP from then on)."""

    def __init__(self, ok_writes: int) -> None:
        super().__init__(qps=50_000.0)
        self.ok_writes = ok_writes
        self.itr_attempts = 0

    def set_itr(self, itr_us: int) -> None:
        self.itr_attempts += 1
        if self.itr_attempts > self.ok_writes:
            raise HostError(
                "NIC eth1 (driver ixgbe) does not support interrupt coalescing (EOPNOTSUPP)", permanent=True
            )
        super().set_itr(itr_us)


def _daemon(tmp_path, host, optimizers=None, notifier=None, **kw) -> Daemon:
    cfg = load_config(write_config(tmp_path, **kw))
    d = Daemon(cfg, host=host, optimizers=optimizers or FakeOptimizers(), notifier=notifier, serve=False)
    d.start()
    return d


def _run(d: Daemon) -> tuple[threading.Thread, list[int]]:
    result: list[int] = []
    t = threading.Thread(target=lambda: result.append(d.run()), daemon=True)
    t.start()
    return t, result


# ------------------------------------------------------------------------------------------ permanent faults


def test_a_permanent_fault_in_a_trial_restores_the_os_settings_and_stops_retuning(tmp_path, caplog):
    """Seen on a VM: a NIC without coalescing made every retune fail and be retried forever. A permanent fault
    at run time now ends tuning once: knobs restored, no retry, no new worker, the reason everywhere."""
    host = LosesCoalescing(ok_writes=1)  # the first trial's write works, the second's finds no coalescing
    notifier = RecordingNotifier()
    d = _daemon(tmp_path, host, notifier=notifier, trials=4, window_s=0.02)
    with caplog.at_level(logging.WARNING, logger="tuner.daemon.loop"):
        thread, result = _run(d)
        assert notifier.degraded.wait(10), "the daemon did not say it is degraded"
        s = d.status()
        assert host.point() is None and host.restore_count >= 2  # start + the fault: the OS's settings are back
        attempts, measured = host.itr_attempts, host.measure_count
        wait_for(lambda: host.measure_count >= measured + 3)  # still measuring, at the OS's settings
        metrics = registry_samples(d.metrics.registry)
        accepted, why = d.request_retune("rpc")
        d.request_stop()
        thread.join(10)
    assert result == [0]
    assert s.state == "degraded" and s.point is None
    assert any("permanent host fault" in w and "EOPNOTSUPP" in w for w in s.warnings)
    assert host.itr_attempts == attempts == 2  # never retried
    assert d.optimizers.created == 1 and d.optimizers.loaded == 0  # no worker per retry
    assert [t["status"] for t in d.state.trials] == ["completed"]  # the fault is not the point's: no failed trial
    assert not accepted and "permanent host fault" in why
    assert metrics[("tuner_degraded", ())] == 1
    assert metrics[("tuner_host_warnings", (("source", "fault"),))] == 1
    assert metrics[("tuner_loop_state", (("tuner_loop_state", "degraded"),))] == 1
    assert any(m.startswith("STATUS=degraded: tuning stopped on a permanent host fault") for m in notifier.sent)
    errors = [r.getMessage() for r in caplog.records if r.levelno >= logging.ERROR]
    assert len(errors) == 1 and "permanent host fault" in errors[0]  # said once, not per window
    assert not any("retrying" in r.getMessage() for r in caplog.records)


class GoneSensor(FakeHost):
    """Measures `ok` windows, then every measurement fails permanently (its counter file is gone)."""

    def __init__(self, ok: int) -> None:
        super().__init__(qps=50_000.0)
        self.ok = ok

    def measure(self, seconds: float) -> Any:
        if self.measure_count >= self.ok:
            self.measure_count += 1
            raise HostError("/sys/class/powercap/intel-rapl:0/energy_uj is missing", permanent=True)
        return super().measure(seconds)


def test_a_permanent_measurement_fault_while_holding_is_logged_once_and_not_retried(tmp_path, caplog):
    host = GoneSensor(ok=0)
    d = _daemon(tmp_path, host, window_s=0.02)
    d.ctx.wait = lambda seconds, interruptible: d.ctx.stop.is_set()  # no real waiting in this unit test
    with pytest.raises(HostError) as e:
        d.guardrail.hold_window()  # was: a warning, a window's wait, and the same again forever
    assert is_permanent(e.value)
    with caplog.at_level(logging.WARNING, logger="tuner.daemon.loop"):
        d._degrade(e.value)
        waits = []

        def wait(seconds: float, interruptible: bool) -> bool:
            waits.append(seconds)
            if len(waits) >= 5:
                d.ctx.stop.set()
            return d.ctx.stop.is_set()

        d.ctx.wait = wait
        d._degraded_loop()
    assert host.measure_count == 2  # the held window, then one try in the degraded loop: not retried
    assert len(waits) == 5 and d.status().state == "degraded"
    logged = [r.getMessage() for r in caplog.records]
    assert sum("not retried" in m for m in logged) == 1
    d._shutdown()


def test_a_transient_fault_is_not_permanent_and_keeps_the_backoff(tmp_path):
    """EBUSY from the NIC (another tool holds it) is retried with the capped back-off, never degraded."""
    from tests.fakes import FlakyHost

    host = FlakyHost()
    d = _daemon(tmp_path, host, trials=2, window_s=2.0, tuning="retry_max_s = 4")
    waits: list[float] = []
    d.ctx.wait = lambda seconds, interruptible: (waits.append(seconds) if interruptible else None) or False
    for _ in range(3):
        d.retune_driver.retune("startup" if d.state.current_retune is None else "resume")  # raises nothing: retried
    assert waits == [2.0, 4.0, 4.0] and d._fault is None and d.status().state != "degraded"
    d._shutdown()


@pytest.mark.parametrize(
    ("code", "permanent"),
    [
        (errno.EOPNOTSUPP, True),  # the driver has no coalescing
        (errno.EPERM, True),  # CAP_NET_ADMIN dropped
        (errno.ENODEV, True),  # the interface is gone
        (errno.EBUSY, False),
        (errno.EINVAL, False),  # one value refused: a failed trial, not the end of tuning
        (errno.EAGAIN, False),
    ],
)
def test_the_errno_decides_whether_an_itr_fault_is_permanent(tmp_path, code, permanent):
    nic = fakefs.FakeNic()
    nic.add("eth1")
    nic.fail_set["eth1"] = code
    io = hwio.HardwareIO(tmp_path, nic=nic)
    with pytest.raises(HostError) as e:
        io.apply(hwio.Setting(hwio.COALESCE, "eth1", {"rx_coalesce_usecs": 50}))
    assert is_permanent(e.value) is permanent


def test_a_cpufreq_file_that_disappears_is_permanent_and_a_refused_value_is_not(tmp_path):
    rel = "sys/devices/system/cpu/cpu0/cpufreq/scaling_setspeed"
    (tmp_path / rel).parent.mkdir(parents=True)
    io = hwio.HardwareIO(tmp_path)
    with pytest.raises(HostError) as e:
        io.apply(hwio.Setting(hwio.SYSFS, rel, "2000000"))  # the cpufreq directory has no such file (any more)
    assert is_permanent(e.value) and "is missing" in str(e.value)
    with pytest.raises(HostError) as e:
        io.read_text(rel)
    assert is_permanent(e.value)


@pytest.mark.parametrize(("code", "permanent"), [(errno.EIO, False), (errno.EPERM, True)])
def test_msr_write_faults_are_classified_by_errno(tmp_path, monkeypatch, code, permanent):
    fakefs.msr_files(tmp_path, 1)

    def refuse(fd: int, data: bytes, off: int) -> int:
        raise OSError(code, "refused")

    monkeypatch.setattr(msr, "_pwrite", refuse)
    with pytest.raises(HostError) as e:
        msr.write_msr(tmp_path, 0, 0x199, 20 << 8)
    assert is_permanent(e.value) is permanent
    with pytest.raises(HostError) as e:
        msr.read_msr(tmp_path, 3, 0x199)  # no such CPU: offline or gone
    assert is_permanent(e.value)


# ------------------------------------------------------------------------------------------ worker start


class SlowStart(FakeOptimizers):
    """`create` blocks until the test sets `release` (a worker importing Ax); `started` says it is blocking."""

    def __init__(self) -> None:
        super().__init__()
        self.started, self.release = threading.Event(), threading.Event()
        self.closed: list[Any] = []

    def create(self, *args: Any) -> Any:
        self.started.set()
        assert self.release.wait(30), "the test never released the worker"
        opt = super().create(*args)
        opt.close = lambda: self.closed.append(opt)  # type: ignore[attr-defined]
        return opt


def test_the_guardrail_acts_within_one_window_while_the_optimiser_worker_starts(tmp_path):
    """Starting a worker (spawn + import Ax, ~5 s) once blocked the control loop, so an SLA breach then went
    unanswered. The loop now keeps measuring while it starts, and reverts on the first window that breaks."""
    host = FakeHost(qps=100_000.0)  # at the OS's settings (ITR 50 µs, 2.9 GHz) p99 is well above a 60 µs SLA
    opts = SlowStart()
    d = _daemon(tmp_path, host, optimizers=opts, sla_us=60.0, window_s=0.02)
    decisions, _ = d.subscribe()
    thread, result = _run(d)
    try:
        assert opts.started.wait(10)
        revert = decisions.get(timeout=10)  # while create() is still blocked
        assert revert["reason"] == "guardrail" and not opts.release.is_set()
        assert revert["point"] == safe_corner(d.space) == host.point()
        first_write = next(i for i, c in enumerate(host.calls) if c[0] == "set_itr")
        assert [c[0] for c in host.calls[:first_write]].count("measure") == 1  # acted on within one window
        opts.release.set()
        while (decision := decisions.get(timeout=10))["reason"] == "guardrail":
            pass  # the safe corner may break the SLA too: "already at" is logged, nothing published
        assert decision["reason"] == "startup" and opts.created == 1  # then the retune ran as usual
    finally:
        opts.release.set()
        d.request_stop()
        thread.join(10)
    assert result == [0]


def test_a_stop_while_the_worker_starts_is_prompt_and_the_late_worker_is_closed(tmp_path):
    host = FakeHost(qps=100_000.0)
    opts = SlowStart()
    d = _daemon(tmp_path, host, optimizers=opts, window_s=0.02)
    thread, result = _run(d)
    assert opts.started.wait(10)
    d.request_stop()
    thread.join(10)
    assert not thread.is_alive() and result == [0] and host.point() is None
    opts.release.set()  # the worker comes up after the loop gave up on it
    wait_for(lambda: len(opts.closed) == 1)
    assert d.state.current_retune is None and d.state.trials == []


def test_a_config_error_exits_ex_config_naming_file_line_field(tmp_path):
    """`tuner daemon --check` and `tuner daemon` on a bad file: status 78 (EX_CONFIG, which the systemd unit
    does not restart on), one line naming file:line:field; an unknown option stays argparse's usage error (2)."""
    from core.errors import EXIT_CONFIG
    from tests.fuzzkit import run_cli

    cfg = tmp_path / "bad.toml"
    cfg.write_text("[policy]\nsla_us = 500\n[tuning]\n\nwindow_s = -1\n")
    for argv in (["daemon", "--check", "--config", str(cfg)], ["daemon", "--config", str(cfg)]):
        code, out, err = run_cli(argv)
        assert code == EXIT_CONFIG and out == ""
        assert err.startswith(f"tuner: error: {cfg}:5: tuning.window_s: ") and err.count("\n") == 1
    code, _, err = run_cli(["daemon", "--check", "--config", str(tmp_path / "missing.toml")])
    assert code == EXIT_CONFIG and "missing.toml" in err and "cannot read config" in err
    with pytest.raises(SystemExit) as e:
        run_cli(["daemon", "--no-such-option"])
    assert e.value.code == 2


def test_worker_start_keeps_the_queue_of_decisions_quiet_when_nothing_breaks(tmp_path):
    """With the SLA met, windows measured while the worker starts change nothing (no revert, no trigger)."""
    host = FakeHost(qps=100_000.0)
    opts = SlowStart()
    d = _daemon(tmp_path, host, optimizers=opts, sla_us=5000.0, window_s=0.02)
    decisions, _ = d.subscribe()
    thread, result = _run(d)
    try:
        assert opts.started.wait(10)
        wait_for(lambda: host.measure_count >= 3)  # windows go on while the worker starts
        with pytest.raises(queue.Empty):
            decisions.get_nowait()
        assert host.point() is None and not d.ctx.requests.load
        opts.release.set()
        assert decisions.get(timeout=10)["reason"] == "startup"
    finally:
        opts.release.set()
        d.request_stop()
        thread.join(10)
    assert result == [0]


def test_a_transient_fault_in_a_guardrail_revert_is_retried_next_window_not_a_crash(tmp_path):
    """EBUSY on the revert's write once propagated out of the loop (exit 1, a systemd restart)."""
    host = FakeHost(qps=100_000.0)
    d = _daemon(tmp_path, host, sla_us=60.0, window_s=0.02)  # every window breaks a 60 µs SLA here
    d.ctx.wait = lambda seconds, interruptible: False
    real_set_itr, busy = host.set_itr, [True]

    def set_itr(itr_us: int) -> None:
        if busy[0]:
            raise HostError("NIC eth1: EBUSY")
        real_set_itr(itr_us)

    host.set_itr = set_itr  # type: ignore[method-assign]
    d.guardrail.hold_window()  # the revert fails: logged, the loop goes on
    assert host.point() is None and d.state.counters.get("guardrail_reverts", 0) == 0
    busy[0] = False
    d.guardrail.hold_window()  # the next window's breach reverts
    assert host.point() == safe_corner(d.space) and d.state.counters["guardrail_reverts"] == 1
    d._shutdown()
