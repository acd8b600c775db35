"""Parsing and validating the daemon's TOML configuration: every problem reported at once, one
`file:line: key: expected ...` line each; reading the config file and the gRPC token file."""

from __future__ import annotations

import os
import re
import tomllib
from dataclasses import replace
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
    positive,
    read_rows,
    shown,
)
from tuner.config.schema import (
    HOST_MODES,
    TUNING_TABLE,
    Config,
    GrpcConfig,
    HistoryConfig,
    HostConfig,
    KnobBounds,
    PolicyConfig,
    TuningConfig,
)
from tuner.optimize.table import Setting


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


#: The config file's tables.
TABLES = ("host", "knobs", "policy", "tuning", "state", "grpc", "metrics", "history")


def parse_config(text: str, path: Path) -> Config:
    """Parse and validate config `text` read from `path`; raise `InputError` listing every problem."""
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        m = re.search(r"line (\d+)", str(exc))
        raise InputError(f"{path}:{m.group(1) if m else 1}: invalid TOML: {exc}") from None
    base = path.parent
    c = Checker(path, text)
    for key in sorted(set(data) - set(TABLES)):
        c.error("", key, f"unknown table: expected one of {', '.join(sorted(TABLES))}")
    host = _host(c, data)
    knobs = _knobs(c, data)
    policy = _policy(c, data)
    tuning = read_tuning(c, data)
    t = c.table(data, "state", {"dir"})
    state_dir = c.get(t, "state", "dir", "/var/lib/tuner", "str", lambda v: None if v else "a directory")
    grpc_cfg = _grpc(c, data, base)
    t = c.table(data, "metrics", {"listen"})
    metrics_listen = c.get(
        t, "metrics", "listen", "127.0.0.1:9464", "str", lambda v: None if v in ("", "off") else check_host_port(v)
    )
    history = _history(c, data, base)
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


def _host(c: Checker, data: dict) -> HostConfig:
    t = c.table(data, "host", {"spec", "options", "mode"})
    host = HostConfig(
        spec=c.get(t, "host", "spec", "sim", "str", check_host_spec),
        options=c.get(t, "host", "options", {}, "table"),
        mode=c.get(t, "host", "mode", "tune", "str", lambda v: None if v in HOST_MODES else "one of 'tune', 'observe'"),
    )
    check_host_options(c, host)
    return host


def _knobs(c: Checker, data: dict) -> KnobBounds:
    t = c.table(data, "knobs", {"itr_us", "dvfs_ghz"})

    def low_ok(r: tuple) -> str | None:
        return None if r[0] >= 0 else "[low, high] with low >= 0"

    return KnobBounds(
        itr_us=c.get(t, "knobs", "itr_us", KnobBounds.itr_us, "range_int", low_ok),
        dvfs_ghz=c.get(t, "knobs", "dvfs_ghz", KnobBounds.dvfs_ghz, "range_float", low_ok),
    )


def _policy(c: Checker, data: dict) -> PolicyConfig:
    t = c.table(data, "policy", {"reward", "sla_us", "percentile"})
    return PolicyConfig(
        reward=c.get(t, "policy", "reward", PolicyConfig.reward, "str", check_reward),
        sla_us=c.get(t, "policy", "sla_us", PolicyConfig.sla_us, "float", positive),
        percentile=c.get(t, "policy", "percentile", PolicyConfig.percentile, "float", check_percentile),
    )


def read_tuning(c: Checker, data: dict, table: tuple[Setting, ...] = TUNING_TABLE) -> TuningConfig:
    """The `[tuning]` table, one key per row of `table`, then the rules between keys: the adaptive window's
    minimum at most its maximum (a default minimum follows a shorter `window_s`), Sobol trials at most trials."""
    values = read_rows(c, data, "tuning", table)
    given = data.get("tuning") if isinstance(data.get("tuning"), dict) else {}
    tuning = TuningConfig(**{k: v for k, v in values.items() if k in TuningConfig.__dataclass_fields__})
    adaptive = tuning.window_mode == "adaptive"
    if adaptive and tuning.window_min_s > tuning.window_s and "window_min_s" not in given:
        tuning = replace(tuning, window_min_s=tuning.window_s)
    if adaptive and tuning.window_min_s > tuning.window_s:
        c.error(
            "tuning",
            "window_min_s",
            f"expected tuning.window_min_s ({tuning.window_min_s:g} s) at most tuning.window_s "
            f"({tuning.window_s:g} s, the adaptive window's maximum)",
        )
    if "trials" in given and "sobol_trials" in given and tuning.sobol_trials > tuning.trials:
        c.error(
            "tuning", "sobol_trials", f"expected at most tuning.trials ({tuning.trials}), got {tuning.sobol_trials}"
        )
    elif tuning.sobol_trials > tuning.trials:
        tuning = replace(tuning, sobol_trials=max(1, min(tuning.sobol_trials, tuning.trials)))
    return tuning


def _grpc(c: Checker, data: dict, base: Path) -> GrpcConfig:
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
    return GrpcConfig(listen=listen, **files)


def _history(c: Checker, data: dict, base: Path) -> HistoryConfig:
    t = c.table(data, "history", set(HistoryConfig.__dataclass_fields__))
    hd = HistoryConfig()
    history_file = c.get(t, "history", "file", "", "str")
    return HistoryConfig(
        warm_start=c.get(t, "history", "warm_start", hd.warm_start, "bool"),
        file=_config_path(c, "history", "file", history_file, base) if history_file else None,
        keep_trials=c.get(
            t, "history", "keep_trials", hd.keep_trials, "int", lambda v: None if 1 <= v <= 1_000_000 else "1..1000000"
        ),
        url=c.get(t, "history", "url", hd.url, "str", _check_store_url),
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
