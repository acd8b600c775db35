"""Completed trials as portable history: the `tuner.trial/v1` JSON-lines format and the daemon's bounded store.

One completed trial per line (failed trials are never written: they carry no measurement to learn from):

    {"schema": "tuner.trial/v1", "host": "db7/sim", "time": 1763900000.0,
     "objective": {"reward": "constrained", "percentile": 99.0, "sla_us": 500.0},
     "point": {"itr_us": 250, "dvfs_ghz": 1.6}, "qps": 400000.0, "measurement": {...Measurement.to_dict()...}}

`time` is when the window was measured (unix s), `qps` the offered load it ran at, `objective` the policy it was
measured under (the measurement holds every percentile, so a reader may re-score it under its own policy).
An optional `"class"` names the host's hardware class (`actuators.hwclass`), when the host reported one.
Unknown extra keys are ignored (additive evolution within v1); a different `schema` is refused.

Readers stream the file and stop at the first bad line with one `FILE:LINE: field: expected ...` error;
with a `KnobSpace`, a point the host cannot set is such an error too. `tuner trials export|import` and the
daemon's warm start (`HistoryStore`, `history.jsonl` in the state directory) use this module.
"""

from __future__ import annotations

import fcntl
import json
import logging
import math
import os
import socket
import time as _time
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from actuators.host import PERCENTILES, KnobSpace, Measurement, OperatingPoint
from core.errors import InputError, KnobRangeError, TunerError
from core.fsutil import atomic_write
from tuner.optimize.records import TrialRecord
from tuner.optimize.settings import Objective

SCHEMA = "tuner.trial/v1"
#: The daemon's history store, relative to its state directory (config `history.file`).
HISTORY_FILE = "history.jsonl"
#: Trials a replay saves into its --out directory (read by `tuner trials export --from-replay`).
REPLAY_TRIALS_FILE = "trials.jsonl"
#: Default bound on the daemon's history store (config `history.keep_trials`): newest trials are kept.
KEEP_TRIALS = 2000

_COMPLETED = "completed"

log = logging.getLogger("tuner.store.history")


@dataclass(frozen=True)
class HistoryEntry:
    """One completed trial with where (`host`), when (`time`, unix s) and under which `objective` it ran."""

    record: TrialRecord
    host: str
    time: float
    objective: Objective
    hw_class: str = ""  # the host's hardware class id ("" = unknown)

    def key(self) -> tuple:
        """Identity of the measured window (same point, load, length and energy = the same trial), used to
        drop duplicates when the same trial reaches a file twice (re-import, several sources)."""
        m = self.record.measurement
        assert m is not None
        return (
            self.record.point.itr_us,
            round(self.record.point.dvfs_ghz, 4),
            round(self.record.qps, 3),
            round(m.seconds, 6),
            round(m.energy_j, 6),
        )

    def to_line(self) -> str:
        r = self.record
        assert r.measurement is not None
        d: dict[str, Any] = {
            "schema": SCHEMA,
            "host": self.host,
            "time": self.time,
            "objective": asdict(self.objective),
            "point": {"itr_us": r.point.itr_us, "dvfs_ghz": r.point.dvfs_ghz},
            "qps": r.qps,
            "measurement": r.measurement.to_dict(),
        }
        if self.hw_class:
            d["class"] = self.hw_class
        return json.dumps(d, separators=(",", ":"), allow_nan=False)


def host_label(name: str) -> str:
    """`<hostname>/<host name>`: which machine and which `Host` a trial ran on."""
    return f"{socket.gethostname()}/{name}"


def is_exportable(r: TrialRecord) -> bool:
    """Completed, measured, at a known finite load: what a model can learn from."""
    return r.status == _COMPLETED and r.measurement is not None and r.qps is not None and math.isfinite(r.qps)


def as_objective(objective: Objective | Mapping[str, Any]) -> Objective:
    """`objective` as an `Objective` (from a dict with reward, percentile, sla_us; `TunerError` if invalid)."""
    if isinstance(objective, Objective):
        return objective
    return Objective(**{k: objective[k] for k in ("reward", "percentile", "sla_us") if k in objective})


