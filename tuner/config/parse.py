"""Parsing and validating the daemon's TOML configuration: every problem reported at once, one
`file:line: key: expected ...` line each; reading the config file and the gRPC token file."""

from __future__ import annotations

import os
import re
import tomllib
from pathlib import Path

from core.errors import InputError
from tuner.config.checks import (
    Checker,
    check_grpc_address,
    check_host_port,
    check_host_spec,
    check_percentile,
    check_reward,
    is_loopback,
    non_negative,
    positive,
    shown,
)
from tuner.config.schema import (
    HOST_MODES,
    WINDOW_MODES,
    Config,
    GrpcConfig,
    HistoryConfig,
    HostConfig,
    KnobBounds,
    PolicyConfig,
    TuningConfig,
)
from tuner.optimize.latscale import KINDS as LATENCY_METRICS  # `latency_metric` values
from tuner.optimize.settings import ACQUISITIONS  # `acquisition` values


def _config_path(c: Checker, table: str, key: str, value: str, base: Path, *, file: bool = False) -> Path | None:
    """`value` as a path, relative to the config file's directory; with `file`, one that can be read. Whatever
    the OS says about it (too long, a NUL byte, permission denied, ...) is one error at the key's line."""
    try:
        p = Path(value) if Path(value).is_absolute() else (base / value).resolve()
        if file and not p.is_file():
            c.error(table, key, f"expected a readable file, got {shown(value)} (not found)")
        elif file and not os.access(p, os.R_OK):
            c.error(table, key, f"expected a readable file, got {shown(value)} (permission denied)")
        return p
    except (OSError, ValueError) as exc:  # ENAMETOOLONG, ELOOP, EACCES on a parent; "embedded null byte"
        reason = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)
        c.error(table, key, f"expected a usable path, got {shown(value)}: {reason}")
        return None


def _check_store_url(v: str) -> str | None:
    if v == "" or v.startswith(("postgresql://", "postgres://")) or (v.startswith("sqlite:///") and len(v) > 10):
        return None
    return '"" (SQLite in the state directory), "postgresql://..." or "sqlite:///absolute/path"'


