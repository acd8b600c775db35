"""`tuner trials export|import`: move completed trials between daemons, days and replays (`tuner.trial/v1`).

    tuner trials export [--config FILE | --state-dir DIR | --from-replay OUT_DIR] --out FILE
    tuner trials import FILE [--config FILE] [--state-dir DIR] [--host sim|real|module:factory]
    tuner trials fleet [--config FILE | --state-dir DIR | --url URL] [--sla US] [--percentile P] [--json]

Export writes every completed trial a daemon has (its trial store, state.json and saved experiments,
duplicates dropped) or a replay saved. Import checks every line against the host's knob space (bounded by
the config's [knobs] when --config is given) -- one bad line rejects the file with `FILE:LINE: ...` -- and
adds the trials to the daemon's trial store (`<state dir>/trials.sqlite`, or the fleet's `history.url`),
from which the next retune warm-starts (config `history.warm_start` or `tuning.context`). It may run while
the daemon runs. A `history.jsonl` of an older daemon is imported into the store once, first.
Fleet prints, from a trial store (a fleet's PostgreSQL, or one host's SQLite file), the best known point per
hardware class and load band under one SLA (drifting hosts left out).
"""

from __future__ import annotations

import argparse
import json
import math
import socket
from pathlib import Path
from typing import Any

from core.errors import InputError, TunerError

DEFAULT_STATE_DIR = Path("/var/lib/tuner")