def entries_from_records(
    records: Iterable[TrialRecord],
    *,
    host: str,
    objective: Objective | Mapping[str, Any],
    times: Sequence[float] | None = None,
) -> list[HistoryEntry]:
    """History entries for the exportable records (failed ones dropped); `times[i]` is record i's time
    (default: now)."""
    obj = as_objective(objective)
    now = _time.time()
    out = []
    for i, r in enumerate(records):
        if is_exportable(r):
            out.append(HistoryEntry(r, str(host), float(times[i]) if times is not None else now, obj))
    return out


def write_entries(path: str | Path, entries: Iterable[HistoryEntry]) -> int:
    """Replace `path` atomically with `entries` (one line each); returns how many were written."""
    lines = []
    for e in entries:
        if not is_exportable(e.record):
            continue
        try:
            lines.append(e.to_line())
        except ValueError:  # a non-finite number: no reader could use the line
            continue
    try:
        atomic_write(Path(path), ("\n".join(lines) + "\n" if lines else "").encode(), mode=0o644)
    except OSError as exc:
        raise TunerError(f"{path}: cannot write trials: {exc.strerror or exc}") from None
    return len(lines)


def write_trials(
    path: str | Path,
    records: Iterable[TrialRecord],
    *,
    host: str,
    objective: Objective | Mapping[str, Any],
    times: Sequence[float] | None = None,
) -> int:
    """Write the completed `records` to `path` (atomic; failed trials are skipped); returns how many."""
    return write_entries(path, entries_from_records(records, host=host, objective=objective, times=times))


# ------------------------------------------------------------------------------------------------ reading


class _Bad(Exception):
    """One field of one line is wrong (message: `field: expected ...`)."""


def _number(d: Mapping[str, Any], key: str, where: str, *, minimum: float = 0.0, strict: bool = False) -> float:
    if key not in d:
        raise _Bad(f"{where}{key}: expected a number, got nothing (missing)")
    v = d[key]
    if (
        isinstance(v, bool)
        or not isinstance(v, (int, float))
        or not math.isfinite(v)
        or (v <= minimum if strict else v < minimum)
    ):
        raise _Bad(f"{where}{key}: expected a finite number {'>' if strict else '>='} {minimum:g}, got {v!r}")
    return float(v)


def _parse_measurement(d: Any, pct: float) -> Measurement:
    if not isinstance(d, dict):
        raise _Bad(f"measurement: expected an object (Measurement.to_dict()), got {type(d).__name__}")
    for key in ("seconds", "energy_j"):
        _number(d, key, "measurement.", strict=key == "seconds")
    for key in ("offered_qps", "achieved_qps"):
        _number(d, key, "measurement.")
    lat = d.get("latency_us")
    if not isinstance(lat, dict) or not lat:
        raise _Bad("measurement.latency_us: expected an object {percentile: µs}")
    ci = d.get("latency_ci_us")
    if not isinstance(ci, dict):
        raise _Bad("measurement.latency_ci_us: expected an object {percentile: [low, high]}")
    try:
        m = Measurement.from_dict(d)
    except (KeyError, TypeError, ValueError, AttributeError, IndexError) as exc:
        what = f"missing {exc}" if isinstance(exc, KeyError) else str(exc)
        raise _Bad(f"measurement: expected Measurement.to_dict() fields ({what})") from None
    for p, v in m.latency_us.items():
        if p not in PERCENTILES:
            raise _Bad(
                f"measurement.latency_us: expected percentiles among "
                f"{', '.join(f'{x:g}' for x in PERCENTILES)}, got {p:g}"
            )
        if not (math.isfinite(v) and v > 0):
            raise _Bad(f"measurement.latency_us.{p:g}: expected a finite latency > 0 µs, got {v!r}")
    if pct not in m.latency_us:
        raise _Bad(f"measurement.latency_us: expected the objective's percentile {pct:g}")
    for p, (lo, hi) in m.latency_ci_us.items():
        if not (math.isfinite(lo) and math.isfinite(hi) and lo <= hi):
            raise _Bad(
                f"measurement.latency_ci_us.{p:g}: expected finite [low, high] with low <= high, got [{lo!r}, {hi!r}]"
            )
    if not m.requests >= 0:
        raise _Bad(f"measurement.requests: expected an integer >= 0, got {m.requests!r}")
    return m


