"""The daemon's TOML configuration: schema, defaults, and validation with one `file:line: key: expected ...`
line per problem (all problems reported at once; `tomllib` gives no line numbers, so keys are located
by scanning the source).

Modules: `tables` (every key declared once as a `tuner.optimize.table.Setting` row: `SECTIONS`, `TUNING_TABLE`),
`schema` (the dataclasses, their defaults from the rows), `checks` (locating keys, typed reads, value checks),
`parse` (`parse_config`, `load_config`, `read_token`), `reference` (the generated reference in docs/daemon.md).
Everything callers use is re-exported here.
"""

from tuner.config.checks import check_grpc_address, check_host_port, is_loopback
from tuner.config.parse import load_config, parse_config, read_token
from tuner.config.schema import (
    ALLOWED_PERCENTILES,
    DEFAULT_REWARDS,
    SETTINGS_FIELDS,
    WINDOW_MODES,
    Config,
    GrpcConfig,
    HistoryConfig,
    HostConfig,
    KnobBounds,
    PolicyConfig,
    TuningConfig,
    known_rewards,
)
from tuner.config.tables import SECTIONS, TUNING_TABLE

__all__ = [
    "ALLOWED_PERCENTILES",
    "DEFAULT_REWARDS",
    "SECTIONS",
    "SETTINGS_FIELDS",
    "TUNING_TABLE",
    "WINDOW_MODES",
    "Config",
    "GrpcConfig",
    "HistoryConfig",
    "HostConfig",
    "KnobBounds",
    "PolicyConfig",
    "TuningConfig",
    "check_grpc_address",
    "check_host_port",
    "is_loopback",
    "known_rewards",
    "load_config",
    "parse_config",
    "read_token",
]
