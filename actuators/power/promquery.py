"""A `PowerReader` from a Prometheus instant query: a counter of joules (Kepler's node energy) or a gauge of
watts (a PDU's or a BMC exporter's power), whichever the operator already scrapes.

The query must give one series. A counter is read as its instant value, never `rate()`: the energy meter
differences the joules itself, over its own window. A counter that goes down (its exporter restarted) is read
as Prometheus's `rate()` reads it: restarted from 0, so the joules handed on never go backwards.

How often a new value appears is the scrape interval of the series' `job` (from the configuration Prometheus
serves at `/api/v1/status/config`), else the global one; `update_period_s` overrides it, and where the server
serves no such endpoint (some query front ends) the reader assumes 60 s, Prometheus's own default.

Faults are `HostError`s, all transient (Prometheus down or slow, the series gone or stale may come back) except
bad options and a query that can never give one number (`several series`, a string or matrix), which are
permanent.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Mapping
from pathlib import Path

from actuators import promapi
from actuators.power.source import PowerSample, SourceInfo
from core.errors import HostError

KINDS = ("counter", "gauge")
#: the update period assumed when Prometheus does not serve its configuration: its default scrape_interval
FALLBACK_UPDATE_PERIOD_S = 60.0
#: a sample older than this many update periods is stale (the target is no longer scraped)
STALE_PERIODS = 3.0


class PromQueryReader:
    """One instant query read as a power (gauge, W) or a cumulative energy (counter, J); see the module doc."""

    def __init__(
        self,
        url: str,
        query: str,
        metric_type: str = "counter",
        update_period_s: float | None = None,
        timeout_s: float = 2.0,
        zone: str = "platform",
        resolution: float | None = None,
        bearer_token_file: str | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        try:
            self.url = promapi.check_url(url if isinstance(url, str) else "")
        except HostError:
            raise _bad("url", f"{url!r}: expected http(s)://host:port") from None
        if not isinstance(query, str) or not query.strip():
            raise _bad("query", "expected a PromQL expression giving one series")
        if metric_type not in KINDS:
            raise _bad("type", f"{metric_type!r}: expected counter (joules) or gauge (watts)")
        if not isinstance(zone, str) or not zone:
            raise _bad("zone", f"{zone!r}: expected a non-empty label value")
        for name, value in (("timeout_s", timeout_s), ("update_period_s", update_period_s), ("resolution", resolution)):
            number = isinstance(value, int | float) and not isinstance(value, bool)
            if value is not None and not (number and math.isfinite(value) and value > 0):
                raise _bad(name, f"{value!r}: expected a number > 0")
        self.query = query
        self.kind = metric_type
        self.timeout_s = float(timeout_s)
        self._headers = _auth_headers(bearer_token_file)
        self._clock = clock
        self._where = f"Prometheus {self.url}: query {query!r}"
        self._last_raw: float | None = None
        self._offset = 0.0
        first = self._query(query)  # fails here, at start-up, on a query that does not give one series
        self.update_period_from = "update_period_s" if update_period_s else ""
        period = float(update_period_s) if update_period_s else self._scrape_interval(first.labels.get("job"))
        counter = metric_type == "counter"
        self._info = SourceInfo(
            source="prometheus",
            zones=(zone,),
            update_period_s=period,
            resolution=float(resolution) if resolution else (0.001 if counter else 1.0),
            resolution_unit="J" if counter else "W",
        )

    @property
    def info(self) -> SourceInfo:
        return self._info

    def read(self) -> PowerSample:
        """The query's value now (`HostError` when it is missing, not one series, not a number, or stale)."""
        t = self._clock()
        sample = self._query(self.query)
        value = sample.value
        if math.isnan(value) or not math.isfinite(value) or value < 0:
            raise HostError(f"{self._where}: value {value!r} is not a {self._unit_name()}")
        self._check_fresh(sample.timestamp)
        if self.kind == "gauge":
            return PowerSample(t=t, watts=value)
        if self._last_raw is not None and value < self._last_raw:
            self._offset += self._last_raw  # a counter reset: it restarted from 0 (as rate() reads it)
        self._last_raw = value
        return PowerSample(t=t, joules=self._offset + value)

    def close(self) -> None:
        """Nothing to release (one HTTP request per query)."""

    def _query(self, promql: str) -> promapi.PromSample:
        try:
            return promapi.instant_query(
                self.url,
                promql,
                timeout_s=self.timeout_s,
                headers=self._headers,
                no_series_hint="not scraped (yet), or the selector matches nothing",
                several_hint="narrow the selector or aggregate to one, e.g. sum(...)",
            )
        except promapi.QueryShapeError as exc:
            raise HostError(str(exc), permanent=True) from None  # the query itself can never give one number

    def _check_fresh(self, evaluated_at: float) -> None:
        """`timestamp(query)` is the sample's scrape time for a plain selector (for an expression, the evaluation
        time: then Prometheus's own staleness, which drops a series its target no longer serves, covers it)."""
        scraped_at = self._query(f"timestamp({self.query})").value
        age = evaluated_at - scraped_at
        limit = STALE_PERIODS * self._info.update_period_s
        if age > limit:
            raise HostError(
                f"{self._where}: stale: the newest sample is {age:.1f} s old (over {STALE_PERIODS:g} update periods "
                f"of {self._info.update_period_s:g} s): is its target still scraped?"
            )

    def _scrape_interval(self, job: str | None) -> float:
        try:
            data = promapi.get_json(self.url, "/api/v1/status/config", {}, self.timeout_s, self._headers)
        except HostError:
            self.update_period_from = "assumed (no /api/v1/status/config)"
            return FALLBACK_UPDATE_PERIOD_S
        global_s, jobs = promapi.scrape_intervals(str(data.get("yaml", "")))
        if job is not None and job in jobs:
            self.update_period_from = f"scrape_interval of job {job!r}"
            return jobs[job]
        if global_s is not None:
            self.update_period_from = "global scrape_interval"
            return global_s
        self.update_period_from = "assumed (no scrape_interval in the configuration)"
        return FALLBACK_UPDATE_PERIOD_S

    def _unit_name(self) -> str:
        return "cumulative energy in joules" if self.kind == "counter" else "power in watts"


