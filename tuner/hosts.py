"""Resolve a host spec (`sim`, `real`, or `module:factory`) to a `Host`."""

from __future__ import annotations

import importlib
import inspect
import math
import os
import sys
from collections.abc import Mapping
from typing import Any

from actuators.host import Host
from core.errors import TunerError

BUILTIN = {
    "sim": "tuner.hosts:make_sim",
    "real": "actuators.real:make_real_host",
}


def _one_line(exc: BaseException) -> str:
    return " ".join(str(exc).split()) or type(exc).__name__


def tuner_load_template(extra: str = "") -> str:
    """The `tuner load` command (this Python) as a load-command template, Poisson at `{qps}` to `{server}`."""
    import shlex

    return f"{shlex.quote(sys.executable)} -m tuner.cli load --server {{server}} --qps {{qps}} --duration {{seconds}} --quiet {extra}".strip()


def load_controller(command: str, server: str = "127.0.0.1:11211", seconds: float = 86_400) -> Any:
    """A `CommandLoad` for `--load-command` ('tuner' = `tuner load`, else a template with {qps}, {seconds}, {server})."""
    import shlex

    from actuators.loadctl import CommandLoad

    template = tuner_load_template() if command == "tuner" else command
    try:
        words = [os.path.basename(w) for w in shlex.split(template)]
    except ValueError:
        words = []  # CommandLoad reports the bad template
    # `tuner load` plans its whole run in memory before it sends (~1 s per 2 M requests here): runs of <= 2 M
    # requests (at least 60 s), restarted as they end, keep its start quick and its memory small
    is_tuner_load = any(w in ("tuner", "tuner.cli") and words[i + 1 : i + 2] == ["load"] for i, w in enumerate(words))
    return CommandLoad(template, server=server, seconds=seconds, max_requests=2_000_000 if is_tuner_load else None)


def _factory(spec: str) -> Any:
    target = BUILTIN.get(spec, spec)
    module_name, sep, attr = target.partition(":")
    if not sep or not module_name or not attr:
        raise TunerError(f"--host {spec!r}: expected 'sim', 'real' or 'module:factory'")
    if spec not in BUILTIN and os.getcwd() not in sys.path and "" not in sys.path:
        sys.path.append(os.getcwd())
    try:
        module = importlib.import_module(module_name)
    except Exception as exc:  # noqa: BLE001 - any import failure is the user's host module
        raise TunerError(f"--host {spec!r}: cannot import {module_name!r}: {_one_line(exc)}") from None
    factory = getattr(module, attr, None)
    if not callable(factory):
        raise TunerError(f"--host {spec!r}: {module_name!r} has no callable {attr!r}")
    return factory


def factory_options(spec: str) -> tuple[tuple[str, ...], tuple[str, ...], bool]:
    """(accepted option names, required ones, takes **options) of the host factory, from its signature."""
    sig = inspect.signature(_factory(spec))
    names, required, var_kw = [], [], False
    for p in sig.parameters.values():
        if p.kind is p.VAR_KEYWORD:
            var_kw = True
        elif p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY):
            names.append(p.name)
            if p.default is p.empty:
                required.append(p.name)
    return tuple(names), tuple(required), var_kw


#: Factory parameters the daemon sets itself (observe mode), not the operator.
DAEMON_SET = ("parts", "optional", "nic")
#: Options `make_host` itself takes for every host (`load`: load control; `seed`: dropped if not taken).
HOST_LEVEL = ("load", "seed")


def check_options(spec: str, options: dict[str, Any], where: str = "[host.options] ") -> list[str]:
    """Every problem of `options` against the factory's signature (unknown keys, missing required ones),
    one line each; [] when they fit. A factory taking `**options` accepts any key (it checks them itself)."""
    names, required, var_kw = factory_options(spec)
    problems = []
    accepted = [n for n in names if n not in DAEMON_SET]
    for key in options:
        if key not in names and key not in HOST_LEVEL and not var_kw:
            problems.append(f"{where}{key}: not an option of host {spec!r} (accepted: {', '.join(accepted) or 'none'})")
    for key in required:
        if key not in options:
            problems.append(f"{where}{key}: required by host {spec!r}")
    return problems


def make_host(spec: str, **options: Any) -> Host:
    """Build the host named by `spec`, passing `options` to its factory.

    Option `load` (a `CommandLoad`, or a table `{command, server, seconds}`) gives the host load control through a
    generator process (`actuators.loadctl.LoadedHost`); option `seed` is passed only to factories that take it.

    Raises `TunerError` (one line) when the module does not import, the factory is missing, or the
    object it returns does not implement the `Host` protocol. Like `python -m`, a `module:factory` spec
    also finds modules in the current directory.
    """
    factory = _factory(spec)
    attr = BUILTIN.get(spec, spec).partition(":")[2]
    problems = check_options(spec, options, f"--host {spec!r}: option ")
    if problems:
        raise TunerError("; ".join(problems))
    load = options.pop("load", None)
    if "seed" in options and not _takes(factory, "seed"):
        options.pop("seed")
    try:
        host = factory(**options)
    except TunerError:
        raise
    except Exception as exc:  # noqa: BLE001
        raise TunerError(f"--host {spec!r}: factory failed: {type(exc).__name__}: {_one_line(exc)}") from None
    missing = [
        m
        for m in ("knobs", "set_itr", "set_dvfs", "point", "restore", "offered_qps", "measure")
        if not callable(getattr(host, m, None))
    ]
    if missing or not isinstance(host, Host):
        what = ", ".join(missing) if missing else "attribute 'name'"
        raise TunerError(
            f"--host {spec!r}: object from {attr!r} does not implement the Host protocol (missing: {what})"
        )
    if load is not None:
        from actuators.loadctl import CommandLoad, LoadedHost

        if isinstance(load, dict):
            load = load_controller(**load)
        if not isinstance(load, CommandLoad):
            raise TunerError(f"--host {spec!r}: option load must be a table {{command, server, seconds}}")
        return LoadedHost(host, load)
    return host


