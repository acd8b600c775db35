"""Observe mode, the OS-policy baseline and measured savings (`Observer`).

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
from tuner.daemon.baseline import BandStats, LoadBands, Savings, energy_saved
from tuner.daemon.context import LoopContext

log = logging.getLogger("tuner.daemon.loop")

BASELINE_FILE = "baseline.json"
TUNED_FILE = "tuned.json"
#: Persist the band statistics every this many windows (and at shutdown).
SAVE_EVERY = 10


class Observer:
    """The baseline and tuned statistics by load band, and the savings between them (see the module docstring).
    `load()` reads them from the state directory; until then they are empty."""

    def __init__(self, ctx: LoopContext) -> None:
        self.ctx = ctx
        bands = LoadBands(float(ctx.config.tuning.load_change_pct))
        self.baseline = BandStats(bands)
        self.tuned = BandStats(bands)
        self.savings: Savings | None = None
        self.loaded = False
        self._unsaved = 0
        self._last_baseline_t = 0.0

    # ------------------------------------------------------------------ files

    def load(self) -> None:
        """Read the baseline and tuned statistics (a bad file starts afresh) and export them."""
        bands = LoadBands(float(self.ctx.config.tuning.load_change_pct))
        loaded = []
        for name in (BASELINE_FILE, TUNED_FILE):
            try:
                loaded.append(BandStats.load(self.ctx.store.dir / name, bands))
            except InputError as exc:
                log.warning("%s; starting it afresh", exc)
                loaded.append(BandStats(bands))
        self.baseline, self.tuned = loaded
        self.loaded = True
        self._last_baseline_t = time.monotonic()
        for k in sorted(self.baseline.data):
            self._export_band(k)
        self._export_savings()

    def save(self) -> None:
        try:
            self.baseline.save(self.ctx.store.dir / BASELINE_FILE)
            self.tuned.save(self.ctx.store.dir / TUNED_FILE)
        except OSError as exc:
            log.warning("cannot save the baseline under %s: %s", self.ctx.store.dir, exc)
        self._unsaved = 0

    # ------------------------------------------------------------------ windows

    def observe_window(self) -> None:
        """One window at the OS's own settings: measured, exported, added to the baseline; nothing written."""
        ctx = self.ctx
        ctx.set_loop_state("observing")
        try:
            m, _ = ctx.measure()
        except Exception as exc:
            if ctx.stop.is_set():
                return
            if is_permanent(exc):
                raise  # retrying cannot help: logged once, then degraded (Daemon._degrade)
            log.warning("measurement failed while observing: %s", exc, exc_info=not isinstance(exc, TunerError))
            ctx.wait(ctx.config.tuning.window_s, interruptible=True)
            return
        self.record_baseline(m)

    def record_baseline(self, m: Measurement) -> None:
        """A window at the OS's own settings."""
        k = self.baseline.add(m)
        self._export_band(k)
        self._export_savings()
        self._count_unsaved()

    def record_tuned(self, m: Measurement) -> None:
        """A holding window at the tuner's point (not the idle hold, not a baseline window)."""
        self.tuned.add(m)
        self._export_savings()
        self._count_unsaved()

    def _count_unsaved(self) -> None:
        self._unsaved += 1
        if self._unsaved >= SAVE_EVERY:
            self.save()

    def baseline_due(self) -> bool:
        """Whether a baseline window is due (`tuning.baseline_every_s` since the last, a point held)."""
        every = float(self.ctx.config.tuning.baseline_every_s or 0.0)
        held = self.ctx.state.held is not None
        return every > 0 and held and time.monotonic() - self._last_baseline_t >= every

    def baseline_window(self) -> None:
        """Hand the knobs back to the OS for one window, measure it as baseline, then re-apply the held point."""
        ctx = self.ctx
        self._last_baseline_t = time.monotonic()
        held = (ctx.state.held or {}).get("point")
        ctx.set_loop_state("observing")
        host = ctx.host
        if host is None:
            return
        permanent = False
        try:
            host.restore()
            ctx.set_point(None)
            ctx.wait(ctx.config.tuning.settle_s, interruptible=False)
            m, _ = ctx.measure()
            if m.point is None:  # the OS really was in charge
                self.record_baseline(m)
        except TunerError as exc:
            permanent = is_permanent(exc)
            if permanent:
                raise  # the held point is not re-applied: the loop stops tuning (Daemon._degrade)
            if not ctx.stop.is_set():
                log.warning("baseline window failed: %s", exc)
        finally:
            if held is not None and not ctx.stop.is_set() and not permanent:
                ctx.apply(held)

    # ------------------------------------------------------------------ exports

    def _export_band(self, k: int) -> None:
        band = self.baseline.data[k]
        label = self.baseline.bands.label(k)
        power = band.power.mean if band.power.n else None
        self.ctx.metrics.set_baseline(label, power, {p: mo.mean for p, mo in band.latency.items()}, band.windows)

    def _export_savings(self) -> None:
        self.savings = energy_saved(self.baseline, self.tuned)
        s = self.savings
        self.ctx.metrics.set_savings(*((s.ratio, s.lower, s.upper) if s else (None, None, None)))

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
