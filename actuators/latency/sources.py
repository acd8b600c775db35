"""External latency sources (`LatencySource`): a Prometheus instant query, an operator command, a file.

None of these sees individual samples, so none can give an order-statistic CI. Their windows are
`ExternalWindow`s with `ci_known=False` and a zero-width CI `(v, v)` unless the hook supplies one:
a consumer must read `ci_known=False` as "noise unknown" (for Ax: `sem=None`, let the model infer
the noise), never as "exact".

The hook format they read is `actuators.latency.hook`.
"""

from __future__ import annotations

import json
import math
import os
import subprocess
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

from actuators import promapi
from actuators.latency.dist import PERCENTILES
from actuators.latency.hook import HOOK_KEYS, ExternalWindow, hook_json, parse_hook_json
from core.errors import HostError

__all__ = [
    "HOOK_KEYS",
    "CommandLatency",
    "ExternalWindow",
    "FileLatency",
    "PrometheusLatency",
    "hook_json",
    "make_latency_source",
    "parse_hook_json",
]


class CommandLatency:
    """`LatencySource` from an operator command (argv list, no shell), in one of two modes.

    * `mode="end"` (default): the command runs at `end()` and reports on the window that just ended;
      it gets `TUNER_WINDOW_START_UNIX`, `TUNER_WINDOW_END_UNIX`, `TUNER_WINDOW_SECONDS` in its
      environment (e.g. a script that asks the operator's monitoring).
    * `mode="span"`: the command starts at `begin()` and measures while it runs; `end()` closes its
      stdin and it must then print its result and exit. This is how a prober on a client machine is
      driven: `["ssh", "client", "python3", "-m", "actuators.latency.prober", "--target", "SERVER:11211",
      "--until-eof"]`. Its start-up time (interpreter, ssh) is cut off the front of the window, and
      its clock is not compared with ours (no staleness check).

    Either way it must print the hook JSON on stdout and exit 0 within `timeout_s` of `end()` (it is
    killed otherwise).
    """

    def __init__(
        self,
        argv: Sequence[str],
        timeout_s: float = 10.0,
        mode: str = "end",
        clock: Callable[[], float] = time.time,
    ) -> None:
        if isinstance(argv, str) or not argv or not all(isinstance(a, str) and a for a in argv):
            raise HostError(f"hook command {argv!r}: expected a non-empty argv list of strings (no shell)")
        if not timeout_s > 0:
            raise HostError(f"hook command timeout {timeout_s!r}: expected > 0 s")
        if mode not in ("end", "span"):
            raise HostError(f"hook command mode {mode!r}: expected 'end' or 'span'")
        self.argv = list(argv)
        self.timeout_s = timeout_s
        self.mode = mode
        self._clock = clock
        self._start: float | None = None
        self._proc: subprocess.Popen[str] | None = None

    @property
    def origin(self) -> str:
        return f"hook command {self.argv[0]!r}"

    def begin(self) -> None:
        self._kill()  # a window that was begun and never ended
        self._start = self._clock()
        if self.mode == "span":
            env = dict(os.environ, TUNER_WINDOW_START_UNIX=f"{self._start:.6f}")
            self._proc = self._spawn(env, stdin=subprocess.PIPE)

    def end(self) -> ExternalWindow:
        if self._start is None:
            raise HostError(f"{self.origin}: end() without begin()")
        start, end = self._start, self._clock()
        self._start = None
        if self.mode == "span":
            proc, self._proc = self._proc, None
            assert proc is not None
            try:
                out, err = proc.communicate(timeout=self.timeout_s)  # closes stdin: "window over"
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.communicate()
                raise HostError(
                    f"{self.origin}: did not finish within {self.timeout_s:g} s of end() (killed)"
                ) from None
            not_before = None
        else:
            env = dict(
                os.environ,
                TUNER_WINDOW_START_UNIX=f"{start:.6f}",
                TUNER_WINDOW_END_UNIX=f"{end:.6f}",
                TUNER_WINDOW_SECONDS=f"{end - start:.6f}",
            )
            proc = self._spawn(env, stdin=subprocess.DEVNULL)
            try:
                out, err = proc.communicate(timeout=self.timeout_s)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.communicate()
                raise HostError(f"{self.origin}: did not finish within {self.timeout_s:g} s (killed)") from None
            not_before = start
        if proc.returncode != 0:
            last = (err.strip().splitlines() or ["no stderr"])[-1][:160]
            raise HostError(f"{self.origin}: exited with status {proc.returncode}: {last}")
        return parse_hook_json(out, self.origin, end - start, not_before_unix=not_before)

    def close(self) -> None:
        """Kill a span-mode command that is still running (idempotent)."""
        self._kill()
        self._start = None

    def _spawn(self, env: dict[str, str], stdin: int) -> subprocess.Popen[str]:
        try:
            return subprocess.Popen(
                self.argv, stdin=stdin, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env
            )
        except FileNotFoundError:
            raise HostError(f"{self.origin}: not found (give an absolute path or put it on PATH)") from None
        except PermissionError:
            raise HostError(f"{self.origin}: permission denied (is it executable?)") from None
        except OSError as exc:
            raise HostError(f"{self.origin}: cannot run: {exc.strerror or exc}") from None

    def _kill(self) -> None:
        proc, self._proc = self._proc, None
        if proc is not None and proc.poll() is None:
            proc.kill()
        if proc is not None:
            proc.communicate()


