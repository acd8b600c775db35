"""Config validation: every problem reported, one `file:line: key: expected ...` line each."""

from __future__ import annotations

from pathlib import Path

import pytest

from core.errors import InputError
from tuner.config import Config, check_grpc_address, is_loopback, load_config, parse_config, read_token


def _errors(text: str, tmp_path: Path) -> list[str]:
    p = tmp_path / "t.toml"
    p.write_text(text)
    with pytest.raises(InputError) as e:
        load_config(p)
    return str(e.value).splitlines()


def test_defaults_and_relative_paths(tmp_path):
    cfg = parse_config('[state]\ndir = "st"\n', tmp_path / "c.toml")
    assert cfg.state_dir == (tmp_path / "st").resolve()
    assert cfg.tuning.retune_period_s == 3600 and cfg.policy.sla_us == 500 and cfg.policy.percentile == 99
    assert cfg.grpc.listen == "unix:///run/tuner/tuner.sock" and cfg.metrics_listen == "127.0.0.1:9464"
    assert cfg.host.spec == "sim" and cfg.grpc.token_file is None
    assert parse_config("", tmp_path / "c.toml") == Config(path=tmp_path / "c.toml")


def test_every_problem_one_line_with_its_line_number(tmp_path):
    text = """# comment
[host]
spec = "nonsense"

[policy]
sla_us = -5
percentile = 98
reward = "money"

[tuning]
trials = 3
sobol_trials = 5
window_s = "long"
load_change_pct = 0
unknown_knob = 1

[knobs]
itr_us = [100, 10]

[grpc]
listen = "example.com"
tls_cert = "missing.pem"

[metrics]
listen = "localhost"
"""
    lines = _errors(text, tmp_path)
    f = tmp_path / "t.toml"
    expected = [
        f"{f}:3: host.spec: expected 'sim', 'real' or 'module:factory', got 'nonsense'",
        f"{f}:6: policy.sla_us: expected a value > 0, got -5",
        f"{f}:7: policy.percentile: expected one of 50, 90, 95, 99, 99.9, got 98",
        f"{f}:8: policy.reward: expected one of",
        f"{f}:13: tuning.window_s: expected a number, got 'long'",
        f"{f}:14: tuning.load_change_pct: expected a percentage in (0, 1000], got 0",
        f"{f}:15: tuning.unknown_knob: unknown key: expected one of",
        f"{f}:12: tuning.sobol_trials: expected at most tuning.trials (3), got 5",
        f"{f}:18: knobs.itr_us: expected [low, high] integers, got [100, 10]",
        f"{f}:21: grpc.listen: expected HOST:PORT (port 0..65535) or unix:///path.sock, got 'example.com'",
        f"{f}:22: grpc.tls_cert: expected a readable file, got 'missing.pem' (not found)",
        f"{f}:20: grpc.tls_key: expected both tls_cert and tls_key",
        f"{f}:25: metrics.listen: expected HOST:PORT",
    ]
    for want in expected:
        assert any(line.startswith(want) for line in lines), (want, lines)
    assert len(lines) == len(expected), lines


def test_unknown_table_and_wrong_table_type(tmp_path):
    lines = _errors("tuning = 3\n\n[extra]\na = 1\n", tmp_path)
    f = tmp_path / "t.toml"
    assert f"{f}:1: tuning: expected a table [tuning], got int" in lines
    assert any(l.startswith(f"{f}:3: extra: unknown table") for l in lines)


def test_toml_syntax_error_has_line(tmp_path):
    lines = _errors("[tuning]\ntrials = = 3\n", tmp_path)
    assert len(lines) == 1 and lines[0].startswith(f"{tmp_path / 't.toml'}:2: invalid TOML")


def test_unreadable_file_is_one_line(tmp_path):
    with pytest.raises(InputError, match="cannot read config"):
        load_config(tmp_path / "absent.toml")


def test_wide_listen_needs_token_or_client_certs(tmp_path):
    f = tmp_path / "t.toml"
    lines = _errors('[grpc]\nlisten = "0.0.0.0:50051"\n', tmp_path)
    assert lines == [
        f"{f}:2: grpc.listen: expected a unix socket or loopback address unless token_file or "
        "tls_client_ca is set (anyone could retune the host), got '0.0.0.0:50051'"
    ]
    (tmp_path / "tok").write_text("abc\n")
    cfg = parse_config('[grpc]\nlisten = "0.0.0.0:50051"\ntoken_file = "tok"\n', f)
    assert cfg.grpc.token_file == (tmp_path / "tok").resolve() and read_token(cfg.grpc.token_file) == b"abc"
    (tmp_path / "empty").write_text("\n")
    with pytest.raises(InputError, match="non-empty token"):
        read_token(tmp_path / "empty")


