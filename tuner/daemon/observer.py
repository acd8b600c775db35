"""Observe mode, the OS-policy baseline, measured savings, and what limits the host (warnings).

Observe mode (`[host] mode = "observe"`) is how the daemon starts on a new host: it measures QPS, latency and
energy at whatever the OS has set (adaptive interrupt moderation, the cpufreq governor), writes no knob,
records no trial, and keeps the windows per load band as the baseline (`<state.dir>/baseline.json`,
`tuner.daemon.baseline`). Energy the host cannot measure (no RAPL: most VMs) is reported as unknown.

With tuning on, the holding windows at the tuned point are kept per band the same way, and the energy saved
against the baseline (with its 95 % CI) is exported as `tuner_energy_saved_ratio{,_lower,_upper}`. The
baseline comes from an earlier observe run, or from short baseline windows the daemon takes itself every
`tuning.baseline_every_s` (0 = never): the OS's settings are put back for one window, then the held point.
"""

from __future__ import annotations

import logging
import time
from typing import Any

from actuators.host import Measurement
from core.errors import InputError, TunerError, is_permanent
from tuner.daemon.base import DaemonBase
from tuner.daemon.baseline import BandStats, LoadBands, Savings, energy_saved

log = logging.getLogger("tuner.daemon.loop")

BASELINE_FILE = "baseline.json"
TUNED_FILE = "tuned.json"
#: Persist the band statistics every this many windows (and at shutdown).
SAVE_EVERY = 10


