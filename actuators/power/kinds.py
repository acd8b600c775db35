"""Energy sources by name: `[host.options] energy` and `energy_compare` build theirs through `build_source`.

`energy` is today's string (auto | powercap | msr: RAPL, unchanged) or a table `{kind = "...", ...}`. Kind `rapl`
takes `prefer` (auto | powercap | msr); every other kind is a `PowerReader` module in `READERS` whose
`make_reader(**options)` receives the table's keys except `kind` and the meter's own (`method`, `give_up_s`, see
`actuators.power.sampled`), and is read through a `SampledEnergyMeter`.

Adding a reader: one line in `READERS` (kind -> module path); the module defines `make_reader(**options) ->
PowerReader`, raising a one-line `HostError` naming the bad key as `energy.KEY` (permanent=True: retrying cannot
fix a configuration), and an `UnreachableError` when its server does not answer (refused, timed out, HTTP 5xx).

Faults at start-up: every error building a reader is permanent (one line naming the field; the daemon's start-up
fails, or observe mode drops the source), except an `UnreachableError`: then the source is kept and its reader
built when the server first answers (`actuators.power.deferred`), its windows' energy unknown until then.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from typing import Any

from actuators.power.deferred import DeferredReader, provisional_info
from actuators.power.sampled import METHODS, SampledEnergyMeter
from actuators.power.source import EnergySource, PowerReader
from core.errors import HostError, UnreachableError

RAPL_PREFER = ("auto", "powercap", "msr")

#: kind -> module whose `make_reader(**options)` returns a `PowerReader`.
READERS: dict[str, str] = {
    "ipmi": "actuators.power.ipmi",
    "redfish": "actuators.power.redfish",
    "prometheus": "actuators.power.promquery",
}

#: Keys of a reader's table the meter takes (the rest go to `make_reader`).
METER_KEYS = ("method", "give_up_s")


def kinds() -> tuple[str, ...]:
    return ("rapl", *READERS)


def make_power_reader(kind: str, options: dict[str, Any]) -> PowerReader:
    """The `PowerReader` of `kind` (a key of `READERS`) built from `options`."""
    try:
        module = importlib.import_module(READERS[kind])
    except ImportError as exc:  # a reader's client library comes with an extra (redfish: `tuner[redfish]`)
        raise HostError(
            f"energy: kind {kind} needs the Python package {exc.name!r}, which is not installed "
            f"(pip install {exc.name}; for redfish the extra 'tuner[redfish]')",
            permanent=True,
        ) from None
    factory: Callable[..., PowerReader] = module.make_reader
    try:
        return factory(**options)
    except TypeError as exc:
        raise HostError(f"energy: bad option for kind {kind} ({exc})", permanent=True) from None


def build_source(spec: Any, rapl: Callable[[str], EnergySource], field: str = "energy") -> EnergySource:
    """An `EnergySource` from a `[host.options]` value: a RAPL string or a `{kind = ...}` table; `rapl(prefer)`
    builds RAPL. Errors are one line naming `field` (`energy`, `energy_compare[1]`, ...)."""
    if isinstance(spec, str):
        if spec not in RAPL_PREFER:
            raise HostError(
                f"{field}: {spec!r}: expected {' | '.join(RAPL_PREFER)} or a table {{kind = ...}}", permanent=True
            )
        return rapl(spec)
    if not isinstance(spec, dict):
        raise HostError(f"{field}: expected a string or a table, got {type(spec).__name__}", permanent=True)
    opts = dict(spec)
    kind = opts.pop("kind", None)
    if kind == "rapl":
        prefer = opts.pop("prefer", "auto")
        if opts or prefer not in RAPL_PREFER:
            bad = f"prefer {prefer!r}" if not opts else f"unknown key {next(iter(opts))!r}"
            raise HostError(f"{field}: kind rapl: {bad} (takes prefer = {' | '.join(RAPL_PREFER)})", permanent=True)
        return rapl(str(prefer))
    if kind not in READERS:
        raise HostError(f"{field}.kind: {kind!r}: expected one of {', '.join(kinds())}", permanent=True)
    meter = {k: opts.pop(k) for k in METER_KEYS if k in opts}
    if meter.get("method", "trapezoid") not in METHODS:
        raise HostError(f"{field}.method: {meter['method']!r}: expected {' | '.join(METHODS)}", permanent=True)
    give_up = meter.get("give_up_s", 60.0)
    if isinstance(give_up, bool) or not isinstance(give_up, int | float) or not give_up > 0:
        raise HostError(f"{field}.give_up_s: {give_up!r}: expected seconds > 0", permanent=True)
    try:
        reader: PowerReader = make_power_reader(str(kind), opts)
    except UnreachableError:  # the server did not answer: built when it does (actuators.power.deferred)
        reader = DeferredReader(lambda: _named(field, make_power_reader, str(kind), opts), provisional_info(kind, opts))
    except HostError as exc:
        raise HostError(_rename(str(exc), field), permanent=True) from None
    return SampledEnergyMeter(reader, **meter)


def _rename(message: str, field: str) -> str:
    return message.replace("energy.", f"{field}.", 1)


def _named(
    field: str, make: Callable[[str, dict[str, Any]], PowerReader], kind: str, opts: dict[str, Any]
) -> PowerReader:
    """`make(kind, opts)`, its error naming `field` (a fault's class and permanence kept)."""
    try:
        return make(kind, opts)
    except HostError as exc:
        raise type(exc)(_rename(str(exc), field), permanent=exc.permanent) from None