def test_tls_client_ca_needs_cert(tmp_path):
    (tmp_path / "ca.pem").write_text("x")
    lines = _errors('[grpc]\ntls_client_ca = "ca.pem"\n', tmp_path)
    assert lines == [
        f"{tmp_path / 't.toml'}:2: grpc.tls_client_ca: expected tls_cert and tls_key as well (client certs need TLS)"
    ]


@pytest.mark.parametrize(
    "addr, ok",
    [
        ("unix:///run/tuner/tuner.sock", True),
        ("unix:/tmp/x.sock", True),
        ("127.0.0.1:0", True),
        ("[::1]:50051", True),
        ("localhost:1", True),
        ("unix:", False),
        ("host", False),
        ("1.2.3.4:70000", False),
        ("unix:///" + "a" * 200, False),
    ],
)
def test_grpc_address(addr, ok):
    assert (check_grpc_address(addr) is None) == ok


def test_loopback_detection():
    assert is_loopback("unix:///x") and is_loopback("127.0.0.1:1") and is_loopback("[::1]:1")
    assert is_loopback("localhost:5") and not is_loopback("0.0.0.0:1") and not is_loopback("10.0.0.1:1")


def test_metrics_off_and_host_options(tmp_path):
    cfg = parse_config(
        '[metrics]\nlisten = "off"\n[host]\nspec = "tests.fakes:make_fake_host"\n[host.options]\nqps = 5\n',
        tmp_path / "c.toml",
    )
    assert (
        cfg.metrics_listen is None and cfg.host.options == {"qps": 5} and cfg.host.spec == "tests.fakes:make_fake_host"
    )
    assert cfg.host.mode == "tune"


def test_host_options_checked_against_the_factory_signature(tmp_path):
    """The example config once suggested `memcached = ...`, which the real host never took: --check said OK and
    the daemon died at start-up with a TypeError. Every key is now checked, at its line."""
    text = '[host]\nspec = "real"\nmode = "observe"\n[host.options]\nmemcached = "127.0.0.1:11211"\nparts = []\n'
    with pytest.raises(InputError) as e:
        parse_config(text, tmp_path / "c.toml")
    lines = str(e.value).splitlines()
    assert lines[0].startswith(f"{tmp_path / 'c.toml'}:5: host.options.memcached: not an option of host 'real'")
    assert "qps" in lines[0] and "latency" in lines[0] and "parts" not in lines[0].partition("accepted")[2]
    assert any(":6: host.options.parts: set by the daemon itself" in line for line in lines)
    with pytest.raises(InputError, match=r"c.toml:2: host.spec: --host 'nosuchmod:make': cannot import"):
        parse_config('[host]\nspec = "nosuchmod:make"\n', tmp_path / "c.toml")
    with pytest.raises(InputError, match="host.mode: expected one of 'tune', 'observe'"):
        parse_config('[host]\nmode = "watch"\n', tmp_path / "c.toml")


def test_example_config_is_valid_and_shows_only_real_options():
    from pathlib import Path

    example = Path(__file__).resolve().parents[3] / "deploy" / "tuner.example.toml"
    assert load_config(example).host.mode == "tune"
    assert "memcached = " not in example.read_text()


def test_learning_tuning_and_history_keys(tmp_path):
    text = """[state]
dir = "st"
[tuning]
context = true
context_max_qps = 800000
history_max_trials = 300
min_trials = 3
stop_ei_pct = 1.5
safe_delta = 0.05
safe_radius = 0.3
safe_model_error = 0.05
safe_sd_scale = 2.5
latency_metric = "headroom"
window_mode = "adaptive"
window_ci_pct = 4
window_min_s = 1.5
[history]
warm_start = true
file = "h/trials.jsonl"
keep_trials = 500
"""
    cfg = parse_config(text, tmp_path / "c.toml")
    t = cfg.tuning
    assert (
        t.context,
        t.context_max_qps,
        t.history_max_trials,
        t.min_trials,
        t.stop_ei_pct,
        t.safe_delta,
        t.window_mode,
        t.window_ci_pct,
        t.window_min_s,
    ) == (True, 8e5, 300, 3, 1.5, 0.05, "adaptive", 4.0, 1.5)
    assert t.safe_radius == 0.3 and t.safe_model_error == 0.05
    assert t.safe_sd_scale == 2.5 and t.latency_metric == "headroom"
    assert cfg.history.warm_start and cfg.history.keep_trials == 500 and cfg.warm_start
    assert cfg.history_path == (tmp_path / "h" / "trials.jsonl").resolve()
    plain = parse_config('[state]\ndir = "st"\n', tmp_path / "c.toml")
    # context is on by default (the 3-day replay benchmark chose it), and context implies warm start from the history store
    assert plain.history_path == (tmp_path / "st" / "history.jsonl").resolve() and plain.warm_start
    assert plain.tuning.context and not plain.history.warm_start
    cold = parse_config('[state]\ndir = "st"\n[tuning]\ncontext = false\n', tmp_path / "c.toml")
    assert not cold.warm_start
    # the daemon's defaults and `tuner replay`'s are the same rows (tuner.optimize.table); the values above build
    # valid optimiser settings
    from tuner.config import SETTINGS_FIELDS
    from tuner.optimize.settings import TunerSettings

    TunerSettings(window_s=t.window_s, **{k: getattr(t, k) for k in SETTINGS_FIELDS})


