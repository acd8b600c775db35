"""The daemon's TOML configuration: schema, defaults, and validation with one `file:line: key: expected ...`
line per problem (all problems reported at once; `tomllib` gives no line numbers, so keys are located
by scanning the source).
"""

from __future__ import annotations

import ipaddress
import math
import re
import tomllib
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from core.errors import InputError
from tuner.optimize.latscale import KINDS as LATENCY_METRICS  # `latency_metric` values

#: Percentiles a policy may target (must be one of `actuators.host.PERCENTILES`).
ALLOWED_PERCENTILES: tuple[float, ...] = (50.0, 90.0, 95.0, 99.0, 99.9)
#: Reward functions used when the optimiser does not publish its own list.
DEFAULT_REWARDS: tuple[str, ...] = ("constrained", "edp", "latency", "sla-linear")


def known_rewards() -> tuple[str, ...]:
    """Reward names the optimiser accepts (`reward.REWARDS` if that module publishes them)."""
    try:
        import reward

        names = getattr(reward, "REWARDS", None) or getattr(reward, "REWARD_NAMES", None)
        if names:
            return tuple(sorted(str(n) for n in names))
    except Exception:  # noqa: BLE001 - fall back to the documented names
        pass
    return DEFAULT_REWARDS


@dataclass(frozen=True)
class HostConfig:
    spec: str = "sim"
    options: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class KnobBounds:
    """Inclusive bounds; the host's own knob lists are filtered to them."""

    itr_us: tuple[int, int] = (0, 100_000)
    dvfs_ghz: tuple[float, float] = (0.0, 100.0)


@dataclass(frozen=True)
class PolicyConfig:
    reward: str = "constrained"
    sla_us: float = 500.0
    percentile: float = 99.0


@dataclass(frozen=True)
class TuningConfig:
    trials: int = 30
    sobol_trials: int = 8
    window_s: float = 20.0
    settle_s: float = 1.0
    seed: int = 0
    retune_period_s: float = 3600.0
    load_change_pct: float = 20.0
    guardrail_margin_pct: float = 10.0
    # issue 6 (the optimiser's `TunerSettings` fields of the same names and defaults: all on)
    context: bool = True
    context_max_qps: float = 1e6
    itr_resolution_us: int = 16
    history_max_trials: int = 100
    min_trials: int = 2
    stop_ei_pct: float = 1.0
    safe_delta: float = 0.05
    safe_radius: float = 0.2
    safe_model_error: float = 0.0
    safe_sd_scale: float = 2.0
    latency_metric: str = "log"
    window_mode: str = "adaptive"
    window_ci_pct: float = 5.0
    window_min_s: float = 2.0
    window_guard: bool = True


#: `tuning.window_mode` values (see `tuner.optimize.windowing`).
WINDOW_MODES: tuple[str, ...] = ("fixed", "adaptive")
#: `TuningConfig` fields passed to the optimiser's `TunerSettings` under the same names (issue 6).
SETTINGS_FIELDS: tuple[str, ...] = (
    "context",
    "context_max_qps",
    "itr_resolution_us",
    "history_max_trials",
    "min_trials",
    "stop_ei_pct",
    "safe_delta",
    "safe_radius",
    "safe_model_error",
    "safe_sd_scale",
    "latency_metric",
    "window_mode",
    "window_ci_pct",
    "window_min_s",
    "window_guard",
)


@dataclass(frozen=True)
class HistoryConfig:
    """The daemon's history store of completed trials (`tuner.store.history`) and warm start from it."""

    #: Seed each retune's optimiser with the stored trials (always done when `tuning.context` is on).
    warm_start: bool = False
    #: The store; None = `<state.dir>/history.jsonl`.
    file: Path | None = None
    #: Newest trials kept in the store.
    keep_trials: int = 2000


@dataclass(frozen=True)
class GrpcConfig:
    listen: str = "unix:///run/tuner/tuner.sock"
    tls_cert: Path | None = None
    tls_key: Path | None = None
    tls_client_ca: Path | None = None
    token_file: Path | None = None