def _takes(factory: Any, name: str) -> bool:
    import inspect

    try:
        params = inspect.signature(factory).parameters.values()
    except (TypeError, ValueError):
        return True
    return any(p.name == name or p.kind is inspect.Parameter.VAR_KEYWORD for p in params)


# ------------------------------------------------------------------------------------- the simulated host

#: Keys of a `shape = "trace"` load schedule (the rest -- time_scale, clock -- pass through to the host).
TRACE_LOAD_KEYS = ("path", "bin_s", "peak_qps", "scale", "start_s", "hours")
DEFAULT_TRACE_BIN_S = 60.0
DEFAULT_TRACE_PEAK_QPS = 600_000.0  # as `tuner replay`: the busiest bin at the dissertation's peak load
EXAMPLE_LOAD = '{shape="steps", levels=[100000, 600000], step_s=240}'


def make_sim(
    seed: int = 0,
    cores: int = 16,
    qps: float | None = None,
    cache: Any = None,
    load_schedule: Mapping[str, Any] | None = None,
    plant: str = "bundled",
) -> Host:
    """The `sim` host (`actuators.sim.host.make_sim_host`), with a `load_schedule = {shape = "trace", ...}`
    option's trace file read and binned here (`traces.schedule`): the simulator does not import `traces`.
    `plant`: one of `actuators.sim.plants.PLANTS` (the zoo's plants; default the bundled simulator)."""
    from actuators.sim.host import make_sim_host

    if isinstance(load_schedule, Mapping) and load_schedule.get("shape") == "trace":
        load_schedule = trace_load(load_schedule)
    return make_sim_host(seed=seed, cores=cores, qps=qps, cache=cache, load_schedule=load_schedule, plant=plant)


def trace_load(spec: Mapping[str, Any]) -> dict[str, Any]:
    """A `shape = "trace"` load schedule as the simulator's `series` table: the trace's rate in `bin_s` bins
    (default 60 s), scaled to `peak_qps` (default 600K) or by `scale`, from `start_s`, for `hours` (default
    all of it). `path` defaults to the bundled sample day."""
    from traces.schedule import load_schedule, sample_trace_path

    rest = {k: v for k, v in spec.items() if k not in TRACE_LOAD_KEYS and k != "shape"}
    unknown = sorted(set(rest) - {"time_scale", "clock"})
    if unknown:
        allowed = ", ".join((*TRACE_LOAD_KEYS, "time_scale", "clock"))
        raise TunerError(f"sim: load_schedule (trace): unknown key(s) {', '.join(unknown)}: expected {allowed}")
    path = spec.get("path", "")
    if not isinstance(path, str):
        raise TunerError(f"sim: load_schedule.path {path!r}: expected a trace file path")
    kw: dict[str, float] = {}
    for key in ("bin_s", "peak_qps", "scale", "start_s", "hours"):
        if key in spec:
            v = spec[key]
            if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v) or v < 0:
                raise TunerError(f"sim: load_schedule.{key} {v!r}: expected a finite number >= 0")
            kw[key] = float(v)
    kw.setdefault("bin_s", DEFAULT_TRACE_BIN_S)
    if "scale" not in kw:
        kw.setdefault("peak_qps", DEFAULT_TRACE_PEAK_QPS)
    if kw["bin_s"] < 1:
        raise TunerError(f"sim: load_schedule.bin_s {kw['bin_s']:g}: expected at least 1 s")
    source = path or str(sample_trace_path())
    try:
        schedule = load_schedule(source, **kw)  # type: ignore[arg-type]
    except TunerError as exc:
        raise TunerError(f"sim: load_schedule.path: {_one_line(exc)}") from None
    return {
        "shape": "series",
        "levels": [w.qps for w in schedule.windows],
        "step_s": kw["bin_s"],
        "source": source,
        **rest,
    }


def parse_inline_table(text: str, flag: str, example: str) -> dict[str, Any]:
    """A command-line flag's TOML inline table as a dict; a one-line TunerError naming `flag` and showing
    `example` when it is not one."""
    import tomllib

    try:
        value = tomllib.loads(f"value = {text}")["value"]
    except tomllib.TOMLDecodeError as exc:
        raise TunerError(f"{flag} {text!r}: expected a TOML inline table such as {example} ({exc})") from None
    if not isinstance(value, dict):
        raise TunerError(f"{flag} {text!r}: expected a TOML inline table such as {example}")
    return value


def parse_load_option(text: str, flag: str = "--load-schedule") -> dict[str, Any]:
    """A load schedule given on the command line: a TOML inline table (the config's
    `[host.options.load_schedule]`)."""
    return parse_inline_table(text, flag, EXAMPLE_LOAD)