def test_learning_keys_bad_values_one_line_each(tmp_path):
    text = """[tuning]
window_s = 1.0
context = "yes"
context_max_qps = 0
history_max_trials = 0
min_trials = 1.5
stop_ei_pct = 100
safe_delta = 1
window_mode = "clever"
window_ci_pct = 0
safe_radius = 3
[history]
warm_start = 1
keep_trials = 0
colour = "red"
"""
    f = tmp_path / "t.toml"
    lines = _errors(text, tmp_path)
    expected = [
        f"{f}:3: tuning.context: expected true or false, got 'yes'",
        f"{f}:4: tuning.context_max_qps: expected a value > 0, got 0",
        f"{f}:5: tuning.history_max_trials: expected 1..100000, got 0",
        f"{f}:6: tuning.min_trials: expected an integer, got 1.5",
        f"{f}:7: tuning.stop_ei_pct: expected a percentage in [0, 100) (0 = off), got 100",
        f"{f}:8: tuning.safe_delta: expected a probability in [0, 1) (0 = off), got 1",
        f"{f}:9: tuning.window_mode: expected one of 'fixed', 'adaptive', got 'clever'",
        f"{f}:10: tuning.window_ci_pct: expected a percentage in (0, 100), got 0",
        f"{f}:11: tuning.safe_radius: expected a normalised knob distance in [0, 2] (0 = off), got 3",
        f"{f}:13: history.warm_start: expected true or false, got 1",
        f"{f}:14: history.keep_trials: expected 1..1000000, got 0",
        f"{f}:15: history.colour: unknown key: expected one of file, keep_trials, url, warm_start",
    ]
    for want in expected:
        assert want in lines, (want, lines)
    assert len(lines) == len(expected), lines
    lines = _errors('[tuning]\nsafe_sd_scale = 0.5\nlatency_metric = "raw"\nwindow_guard = "on"\n', tmp_path)
    assert lines == [
        f"{f}:2: tuning.safe_sd_scale: expected a factor in [1, 10] (1 = the model's SD as it is), got 0.5",
        f"{f}:3: tuning.latency_metric: expected one of 'log', 'headroom', got 'raw'",
        f"{f}:4: tuning.window_guard: expected true or false, got 'on'",
    ]
    assert not parse_config("[tuning]\nwindow_guard = false\n", tmp_path / "t.toml").tuning.window_guard
    lines = _errors('[tuning]\nwindow_s = 1.0\nwindow_min_s = 2\nwindow_mode = "adaptive"\n', tmp_path)
    assert lines == [
        f"{f}:3: tuning.window_min_s: expected tuning.window_min_s (2 s) at most tuning.window_s "
        "(1 s, the adaptive window's maximum)"
    ]
    # the default minimum follows a shorter window_s instead of refusing a config that never set it
    short = parse_config("[tuning]\nwindow_s = 1.0\n", tmp_path / "t.toml")
    assert short.tuning.window_mode == "adaptive" and short.tuning.window_min_s == 1.0


def test_history_url_names_the_trial_store(tmp_path):
    from tuner.config import load_config

    f = tmp_path / "t.toml"
    f.write_text('[history]\nurl = "postgresql://tuner@db.example/tuner"\n')
    assert load_config(f).history.url == "postgresql://tuner@db.example/tuner"
    f.write_text('[state]\ndir = "st"\n')
    assert load_config(f).history.url == ""  # the default: SQLite in the state directory
    assert _errors('[history]\nurl = "mysql://x"\n', tmp_path) == [
        f'{f}:2: history.url: expected "" (SQLite in the state directory), "postgresql://..." or '
        "\"sqlite:///absolute/path\", got 'mysql://x'"
    ]


def test_locate_finds_bare_quoted_and_dotted_keys_and_falls_back_to_the_header():
    """One key locator serves the daemon's config and `tuner replay --config`: errors point at the key's line."""
    from tuner.config.checks import locate

    lines = ["x = 1", "replay.seed = 2", "[replay]", "sla_us = 200", "'out' = 'o'", '"trace" = "t"']
    assert locate(lines, "replay", "sla_us") == 4
    assert locate(lines, "replay", "out") == 5
    assert locate(lines, "replay", "trace") == 6
    assert locate(lines, "replay", "seed") == 2
    assert locate(lines, "replay", "missing") == 3
    assert locate(lines, "replay", None) == 3
    assert locate(["a = 1"], "policy", "sla_us") == 1