class Observing(DaemonBase):
    """Baseline, tuned statistics, savings and host warnings of `tuner.daemon.loop.Daemon`."""

    baseline: BandStats
    tuned: BandStats
    savings: Savings | None = None
    _unsaved = 0
    _last_baseline_t = 0.0
    _warnings: dict[str, list[str]] = {}  # replaced per instance by _load_bands
    mode_label = "tune"  # tune | observe | dry_run (set by Daemon.start)

    @property
    def observing(self) -> bool:
        """Observe mode, or a dry run (which measures like observe mode and records no trial)."""
        return self.mode_label != "tune"

    # ------------------------------------------------------------------ set-up

    def _load_bands(self) -> None:
        bands = LoadBands(float(self.config.tuning.load_change_pct))
        self._warnings = {}
        loaded = []
        for name in (BASELINE_FILE, TUNED_FILE):
            try:
                loaded.append(BandStats.load(self.store.dir / name, bands))
            except InputError as exc:
                log.warning("%s; starting it afresh", exc)
                loaded.append(BandStats(bands))
        self.baseline, self.tuned = loaded
        self._last_baseline_t = time.monotonic()
        for k in sorted(self.baseline.data):
            self._export_band(k)
        self._export_savings()

    def _save_bands(self) -> None:
        try:
            self.baseline.save(self.store.dir / BASELINE_FILE)
            self.tuned.save(self.store.dir / TUNED_FILE)
        except OSError as exc:
            log.warning("cannot save the baseline under %s: %s", self.store.dir, exc)
        self._unsaved = 0

    # ------------------------------------------------------------------ windows

    def _observe_window(self) -> None:
        """One window at the OS's own settings: measured, exported, added to the baseline; nothing written."""
        self._set_loop_state("observing")
        try:
            m, _ = self._measure()
        except Exception as exc:
            if self._stop.is_set():
                return
            if is_permanent(exc):
                raise  # retrying cannot help: logged once, then degraded (Daemon._degrade)
            log.warning("measurement failed while observing: %s", exc, exc_info=not isinstance(exc, TunerError))
            self._wait(self.config.tuning.window_s, interruptible=True)
            return
        self._record_baseline(m)

    def _record_baseline(self, m: Measurement) -> None:
        k = self.baseline.add(m)
        self._export_band(k)
        self._export_savings()
        self._count_unsaved()

    def _record_tuned(self, m: Measurement) -> None:
        """A holding window at the tuner's point (not the idle hold, not a baseline window)."""
        self.tuned.add(m)
        self._export_savings()
        self._count_unsaved()

    def _count_unsaved(self) -> None:
        self._unsaved += 1
        if self._unsaved >= SAVE_EVERY:
            self._save_bands()

    def _baseline_due(self) -> bool:
        every = float(getattr(self.config.tuning, "baseline_every_s", 0.0) or 0.0)
        return every > 0 and self.state.held is not None and time.monotonic() - self._last_baseline_t >= every

    def _baseline_window(self) -> None:
        """Hand the knobs back to the OS for one window, measure it as baseline, then re-apply the held point."""
        from tuner.daemon.plain import point_from

        self._last_baseline_t = time.monotonic()
        held = point_from((self.state.held or {}).get("point"))
        self._set_loop_state("observing")
        host = self.host
        if host is None:
            return
        permanent = False
        try:
            host.restore()
            with self._lock:
                self._current_point = None
            self.metrics.set_point(None)
            self._wait(self.config.tuning.settle_s, interruptible=False)
            m, _ = self._measure()
            if m.point is None:  # the OS really was in charge
                self._record_baseline(m)
        except TunerError as exc:
            permanent = is_permanent(exc)
            if permanent:
                raise  # the held point is not re-applied: the loop stops tuning (Daemon._degrade)
            if not self._stop.is_set():
                log.warning("baseline window failed: %s", exc)
        finally:
            if held is not None and not self._stop.is_set() and not permanent:
                self._apply(held)

    # ------------------------------------------------------------------ exports

    def _export_band(self, k: int) -> None:
        band = self.baseline.data[k]
        label = self.baseline.bands.label(k)
        power = band.power.mean if band.power.n else None
        self.metrics.set_baseline(label, power, {p: mo.mean for p, mo in band.latency.items()}, band.windows)

    def _export_savings(self) -> None:
        self.savings = energy_saved(self.baseline, self.tuned)
        s = self.savings
        self.metrics.set_savings(*((s.ratio, s.lower, s.upper) if s else (None, None, None)))

    def baseline_rows(self) -> list[dict[str, Any]]:
        """The baseline per band (for status and docs): band, windows, power (None = unknown), p99."""
        rows = []
        for k, band in sorted(self.baseline.data.items()):
            p99 = band.latency.get(99.0)
            rows.append(
                {
                    "band": self.baseline.bands.label(k),
                    "windows": band.windows,
                    "power_w": band.power.mean if band.power.n else None,
                    "p99_us": p99.mean if p99 else None,
                }
            )
        return rows

    # ------------------------------------------------------------------ warnings

    def _refresh_warnings(self, extra: dict[str, list[str]] | None = None) -> None:
        """Collect what limits the host now -- energy it cannot measure, the latency source's warnings (a
        same-host prober cannot see ITR delay), DVFS read-back warnings of the last apply -- log each new one
        once, and export the counts by source."""
        host = self.host
        found: dict[str, list[str]] = {
            "energy": [f"{part} unavailable: {why}" for part, why in getattr(host, "absent", {}).items()],
            "latency": [],
            "dvfs": [str(w) for w in getattr(host, "warnings", []) or []],
            "startup": list(self._warnings.get("startup", [])),
            "fault": list(self._warnings.get("fault", [])),  # both stay until the daemon restarts
        }
        source_warnings = getattr(getattr(host, "latency", None), "warnings", None)
        if callable(source_warnings):
            try:
                found["latency"] = [str(w) for w in source_warnings()]
            except Exception as exc:  # noqa: BLE001 - a warning source must not stop the loop
                found["latency"] = [f"latency source warnings unavailable: {exc}"]
        for source, lines in (extra or {}).items():
            found[source] = found.get(source, []) + lines
        seen = {w for lines in self._warnings.values() for w in lines}
        for lines in found.values():
            for w in lines:
                if w not in seen:
                    log.warning("%s", w)
        with self._lock:
            self._warnings = found
        self.metrics.set_warnings({source: len(lines) for source, lines in found.items()})

    def _after_apply(self) -> None:
        self._refresh_warnings()

    def warning_lines(self) -> list[str]:
        with self._lock:
            return [w for lines in self._warnings.values() for w in lines]
