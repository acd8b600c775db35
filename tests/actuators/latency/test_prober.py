"""The open-loop prober: histogram CIs, client settings, windows against a real memcached, sample sizes."""

from __future__ import annotations

import json
import math
import os
import signal
import socket
import sys
import threading
import time

import numpy as np
import pytest

from actuators.host import PERCENTILES
from actuators.latency.prober import (
    ClientSettings,
    Prober,
    ProberConfig,
    ProbeWindow,
    histogram_quantiles,
    new_histogram,
    read_client_settings,
    record_ns,
)
from actuators.latency.sources import parse_hook_json
from actuators.qps import MemcachedStatsQps
from actuators.sensors import LatencySource
from core.errors import HostError
from core.stats import quantile_with_ci

WINDOW_S = 0.3


def _prober_threads() -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.name == "tuner-prober"]


@pytest.fixture(params=["process", "thread"])
def iso(request) -> str:
    """Prober isolation: a child interpreter (default) or an in-process thread."""
    return request.param


def _assert_stopped(prober: Prober) -> None:
    """No probe thread here, and no child process left (it exited, not merely orphaned)."""
    assert _prober_threads() == []
    assert prober._engine.__dict__.get("process") is None


# -- histogram path: CIs from order statistics ------------------------------------------------------
def test_histogram_ci_contains_the_sample_ci():
    # The histogram CI must contain the exact-sample CI (bucket edges only ever widen it).
    rng = np.random.default_rng(3)
    x = (rng.exponential(50_000, size=3000) + 10_000).astype(np.int64)  # ns
    hist = new_histogram()
    for v in x:
        record_ns(hist, int(v))
    n, values, cis = histogram_quantiles(hist, PERCENTILES, unit_per_value=1.0)
    assert n == 3000
    for pct in PERCENTILES:
        est, lo, hi = quantile_with_ci(x, pct / 100)
        hlo, hhi = cis[pct]
        assert hlo <= lo and hi <= hhi
        assert hhi <= hi * 1.001 and hlo >= lo * 0.999  # ...by at most one bucket (0.1 %)
        assert values[pct] == pytest.approx(est, rel=1e-3)
        assert hlo <= values[pct] <= hhi
    assert [values[p] for p in PERCENTILES] == sorted(values[p] for p in PERCENTILES)


@pytest.mark.parametrize("q,n", [(0.99, 1500), (0.5, 300)])
def test_histogram_ci_covers_true_quantile(q, n):
    # Exponential with mean 100 µs: the true quantile is -100 ln(1-q) µs; 95 % CIs must cover it
    # in >= ~92 % of 150 independent windows.
    rng = np.random.default_rng(17)
    truth_us = -100.0 * math.log(1 - q)
    covered, runs = 0, 150
    for _ in range(runs):
        hist = new_histogram()
        for v in rng.exponential(100_000, size=n):
            record_ns(hist, int(v))
        _, _, cis = histogram_quantiles(hist, [q * 100])
        lo, hi = cis[q * 100]
        covered += lo <= truth_us <= hi
    assert covered / runs >= 0.92


def test_histogram_empty_and_clamped():
    with pytest.raises(ValueError, match="empty"):
        histogram_quantiles(new_histogram())
    hist = new_histogram()
    record_ns(hist, 10**12)  # 1000 s: clamped to the 60 s ceiling rather than dropped
    record_ns(hist, 0)
    assert hist.get_total_count() == 2


# -- client settings (fake sysfs, read-only) --------------------------------------------------------
def _fake_cpu_tree(root, governor="powersave", c6_disabled=False):
    cpu = root / "sys/devices/system/cpu"
    for c in (0, 1):
        (cpu / f"cpu{c}/cpufreq").mkdir(parents=True)
        (cpu / f"cpu{c}/cpufreq/scaling_governor").write_text(governor + "\n")
        (cpu / f"cpu{c}/cpufreq/scaling_driver").write_text("intel_pstate\n")
        for i, (name, lat) in enumerate([("POLL", 0), ("C1", 2), ("C1E", 10), ("C6", 133)]):
            d = cpu / f"cpu{c}/cpuidle/state{i}"
            d.mkdir(parents=True)
            (d / "name").write_text(name + "\n")
            (d / "latency").write_text(f"{lat}\n")
            (d / "disable").write_text("1\n" if (name == "C6" and c6_disabled) else "0\n")
    (cpu / "cpuidle").mkdir()
    (cpu / "cpuidle/current_driver").write_text("intel_idle\n")
    (cpu / "cpuidle/current_governor_ro").write_text("menu\n")
    (cpu / "intel_pstate").mkdir()
    (cpu / "intel_pstate/no_turbo").write_text("0\n")
    (root / "proc").mkdir()
    (root / "proc/cmdline").write_text("ro quiet intel_idle.max_cstate=6 nohz=on root=/dev/sda1\n")