def _bad(key: str, message: str) -> HostError:
    """A bad option, named as the configuration's field `energy.KEY`: permanent (the same options fail the same way)."""
    return HostError(f"energy.{key}: {message} (prometheus energy source)", permanent=True)


def _auth_headers(token_file: str | None) -> Mapping[str, str]:
    if token_file is None:
        return {}
    try:
        token = Path(token_file).read_text().strip()
    except OSError as exc:
        raise _bad("bearer_token_file", f"{token_file!r}: cannot read: {exc.strerror or exc}") from None
    if not token:
        raise _bad("bearer_token_file", f"{token_file!r}: empty")
    return {"Authorization": f"Bearer {token}"}


#: the options of `energy = {kind = "prometheus", ...}` (`type` is the metric's: counter or gauge)
OPTIONS = ("url", "query", "type", "update_period_s", "timeout_s", "zone", "resolution", "bearer_token_file")


def make_reader(**options: object) -> PromQueryReader:
    """The reader from the options of `[host.options] energy = {kind = "prometheus", url = ..., query = ...,
    type = "counter" | "gauge", ...}` (`OPTIONS`; the source's `kind` is not among them). An unknown or
    missing option is a one-line permanent `HostError` naming it."""
    unknown = sorted(set(options) - set(OPTIONS))
    if unknown:
        raise _bad(unknown[0], f"unknown option (allowed: {', '.join(OPTIONS)})")
    missing = [name for name in ("url", "query") if name not in options]
    if missing:
        raise _bad(missing[0], "required")
    kwargs = dict(options)
    kwargs["metric_type"] = kwargs.pop("type", "counter")
    return PromQueryReader(**kwargs)  # type: ignore[arg-type]  # each option's type is checked by the constructor