def _parse_line(d: Any, index: int, space: KnobSpace | None) -> HistoryEntry:
    if not isinstance(d, dict):
        raise _Bad(f"expected a JSON object (one trial), got {type(d).__name__}")
    schema = d.get("schema")
    if schema != SCHEMA:
        raise _Bad(f"schema: expected {SCHEMA!r}, got {'nothing (missing)' if schema is None else repr(schema)}")
    host = d.get("host")
    if not isinstance(host, str) or not host:
        raise _Bad(f"host: expected a non-empty string, got {host!r}")
    when = _number(d, "time", "")
    hw_class = d.get("class", "")
    if not isinstance(hw_class, str):
        raise _Bad(f"class: expected a string (hardware class id), got {hw_class!r}")
    obj = d.get("objective")
    if not isinstance(obj, dict) or not {"reward", "percentile", "sla_us"} <= set(obj):
        raise _Bad(f"objective: expected an object with reward, percentile, sla_us, got {obj!r}")
    try:
        objective = as_objective(obj)
    except TunerError as exc:
        raise _Bad(f"objective: {exc}") from None
    p = d.get("point")
    if not isinstance(p, dict):
        raise _Bad(f'point: expected an object {{"itr_us": int, "dvfs_ghz": number}}, got {p!r}')
    itr = p.get("itr_us")
    if isinstance(itr, bool) or not isinstance(itr, int) or itr < 0:
        raise _Bad(f"point.itr_us: expected an integer >= 0 (µs), got {itr!r}")
    ghz = _number(p, "dvfs_ghz", "point.", strict=True)
    point = OperatingPoint(itr, ghz)
    if space is not None:
        try:
            point = space.check(point)
        except KnobRangeError as exc:
            raise _Bad(f"point: outside this host's knob space: {exc}") from None
    qps = _number(d, "qps", "")
    if "measurement" not in d:
        raise _Bad("measurement: expected an object (Measurement.to_dict()), got nothing (missing)")
    m = _parse_measurement(d["measurement"], objective.percentile)
    if m.point is not None and (m.point.itr_us != point.itr_us or abs(m.point.dvfs_ghz - point.dvfs_ghz) > 5e-4):
        raise _Bad(f"measurement.point: expected the trial's point {point}, got {m.point}")
    try:
        reward = objective_reward(objective, m)
    except Exception:  # noqa: BLE001 - a reward that cannot score this window leaves it unscored
        reward = None
    rec = TrialRecord(index, point, qps, _COMPLETED, m, reward, None)
    return HistoryEntry(rec, host, when, objective, hw_class)


def parse_line(text: str, index: int = 0, space: KnobSpace | None = None) -> HistoryEntry:
    """One `tuner.trial/v1` line as an entry; `InputError` `field: expected ...` if it is not one."""
    try:
        data = json.loads(text)
    except (json.JSONDecodeError, RecursionError) as exc:
        raise InputError(f"expected one JSON object ({exc})") from None
    try:
        return _parse_line(data, index, space)
    except _Bad as exc:
        raise InputError(str(exc)) from None


def objective_reward(objective: Objective, m: Measurement) -> float:
    """The reward value of window `m` under `objective` (W for `constrained`)."""
    from reward import get_reward

    return float(get_reward(objective.reward)(m.power_w, m.percentile(objective.percentile), objective.sla_us))


def iter_entries(path: str | Path, space: KnobSpace | None = None) -> Iterator[HistoryEntry]:
    """Stream the entries of a trials file; `InputError` `FILE:LINE: ...` at the first bad line.

    Blank lines are skipped. With `space`, a point the host cannot set is an error (nothing is applied from
    a foreign host's knob space). Record indices are 0.. in file order.
    """
    p = Path(path)
    try:
        fh = p.open("rb")
    except OSError as exc:
        raise InputError(f"{p}: cannot read trials: {exc.strerror or exc}") from None
    index = 0
    with fh:
        for number, raw in enumerate(fh, start=1):
            try:
                text = raw.decode("utf-8").strip()
            except UnicodeDecodeError:
                raise InputError(f"{p}:{number}: expected UTF-8 text") from None
            if not text:
                continue
            try:
                data = json.loads(text)
            except (json.JSONDecodeError, RecursionError) as exc:
                why = f"{exc.msg} at column {exc.colno}" if isinstance(exc, json.JSONDecodeError) else "too deep"
                raise InputError(f"{p}:{number}: expected one JSON object per line ({why})") from None
            try:
                entry = _parse_line(data, index, space)
            except _Bad as exc:
                raise InputError(f"{p}:{number}: {exc}") from None
            index += 1
            yield entry


