"""The latency hook format: one window of latency percentiles as JSON, written by `python -m
actuators.latency.prober` or an operator's tool and read by the command and file latency sources.


    {"requests": 48000,                      # int >= 0: requests in the window
     "p50": 41.5, "p90": 55.0, "p95": 61.2, "p99": 88.0, "p99.9": 140.0,   # all five, finite, >= 0,
                                             #   non-decreasing p50 <= p90 <= p95 <= p99 <= p99.9
     "ci": {"p99": [80.0, 97.5]},            # optional, per percentile: [lo, hi] with lo <= value <= hi
     "window_end_unix": 1763890000.25,       # optional: when the window ended (staleness check)
     "hdr": "HISTFAAAA..."}                  # optional: the window's latencies as an encoded HdrHistogram
                                             #   in ns (what `python -m actuators.latency.prober` prints), so
                                             #   windows can be pooled (`actuators.latency.dist.HdrDist`)

`ci_known` is True only when `ci` gives all five percentiles. Other keys are ignored, except keys that
look like percentiles (`p999`, `p99_9`), which are errors so a typo cannot silently drop a value.
"""

from __future__ import annotations

import json
import math
import re
from dataclasses import dataclass, field
from typing import Any

from actuators.latency.dist import HdrDist
from actuators.sensors import LatencyWindow
from core.errors import HostError

#: Hook JSON key for each percentile.
HOOK_KEYS: dict[float, str] = {50.0: "p50", 90.0: "p90", 95.0: "p95", 99.0: "p99", 99.9: "p99.9"}
_PCT_LIKE = re.compile(r"^p\d")


@dataclass(frozen=True)
class ExternalWindow(LatencyWindow):
    """A `LatencyWindow` from an external source; `ci_known=False` means the CI is a placeholder (v, v)."""

    source: str = ""
    seconds: float = 0.0
    ci_known: bool = False
    warnings: tuple[str, ...] = ()
    latency_dist: HdrDist | None = field(default=None, compare=False, repr=False)


# -- hook JSON --------------------------------------------------------------------------------------
def parse_hook_json(
    text: str, origin: str, seconds: float = 0.0, not_before_unix: float | None = None
) -> ExternalWindow:
    """Parse the hook format (module docstring); HostError `origin: what was wrong` on bad input."""
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        snippet = text.strip()[:60]
        raise HostError(
            f"{origin}: output is not JSON ({exc.msg} at line {exc.lineno} col {exc.colno}): {snippet!r}"
        ) from None
    if not isinstance(data, dict):
        raise HostError(f"{origin}: expected a JSON object with requests, p50..p99.9; got {type(data).__name__}")
    known = set(HOOK_KEYS.values())
    typos = sorted(k for k in data if _PCT_LIKE.match(k) and k not in known)
    if typos:
        raise HostError(f"{origin}: unknown percentile key {typos[0]!r}: expected {', '.join(HOOK_KEYS.values())}")
    requests = data.get("requests")
    if isinstance(requests, bool) or not isinstance(requests, int) or requests < 0:
        raise HostError(f"{origin}: 'requests' must be an integer >= 0, got {requests!r}")
    values: dict[float, float] = {}
    for pct, key in HOOK_KEYS.items():
        if key not in data:
            raise HostError(f"{origin}: missing {key!r} (need all of {', '.join(HOOK_KEYS.values())}, in µs)")
        values[pct] = _finite_nonneg(data[key], origin, key)
    items = list(values.items())
    for (pa, a), (pb, b) in zip(items, items[1:]):
        if b < a:
            raise HostError(f"{origin}: percentiles must not decrease: {HOOK_KEYS[pa]}={a:g} > {HOOK_KEYS[pb]}={b:g}")
    cis = {p: (v, v) for p, v in values.items()}
    ci_raw = data.get("ci", {})
    if not isinstance(ci_raw, dict):
        raise HostError(f"{origin}: 'ci' must be an object like {{\"p99\": [lo, hi]}}")
    for key, pair in ci_raw.items():
        ci_pct = next((p for p, k in HOOK_KEYS.items() if k == key), None)
        if ci_pct is None:
            raise HostError(f"{origin}: ci key {key!r}: expected one of {', '.join(HOOK_KEYS.values())}")
        if not isinstance(pair, list) or len(pair) != 2:
            raise HostError(f"{origin}: ci.{key} must be [lo, hi], got {pair!r}")
        lo, hi = (_finite_nonneg(x, origin, f"ci.{key}") for x in pair)
        if not lo <= values[ci_pct] <= hi:
            raise HostError(f"{origin}: ci.{key} [{lo:g}, {hi:g}] does not contain {key}={values[ci_pct]:g}")
        cis[ci_pct] = (lo, hi)
    dist = None
    if "hdr" in data:
        if not isinstance(data["hdr"], str):
            raise HostError(
                f"{origin}: 'hdr' must be an encoded HdrHistogram string (ns), got {type(data['hdr']).__name__}"
            )
        try:
            dist = HdrDist.from_encoded(data["hdr"])
        except ValueError as exc:
            raise HostError(f"{origin}: 'hdr': {exc}") from None
    if "window_end_unix" in data:
        end = _finite_nonneg(data["window_end_unix"], origin, "window_end_unix")
        if not_before_unix is not None and end < not_before_unix:
            raise HostError(
                f"{origin}: stale result: window_end_unix {end:.3f} is before this window began ({not_before_unix:.3f})"
            )
    return ExternalWindow(
        requests=requests,
        latency_us=values,
        latency_ci_us=cis,
        source=origin,
        seconds=seconds,
        ci_known=set(ci_raw) == set(HOOK_KEYS.values()),
        latency_dist=dist,
    )


def hook_json(window: LatencyWindow, window_end_unix: float | None = None) -> dict[str, Any]:
    """The hook JSON for `window` (what `parse_hook_json` reads back), CIs included."""
    doc: dict[str, Any] = {"requests": int(window.requests)}
    doc.update({key: window.latency_us[pct] for pct, key in HOOK_KEYS.items()})
    doc["ci"] = {key: list(window.latency_ci_us[pct]) for pct, key in HOOK_KEYS.items()}
    if window_end_unix is not None:
        doc["window_end_unix"] = window_end_unix
    dist = getattr(window, "latency_dist", None)
    if isinstance(dist, HdrDist):
        doc["hdr"] = dist.encoded()
    return doc


def _finite_nonneg(value: Any, origin: str, key: str) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value) or value < 0:
        raise HostError(f"{origin}: {key!r} must be a finite number >= 0 (µs), got {value!r}")
    return float(value)
