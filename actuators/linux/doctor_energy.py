"""`tuner doctor`'s energy sources: each configured source (`energy`, `energy_compare`) read side by side for a
couple of seconds -- what it reports now, its zones, how often and how finely it updates -- and, with two or more,
the gap between them (RAPL's package against the BMC's whole platform: DRAM, fans, NIC, PSU losses)."""

from __future__ import annotations

import time
from typing import Any

from actuators.linux.findings import FAIL, INFO, OK, WARN, Finding
from actuators.linux.hwio import HardwareIO
from actuators.linux.rapl import discover_meter
from actuators.power.kinds import build_source
from actuators.power.source import EnergySource
from core.errors import HostError

SAMPLE_S = 2.0


def describe_source(source: EnergySource) -> str:
    i = source.info
    return (
        f"{i.source} ({', '.join(i.zones)}; updates every {i.update_period_s:g} s, "
        f"resolution {i.resolution:g} {i.resolution_unit})"
    )


def _build(io: HardwareIO, specs: list[tuple[str, Any]]) -> tuple[list[tuple[str, EnergySource]], list[Finding]]:
    built, findings = [], []
    for field, spec in specs:
        try:
            built.append((field, build_source(spec, lambda prefer: discover_meter(io, prefer), field)))
        except HostError as exc:
            findings.append(Finding(_check(field), FAIL, str(exc), "fix the table in [host.options]"))
    return built, findings


def _check(field: str) -> str:
    return "energy" if field == "energy" else "energy-compare"


def _sample(sources: list[tuple[str, EnergySource]], seconds: float) -> dict[str, float | str]:
    """Watts of each source over `seconds` (at least two of its update periods), or why it has none."""
    out: dict[str, float | str] = {}
    live = []
    for field, s in sources:
        try:
            s.begin()
            live.append((field, s))
        except HostError as exc:
            out[field] = str(exc)
    seconds = max([seconds] + [2 * s.info.update_period_s for _, s in live])
    step = min([s.poll_interval_s for _, s in live] + [0.5])
    t0 = time.monotonic()
    while time.monotonic() - t0 < seconds:
        time.sleep(step)  # sampling the sources, not synchronising
        for field, s in list(live):
            try:
                s.poll()
            except HostError as exc:
                out[field] = str(exc)
                live.remove((field, s))
    for field, s in live:
        try:
            reading = s.end()
            out[field] = reading.energy_j / reading.seconds if reading.seconds > 0 else "no time measured"
        except HostError as exc:
            out[field] = str(exc)
    return out


def check_energy_sources(io: HardwareIO, specs: list[tuple[str, Any]], seconds: float = SAMPLE_S) -> list[Finding]:
    """One finding per configured source (what it reads now), and a gap finding when two or more read."""
    built, findings = _build(io, specs)
    watts = _sample(built, seconds)
    readings = []
    for field, source in built:
        w = watts[field]
        if isinstance(w, str):
            findings.append(
                Finding(_check(field), FAIL if field == "energy" else WARN, f"{describe_source(source)}: {w}")
            )
            continue
        readings.append((source.info.source, w))
        findings.append(Finding(_check(field), OK, f"{describe_source(source)}: {w:.1f} W now ({field})"))
    if len(readings) >= 2:
        side = ", ".join(f"{name} {w:.1f} W" for name, w in readings)
        (a, wa), (b, wb) = readings[0], readings[1]
        findings.append(Finding("energy-gap", INFO, f"side by side: {side}; {b} - {a} = {wb - wa:+.1f} W"))
    return findings