def read_entries(path: str | Path, space: KnobSpace | None = None) -> list[HistoryEntry]:
    """All entries of a trials file (see `iter_entries`)."""
    return list(iter_entries(path, space))


def read_trials(path: str | Path, space: KnobSpace | None = None) -> list[TrialRecord]:
    """The trials of a `tuner.trial/v1` file as completed `TrialRecord`s (reward scored under each line's
    own objective); `InputError` `FILE:LINE: ...` for a malformed line or a point outside `space`."""
    return [e.record for e in iter_entries(path, space)]


def in_space(entries: Iterable[HistoryEntry], space: KnobSpace) -> list[HistoryEntry]:
    """The entries whose point `space` can set (others silently dropped, e.g. after narrowing knob bounds)."""
    out = []
    for e in entries:
        try:
            space.check(e.record.point)
        except KnobRangeError:
            continue
        out.append(e)
    return out


def dedupe(entries: Iterable[HistoryEntry]) -> list[HistoryEntry]:
    """First occurrence of each trial (`HistoryEntry.key`), sorted by time (stable)."""
    seen: set[tuple] = set()
    out = []
    for e in entries:
        k = e.key()
        if k not in seen:
            seen.add(k)
            out.append(e)
    return sorted(out, key=lambda e: e.time)


# ------------------------------------------------------------------------------------------------ store


class HistoryStore:
    """The daemon's bounded history (`history.jsonl`, the newest `keep` trials by time).

    Every finished retune appends its completed trials; `tuner trials import` adds another host's or day's.
    Writers serialise on an advisory lock of the file's directory and replace the file atomically, so the
    daemon and an import may run at once and a reader always sees a whole file.
    """

    def __init__(self, path: str | Path, keep: int = KEEP_TRIALS) -> None:
        self.path = Path(path)
        self.keep = int(keep)

    def read(self, space: KnobSpace | None = None) -> list[HistoryEntry]:
        """Every stored entry (oldest first); none if the file does not exist yet."""
        if not self.path.exists():
            return []
        return read_entries(self.path, space)

    def add(self, entries: Iterable[HistoryEntry]) -> tuple[int, int]:
        """Add `entries` (failed/duplicate ones skipped), keep the newest `keep`; returns (added, skipped)."""
        new = list(entries)
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
            # the lock is on the directory: no lock file whose owner (root after a `sudo tuner trials import`)
            # could lock the daemon's user out
            fd = os.open(self.path.parent, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
        except OSError as exc:
            raise TunerError(f"{self.path}: cannot write history: {exc.strerror or exc}") from None
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            try:
                old = self.read()
            except InputError as exc:  # keep the damaged file for inspection; the store starts afresh
                bad = self.path.with_name(f"{self.path.name}.bad-{int(_time.time())}")
                os.replace(self.path, bad)
                log.warning("history store damaged (%s); moved to %s, starting a new one", exc, bad)
                old = []
            seen = {e.key() for e in old}
            added: list[HistoryEntry] = []
            for e in new:
                if not is_exportable(e.record) or e.key() in seen:
                    continue
                seen.add(e.key())
                added.append(e)
            if added:
                merged = sorted(old + added, key=lambda e: e.time)[-self.keep :] if self.keep > 0 else []
                write_entries(self.path, merged)
            return len(added), len(new) - len(added)
        finally:
            os.close(fd)  # releases the lock


__all__ = [
    "SCHEMA",
    "HISTORY_FILE",
    "REPLAY_TRIALS_FILE",
    "KEEP_TRIALS",
    "HistoryEntry",
    "HistoryStore",
    "as_objective",
    "dedupe",
    "entries_from_records",
    "host_label",
    "in_space",
    "is_exportable",
    "iter_entries",
    "objective_reward",
    "parse_line",
    "read_entries",
    "read_trials",
    "write_entries",
    "write_trials",
]