def test_client_settings_from_fake_sysfs(tmp_path):
    _fake_cpu_tree(tmp_path)
    s = read_client_settings(tmp_path, cpus=[0, 1])
    assert s.governors == {0: "powersave", 1: "powersave"}
    assert s.cpufreq_driver == "intel_pstate" and s.boost == "1"
    assert (s.idle_driver, s.idle_governor) == ("intel_idle", "menu")
    assert [st.name for st in s.idle_states] == ["POLL", "C1", "C1E", "C6"]
    assert s.cmdline_flags == ("intel_idle.max_cstate=6", "nohz=on")
    warns = s.warnings()
    assert any("powersave" in w for w in warns) and any("C6 (133 µs)" in w for w in warns)
    json.dumps(s.as_dict())  # doctor --json
    assert any("governor powersave" in line for line in s.lines())


def test_client_settings_tuned_has_no_warnings(tmp_path):
    _fake_cpu_tree(tmp_path, governor="performance", c6_disabled=True)
    s = read_client_settings(tmp_path, cpus=[0, 1])
    assert s.warnings() == []
    assert "C6(133µs, off)" in s.lines()[2]


def test_client_settings_missing_tree(tmp_path):
    s = read_client_settings(tmp_path, cpus=[0])
    assert s.governors == {0: None} and s.idle_states == () and s.warnings() == []


def test_client_settings_of_this_machine_read_only():
    s = read_client_settings("/")
    assert isinstance(s, ClientSettings) and s.cpus == tuple(sorted(os.sched_getaffinity(0)))


# -- the prober against a real memcached ------------------------------------------------------------
def _window(prober: Prober, seconds: float = WINDOW_S) -> ProbeWindow:
    prober.begin()
    time.sleep(seconds)  # the measurement window itself, not synchronisation
    return prober.end()


def test_prober_window_counts_and_ordered_percentiles(memcached, iso):
    stats = MemcachedStatsQps(memcached.address)
    prober = Prober(target=memcached.address, rate_hz=200, settings_root=None, isolation=iso)
    assert isinstance(prober, LatencySource)
    try:
        w = _window(prober)
        gets_before = stats.snapshot().counters["cmd_get"]
        w2 = _window(prober)
        gets_after = stats.snapshot().counters["cmd_get"]
    finally:
        prober.close()
        stats.close()
    for win in (w, w2):
        assert isinstance(win, ProbeWindow)
        # open loop: exactly one request per 5 ms slot of the window, all answered
        assert win.requests == win.intended == math.ceil(win.seconds * 200 - 1e-9)
        assert abs(win.requests - 200 * WINDOW_S) <= 3
        vals = [win.latency_us[p] for p in PERCENTILES]
        assert vals == sorted(vals) and 0 < vals[0] < 500_000
        for p in PERCENTILES:
            lo, hi = win.latency_ci_us[p]
            assert lo <= win.latency_us[p] <= hi
        assert win.ci_achieved[50.0] and not win.ci_achieved[99.9]  # 60 samples cannot bound p99.9
        assert win.timeouts == win.incomplete == win.misses == 0
    assert gets_after - gets_before == w2.requests  # every probe is a real memcached get


def test_begin_resets_the_window(memcached):
    prober = Prober(target=memcached.address, rate_hz=200, settings_root=None, isolation="thread")
    try:
        _window(prober, 0.3)
        w = _window(prober, 0.05)
    finally:
        prober.close()
    # ~10 from the 50 ms window (more only if the sleep overshoots), none carried over from the 300 ms one
    assert w.requests == w.intended == math.ceil(w.seconds * 200 - 1e-9)
    assert w.requests < 30


def test_close_stops_the_thread_and_is_idempotent(memcached, iso):
    prober = Prober(target=memcached.address, rate_hz=500, settings_root=None, isolation=iso)
    prober.begin()
    child = getattr(prober._engine, "process", None)
    if iso == "thread":
        assert len(_prober_threads()) == 1
    else:
        assert _prober_threads() == [] and child.poll() is None  # probing happens in the child
    prober.close()
    prober.close()
    _assert_stopped(prober)
    if child is not None:
        assert child.returncode == 0  # it exited cleanly when told to, it was not killed
    with pytest.raises(HostError, match="closed"):
        prober.begin()


