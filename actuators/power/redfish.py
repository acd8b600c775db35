"""A `PowerReader` from a BMC's Redfish service (DMTF's `redfish` library): the chassis' power in watts and, where
the BMC keeps one, its energy counter in joules.

What it reads, in order of preference, on the chosen chassis (option `chassis`, else the first chassis of
`/redfish/v1/Chassis` that has power data):

1. `EnvironmentMetrics` (Redfish 2020.4 and later): `PowerWatts.Reading`, and `EnergyJoules.Reading` or
   `EnergykWh.Reading` as a cumulative energy counter where present;
2. `PowerSubsystem/PowerSupplies/*/Metrics`: the sum of the supplies' `InputPowerWatts.Reading` (and of their
   `EnergykWh` counters when every supply has one);
3. the deprecated `Power` resource of older BMCs: `PowerControl[0].PowerConsumedWatts`.

It logs in once (a Redfish session: `X-Auth-Token`, or HTTP basic auth with `auth = "basic"`), logs in again
when the BMC answers 401 (its session expired or it rebooted), and logs out at `close()`. The password is read
from `password_file`, never from the configuration.

Faults are one-line `HostError`s. Transient (retried with back-off): the BMC does not answer, times out or
answers 5xx (these three an `UnreachableError`: a BMC unreachable at start-up does not drop the source, see
`actuators.power.deferred`), answers something that is not JSON, or has no reading at the moment. Permanent (the
daemon degrades): bad options, an unreadable password file, a login refused (401) at start or after a re-login,
and, at start-up only, a chassis that is missing or has no power data.
"""

from __future__ import annotations

import json
import math
import re
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import certifi
import redfish  # type: ignore[import-untyped]  # DMTF's library ships no type information
import requests
from redfish.messages import RedfishPasswordChangeRequiredError  # type: ignore[import-untyped]  # the same library
from redfish.rest.v1 import (  # type: ignore[import-untyped]  # the same library
    BadRequestError,
    InvalidCredentialsError,
    JsonDecodingError,
    RetriesExhaustedError,
    ServerDownOrUnreachableError,
    SessionCreationError,
)

from actuators.power.source import PowerSample, SourceInfo
from core.errors import HostError, UnreachableError

#: the update period assumed when the power sensor does not state its `SensingInterval`: BMCs refresh their
#: power reading every 1-10 s, most every few seconds; longer is safe (trial windows grow), shorter is not
DEFAULT_UPDATE_PERIOD_S = 5.0
JOULES_PER_KWH = 3.6e6
#: the options of `energy = {kind = "redfish", ...}`
OPTIONS = (
    "base_url",
    "username",
    "password_file",
    "auth",
    "chassis",
    "verify_tls",
    "ca_file",
    "timeout_s",
    "update_period_s",
    "zone",
    "resolution",
    "energy_counter",
)
_ISO_DURATION = re.compile(
    r"^P(?:(\d+(?:\.\d+)?)D)?(?:T(?:(\d+(?:\.\d+)?)H)?(?:(\d+(?:\.\d+)?)M)?(?:(\d+(?:\.\d+)?)S)?)?$"
)


@dataclass(frozen=True)
class Plan:
    """Where one chassis' power is read: `kind` (environment | supplies | power) and the resources to GET."""

    chassis: str
    kind: str
    paths: tuple[str, ...]
    counter: str | None  # EnergyJoules | EnergykWh | None
    sensing_interval_s: float | None