def parse_config(text: str, path: Path) -> Config:
    """Parse and validate config `text` read from `path`; raise `InputError` listing every problem."""
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        m = re.search(r"line (\d+)", str(exc))
        raise InputError(f"{path}:{m.group(1) if m else 1}: invalid TOML: {exc}") from None
    base = path.parent
    c = Checker(path, text)

    top_allowed = {"host", "knobs", "policy", "tuning", "state", "grpc", "metrics", "history"}
    for key in sorted(set(data) - top_allowed):
        c.error("", key, f"unknown table: expected one of {', '.join(sorted(top_allowed))}")

    t = c.table(data, "host", {"spec", "options", "mode"})
    host = HostConfig(
        spec=c.get(t, "host", "spec", "sim", "str", check_host_spec),
        options=c.get(t, "host", "options", {}, "table"),
        mode=c.get(t, "host", "mode", "tune", "str", lambda v: None if v in HOST_MODES else "one of 'tune', 'observe'"),
    )
    check_host_options(c, host)

    t = c.table(data, "knobs", {"itr_us", "dvfs_ghz"})
    knobs = KnobBounds(
        itr_us=c.get(
            t,
            "knobs",
            "itr_us",
            KnobBounds.itr_us,
            "range_int",
            lambda r: None if r[0] >= 0 else "[low, high] with low >= 0",
        ),
        dvfs_ghz=c.get(
            t,
            "knobs",
            "dvfs_ghz",
            KnobBounds.dvfs_ghz,
            "range_float",
            lambda r: None if r[0] >= 0 else "[low, high] with low >= 0",
        ),
    )

    t = c.table(data, "policy", {"reward", "sla_us", "percentile"})
    policy = PolicyConfig(
        reward=c.get(t, "policy", "reward", PolicyConfig.reward, "str", check_reward),
        sla_us=c.get(t, "policy", "sla_us", PolicyConfig.sla_us, "float", positive),
        percentile=c.get(t, "policy", "percentile", PolicyConfig.percentile, "float", check_percentile),
    )

    t = c.table(data, "tuning", set(TuningConfig.__dataclass_fields__))
    d = TuningConfig()
    tuning = TuningConfig(
        trials=c.get(t, "tuning", "trials", d.trials, "int", lambda v: None if 1 <= v <= 1000 else "1..1000"),
        sobol_trials=c.get(
            t, "tuning", "sobol_trials", d.sobol_trials, "int", lambda v: None if 1 <= v <= 1000 else "1..1000"
        ),
        window_s=c.get(
            t,
            "tuning",
            "window_s",
            d.window_s,
            "float",
            lambda v: None if 0.001 <= v <= 3600 else "0.001..3600 seconds",
        ),
        settle_s=c.get(
            t, "tuning", "settle_s", d.settle_s, "float", lambda v: None if 0 <= v <= 600 else "0..600 seconds"
        ),
        seed=c.get(t, "tuning", "seed", d.seed, "int", non_negative),
        retune_period_s=c.get(
            t,
            "tuning",
            "retune_period_s",
            d.retune_period_s,
            "float",
            lambda v: None if v >= 1 else "a period >= 1 second",
        ),
        load_change_pct=c.get(
            t,
            "tuning",
            "load_change_pct",
            d.load_change_pct,
            "float",
            lambda v: None if 0 < v <= 1000 else "a percentage in (0, 1000]",
        ),
        guardrail_margin_pct=c.get(
            t,
            "tuning",
            "guardrail_margin_pct",
            d.guardrail_margin_pct,
            "float",
            lambda v: None if 0 <= v <= 1000 else "a percentage in [0, 1000]",
        ),
        context=c.get(t, "tuning", "context", d.context, "bool"),
        context_max_qps=c.get(t, "tuning", "context_max_qps", d.context_max_qps, "float", positive),
        itr_resolution_us=c.get(
            t,
            "tuning",
            "itr_resolution_us",
            d.itr_resolution_us,
            "int",
            lambda v: None if 1 <= v <= 1024 else "1..1024 µs",
        ),
        history_max_trials=c.get(
            t,
            "tuning",
            "history_max_trials",
            d.history_max_trials,
            "int",
            lambda v: None if 1 <= v <= 100_000 else "1..100000",
        ),
        min_trials=c.get(
            t, "tuning", "min_trials", d.min_trials, "int", lambda v: None if 1 <= v <= 1000 else "1..1000"
        ),
        stop_ei_pct=c.get(
            t,
            "tuning",
            "stop_ei_pct",
            d.stop_ei_pct,
            "float",
            lambda v: None if 0 <= v < 100 else "a percentage in [0, 100) (0 = off)",
        ),
        safe_delta=c.get(
            t,
            "tuning",
            "safe_delta",
            d.safe_delta,
            "float",
            lambda v: None if 0 <= v < 1 else "a probability in [0, 1) (0 = off)",
        ),
        safe_radius=c.get(
            t,
            "tuning",
            "safe_radius",
            d.safe_radius,
            "float",
            lambda v: None if 0 <= v <= 2 else "a normalised knob distance in [0, 2] (0 = off)",
        ),
        safe_model_error=c.get(
            t,
            "tuning",
            "safe_model_error",
            d.safe_model_error,
            "float",
            lambda v: None if 0 <= v <= 1 else "an SD of ln latency in [0, 1] (0 = off)",
        ),
        safe_sd_scale=c.get(
            t,
            "tuning",
            "safe_sd_scale",
            d.safe_sd_scale,
            "float",
            lambda v: None if 1 <= v <= 10 else "a factor in [1, 10] (1 = the model's SD as it is)",
        ),
        final_margin_pct=c.get(
            t,
            "tuning",
            "final_margin_pct",
            d.final_margin_pct,
            "float",
            lambda v: None if 0 <= v < 100 else "a margin in % of the SLA in [0, 100)",
        ),
        final_margin_ci=c.get(
            t,
            "tuning",
            "final_margin_ci",
            d.final_margin_ci,
            "float",
            lambda v: None if 0 <= v <= 10 else "extra CI half-widths in [0, 10] (0 = the CI as measured)",
        ),
        latency_metric=c.get(
            t,
            "tuning",
            "latency_metric",
            d.latency_metric,
            "str",
            lambda v: None if v in LATENCY_METRICS else "one of " + ", ".join(map(repr, LATENCY_METRICS)),
        ),
        acquisition=c.get(
            t,
            "tuning",
            "acquisition",
            d.acquisition,
            "str",
            lambda v: None if v in ACQUISITIONS else "one of " + ", ".join(map(repr, ACQUISITIONS)),
        ),
        window_mode=c.get(
            t,
            "tuning",
            "window_mode",
            d.window_mode,
            "str",
            lambda v: None if v in WINDOW_MODES else "one of " + ", ".join(map(repr, WINDOW_MODES)),
        ),
        window_ci_pct=c.get(
            t,
            "tuning",
            "window_ci_pct",
            d.window_ci_pct,
            "float",
            lambda v: None if 0 < v < 100 else "a percentage in (0, 100)",
        ),
        window_min_s=c.get(
            t,
            "tuning",
            "window_min_s",
            d.window_min_s,
            "float",
            lambda v: None if 0.001 <= v <= 3600 else "0.001..3600 seconds",
        ),
        window_guard=c.get(t, "tuning", "window_guard", d.window_guard, "bool"),
        peak_step=c.get(t, "tuning", "peak_step", d.peak_step, "bool"),
        hold_max_p=c.get(
            t,
            "tuning",
            "hold_max_p",
            d.hold_max_p,
            "float",
            lambda v: None if 0 <= v <= 0.5 else "a probability in [0, 0.5] (0 = always retune)",
        ),
        refit_every=c.get(
            t, "tuning", "refit_every", d.refit_every, "int", lambda v: None if 1 <= v <= 1000 else "1..1000 trials"
        ),
        hyper_iters=c.get(
            t,
            "tuning",
            "hyper_iters",
            d.hyper_iters,
            "int",
            lambda v: None if 0 <= v <= 1000 else "0..1000 L-BFGS iterations (0 = off)",
        ),
        idle_qps=c.get(t, "tuning", "idle_qps", d.idle_qps, "float", non_negative),
        baseline_every_s=c.get(
            t,
            "tuning",
            "baseline_every_s",
            d.baseline_every_s,
            "float",
            lambda v: None if v == 0 or v >= 1 else "0 (never) or a period >= 1 second",
        ),
        retry_max_s=c.get(
            t, "tuning", "retry_max_s", d.retry_max_s, "float", lambda v: None if 1 <= v <= 86_400 else "1..86400 s"
        ),
    )
    if tuning.window_mode == "adaptive" and tuning.window_min_s > tuning.window_s and "window_min_s" not in t:
        # the default minimum (2 s) follows a shorter window_s (the adaptive window's maximum)
        tuning = TuningConfig(**{**tuning.__dict__, "window_min_s": tuning.window_s})
    if tuning.window_mode == "adaptive" and tuning.window_min_s > tuning.window_s:
        c.error(
            "tuning",
            "window_min_s",
            f"expected tuning.window_min_s ({tuning.window_min_s:g} s) at most tuning.window_s "
            f"({tuning.window_s:g} s, the adaptive window's maximum)",
        )
    if "trials" in t and "sobol_trials" in t and tuning.sobol_trials > tuning.trials:
        c.error(
            "tuning", "sobol_trials", f"expected at most tuning.trials ({tuning.trials}), got {tuning.sobol_trials}"
        )
    elif tuning.sobol_trials > tuning.trials:
        tuning = TuningConfig(**{**tuning.__dict__, "sobol_trials": max(1, min(tuning.sobol_trials, tuning.trials))})

    t = c.table(data, "state", {"dir"})
    state_dir = c.get(t, "state", "dir", "/var/lib/tuner", "str", lambda v: None if v else "a directory")

    t = c.table(data, "grpc", {"listen", "tls_cert", "tls_key", "tls_client_ca", "token_file"})
    listen = c.get(t, "grpc", "listen", GrpcConfig.listen, "str", check_grpc_address)
    files: dict[str, Path | None] = {}
    for key in ("tls_cert", "tls_key", "tls_client_ca", "token_file"):
        value = c.get(t, "grpc", key, "", "str")
        if value:
            files[key] = _config_path(c, "grpc", key, value, base, file=True) or Path(value)
        else:
            files[key] = None
    if bool(files["tls_cert"]) != bool(files["tls_key"]):
        missing = "tls_key" if files["tls_cert"] else "tls_cert"
        c.error("grpc", missing, "expected both tls_cert and tls_key (TLS needs the pair)")
    if files["tls_client_ca"] and not files["tls_cert"]:
        c.error("grpc", "tls_client_ca", "expected tls_cert and tls_key as well (client certs need TLS)")
    if not is_loopback(listen) and not (files["token_file"] or files["tls_client_ca"]):
        c.error(
            "grpc",
            "listen",
            f"expected a unix socket or loopback address unless token_file or "
            f"tls_client_ca is set (anyone could retune the host), got {shown(listen)}",
        )
    grpc_cfg = GrpcConfig(listen=listen, **files)

    t = c.table(data, "metrics", {"listen"})
    metrics_listen = c.get(
        t, "metrics", "listen", "127.0.0.1:9464", "str", lambda v: None if v in ("", "off") else check_host_port(v)
    )

    t = c.table(data, "history", set(HistoryConfig.__dataclass_fields__))
    hd = HistoryConfig()
    history_file = c.get(t, "history", "file", "", "str")
    history = HistoryConfig(
        warm_start=c.get(t, "history", "warm_start", hd.warm_start, "bool"),
        file=_config_path(c, "history", "file", history_file, base) if history_file else None,
        keep_trials=c.get(
            t, "history", "keep_trials", hd.keep_trials, "int", lambda v: None if 1 <= v <= 1_000_000 else "1..1000000"
        ),
        url=c.get(t, "history", "url", hd.url, "str", _check_store_url),
    )

    state_path = _config_path(c, "state", "dir", state_dir, base) if state_dir else None
    if c.errors:
        raise InputError("\n".join(c.errors))
    assert state_path is not None  # an empty state.dir is an error above
    return Config(
        path=path,
        host=host,
        knobs=knobs,
        policy=policy,
        tuning=tuning,
        state_dir=state_path,
        grpc=grpc_cfg,
        metrics_listen=None if metrics_listen in ("", "off") else metrics_listen,
        history=history,
    )