def test_killed_child_is_a_clear_error_and_restarts(memcached):
    prober = Prober(target=memcached.address, rate_hz=200, settings_root=None)
    try:
        prober.begin()
        prober._engine.process.kill()
        with pytest.raises(HostError, match="prober process died"):
            prober.end()
        assert prober._engine.process is None
        prober.begin()  # a fresh child
        w = prober.end()
        assert w.requests >= 1
    finally:
        prober.close()
    _assert_stopped(prober)


def test_end_without_begin(memcached, iso):
    prober = Prober(target=memcached.address, settings_root=None, isolation=iso)
    with pytest.raises(HostError, match="without begin"):
        prober.end()
    prober.close()
    _assert_stopped(prober)


def test_sets_in_the_mix(memcached):
    stats = MemcachedStatsQps(memcached.address)
    prober = Prober(target=memcached.address, rate_hz=200, set_every=4, keys=4, settings_root=None, isolation="thread")
    try:
        prober.begin()  # seeds 4 keys first
        before = stats.snapshot().counters["cmd_set"]
        time.sleep(0.2)
        w = prober.end()
        sets = stats.snapshot().counters["cmd_set"] - before
    finally:
        prober.close()
        stats.close()
    assert sets == w.requests // 4


def test_unreachable_target_is_a_one_line_error(iso):
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
        prober = Prober(target=f"127.0.0.1:{port}", timeout_s=0.3, settings_root=None, isolation=iso)
        with pytest.raises(HostError, match=rf"^memcached 127\.0\.0\.1:{port}: cannot connect") as e:
            prober.begin()
        assert "\n" not in str(e.value)
        prober.close()
    _assert_stopped(prober)


def test_server_dying_mid_window_fails_the_window(memcached, iso):
    prober = Prober(target=memcached.address, rate_hz=200, timeout_s=0.3, settings_root=None, isolation=iso)
    try:
        prober.begin()
        memcached.stop()
        time.sleep(0.1)  # window duration: ~20 probes go to a dead server
        with pytest.raises(HostError, match=rf"memcached {memcached.address}: \d+ of \d+ probe requests failed"):
            prober.end()
    finally:
        prober.close()
    _assert_stopped(prober)


def test_stall_is_not_hidden_by_coordinated_omission(memcached, iso):
    # Freeze memcached for 150 ms inside a 400 ms window. A closed-loop client would record ONE slow
    # sample; the open-loop schedule charges every request intended during the stall, so ~1/3 of the
    # 80 samples are slow and p90 is tens of ms.
    prober = Prober(target=memcached.address, rate_hz=200, timeout_s=2.0, settings_root=None, isolation=iso)
    try:
        prober.begin()
        time.sleep(0.1)
        os.kill(memcached.process.pid, signal.SIGSTOP)
        try:
            time.sleep(0.15)  # the stall being measured
        finally:
            os.kill(memcached.process.pid, signal.SIGCONT)
        time.sleep(0.15)
        w = prober.end()
    finally:
        prober.close()
    assert w.requests == w.intended == math.ceil(w.seconds * 200 - 1e-9)  # no sample lost to the stall
    assert w.requests >= 79 and w.timeouts == 0
    assert w.latency_us[90.0] > 30_000
    assert w.latency_us[99.0] > 100_000
    assert w.send_lag_max_us > 50_000  # the backlog went out late, and is reported as such


def test_config_validation():
    with pytest.raises(HostError, match="rate"):
        ProberConfig(rate_hz=0)
    with pytest.raises(HostError, match="memcached address"):
        ProberConfig(target="host:xx")
    with pytest.raises(HostError, match="isolation"):
        ProberConfig(isolation="fork")
    with pytest.raises(HostError, match="key_prefix 'my probe'"):
        ProberConfig(key_prefix="my probe")


# -- does the probe path cross a NIC? ---------------------------------------------------------------
@pytest.mark.parametrize(
    "target,local,bypasses",
    [
        ("127.0.0.1:11211", [], True),
        ("[::1]:11211", [], True),
        ("unix:/run/memcached.sock", [], True),
        ("192.0.2.10:11211", ["192.0.2.10", "127.0.0.1"], True),  # this host's own NIC address: still lo
        ("192.0.2.10:11211", ["192.0.2.99"], False),  # another machine: crosses the NIC
    ],
)
def test_target_path(target, local, bypasses):
    from actuators.latency.memcached import MemcachedAddress
    from actuators.latency.prober import local_path_reason, target_warning

    addr = MemcachedAddress.parse(target)
    assert (local_path_reason(addr, local) is not None) is bypasses
    warning = target_warning(addr, local)
    assert (warning is not None) is bypasses
    if bypasses:
        assert "ITR" in warning and "client machine" in warning