class RedfishReader:
    """A BMC's chassis power over Redfish; see the module doc."""

    def __init__(self, options: RedfishOptions, clock: Callable[[], float] = time.monotonic) -> None:
        self.base_url = options.base_url
        self._options = options
        self._clock = clock
        self._client: Any = None
        self._client = self._connect()
        try:
            self._login()
            self.plan = find_plan(self._get, options.chassis, options.energy_counter, self.base_url)
        except HostError:
            self.close()
            raise
        counter = self.plan.counter
        period = options.update_period_s or self.plan.sensing_interval_s or DEFAULT_UPDATE_PERIOD_S
        default_resolution = {None: 1.0, "EnergyJoules": 1.0, "EnergykWh": 0.001 * JOULES_PER_KWH}[counter]
        self._info = SourceInfo(
            source="redfish",
            zones=(options.zone,),
            update_period_s=period,
            resolution=options.resolution or default_resolution,
            resolution_unit="J" if counter else "W",
        )

    @property
    def info(self) -> SourceInfo:
        return self._info

    def read(self) -> PowerSample:
        """The chassis' power (and energy counter) now."""
        t = self._clock()
        docs = [self._get(path) for path in self.plan.paths]
        watts, joules = read_plan(self.plan, docs)
        missing = joules is None if self.plan.counter else watts is None  # never a counter's window fed watts
        if missing:
            what = self.plan.counter or "power"
            raise HostError(f"Redfish {self.base_url}: {self.plan.paths[0]} has no {what} reading at the moment")
        return PowerSample(t=t, watts=watts, joules=joules)

    def close(self) -> None:
        """Log out (best effort: a BMC that does not answer keeps the session until it times out); idempotent."""
        client, self._client = self._client, None
        if client is None:
            return
        try:
            client.logout()
        except (RetriesExhaustedError, BadRequestError, JsonDecodingError, requests.RequestException, OSError):
            pass  # the session times out on the BMC

    def _connect(self) -> Any:
        opts = self._options
        try:
            return redfish.redfish_client(
                base_url=opts.base_url,
                username=opts.username,
                password=opts.password,
                cafile=opts.cafile,
                timeout=opts.timeout_s,
                max_retry=0,  # one attempt per request: the daemon's back-off retries, not a 1 s sleep loop here
            )
        except RetriesExhaustedError as exc:
            raise UnreachableError(f"Redfish {self.base_url}: cannot reach: {_cause(exc, opts.timeout_s)}") from None
        except (ServerDownOrUnreachableError, JsonDecodingError) as exc:
            raise _http_error(exc)(f"Redfish {self.base_url}: service root: {_first_line(exc)}") from None

    def _login(self) -> None:
        opts = self._options
        if opts.username is None:
            return  # a service without authentication (the DMTF mockup server)
        self._client.set_session_key(None)  # a stale token would ride along the new login
        self._client.set_authorization_key(None)
        try:
            self._client.login(auth=opts.auth)
        except InvalidCredentialsError:
            raise HostError(
                f"Redfish {self.base_url}: login as {opts.username!r} refused (HTTP 401): check username and "
                f"password_file {opts.password_file!r}",
                permanent=True,
            ) from None
        except RedfishPasswordChangeRequiredError:
            raise HostError(
                f"Redfish {self.base_url}: the BMC requires a new password for {opts.username!r} before any other "
                "request: change it on the BMC, then in password_file",
                permanent=True,
            ) from None
        except (SessionCreationError, JsonDecodingError) as exc:
            raise _http_error(exc)(f"Redfish {self.base_url}: login: {_first_line(exc)}") from None
        except RetriesExhaustedError as exc:
            raise UnreachableError(f"Redfish {self.base_url}: cannot reach: {_cause(exc, opts.timeout_s)}") from None

    def _get(self, path: str) -> Mapping[str, Any]:
        """GET `path` as a JSON object, logging in again once on a 401."""
        if self._client is None:
            raise HostError(f"Redfish {self.base_url}: read after close()", permanent=True)
        response = self._request(path)
        if response.status == 401 and self._options.username is not None:
            self._login()  # the session expired, or the BMC restarted
            response = self._request(path)
            if response.status == 401:
                raise HostError(f"Redfish {self.base_url}: GET {path}: HTTP 401 after a fresh login", permanent=True)
        if response.status != 200:
            error = UnreachableError if response.status >= 500 else HostError  # 5xx: up, but cannot serve now
            raise error(f"Redfish {self.base_url}: GET {path}: HTTP {response.status}")
        try:
            body = json.loads(response.text)  # not the library's `.dict`, which logs the whole body on an error
        except ValueError:
            raise HostError(f"Redfish {self.base_url}: GET {path}: response is not JSON") from None
        if not isinstance(body, Mapping):
            raise HostError(f"Redfish {self.base_url}: GET {path}: expected a JSON object")
        return body

    def _request(self, path: str) -> Any:
        try:
            return self._client.get(path)
        except RetriesExhaustedError as exc:
            cause = _cause(exc, self._options.timeout_s)
            raise UnreachableError(f"Redfish {self.base_url}: GET {path}: {cause}") from None
        except JsonDecodingError:
            raise HostError(f"Redfish {self.base_url}: GET {path}: response is not JSON") from None


