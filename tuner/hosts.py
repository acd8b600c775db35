"""Resolve a host spec (`sim`, `real`, or `module:factory`) to a `Host`."""

from __future__ import annotations

import importlib
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


def make_host(spec: str, **options: Any) -> Host:
    """Build the host named by `spec`, passing `options` to its factory.

    Raises `TunerError` (one line) when the module does not import, the factory is missing, or the
    object it returns does not implement the `Host` protocol. Like `python -m`, a `module:factory` spec
    also finds modules in the current directory.
    """
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
    return host


#: Keys of a `shape = "trace"` load table (the rest -- time_scale, clock -- pass through to the host).
TRACE_LOAD_KEYS = ("path", "bin_s", "peak_qps", "scale", "start_s", "hours")
DEFAULT_TRACE_BIN_S = 60.0
DEFAULT_TRACE_PEAK_QPS = 600_000.0  # as `tuner replay`: the busiest bin at the dissertation's peak load


def make_sim(**options: Any) -> Host:
    """The `sim` host: `actuators.sim.host.make_sim_host`, with a `load = {shape = "trace", ...}` option's
    trace file read and binned here (`traces.schedule`), since the simulator does not import `traces`."""
    from actuators.sim.host import make_sim_host

    load = options.get("load")
    if isinstance(load, Mapping) and load.get("shape") == "trace":
        options["load"] = trace_load(load)
    return make_sim_host(**options)


def trace_load(spec: Mapping[str, Any]) -> dict[str, Any]:
    """A `shape = "trace"` load table as the simulator's `series` table: the trace's rate in `bin_s` bins
    (default 60 s), scaled to `peak_qps` (default 600K) or by `scale`, from `start_s`, for `hours` (default all of it).
    `path` defaults to the bundled sample day."""
    from traces.schedule import load_schedule, sample_trace_path

    rest = {k: v for k, v in spec.items() if k not in TRACE_LOAD_KEYS and k != "shape"}
    unknown = sorted(set(rest) - {"time_scale", "clock"})
    if unknown:
        allowed = ", ".join((*TRACE_LOAD_KEYS, "time_scale", "clock"))
        raise TunerError(f"sim: load (trace): unknown key(s) {', '.join(unknown)}: expected {allowed}")
    path = spec.get("path", "")
    if not isinstance(path, str):
        raise TunerError(f"sim: load.path {path!r}: expected a trace file path")
    kw: dict[str, float] = {}
    for key in ("bin_s", "peak_qps", "scale", "start_s", "hours"):
        if key in spec:
            v = spec[key]
            if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v) or v < 0:
                raise TunerError(f"sim: load.{key} {v!r}: expected a finite number >= 0")
            kw[key] = float(v)
    kw.setdefault("bin_s", DEFAULT_TRACE_BIN_S)
    if "scale" not in kw:
        kw.setdefault("peak_qps", DEFAULT_TRACE_PEAK_QPS)
    if kw["bin_s"] < 1:
        raise TunerError(f"sim: load.bin_s {kw['bin_s']:g}: expected at least 1 s")
    source = path or str(sample_trace_path())
    try:
        schedule = load_schedule(source, **kw)  # type: ignore[arg-type]
    except TunerError as exc:
        raise TunerError(f"sim: load.path: {_one_line(exc)}") from None
    return {
        "shape": "series",
        "levels": [w.qps for w in schedule.windows],
        "step_s": kw["bin_s"],
        "source": source,
        **rest,
    }


def parse_load_option(text: str, flag: str = "--load") -> dict[str, Any]:
    """A load schedule given on the command line: a TOML inline table (the config's `[host.options.load]`)."""
    import tomllib

    try:
        value = tomllib.loads(f"load = {text}")["load"]
    except tomllib.TOMLDecodeError as exc:
        raise TunerError(f"{flag} {text!r}: expected a TOML inline table such as {EXAMPLE_LOAD} ({exc})") from None
    if not isinstance(value, dict):
        raise TunerError(f"{flag} {text!r}: expected a TOML inline table such as {EXAMPLE_LOAD}")
    return value


EXAMPLE_LOAD = '{shape="steps", levels=[100000, 600000], step_s=240}'
