"""Prometheus's HTTP API as the sources that read it use it: an instant query that must give one sample, and the
server's loaded configuration (its scrape intervals).

Shared by the latency source (`actuators.latency.sources.PrometheusLatency`) and the power source
(`actuators.power.promquery`). Every failure is a one-line `HostError` naming the server (and the query);
none is permanent: a Prometheus that is down, slow or not yet scraping may answer at the next try. A server that
did not answer (refused, timed out, HTTP 5xx) is an `UnreachableError`, a `HostError` callers may tell apart.
"""

from __future__ import annotations

import json
import re
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from core.errors import HostError, UnreachableError


@dataclass(frozen=True)
class PromSample:
    """The one sample of an instant query: its value (NaN and infinities included: the caller judges), the
    Unix time Prometheus stamped it with, the series' labels and the server's warnings."""

    value: float
    timestamp: float
    labels: Mapping[str, str]
    warnings: tuple[str, ...]


class QueryShapeError(HostError):
    """The query gives several series, or not an instant vector or scalar: retrying the same query cannot give
    one number (its users decide whether that is permanent for them)."""


def check_url(url: str) -> str:
    """`url` without a trailing '/', or a `HostError` when it is not http(s)://host[:port][/path]."""
    parsed = urllib.parse.urlsplit(url)
    if parsed.scheme not in ("http", "https") or not parsed.netloc:
        raise HostError(f"Prometheus URL {url!r}: expected http(s)://host:port")
    return url.rstrip("/")


def get_json(
    url: str,
    path: str,
    params: Mapping[str, str],
    timeout_s: float,
    headers: Mapping[str, str] | None = None,
    where: str = "",
) -> Mapping[str, Any]:
    """GET `url + path` and return the `data` of a `"status": "success"` answer (with its `warnings`); a
    one-line `HostError` starting with `where` (default `Prometheus URL/PATH`) otherwise."""
    address = f"{url}{path}?{urllib.parse.urlencode(params)}" if params else f"{url}{path}"
    where = where or f"Prometheus {url}{path}"
    try:
        request = urllib.request.Request(address, headers=dict(headers or {}))
        with urllib.request.urlopen(request, timeout=timeout_s) as resp:
            body = resp.read()
    except urllib.error.HTTPError as exc:
        detail = _prom_error(exc.read()) or exc.reason
        error = UnreachableError if exc.code >= 500 else HostError  # 5xx: up, but cannot serve now
        raise error(f"{where}: HTTP {exc.code}: {detail}") from None
    except urllib.error.URLError as exc:
        reason = exc.reason
        text = "timed out" if isinstance(reason, TimeoutError) else getattr(reason, "strerror", None) or str(reason)
        raise UnreachableError(f"Prometheus {url}: cannot connect: {text}") from None
    except TimeoutError:
        raise UnreachableError(f"Prometheus {url}: timed out after {timeout_s:g} s") from None
    except OSError as exc:
        raise UnreachableError(f"Prometheus {url}: {exc.strerror or exc}") from None
    try:
        data = json.loads(body)
    except (ValueError, UnicodeDecodeError):
        raise HostError(f"{where}: response is not JSON: {body[:60]!r}") from None
    if not isinstance(data, Mapping) or data.get("status") != "success":
        detail = _prom_error(body) or f"status {data.get('status') if isinstance(data, Mapping) else '?'}"
        raise HostError(f"{where}: {detail}")
    result = data.get("data", {})
    if not isinstance(result, Mapping):
        raise HostError(f"{where}: malformed answer: data is {type(result).__name__}")
    warnings = data.get("warnings", [])
    return {**result, "warnings": [str(w) for w in warnings] if isinstance(warnings, list) else []}


def instant_query(
    url: str,
    promql: str,
    *,
    timeout_s: float,
    at_unix: float | None = None,
    headers: Mapping[str, str] | None = None,
    no_series_hint: str = "the metric is not scraped, or the selector matches nothing",
    several_hint: str = "aggregate to one, e.g. sum(...)",
) -> PromSample:
    """One `GET /api/v1/query` that must give exactly one sample (an instant vector of one series, or a scalar).

    `url` is a checked base URL (`check_url`); the hints end the "no series" and "N series" errors."""
    params = {"query": promql}
    if at_unix is not None:
        params["time"] = f"{at_unix:.3f}"
    where = f"Prometheus {url}: query {promql!r}"
    data = get_json(url, "/api/v1/query", params, timeout_s, headers, where)
    kind, res = data.get("resultType"), data.get("result")
    labels: Mapping[str, str] = {}
    if kind == "scalar":
        sample = res
    elif kind == "vector" and isinstance(res, list):
        if not res:
            raise HostError(f"{where}: no series ({no_series_hint})")
        if len(res) > 1:
            raise QueryShapeError(f"{where}: {len(res)} series; {several_hint}")
        sample = res[0].get("value") if isinstance(res[0], Mapping) else None
        metric = res[0].get("metric") if isinstance(res[0], Mapping) else None
        labels = {str(k): str(v) for k, v in metric.items()} if isinstance(metric, Mapping) else {}
    else:
        raise QueryShapeError(f"{where}: resultType {kind!r}; expected an instant vector or scalar")
    try:
        timestamp, value = float(sample[0]), float(sample[1])  # type: ignore[index]  # checked by the except
    except (TypeError, ValueError, IndexError, KeyError):
        raise HostError(f"{where}: malformed sample {sample!r}") from None
    return PromSample(value=value, timestamp=timestamp, labels=labels, warnings=tuple(data["warnings"]))


#: a Prometheus duration: 1h30m, 15s, 500ms (https://prometheus.io/docs/prometheus/latest/configuration/configuration/)
_DURATION = re.compile(r"(\d+)(ms|s|m|h|d|w|y)")
_UNIT_S = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0, "w": 604800.0, "y": 31536000.0}


def parse_duration(text: str) -> float | None:
    """Seconds of a Prometheus duration (`1m30s` -> 90.0), or None when `text` is not one."""
    text = text.strip().strip("'\"")
    parts = _DURATION.findall(text)
    if not parts or "".join(n + u for n, u in parts) != text:
        return None
    return sum(int(n) * _UNIT_S[u] for n, u in parts)


def scrape_intervals(config_yaml: str) -> tuple[float | None, dict[str, float]]:
    """The global scrape interval and each job's, in seconds, from the configuration Prometheus serves at
    `/api/v1/status/config`: its own YAML rendering, every default filled in (`global:` with
    `  scrape_interval: 15s`, then `scrape_configs:` of `- job_name: NAME` each with `  scrape_interval: ...`).
    Lines of any other shape are skipped."""
    global_s: float | None = None
    jobs: dict[str, float] = {}
    section, job = "", None
    for line in config_yaml.splitlines():
        if line[:1].isalpha():  # a top-level key
            section, job = line.split(":", 1)[0], None
        elif section == "scrape_configs" and line.startswith("- job_name:"):
            job = line.split(":", 1)[1].strip().strip("'\"")
        elif line.startswith("  scrape_interval:") and not line.startswith("   "):
            seconds = parse_duration(line.split(":", 1)[1])
            if seconds is not None and section == "global":
                global_s = seconds
            elif seconds is not None and section == "scrape_configs" and job is not None:
                jobs[job] = seconds
    return global_s, jobs


def _prom_error(body: bytes) -> str | None:
    try:
        data = json.loads(body)
    except (ValueError, UnicodeDecodeError):
        return None
    if isinstance(data, Mapping) and data.get("status") == "error":
        return f"{data.get('errorType', 'error')}: {data.get('error', '?')}"
    return None