# -- finding where the power is --------------------------------------------------------------------------------
Getter = Callable[[str], Mapping[str, Any]]


def find_plan(get: Getter, chassis: str | None, energy_counter: bool, base_url: str) -> Plan:
    """The chassis to read (by `Id` or `@odata.id`, else the first with power data) and how to read it; a
    permanent `HostError` when there is none."""
    try:
        members = [_link(m) for m in get("/redfish/v1/Chassis").get("Members", [])]
    except HostError as exc:
        raise type(exc)(f"{exc} (listing the chassis)", permanent=exc.permanent) from None
    paths = [m for m in members if m]
    if chassis is not None:
        paths = [
            m for m in paths if m.rstrip("/") == chassis.rstrip("/") or m.rstrip("/").rsplit("/", 1)[-1] == chassis
        ]
        if not paths:
            ids = ", ".join(m.rstrip("/").rsplit("/", 1)[-1] for m in members if m) or "none"
            raise HostError(
                f"Redfish {base_url}: chassis {chassis!r}: no such chassis (there are: {ids})", permanent=True
            )
    for path in paths:
        plan = _chassis_plan(get, path, energy_counter)
        if plan is not None:
            return plan
    where = f"chassis {chassis!r}" if chassis is not None else f"none of {len(paths)} chassis"
    raise HostError(
        f"Redfish {base_url}: {where} has power data (EnvironmentMetrics.PowerWatts, "
        "PowerSubsystem/PowerSupplies metrics or Power.PowerControl)",
        permanent=True,
    )


def _chassis_plan(get: Getter, path: str, energy_counter: bool) -> Plan | None:
    doc = get(path)
    env = _link(doc.get("EnvironmentMetrics"))
    if env:
        metrics = get(env)
        counter = _counter(metrics) if energy_counter else None
        if _has_reading(metrics.get("PowerWatts")) or counter:
            interval = _sensing_interval(get, metrics.get("PowerWatts"))
            return Plan(path, "environment", (env,), counter, interval)
    subsystem = _link(doc.get("PowerSubsystem"))
    if subsystem:
        supplies = _link(get(subsystem).get("PowerSupplies"))
        members = [_link(m) for m in get(supplies).get("Members", [])] if supplies else []
        metric_paths = tuple(m for m in (_link(get(s).get("Metrics")) for s in members if s) if m)
        docs = [get(m) for m in metric_paths]
        if docs and all(_has_reading(d.get("InputPowerWatts")) for d in docs):
            every_counter = energy_counter and all(_has_reading(d.get("EnergykWh")) for d in docs)
            return Plan(path, "supplies", metric_paths, "EnergykWh" if every_counter else None, None)
    power = _link(doc.get("Power"))
    if power:
        control = get(power).get("PowerControl") or [{}]
        if (
            isinstance(control, list)
            and isinstance(control[0], Mapping)
            and control[0].get("PowerConsumedWatts") is not None
        ):
            return Plan(path, "power", (power,), None, None)
    return None