def check_host_options(c: Checker, host: HostConfig) -> None:
    """`[host.options]` against the host factory's signature: each key it does not take is an error at its line."""
    from core.errors import TunerError
    from tuner.hosts import DAEMON_SET, check_options

    if check_host_spec(host.spec) is not None:
        return
    try:
        problems = check_options(host.spec, host.options, "")
    except TunerError as exc:
        c.error("host", "spec", str(exc))
        return
    for problem in problems:
        key, _, message = problem.partition(": ")
        c.error("host.options", key, message)
    for key in sorted(set(host.options) & set(DAEMON_SET)):
        c.error("host.options", key, "set by the daemon itself (observe mode), not in the config")


def load_config(path: str | Path) -> Config:
    """Read and validate the config file at `path` (relative paths inside it are relative to its directory)."""
    p = Path(path)
    try:
        text = p.read_text(encoding="utf-8")
    except UnicodeDecodeError:
        raise InputError(f"{p}:1: expected UTF-8 text") from None
    except (OSError, ValueError) as exc:  # ValueError: a NUL byte in the path
        reason = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)
        raise InputError(f"{shown(str(p))}: cannot read config: {reason}") from None
    return parse_config(text, p)


def read_token(path: Path) -> bytes:
    """The bearer token in `path` (surrounding whitespace stripped); must be non-empty."""
    try:
        token = path.read_bytes().strip()
    except OSError as exc:
        raise InputError(f"{path}: cannot read token file: {exc.strerror or exc}") from None
    if not token:
        raise InputError(f"{path}:1: token_file: expected a non-empty token")
    return token