def register(subparsers: Any) -> None:
    p = subparsers.add_parser(
        "trials",
        help="export or import completed trials (warm start from history)",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    sub = p.add_subparsers(dest="trials_command", metavar="ACTION", required=True)

    e = sub.add_parser("export", help="write a daemon's (or a replay's) completed trials to a JSON-lines file")
    src = e.add_mutually_exclusive_group()
    src.add_argument(
        "--state-dir",
        type=Path,
        help=f"daemon state directory (default: the config's state.dir, else {DEFAULT_STATE_DIR})",
    )
    src.add_argument(
        "--from-replay",
        type=Path,
        metavar="OUT_DIR",
        help="a `tuner replay --out` directory with saved trials (trials.jsonl)",
    )
    e.add_argument("--config", type=Path, help="daemon config (for state.dir and history.url)")
    e.add_argument("--url", help="trial store: postgresql://... or sqlite:///path (default: the config's)")
    e.add_argument("--out", type=Path, required=True, help="file to write (replaced atomically)")
    e.set_defaults(func=run_export)

    i = sub.add_parser(
        "import", help="validate trials against a host's knob space and add them to a daemon's history store"
    )
    i.add_argument("file", type=Path, help="a tuner.trial/v1 JSON-lines file (from `tuner trials export`)")
    i.add_argument("--config", type=Path, help="daemon config (host, knob bounds, state.dir, history.url)")
    i.add_argument("--url", help="trial store: postgresql://... or sqlite:///path (default: the config's)")
    i.add_argument(
        "--state-dir",
        type=Path,
        help=f"daemon state directory (default: the config's state.dir, else {DEFAULT_STATE_DIR})",
    )
    i.add_argument(
        "--host",
        help="host whose knob space the trials must fit: sim | real | module:factory "
        "(default: the config's host.spec, else sim)",
    )
    i.set_defaults(func=run_import)

    f = sub.add_parser("fleet", help="best known point per hardware class and load band, from a trial store")
    f.add_argument("--config", type=Path, help="daemon config (for state.dir and history.url)")
    f.add_argument("--state-dir", type=Path, help=f"daemon state directory (default: {DEFAULT_STATE_DIR})")
    f.add_argument("--url", help="trial store: postgresql://... or sqlite:///path (default: the config's)")
    f.add_argument("--sla", type=float, default=500.0, help="latency SLA in µs (default 500)")
    f.add_argument("--percentile", type=float, default=99.0, help="SLA percentile (default 99)")
    f.add_argument("--band-pct", type=float, default=10.0, help="load band width in %% (default 10)")
    f.add_argument("--class", dest="hw_class", help="only this hardware class id")
    f.add_argument("--json", action="store_true", help="print JSON instead of a table")
    f.set_defaults(func=run_fleet)


# ------------------------------------------------------------------------------------------------ helpers


def _config(path: Path | None) -> Any:
    if path is None:
        return None
    from tuner.config import load_config

    return load_config(path)


def _store_path(args: argparse.Namespace, cfg: Any) -> tuple[Path, Path]:
    """(state dir, history file) from --state-dir / the config / the default."""
    from tuner.store.history import HISTORY_FILE

    if args.state_dir is None and cfg is not None:
        return cfg.state_dir, cfg.history_path
    state_dir = Path(args.state_dir or DEFAULT_STATE_DIR)
    return state_dir, Path(state_dir) / HISTORY_FILE


def _row_objective(row: dict[str, Any], state: Any) -> dict[str, Any]:
    """The policy a state.json trial row was measured under (rows written before objectives were recorded
    take it from their retune's decision or signature, else the run-time/default policy)."""
    if isinstance(row.get("objective"), dict):
        return row["objective"]
    rid = row.get("retune_id")
    base = dict(state.policy_override or {})
    cur = state.current_retune or {}
    if cur.get("id") == rid and isinstance((cur.get("signature") or {}).get("policy"), dict):
        return cur["signature"]["policy"]
    for d in reversed(state.decisions):
        if d.get("retune_id") == rid and d.get("sla_us") and d.get("percentile"):
            return {"reward": base.get("reward", "constrained"), "sla_us": d["sla_us"], "percentile": d["percentile"]}
    return {
        "reward": base.get("reward", "constrained"),
        "sla_us": base.get("sla_us", 500.0),
        "percentile": base.get("percentile", 99.0),
    }


def _state_entries(state_dir: Path) -> list[Any]:
    """Completed trials in state.json and experiments/*.json, as history entries."""
    from actuators.host import Measurement, OperatingPoint
    from tuner.daemon.state import StateStore
    from tuner.optimize.records import TrialRecord
    from tuner.store.history import HistoryEntry, as_objective, objective_reward

    store = StateStore(state_dir)
    state = store.load()  # a fresh (empty) state when there is no state.json
    me = socket.gethostname()
    out: list[HistoryEntry] = []

    def add(point: Any, qps: Any, md: Any, when: float, host: str, objective: Any, index: int) -> None:
        try:
            m = Measurement.from_dict(md)
            if isinstance(point, OperatingPoint):  # a state row (`tuner.daemon.state` loads points as such)
                p = point
            elif isinstance(point, list):
                p = OperatingPoint(int(point[0]), float(point[1]))
            else:
                p = OperatingPoint(int(point["itr_us"]), float(point["dvfs_ghz"]))
            obj = as_objective(objective)
            q = float(qps)
            if not (math.isfinite(q) and math.isfinite(m.power_w)):
                return
            rec = TrialRecord(index, p, q, "completed", m, objective_reward(obj, m), None)
        except (KeyError, TypeError, ValueError, IndexError, TunerError):
            return  # an unreadable row is not a trial anyone can learn from
        out.append(HistoryEntry(rec, host, float(when), obj))

    for i, row in enumerate(state.trials):
        if row.get("status") == "completed" and row.get("measurement"):
            add(
                row.get("point"),
                row.get("qps"),
                row["measurement"],
                row.get("time", 0.0),
                row.get("host") or me,
                _row_objective(row, state),
                i,
            )
    for path in sorted(store.exp_dir.glob("*.json")) if store.exp_dir.is_dir() else []:
        if path.name.endswith(".table.json"):
            continue
        try:
            data = json.loads(path.read_text())
            rows, objective, when = data["trials"], data["objective"], path.stat().st_mtime
        except (OSError, ValueError, KeyError, TypeError):
            continue  # not an optimiser snapshot we know
        for row in rows if isinstance(rows, list) else []:
            if isinstance(row, dict) and row.get("status") == "completed" and row.get("measurement"):
                add(row.get("point"), row.get("qps"), row["measurement"], when, me, objective, int(row.get("index", 0)))
    return out


# ------------------------------------------------------------------------------------------------ commands


def _open_store(args: argparse.Namespace, cfg: Any) -> tuple[Any, Path]:
    """The trial store named by --url / the config's history.url (default `<state dir>/trials.sqlite`), with an
    old daemon's history.jsonl imported into it once; and the state directory."""
    from tuner.store.open import import_legacy, open_store

    state_dir, legacy = _store_path(args, cfg)
    url = getattr(args, "url", None) or (cfg.history.url if cfg is not None else "")
    store = open_store(url, state_dir)
    import_legacy(store, legacy)
    return store, state_dir


def run_export(args: argparse.Namespace) -> int:
    from tuner.store.history import REPLAY_TRIALS_FILE, dedupe, read_entries, write_entries
    from tuner.store.open import SQLITE_FILE

    if args.from_replay is not None:
        src = args.from_replay / REPLAY_TRIALS_FILE
        if not src.is_file():
            raise InputError(
                f"{args.from_replay}: no {REPLAY_TRIALS_FILE}: expected the --out directory of a "
                f"`tuner replay` run that saved its trials"
            )
        entries = read_entries(src)
        where = str(src)
    else:
        cfg = _config(args.config)
        state_dir, history_file = _store_path(args, cfg)
        has_url = bool(args.url or (cfg.history.url if cfg is not None else ""))
        places = (state_dir / "state.json", state_dir / "experiments", history_file, state_dir / SQLITE_FILE)
        if not has_url and not any(p.exists() for p in places):
            raise InputError(
                f"{state_dir}: no daemon state here (expected state.json, experiments/, {SQLITE_FILE} "
                f"or {history_file.name})"
            )
        store, _ = _open_store(args, cfg)
        try:
            entries = store.read() + _state_entries(state_dir)
        finally:
            store.close()
        where = str(state_dir)
    entries = dedupe(entries)
    n = write_entries(args.out, entries)
    print(f"exported {n} completed trial(s) from {where} to {args.out}")
    return 0


def run_import(args: argparse.Namespace) -> int:
    from actuators.abilities import Closable
    from tuner.hosts import make_host
    from tuner.store.history import read_entries

    cfg = _config(args.config)
    spec = args.host or (cfg.host.spec if cfg is not None else "sim")
    options = dict(cfg.host.options) if cfg is not None and spec == cfg.host.spec else {}
    if spec == "real":
        options["parts"] = ("itr", "dvfs")  # only the knob space: no sensors, no prober, nothing written
    host = make_host(spec, **options)
    try:
        space = host.knobs()
    finally:
        if isinstance(host, Closable):
            host.close()
    if cfg is not None:
        from tuner.daemon.plain import bounded_space

        space = bounded_space(space, cfg.knobs)
    entries = read_entries(args.file, space)  # one bad line rejects the whole file
    store, _ = _open_store(args, cfg)
    try:
        added, skipped = store.add(entries)
    finally:
        store.close()
    print(f"imported {added} trial(s) into {store.location}; skipped {skipped} already there")
    return 0


def run_fleet(args: argparse.Namespace) -> int:
    from tuner.store.fleet import check_class, check_query, fleet_report
    from tuner.store.open import open_store

    check_query(args.percentile, args.sla, args.band_pct, names=("--percentile", "--sla", "--band-pct"))
    check_class(args.hw_class or "", "--class")
    cfg = _config(args.config)
    url = args.url if args.url is not None else (cfg.history.url if cfg is not None else "")
    state_dir = args.state_dir or (cfg.state_dir if cfg is not None else DEFAULT_STATE_DIR)
    if not url and not (Path(state_dir) / "trials.sqlite").is_file():
        raise InputError(f"{state_dir}: no trial store here (expected trials.sqlite, or give --url)")
    store = open_store(url, state_dir)
    try:
        report = fleet_report(
            store, percentile=args.percentile, sla_us=args.sla, band_pct=args.band_pct, hw_class=args.hw_class
        )
    finally:
        store.close()
    rows, drifting = report.rows, report.drifting
    if args.json:
        print(json.dumps(report.to_dict(), indent=2))
        return 0
    print(f"best known points in {store.location} (p{args.percentile:g} < {args.sla:g} µs)")
    print(f"{'class':<17} {'load kQPS':>15} {'ITR µs':>7} {'GHz':>5} {'W':>7} {'lat µs':>7} {'n':>4} {'hosts':>5}")
    for r in rows:
        band = f"{r.qps_low / 1e3:.0f}-{r.qps_high / 1e3:.0f}"
        if r.itr_us is None:
            print(f"{r.hw_class or '-':<17} {band:>15} {'no point met the SLA':>28} {r.trials:>4} {r.hosts:>5}")
        else:
            print(
                f"{r.hw_class or '-':<17} {band:>15} {r.itr_us:>7} {r.dvfs_ghz:>5.1f} {r.power_w:>7.1f} "
                f"{r.latency_us:>7.0f} {r.trials_at_point:>4} {r.hosts:>5}"
            )
    if drifting:
        print(f"left out (drifting from their class): {', '.join(sorted(drifting))}")
    return 0