def read_plan(plan: Plan, docs: Sequence[Mapping[str, Any]]) -> tuple[float | None, float | None]:
    """(watts, joules) from the documents of `plan.paths`; None where the BMC has no reading now."""
    if plan.kind == "environment":
        watts = _reading(docs[0].get("PowerWatts"))
        joules = _counter_joules(docs[0], plan.counter)
        return watts, joules
    if plan.kind == "supplies":
        readings = [_reading(d.get("InputPowerWatts")) for d in docs]
        watts = None if any(r is None for r in readings) else sum(r for r in readings if r is not None)
        energies = [_counter_joules(d, plan.counter) for d in docs]
        joules = None if not plan.counter or any(e is None for e in energies) else sum(e for e in energies if e)
        return watts, joules
    control = docs[0].get("PowerControl") or [{}]
    value = (
        control[0].get("PowerConsumedWatts") if isinstance(control, list) and isinstance(control[0], Mapping) else None
    )
    return _number(value), None


def _link(value: object) -> str | None:
    if isinstance(value, Mapping) and isinstance(value.get("@odata.id"), str):
        return str(value["@odata.id"])
    return None


def _number(value: object) -> float | None:
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value) or value < 0:
        return None
    return float(value)


def _reading(excerpt: object) -> float | None:
    return _number(excerpt.get("Reading")) if isinstance(excerpt, Mapping) else None


def _has_reading(excerpt: object) -> bool:
    return isinstance(excerpt, Mapping) and "Reading" in excerpt


def _counter(metrics: Mapping[str, Any]) -> str | None:
    return next((name for name in ("EnergyJoules", "EnergykWh") if _has_reading(metrics.get(name))), None)


def _counter_joules(doc: Mapping[str, Any], counter: str | None) -> float | None:
    value = _reading(doc.get(counter)) if counter else None
    return None if value is None else value * (JOULES_PER_KWH if counter == "EnergykWh" else 1.0)


def _sensing_interval(get: Getter, excerpt: object) -> float | None:
    """The power sensor's `SensingInterval` (ISO 8601, e.g. `PT1S`) through the excerpt's `DataSourceUri`."""
    uri = excerpt.get("DataSourceUri") if isinstance(excerpt, Mapping) else None
    if not isinstance(uri, str):
        return None
    try:
        text = get(uri).get("SensingInterval")
    except HostError:
        return None  # the sensor resource is optional: the default period stands
    return iso_duration(text) if isinstance(text, str) else None


def iso_duration(text: str) -> float | None:
    """Seconds of an ISO 8601 duration of days, hours, minutes, seconds (`PT0.5S`, `PT1M`), or None."""
    match = _ISO_DURATION.match(text)
    if match is None or text in ("P", "PT"):
        return None
    days, hours, minutes, seconds = (float(g) if g else 0.0 for g in match.groups())
    total = days * 86400 + hours * 3600 + minutes * 60 + seconds
    return total if total > 0 else None


def _cause(exc: BaseException, timeout_s: float) -> str:
    """Why a request got no answer (the library wraps requests' error in its `RetriesExhaustedError`)."""
    cause = exc.__cause__ or exc.__context__
    if isinstance(cause, requests.Timeout):
        return f"no answer within {timeout_s:g} s"
    text = _first_line(cause) if cause is not None else "no answer"
    if "refused" in text.lower():
        return "connection refused"
    return f"no answer ({text[:120]})"


def _http_error(exc: BaseException) -> type[HostError]:
    """`UnreachableError` when the library's error says HTTP 5xx (`return code: 503`, `HTTP 500: ...`), else
    `HostError` (the BMC answered, and not with a fault of its own)."""
    match = re.search(r"(?:return code:|HTTP) (\d{3})", str(exc))
    return UnreachableError if match and int(match.group(1)) >= 500 else HostError


def _first_line(exc: BaseException) -> str:
    return (str(exc).strip().splitlines() or [type(exc).__name__])[0]