def test_loopback_prober_warns(memcached):
    prober = Prober(target=memcached.address, settings_root=None)
    assert any("never cross the NIC" in w for w in prober.warnings())
    prober.close()


def test_pinned_prober_reports_its_cpus(memcached):
    cpu = min(os.sched_getaffinity(0))
    prober = Prober(target=memcached.address, rate_hz=200, cpus=[cpu], isolation="thread")
    try:
        assert prober.settings.cpus == (cpu,)
        w = _window(prober, 0.1)
        assert w.requests >= 1
    finally:
        prober.close()
    bad = Prober(target=memcached.address, rate_hz=200, cpus=[4096], isolation="thread", settings_root=None)
    try:
        bad.begin()
        with pytest.raises(HostError, match="cannot pin the prober to CPUs 4096"):
            bad.end()
    finally:
        bad.close()


# -- the sample-size numbers in docs/real-hosts.md --------------------------------------------------
def _expected_rel_half_width(n: int, q: float, ppf) -> float:
    """Relative CI half-width of the q-quantile from n samples, at the expected order statistics."""
    from core.stats import quantile_ci_ranks

    lo, hi = quantile_ci_ranks(n, q)
    return (ppf((hi + 1) / (n + 1)) - ppf((lo + 1) / (n + 1))) / 2 / ppf(q)


@pytest.mark.parametrize(
    "dist,q,n_enough",
    [("expon", 0.99, 7602), ("expon", 0.999, 36899), ("offset", 0.99, 4511), ("lognorm", 0.99, 22209)],
)
def test_readme_sample_sizes_for_5_percent_ci(dist, q, n_enough):
    from scipy import stats as st

    ppf = {"expon": st.expon().ppf, "offset": st.expon(loc=30, scale=20).ppf, "lognorm": st.lognorm(1.0).ppf}[dist]
    assert _expected_rel_half_width(n_enough, q, ppf) <= 0.05
    assert _expected_rel_half_width(int(n_enough * 0.9), q, ppf) > 0.05  # integer ranks: "about" n


def test_readme_minimum_samples_for_any_two_sided_ci():
    from core.stats import quantile_ci_achievable

    assert not quantile_ci_achievable(367, 0.99) and quantile_ci_achievable(368, 0.99)
    assert not quantile_ci_achievable(3687, 0.999) and quantile_ci_achievable(3688, 0.999)


# -- the standalone prober (client machine) ---------------------------------------------------------
def test_standalone_prober_prints_hook_json(memcached):
    import subprocess

    out = subprocess.run(
        [
            sys.executable,
            "-m",
            "actuators.latency.prober",
            "--target",
            memcached.address,
            "--rate-hz",
            "200",
            "--seconds",
            "0.3",
        ],
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert out.returncode == 0, out.stderr
    w = parse_hook_json(out.stdout, "prober cli")
    assert w.ci_known and abs(w.requests - 60) <= 3
    doc = json.loads(out.stdout)
    assert doc["target"] == memcached.address
    assert doc["ci_achieved"] == {"p50": True, "p90": True, "p95": False, "p99": False, "p99.9": False}


def test_standalone_prober_unreachable_exit_2():
    import subprocess

    out = subprocess.run(
        [sys.executable, "-m", "actuators.latency.prober", "--target", "127.0.0.1:1", "--seconds", "0.1"],
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert out.returncode == 2 and out.stdout == ""
    assert out.stderr.strip() == "error: memcached 127.0.0.1:1: cannot connect: Connection refused"


def test_standalone_prober_flags_are_the_config_keys():
    """One name per option: each flag of `python -m actuators.latency.prober` that sets a `ProberConfig` field
    is that field's name with dashes (`rate_hz` is `--rate-hz`, never `--rate`)."""
    import dataclasses
    import re
    import subprocess

    out = subprocess.run(
        [sys.executable, "-m", "actuators.latency.prober", "--help"], capture_output=True, text=True, timeout=30
    )
    flags = set(re.findall(r"--([a-z][a-z-]*)", out.stdout))
    fields = {f.name.replace("_", "-") for f in dataclasses.fields(ProberConfig)}
    assert {"rate-hz", "timeout-s", "set-every", "keys", "cpus", "target"} <= flags & fields
    assert "rate" not in flags and "timeout" not in flags
