"""Parsing and validating the daemon's TOML configuration: every problem reported at once, one
`file:line: key: expected ...` line each; reading the config file and the gRPC token file."""

from __future__ import annotations

import os
import re
import tomllib
from dataclasses import replace
from pathlib import Path

from core.errors import InputError
from tuner.config.checks import Checker, check_host_spec, is_loopback, read_rows, shown
from tuner.config.schema import (
    Config,
    GrpcConfig,
    HistoryConfig,
    HostConfig,
    KnobBounds,
    PolicyConfig,
    TuningConfig,
)
from tuner.config.tables import SECTIONS, TUNING_TABLE
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


def parse_config(text: str, path: Path) -> Config:
    """Parse and validate config `text` read from `path`; raise `InputError` listing every problem."""
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        m = re.search(r"line (\d+)", str(exc))
        raise InputError(f"{path}:{m.group(1) if m else 1}: invalid TOML: {exc}") from None
    base = path.parent
    c = Checker(path, text)
    for key in sorted(set(data) - set(SECTIONS)):
        what = "unknown table" if isinstance(data[key], dict | list) else "unknown top-level key"
        c.error("", key, f"{what}: expected one of the tables {', '.join(sorted(SECTIONS))}")
    host = _server_kind(c, data, HostConfig(**read_rows(c, data, "host", SECTIONS["host"])))
    check_host_options(c, host)
    knobs = KnobBounds(**read_rows(c, data, "knobs", SECTIONS["knobs"]))
    policy = PolicyConfig(**read_rows(c, data, "policy", SECTIONS["policy"]))
    tuning = read_tuning(c, data)
    state_dir = read_rows(c, data, "state", SECTIONS["state"])["dir"]
    grpc_cfg = _grpc(c, read_rows(c, data, "grpc", SECTIONS["grpc"]), base)
    metrics_listen = read_rows(c, data, "metrics", SECTIONS["metrics"])["listen"]
    history = _history(c, read_rows(c, data, "history", SECTIONS["history"]), base)
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
        source=text,
    )


def read_tuning(c: Checker, data: dict, table: tuple[Setting, ...] = TUNING_TABLE) -> TuningConfig:
    """The `[tuning]` table, one key per row of `table`, then the rules between keys: the adaptive window's
    minimum at most its maximum (a default minimum follows a shorter `window_s`), Sobol trials at most trials."""
    values = read_rows(c, data, "tuning", table)
    raw = data.get("tuning")
    given: dict = raw if isinstance(raw, dict) else {}
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


def _grpc(c: Checker, values: dict, base: Path) -> GrpcConfig:
    """`[grpc]`: the files it names must be readable; TLS needs the pair; a non-loopback address needs auth."""
    listen = values["listen"]
    files: dict[str, Path | None] = {}
    for key in ("tls_cert", "tls_key", "tls_client_ca", "token_file"):
        value = values[key]
        files[key] = (_config_path(c, "grpc", key, value, base, file=True) or Path(value)) if value else None
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


def _history(c: Checker, values: dict, base: Path) -> HistoryConfig:
    file = _config_path(c, "history", "file", values["file"], base) if values["file"] else None
    return HistoryConfig(**{**values, "file": file})


def _server_kind(c: Checker, data: dict, host: HostConfig) -> HostConfig:
    """`[host] server`, or when it is not written the kind `[host.options] qps` names; a `qps` naming another kind
    than the one written is an error at its line."""
    from actuators.latency.servers import server_of

    raw = data.get("host")
    written = isinstance(raw, dict) and "server" in raw
    named = server_of(host.options.get("qps"))
    if named is None or named[0] == host.server:
        return host
    if not written:
        return replace(host, server=named[0])
    c.error("host.options", "qps", f"expected a {host.server} server (host.server), got {shown(host.options['qps'])}")
    return host


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