# -- options ---------------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class RedfishOptions:
    """The checked options; `password` is read from `password_file`, `cafile` is what TLS is verified against."""

    base_url: str
    username: str | None = None
    password_file: str | None = None
    password: str | None = field(default=None, repr=False)
    auth: str = "session"
    chassis: str | None = None
    cafile: str | None = None
    timeout_s: float = 3.0
    update_period_s: float | None = None
    zone: str = "platform"
    resolution: float | None = None
    energy_counter: bool = True


def _bad(key: str, message: str) -> HostError:
    """A bad option, named as the configuration's field `energy.KEY`: permanent (the same options fail the same way)."""
    return HostError(f"energy.{key}: {message} (redfish energy source)", permanent=True)


def parse_options(options: Mapping[str, object]) -> RedfishOptions:
    """`RedfishOptions` from the options of `energy = {kind = "redfish", ...}` (`OPTIONS`); a one-line permanent
    `HostError` naming the first bad one."""
    unknown = sorted(set(options) - set(OPTIONS))
    if unknown:
        hint = " (put the password in a file: password_file)" if unknown[0] == "password" else ""
        raise _bad(unknown[0], f"unknown option{hint} (allowed: {', '.join(OPTIONS)})")
    url = options.get("base_url")
    if not isinstance(url, str) or not re.match(r"^https?://[^/\s]+", url):
        raise _bad("base_url", f"{url!r}: expected https://BMC (or http://host:port)")
    text = {name: _text(options, name) for name in ("username", "password_file", "chassis", "ca_file")}
    if (text["username"] is None) != (text["password_file"] is None):
        raise _bad("username", "give it with password_file, or neither (a service without authentication)")
    auth = options.get("auth", "session")
    if auth not in ("session", "basic"):
        raise _bad("auth", f"{auth!r}: expected session or basic")
    numbers = {name: _positive(options, name) for name in ("timeout_s", "update_period_s", "resolution")}
    flags = {name: options.get(name, True) for name in ("verify_tls", "energy_counter")}
    for name, flag in flags.items():
        if not isinstance(flag, bool):
            raise _bad(name, f"{flag!r}: expected true or false")
    zone = options.get("zone", "platform")
    if not isinstance(zone, str) or not zone:
        raise _bad("zone", f"{zone!r}: expected a non-empty label value")
    if text["ca_file"] is not None and not flags["verify_tls"]:
        raise _bad("ca_file", "given with verify_tls = false: verify against it, or drop it")
    cafile = (text["ca_file"] or certifi.where()) if flags["verify_tls"] else None
    return RedfishOptions(
        base_url=url.rstrip("/"),
        username=text["username"],
        password_file=text["password_file"],
        password=_password(text["password_file"]),
        auth=str(auth),
        chassis=text["chassis"],
        cafile=cafile,
        timeout_s=numbers["timeout_s"] or 3.0,
        update_period_s=numbers["update_period_s"],
        zone=zone,
        resolution=numbers["resolution"],
        energy_counter=bool(flags["energy_counter"]),
    )


def _text(options: Mapping[str, object], name: str) -> str | None:
    value = options.get(name)
    if value is not None and (not isinstance(value, str) or not value):
        raise _bad(name, f"{value!r}: expected a non-empty string")
    return value


def _positive(options: Mapping[str, object], name: str) -> float | None:
    value = options.get(name)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value) or value <= 0:
        raise _bad(name, f"{value!r}: expected a number > 0")
    return float(value)


def _password(path: str | None) -> str | None:
    if path is None:
        return None
    try:
        password = Path(path).read_text().rstrip("\r\n")
    except OSError as exc:
        raise _bad("password_file", f"{path!r}: cannot read: {exc.strerror or exc}") from None
    if not password:
        raise _bad("password_file", f"{path!r}: empty")
    return password


def make_reader(**options: object) -> RedfishReader:
    """The reader from the options of `[host.options] energy = {kind = "redfish", base_url = ..., username = ...,
    password_file = ..., ...}` (`OPTIONS`; the source's `kind` is not among them): logs in and finds the chassis."""
    return RedfishReader(parse_options(options))