class FileLatency:
    """`LatencySource` that reads the hook JSON from a file at `end()` (written by the operator's agent).

    With `require_fresh` (default) the result must belong to this window: its `window_end_unix`, or
    the file's mtime when that key is absent, must not be older than `begin()`.
    """

    def __init__(
        self, path: str | os.PathLike[str], require_fresh: bool = True, clock: Callable[[], float] = time.time
    ) -> None:
        self.path = Path(path)
        self.require_fresh = require_fresh
        self._clock = clock
        self._start: float | None = None

    @property
    def origin(self) -> str:
        return f"hook file {str(self.path)!r}"

    def begin(self) -> None:
        self._start = self._clock()

    def end(self) -> ExternalWindow:
        if self._start is None:
            raise HostError(f"{self.origin}: end() without begin()")
        start, end = self._start, self._clock()
        self._start = None
        try:
            text = self.path.read_text()
            mtime = self.path.stat().st_mtime
        except FileNotFoundError:
            raise HostError(f"{self.origin}: does not exist") from None
        except OSError as exc:
            raise HostError(f"{self.origin}: cannot read: {exc.strerror or exc}") from None
        not_before = start if self.require_fresh else None
        window = parse_hook_json(text, self.origin, end - start, not_before_unix=not_before)
        if self.require_fresh and "window_end_unix" not in json.loads(text) and mtime < start:
            raise HostError(
                f"{self.origin}: stale: not modified since the window began (mtime {mtime:.3f} < {start:.3f})"
            )
        return window

    def close(self) -> None:
        """Nothing to release."""