@dataclass(frozen=True)
class Config:
    path: Path | None = None
    host: HostConfig = field(default_factory=HostConfig)
    knobs: KnobBounds = field(default_factory=KnobBounds)
    policy: PolicyConfig = field(default_factory=PolicyConfig)
    tuning: TuningConfig = field(default_factory=TuningConfig)
    state_dir: Path = Path("/var/lib/tuner")
    grpc: GrpcConfig = field(default_factory=GrpcConfig)
    metrics_listen: str | None = "127.0.0.1:9464"
    history: HistoryConfig = field(default_factory=HistoryConfig)

    @property
    def history_path(self) -> Path:
        """The history store file (`history.file`, default `<state.dir>/history.jsonl`)."""
        return self.history.file if self.history.file is not None else Path(self.state_dir) / "history.jsonl"

    @property
    def warm_start(self) -> bool:
        """Whether retunes are seeded from the history store (warm start, or the contextual model)."""
        return self.history.warm_start or self.tuning.context


# --------------------------------------------------------------------------------------------------
# Locating keys in the source

_TABLE_RE = re.compile(r"^\s*\[\s*([A-Za-z0-9_.\"' -]+?)\s*\]\s*(#.*)?$")


def _locate(lines: list[str], table: str, key: str | None) -> int:
    """1-based line of `key` inside `[table]` (or of the table header when key is None); 1 if not found."""
    current = ""
    header_line = 0
    key_re = re.compile(rf"^\s*\"?{re.escape(key)}\"?\s*=") if key else None
    dotted_re = (
        re.compile(rf"^\s*{re.escape(table.split('.')[-1])}\s*\.\s*{re.escape(key)}\s*=") if key and table else None
    )
    for number, line in enumerate(lines, start=1):
        m = _TABLE_RE.match(line)
        if m and not line.lstrip().startswith("[["):
            current = m.group(1).replace('"', "").replace("'", "").replace(" ", "")
            if current == table and not header_line:
                header_line = number
            if key and current == (f"{table}.{key}" if table else key):
                return number  # the key is itself a table: [table.key]
            continue
        if current == table and key_re and key_re.match(line):
            return number
        if dotted_re and current == "" and dotted_re.match(line):
            return number
    return header_line or 1


class _Checker:
    """Collects one message per problem while reading typed values out of the parsed TOML."""

    def __init__(self, path: Path, text: str) -> None:
        self.path = path
        self.lines = text.splitlines()
        self.errors: list[str] = []

    def error(self, table: str, key: str | None, message: str) -> None:
        line = _locate(self.lines, table, key)
        name = f"{table}.{key}" if key and table else (key or table)
        self.errors.append(f"{self.path}:{line}: {name}: {message}")

    def table(self, data: dict, name: str, allowed: set[str]) -> dict:
        value = data.get(name, {})
        if not isinstance(value, dict):
            self.error("", name, f"expected a table [{name}], got {type(value).__name__}")
            return {}
        for key in sorted(set(value) - allowed):
            self.error(name, key, f"unknown key: expected one of {', '.join(sorted(allowed))}")
        return value

    def get(
        self,
        table: dict,
        tname: str,
        key: str,
        default: Any,
        kind: str,
        check: Callable[[Any], str | None] | None = None,
    ) -> Any:
        if key not in table:
            return default
        value = table[key]
        converted = _convert(value, kind)
        if converted is None:
            self.error(tname, key, f"expected {_KIND_TEXT[kind]}, got {value!r}")
            return default
        if check is not None:
            problem = check(converted)
            if problem:
                self.error(tname, key, f"expected {problem}, got {value!r}")
                return default
        return converted


_KIND_TEXT = {
    "int": "an integer",
    "float": "a number",
    "str": "a string",
    "range_int": "[low, high] integers",
    "range_float": "[low, high] numbers",
    "bool": "true or false",
    "table": "a table",
}


def _convert(value: Any, kind: str) -> Any:
    if kind == "int":
        return value if isinstance(value, int) and not isinstance(value, bool) else None
    if kind == "float":
        if isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value):
            return float(value)
        return None
    if kind == "str":
        return value if isinstance(value, str) else None
    if kind == "bool":
        return value if isinstance(value, bool) else None
    if kind in ("range_int", "range_float"):
        inner = "int" if kind == "range_int" else "float"
        if isinstance(value, list) and len(value) == 2:
            lo, hi = (_convert(v, inner) for v in value)
            if lo is not None and hi is not None and lo <= hi:
                return (lo, hi)
        return None
    if kind == "table":
        return dict(value) if isinstance(value, dict) else None
    raise ValueError(kind)


def _positive(value: float) -> str | None:
    return None if value > 0 else "a value > 0"


def _non_negative(value: float) -> str | None:
    return None if value >= 0 else "a value >= 0"


