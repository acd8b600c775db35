"""Resolve a host spec (`sim`, `real`, or `module:factory`) to a `Host`."""

from __future__ import annotations

import importlib
import inspect
import os
import sys
from typing import Any

from actuators.host import Host
from core.errors import TunerError

BUILTIN = {
    "sim": "actuators.sim.host:make_sim_host",
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
    from actuators.loadctl import CommandLoad

    return CommandLoad(tuner_load_template() if command == "tuner" else command, server=server, seconds=seconds)


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