# -- Prometheus ------------------------------------------------------------------------------------
class PrometheusLatency:
    """`LatencySource` from Prometheus instant queries (`GET /api/v1/query`), one per percentile.

    `quantile_query` must contain `{q}` (the quantile, e.g. 0.99) and may contain `{window}` (the
    window length as a Prometheus duration, e.g. `1500ms`), for example
    `histogram_quantile({q}, sum(rate(app_request_duration_seconds_bucket[{window}])) by (le))`.
    `count_query` (optional, may use `{window}`) gives the request count, e.g.
    `sum(increase(app_request_duration_seconds_count[{window}]))`; without it `requests` is 0.
    Queries are evaluated at the window's end time. Results are multiplied by `scale_to_us`
    (1e6 for histograms in seconds). `min_window_s` is a floor for `{window}` (rate() needs two
    scrapes in range); `headers` are sent with every request (e.g. `Authorization`).
    """

    def __init__(
        self,
        url: str = "http://127.0.0.1:9090",
        quantile_query: str = "",
        count_query: str | None = None,
        scale_to_us: float = 1e6,
        timeout_s: float = 2.0,
        min_window_s: float = 0.0,
        percentiles: Iterable[float] = PERCENTILES,
        headers: Mapping[str, str] | None = None,
        clock: Callable[[], float] = time.time,
    ) -> None:
        base_url = promapi.check_url(url)
        if "{q}" not in quantile_query:
            raise HostError(
                "Prometheus quantile_query must contain {q}, e.g. "
                "histogram_quantile({q}, sum(rate(X_bucket[{window}])) by (le))"
            )
        if not timeout_s > 0 or not scale_to_us > 0:
            raise HostError("Prometheus timeout_s and scale_to_us must be positive")
        self.url = base_url
        self.quantile_query = quantile_query
        self.count_query = count_query
        self.scale_to_us = scale_to_us
        self.timeout_s = timeout_s
        self.min_window_s = min_window_s
        self.percentiles = tuple(float(p) for p in percentiles)
        self._headers = dict(headers or {})  # e.g. Authorization; never logged
        self._clock = clock
        self._start: float | None = None

    def begin(self) -> None:
        self._start = self._clock()

    def end(self) -> ExternalWindow:
        if self._start is None:
            raise HostError(f"Prometheus {self.url}: end() without begin()")
        start, end = self._start, self._clock()
        self._start = None
        seconds = max(end - start, self.min_window_s)
        window = f"{max(int(round(seconds * 1000)), 1)}ms"
        values: dict[float, float] = {}
        warnings: list[str] = []
        for pct in self.percentiles:
            query = self.quantile_query.format(q=f"{pct / 100:g}", window=window)
            value, warn = self.query(query, at_unix=end)
            values[pct] = value * self.scale_to_us
            warnings += warn
        requests = 0
        if self.count_query:
            count, warn = self.query(self.count_query.format(window=window), at_unix=end)
            requests = int(round(count))
            warnings += warn
        return ExternalWindow(
            requests=requests,
            latency_us=values,
            latency_ci_us={p: (v, v) for p, v in values.items()},
            source=f"prometheus {self.url}",
            seconds=end - start,
            ci_known=False,
            warnings=tuple(warnings),
        )

    def close(self) -> None:
        """Nothing to release (one HTTP request per query)."""

    def query(self, promql: str, at_unix: float | None = None) -> tuple[float, list[str]]:
        """One instant query that must return exactly one finite sample; (value, warnings)."""
        sample = promapi.instant_query(
            self.url,
            promql,
            timeout_s=self.timeout_s,
            at_unix=at_unix,
            headers=self._headers,
            no_series_hint="metric not scraped, or the window is shorter than two scrape intervals",
            several_hint="aggregate to one, e.g. sum(...) by (le)",
        )
        where = f"Prometheus {self.url}: query {promql!r}"
        if math.isnan(sample.value):
            raise HostError(f"{where}: NaN (no observations in the window)")
        if not math.isfinite(sample.value) or sample.value < 0:
            raise HostError(f"{where}: value {sample.value!r} is not a finite latency")
        return sample.value, list(sample.warnings)


# -- configuration ---------------------------------------------------------------------------------
def make_latency_source(spec: Mapping[str, Any], settings_root: str | os.PathLike[str] = "/") -> Any:
    """Build a `LatencySource` from a config mapping with a `kind`:

    `{"kind": "prober", "target": "10.0.0.5:11211", "rate_hz": 200, ...}` (any `ProberConfig` field),
    `{"kind": "prometheus", "url": ..., "quantile_query": ..., "count_query": ...}`,
    `{"kind": "command", "argv": [...], "mode": "end"|"span", "timeout_s": ...}`,
    `{"kind": "file", "path": ..., "require_fresh": true}`. Unknown kinds or options -> one-line HostError.
    """
    import dataclasses
    import inspect

    options = dict(spec)
    kind = options.pop("kind", None)
    if kind == "prober":
        from actuators.latency.prober import Prober, ProberConfig

        allowed = {f.name for f in dataclasses.fields(ProberConfig)}
        factory: Callable[..., Any] = lambda **kw: Prober(ProberConfig(**kw), settings_root=settings_root)
    else:
        cls = {"prometheus": PrometheusLatency, "command": CommandLatency, "file": FileLatency}.get(str(kind))
        if cls is None:
            raise HostError(f"latency source kind {kind!r}: expected prober, prometheus, command or file")
        allowed = set(inspect.signature(cls).parameters) - {"clock"}
        factory = cls
    unknown = sorted(set(options) - allowed)
    if unknown:
        raise HostError(
            f"latency source {kind!r}: unknown option {unknown[0]!r} (allowed: {', '.join(sorted(allowed))})"
        )
    try:
        return factory(**options)
    except TypeError as exc:
        raise HostError(f"latency source {kind!r}: {exc}") from None
