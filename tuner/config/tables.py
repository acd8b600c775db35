"""Every key of the daemon's TOML file declared once, as `tuner.optimize.table.Setting` rows per table
(`SECTIONS`): the optimiser's settings the daemon exposes (the rows of `TUNER_TABLE` marked `daemon`), the
daemon's own `[tuning]` keys (`DAEMON_TUNING`), and the other tables. The dataclasses' defaults
(`tuner.config.schema`), the reader (`tuner.config.parse`) and the configuration reference in docs/daemon.md
(`tuner.config.daemon_reference`) come from these rows."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from actuators.latency.servers import SERVER_KINDS
from tuner.config.checks import (
    ALLOWED_PERCENTILES,
    DEFAULT_REWARDS,
    check_grpc_address,
    check_host_port,
    check_host_spec,
    check_percentile,
    check_reward,
    check_store_url,
)
from tuner.optimize.table import TUNER_TABLE, Setting

#: `[host] mode` values.
HOST_MODES: tuple[str, ...] = ("tune", "observe")


def _in(section: str, *rows: Setting) -> tuple[Setting, ...]:
    """`rows` as keys of `[section]` read by the daemon alone (not `TunerSettings` fields, not replay flags)."""
    return tuple(replace(row, section=section, optimizer=False, replay=False) for row in rows)


def _period_or_never(v: float) -> str | None:
    return None if v == 0 or v >= 1 else "0 (never) or a period >= 1 second"


def _low_at_least_0(r: tuple) -> str | None:
    return None if r[0] >= 0 else "[low, high] with low >= 0"


def _listen_or_off(v: str) -> str | None:
    return None if v in ("", "off") else check_host_port(v)


def _path(name: str, doc: str, doc_default: str = "off") -> Setting:
    return Setting(name, str, "", doc, doc_default=doc_default, expect="a path")


#: The daemon's own `[tuning]` keys (not the optimiser's): when it retunes and how it guards the held point.
DAEMON_TUNING: tuple[Setting, ...] = _in(
    "tuning",
    Setting("retune_period_s", float, 3600.0, "scheduled retune period", low=1, expect="a period >= 1 second"),
    Setting(
        "load_change_pct",
        float,
        20.0,
        "retune when the load leaves the tuned band by more than this %",
        low=0,
        high=1000,
        low_open=True,
        expect="a percentage in (0, 1000]",
    ),
    Setting(
        "guardrail_margin_pct",
        float,
        10.0,
        "revert when the percentile exceeds SLA x (1 + this %)",
        low=0,
        high=1000,
        expect="a percentage in [0, 1000]",
    ),
    Setting(
        "idle_qps",
        float,
        100.0,
        "below this load hold the idle point (lowest ITR, lowest frequency) and never retune",
        low=0,
    ),
    Setting(
        "baseline_every_s",
        float,
        0.0,
        "a baseline window at the OS's own settings this often (docs/real-hosts.md)",
        low=0,
        allowed=_period_or_never,
        expect="0 (never) or a period >= 1 second",
    ),
    Setting(
        "retry_max_s",
        float,
        600.0,
        "a failed retune is retried after window_s, the wait doubling up to this",
        low=1,
        high=86_400,
        expect="1..86400 s",
    ),
)
#: Every `[tuning]` key: the optimiser's settings the daemon exposes, then its own.
TUNING_TABLE: tuple[Setting, ...] = tuple(row for row in TUNER_TABLE if row.daemon) + DAEMON_TUNING

#: Every table of the config file and its keys, in the order of the docs.
SECTIONS: dict[str, tuple[Setting, ...]] = {
    "host": _in(
        "host",
        Setting(
            "spec",
            str,
            "sim",
            "`sim`, `real`, or `module:factory` (your `Host`)",
            allowed=check_host_spec,
            expect="'sim', 'real' or 'module:factory'",
        ),
        Setting("options", dict, {}, "keyword arguments for the host factory (checked against its signature)"),
        Setting(
            "mode",
            str,
            "tune",
            "observe: measure at the OS's own settings, write no knob, record no trials",
            choices=HOST_MODES,
        ),
        Setting(
            "server",
            str,
            SERVER_KINDS[0],
            "the cache server the QPS source, the prober and `tuner doctor` speak to: memcached, or redis (Redis and "
            "Valkey); default: the kind `options.qps` names, else memcached (its default qps: the kind on 127.0.0.1)",
            choices=SERVER_KINDS,
        ),
    ),
    "knobs": _in(
        "knobs",
        Setting(
            "itr_us",
            tuple,
            (0, 100_000),
            "inclusive ITR bounds (µs); the host's list is filtered to them",
            allowed=_low_at_least_0,
            doc_default="the host's range",
        ),
        Setting(
            "dvfs_ghz",
            tuple,
            (0.0, 100.0),
            "inclusive frequency bounds (GHz); the host's list is filtered to them",
            item=float,
            allowed=_low_at_least_0,
            doc_default="the host's range",
        ),
    ),
    "policy": _in(
        "policy",
        Setting(
            "reward",
            str,
            "constrained",
            "the reward the optimiser minimises (`reward/rewards.py`)",
            allowed=check_reward,
            expect="one of " + ", ".join(DEFAULT_REWARDS),
        ),
        Setting("sla_us", float, 500.0, "the tail-latency SLA (µs)", low=0, low_open=True),
        Setting(
            "percentile",
            float,
            99.0,
            "the percentile the SLA bounds",
            allowed=check_percentile,
            expect="one of " + ", ".join(f"{p:g}" for p in ALLOWED_PERCENTILES),
        ),
    ),
    "tuning": TUNING_TABLE,
    "state": _in(
        "state",
        Setting(
            "dir",
            str,
            "/var/lib/tuner",
            "state directory (relative paths in the file: relative to the file)",
            allowed=lambda v: None if v else "a directory",
            expect="a directory",
        ),
    ),
    "grpc": _in(
        "grpc",
        Setting(
            "listen",
            str,
            "unix:///run/tuner/tuner.sock",
            "the API's address: a unix socket or HOST:PORT; non-loopback needs token_file or tls_client_ca",
            allowed=check_grpc_address,
            expect="unix:///path.sock or HOST:PORT",
        ),
        _path("tls_cert", "TLS certificate (with tls_key)"),
        _path("tls_key", "TLS private key (with tls_cert)"),
        _path("tls_client_ca", "with TLS: client certificates are required, signed by this CA"),
        _path("token_file", "bearer token (`authorization: Bearer ...`, compared in constant time)"),
    ),
    "metrics": _in(
        "metrics",
        Setting(
            "listen",
            str,
            "127.0.0.1:9464",
            'the Prometheus endpoint, HOST:PORT; "off" disables it',
            allowed=_listen_or_off,
            expect='HOST:PORT or "off"',
        ),
    ),
    "history": _in(
        "history",
        Setting(
            "warm_start",
            bool,
            False,
            "seed each retune with the stored trials measured within the load band (tuning.context: all of them)",
        ),
        _path(
            "file",
            "an older daemon's JSON-lines history, imported into the trial store once",
            "`<state.dir>/history.jsonl`",
        ),
        Setting(
            "keep_trials",
            int,
            2000,
            "newest trials a warm start takes from each source (this host's own, its hardware class's)",
            low=1,
            high=1_000_000,
        ),
        Setting(
            "url",
            str,
            "",
            "the trial store: a fleet's postgresql://..., or sqlite:///PATH (docs/trial-store.md)",
            allowed=check_store_url,
            doc_default="`<state.dir>/trials.sqlite`",
            expect='"", "postgresql://..." or "sqlite:///absolute/path"',
        ),
    ),
}


def default(section: str, name: str) -> Any:
    """The daemon's default of `[section] name`."""
    for row in SECTIONS[section]:
        if row.name == name:
            return row.daemon_value
    raise KeyError(f"{section}.{name}")