def check_grpc_address(address: str) -> str | None:
    """None if `address` is `unix:PATH` or `HOST:PORT`; else what was expected."""
    if address.startswith("unix:"):
        path = address[len("unix:") :]
        path = path[2:] if path.startswith("//") else path
        if not path:
            return "unix:///absolute/path.sock"
        if len(path.encode()) > 107:
            return "a unix socket path of at most 107 bytes"
        return None
    return check_host_port(address)


def check_host_port(address: str) -> str | None:
    """None if `address` is `HOST:PORT` (IPv6 in brackets) with port 0..65535; else what was expected."""
    host, sep, port = address.rpartition(":")
    if not sep or not host or not port.isdigit() or not 0 <= int(port) <= 65535:
        return "HOST:PORT (port 0..65535) or unix:///path.sock"
    return None


def is_loopback(address: str) -> bool:
    """True for unix sockets and loopback IPs / `localhost`."""
    if address.startswith("unix:"):
        return True
    host = address.rpartition(":")[0].strip("[]")
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def _check_percentile(value: float) -> str | None:
    return (
        None
        if any(abs(value - p) < 1e-9 for p in ALLOWED_PERCENTILES)
        else "one of " + ", ".join(f"{p:g}" for p in ALLOWED_PERCENTILES)
    )


def _check_reward(value: str) -> str | None:
    names = known_rewards()
    return None if value in names else "one of " + ", ".join(repr(n) for n in names)


def _check_host_spec(value: str) -> str | None:
    if value in ("sim", "real"):
        return None
    module, sep, attr = value.partition(":")
    return None if sep and module and attr else "'sim', 'real' or 'module:factory'"


def parse_config(text: str, path: Path) -> Config:
    """Parse and validate config `text` read from `path`; raise `InputError` listing every problem."""
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        m = re.search(r"line (\d+)", str(exc))
        raise InputError(f"{path}:{m.group(1) if m else 1}: invalid TOML: {exc}") from None
    base = path.parent
    c = _Checker(path, text)

    top_allowed = {"host", "knobs", "policy", "tuning", "state", "grpc", "metrics", "history"}
    for key in sorted(set(data) - top_allowed):
        c.error("", key, f"unknown table: expected one of {', '.join(sorted(top_allowed))}")

    t = c.table(data, "host", {"spec", "options"})
    host = HostConfig(
        spec=c.get(t, "host", "spec", "sim", "str", _check_host_spec),
        options=c.get(t, "host", "options", {}, "table"),
    )

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
        reward=c.get(t, "policy", "reward", PolicyConfig.reward, "str", _check_reward),
        sla_us=c.get(t, "policy", "sla_us", PolicyConfig.sla_us, "float", _positive),
        percentile=c.get(t, "policy", "percentile", PolicyConfig.percentile, "float", _check_percentile),
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
        seed=c.get(t, "tuning", "seed", d.seed, "int", _non_negative),
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
        context_max_qps=c.get(t, "tuning", "context_max_qps", d.context_max_qps, "float", _positive),
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
        latency_metric=c.get(
            t,
            "tuning",
            "latency_metric",
            d.latency_metric,
            "str",
            lambda v: None if v in LATENCY_METRICS else "one of " + ", ".join(map(repr, LATENCY_METRICS)),
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
            p = (base / value).resolve() if not Path(value).is_absolute() else Path(value)
            if not p.is_file():
                c.error("grpc", key, f"expected a readable file, got {value!r} (not found)")
            files[key] = p
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
            f"tls_client_ca is set (anyone could retune the host), got {listen!r}",
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
        file=((base / history_file).resolve() if not Path(history_file).is_absolute() else Path(history_file))
        if history_file
        else None,
        keep_trials=c.get(
            t, "history", "keep_trials", hd.keep_trials, "int", lambda v: None if 1 <= v <= 1_000_000 else "1..1000000"
        ),
    )

    if c.errors:
        raise InputError("\n".join(c.errors))
    state_path = Path(state_dir)
    return Config(
        path=path,
        host=host,
        knobs=knobs,
        policy=policy,
        tuning=tuning,
        state_dir=state_path if state_path.is_absolute() else (base / state_path).resolve(),
        grpc=grpc_cfg,
        metrics_listen=None if metrics_listen in ("", "off") else metrics_listen,
        history=history,
    )


def load_config(path: str | Path) -> Config:
    """Read and validate the config file at `path` (relative paths inside it are relative to its directory)."""
    p = Path(path)
    try:
        text = p.read_text(encoding="utf-8")
    except OSError as exc:
        raise InputError(f"{p}: cannot read config: {exc.strerror or exc}") from None
    except UnicodeDecodeError:
        raise InputError(f"{p}:1: expected UTF-8 text") from None
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
