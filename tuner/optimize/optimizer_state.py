"""The optimiser's state as JSON: its objective, settings and knob space, the trial books and the Ax experiment
(with its generation strategy), written by `Optimizer.to_json` and read back by `Optimizer.from_json`."""

from __future__ import annotations

import json
from dataclasses import asdict

from actuators.host import KnobSpace, OperatingPoint
from core.errors import TunerError
from tuner.optimize.axsetup import no_warnings, quiet_ax, small_acqf_batches
from tuner.optimize.drift import Cusum
from tuner.optimize.experiment import ExperimentModel
from tuner.optimize.presets import cold_values
from tuner.optimize.records import Pending, opt_float, record_from_dict, record_to_dict
from tuner.optimize.settings import Objective, TunerSettings
from tuner.optimize.trial_book import TrialBook


def dump_state(model: ExperimentModel, book: TrialBook) -> str:
    """Full state as JSON: objective, settings, knob space, trial records and the Ax experiment."""
    with no_warnings():
        snapshot = model.client._to_json_snapshot()
    return json.dumps(
        {
            "version": 1,
            "name": model.name,
            "objective": asdict(model.objective),
            "settings": asdict(model.settings),
            "space": {"itr_us": list(model.space.itr_us), "dvfs_ghz": list(model.space.dvfs_ghz)},
            "trials": [record_to_dict(r) for r in book.trials()],
            "pending": {
                str(i): {
                    "itr_us": p.point.itr_us,
                    "dvfs_ghz": p.point.dvfs_ghz,
                    "compute_s": p.compute_s,
                    "ax_index": p.ax_index,
                    "load": p.load,
                    "p_violation": p.p_violation,
                    "note": p.note,
                    "line_t": p.line_t,
                    "proven": p.proven,
                }
                for i, p in book.pending.items()
            },
            "next_index": book.next_index,
            "retune": {"start": book.retune_start, "load": book.load},
            "line_t": {str(i): t for i, t in book.line_t.items()},
            "borrowed": sorted(book.borrowed),
            "held_broke": [[i, j, q] for (i, j), q in book.held_broke],
            "ax_of": {str(i): a for i, a in book.ax_of.items()},
            "retired_through": book.retired_through,
            "proof_from": book.proof_from,
            "drift": [book.drift.total, book.drift.start],
            "ax": snapshot,
        }
    )


def load_state(text: str) -> tuple[ExperimentModel, TrialBook]:
    """The model (the Ax experiment and generation strategy included) and the trial books saved by `dump_state`;
    TunerError (one line) for any malformed state."""
    from ax import Client

    quiet_ax()
    try:
        d = json.loads(text)
        if d.get("version") != 1:
            raise ValueError(f"unsupported version {d.get('version')!r}")
        obj = Objective(**d["objective"])
        # a state saved before `latency_metric` existed holds an experiment on the ln scale
        # a field the saved state lacks takes the value it had then (the cold tuner's, the defaults of that time)
        settings = TunerSettings(**{**cold_values(), "latency_metric": "log", **d["settings"]})
        space = KnobSpace(tuple(int(x) for x in d["space"]["itr_us"]), tuple(float(x) for x in d["space"]["dvfs_ghz"]))
        book = _load_book(d)
        with no_warnings():
            client = Client._from_json_snapshot(d["ax"])
            small_acqf_batches(client)
        client._random_seed = settings.seed  # the snapshot does not carry the client's seed
        model = ExperimentModel(space, obj, settings, str(d["name"]), client=client)
    except TunerError:
        raise
    except Exception as exc:  # noqa: BLE001 - any malformed state is one line for the user
        raise TunerError(f"optimizer state is not valid: {type(exc).__name__}: {exc}") from None
    return model, book


def _load_book(d: dict) -> TrialBook:
    records = {r.index: r for r in (record_from_dict(x) for x in d["trials"])}
    pending = {
        int(i): Pending(
            OperatingPoint(int(p["itr_us"]), float(p["dvfs_ghz"])),
            float(p["compute_s"]),
            int(p.get("ax_index", i)),
            opt_float(p.get("load")),
            opt_float(p.get("p_violation")),
            str(p.get("note") or ""),
            opt_float(p.get("line_t")),
            bool(p.get("proven", False)),
        )
        for i, p in d.get("pending", {}).items()
    }
    used = [*records, *pending]
    retune = d.get("retune") or {}
    return TrialBook(
        records=records,
        pending=pending,
        line_t={int(i): float(t) for i, t in (d.get("line_t") or {}).items()},
        borrowed={int(i) for i in d.get("borrowed") or ()},
        held_broke=[((int(i), int(j)), float(q)) for i, j, q in d.get("held_broke") or ()],
        next_index=int(d.get("next_index", max(used) + 1 if used else 0)),
        retune_start=None if retune.get("start") is None else int(retune["start"]),
        load=opt_float(retune.get("load")),
        ax_of={int(i): int(a) for i, a in (d.get("ax_of") or {}).items()},
        retired_through=int(d.get("retired_through", -1)),
        proof_from=int(d.get("proof_from", 0)),
        drift=_cusum(d.get("drift")),
    )


def _cusum(v: list | None) -> Cusum:
    if not v:
        return Cusum()
    return Cusum(float(v[0]), None if v[1] is None else int(v[1]))
