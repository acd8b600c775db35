"""Two simulated hosts of one hardware class share a trial store: what does the second host's day 0 cost? JSON.

Host A (seed `--seed-a`) replays day 0 of the bundled 24 h trace (peak 600 kQPS, every `--every`-th hourly
window) with the default (warm) tuner and writes its trials to a real trial store (a SQLite file in a temp
dir) under its hardware class (`SimHost.hardware_class()`). Host B (another
seed, same class) then starts: its retunes are seeded with `tuner.store.warm.class_history` -- its own
trials (none yet) plus its class's, after the drift test -- exactly as the daemon does, and it replays the
same day. The class's trials are passed as borrowed (`replay(borrowed_history=...)`): they inform the model and
the safety filter, but host B holds a point without trials only at loads it measured itself, as the daemon
does (its hold rule reads its own trials only). A fresh host B (no store) replays it too, for the comparison. Reported per host: trials per
retune, energy vs the oracle, % of trial time above the SLA, windows in violation, and the store's
warm-start query time.

Target: the second host's day 0 needs <= 3 trials per retune at <= 1.02 x the oracle with <= 1 % of
trial time above the SLA, against a fresh host's ~6.6 trials per retune.

    .venv/bin/python bench/fleet.py [--every 3] [--seed-a 0] [--seeds-b 1] [--slas 99:500]
    .venv/bin/python bench/fleet.py --seed-a 5 --seeds-b 6 --offset 1 --reverse --peak-qps 450000  # another day
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

if TYPE_CHECKING:
    from actuators.sim.host import SimHost

TARGETS = {"trials_per_retune": 3.0, "ratio_to_oracle": 1.02, "explore_above_sla_pct_of_time": 1.0}
KEYS = (
    "trials_per_retune",
    "ratio_to_oracle",
    "explore_above_sla_pct_of_time",
    "sla_violating_windows",
    "saved_vs_linux_default_pct",
)


def bounds(host: SimHost, windows: list, pct: float, sla: float) -> dict:
    """What the decision rule allows at best, from the host's noise-free model: the day's energy (window
    seconds x expected power) if every window held the lowest-power point whose expected percentile is within
    a tighter limit, over the oracle's (within the SLA), with no exploration. `margin`: the limit `best`
    applies, the SLA less `sla_margin_pct`; `margin_and_ci`: that limit also divided by 1 + `window_ci_pct` %,
    since `best` takes a point only when its CI's UPPER end is within the limit (the adaptive window's CI
    half-width), so the points it holds measure about that much below it."""
    from tuner.optimize.optimizer import Objective, TunerSettings
    from tuner.replay.oracle import oracle_point

    st = TunerSettings()
    limits = {
        "margin": sla * (1 - st.sla_margin_pct / 100),
        "margin_and_ci": sla * (1 - st.sla_margin_pct / 100) / (1 + st.window_ci_pct / 100),
    }

    def energy(limit: float) -> float:
        total = 0.0
        for w in windows:
            p, _ = oracle_point(host, Objective("constrained", pct, limit), w.qps)
            total += w.seconds * host.expected([p], w.qps)[0].power_w
        return total

    base = energy(sla)
    return {
        **{f"limit_{k}_us": round(v, 1) for k, v in limits.items()},
        **{f"ratio_to_oracle_{k}": round(energy(v) / base, 4) for k, v in limits.items()},
    }


def per_window(res: object, obj: object) -> list[dict]:
    """Per window of the tuner: load, trials, the point held and the oracle's, energy over the oracle's in
    that window, the hold's measured percentile, and the decision's reason (why it holds that point)."""
    pols = res.policies  # type: ignore[attr-defined]
    pct = obj.percentile  # type: ignore[attr-defined]
    out = []
    for w, o in zip(pols["tuner"].windows, pols["oracle"].windows, strict=True):
        hold = w.steady
        out.append(
            {
                "qps": round(w.qps),
                "trials": w.trials,
                "x_oracle": round(w.energy_j / o.energy_j, 4) if o.energy_j > 0 else None,
                "explore_x_oracle_power": round(w.explore_energy_j / w.explore_s / o.power_w, 3)
                if w.explore_s > 0
                else None,
                "explore_s": round(w.explore_s, 1),
                "held": None if w.point is None else [w.point.itr_us, w.point.dvfs_ghz],
                "oracle": None if o.point is None else [o.point.itr_us, o.point.dvfs_ghz],
                "hold_power_x_oracle": round(hold.power_w / o.power_w, 4) if hold is not None else None,
                "hold_p": round(hold.percentile(pct)) if hold is not None else None,
                "oracle_p": round(o.latency_us(pct)),
                "why": w.note,
            }
        )
    return out


def parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    ap.add_argument("--every", type=int, default=3, help="replay every N-th hourly window of the day")
    ap.add_argument("--seed-a", type=int, default=0)
    ap.add_argument("--seeds-b", default="1", help="comma list of seeds for the second host")
    ap.add_argument("--slas", default="99:500", help="comma list PCT:US")
    ap.add_argument("--peak-qps", type=float, default=600_000.0)
    ap.add_argument("--offset", type=int, default=0, help="first hourly window (then every --every-th)")
    ap.add_argument("--reverse", action="store_true", help="replay the windows in reverse order (another day shape)")
    ap.add_argument("--no-fresh", action="store_true", help="skip the fresh-host comparison run")
    ap.add_argument("--limit", type=int, default=2000, help="warm-start trials per source (own, class)")
    ap.add_argument("--per-window", action="store_true", help="per window: the point held vs the oracle's, trials, why")
    ap.add_argument(
        "--warm-set",
        action="append",
        default=[],
        metavar="FIELD=VALUE",
        help="override a TunerSettings field of the warm tuner on every host; repeatable, e.g. "
        "--warm-set itr_resolution_us=8",
    )
    return ap


def day_windows(args: argparse.Namespace) -> list:
    """Every --every-th hourly window of the bundled day from --offset (reversed with --reverse)."""
    from traces.schedule import load_schedule, sample_trace_path
    from tuner.replay.run import ReplayWindow

    sched = load_schedule(sample_trace_path(), peak_qps=args.peak_qps)
    picked = list(sched.windows)[args.offset :: args.every]
    if args.reverse:  # the same loads, another order: the day starts at its peak
        picked = [
            type(w)(index=i, start_s=i * w.seconds, seconds=w.seconds, qps=w.qps) for i, w in enumerate(picked[::-1])
        ]
    return [ReplayWindow(w.index, w.start_s, w.seconds, w.qps) for w in picked]


@dataclass
class Fleet:
    """The day every host replays, the warm tuner's overrides, and the hardware class the hosts share."""

    args: argparse.Namespace
    windows: list
    over: dict
    cls: Any

    def save(self, res: Any, label: str, obj: Any) -> list:
        """The tuner's trials of a replay as store entries of this host under the class."""
        from tuner.replay.report import trial_times
        from tuner.store.history import entries_from_records

        pr = res.policies["tuner"]
        entries = entries_from_records(pr.trials, host=label, objective=obj, times=trial_times(res, 1.7e9))
        return [type(e)(e.record, e.host, e.time, e.objective, self.cls.id) for e in entries]

    def run(
        self, seed: int, history: list, obj: Any, memo: dict, borrowed: list | None = None
    ) -> tuple[dict, Any, float]:
        """A host of `seed` replays the day with the warm tuner from `history` (own) and `borrowed` (class)."""
        from tuner.hosts import make_host
        from tuner.optimize.optimizer import TunerSettings
        from tuner.replay.run import preset_settings, replay
        from tuner.replay.summary import policy_summary

        st = preset_settings("warm", TunerSettings(seed=seed), **self.over)
        t0 = time.perf_counter()
        res = replay(
            lambda: make_host("sim", seed=seed),
            self.windows,
            obj,
            st,
            policies=("tuner", "linux-default", "oracle"),
            host_label=f"sim-{seed}",
            oracle_memo=memo,
            history=history,
            borrowed_history=borrowed or (),
        )
        s = policy_summary(res, "tuner")
        row = {k: s[k] for k in KEYS}
        if self.args.per_window:
            row["per_window"] = per_window(res, obj)
        return row, res, time.perf_counter() - t0


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    from actuators.sim.host import SimHost
    from bench.replay import warm_overrides
    from tuner.optimize.optimizer import Objective
    from tuner.replay.grid import oracle_memo_for

    windows = day_windows(args)
    slas = [(float(a), float(b)) for a, b in (x.split(":") for x in args.slas.split(","))]
    fleet = Fleet(args, windows, warm_overrides(args), SimHost(seed=args.seed_a).hardware_class())
    out: dict = {
        "command": " ".join([Path(sys.argv[0]).name, *sys.argv[1:]]),
        "warm_set": fleet.over,
        "note": "simulated hosts; timings from a shared 2-core machine",
        "windows": len(windows),
        "qps": [round(w.qps) for w in windows],
        "hw_class": fleet.cls.to_dict(),
        "store": "sqlite (a fresh file per second host)",
        "targets": TARGETS,
        "runs": [],
    }
    oracle_host = SimHost(seed=0)
    for pct, sla in slas:
        obj = Objective("constrained", pct, sla)
        memo = oracle_memo_for([w.qps for w in windows], pct, sla)[0]
        out.setdefault("bounds", {})[f"p{pct:g} < {sla:g} us"] = bounds(oracle_host, windows, pct, sla)
        a, res_a, wall_a = fleet.run(args.seed_a, [], obj, memo)
        entries_a = fleet.save(res_a, "sim-a", obj)
        for seed in [int(s) for s in args.seeds_b.split(",")]:
            row = second_host(fleet, seed, obj, memo, entries_a)
            row["host_a"] = {**a, "wall_s": round(wall_a, 1)}
            out["runs"].append(row)
            print(json.dumps(row), file=sys.stderr, flush=True)
    print(json.dumps(out, indent=2))
    return 0


def second_host(fleet: Fleet, seed: int, obj: Any, memo: dict, entries_a: list) -> dict:
    """Host B of `seed` from a store holding host A's day only: its day, its drift test before and after, and
    (unless --no-fresh) a fresh host B's day for the comparison."""
    from tuner.hosts import make_host
    from tuner.store.open import open_store
    from tuner.store.warm import class_history

    args, cls = fleet.args, fleet.cls
    # a store per second host: A's day in it, nothing else (no other second host's trials)
    with tempfile.TemporaryDirectory() as tmp:
        store = open_store("", tmp)
        store.add(entries_a)
        host_b = f"sim-b{seed}"
        t0 = time.perf_counter()
        got = class_history(store, host_b, cls.id, limit=args.limit, space=make_host("sim").knobs())
        query_s = time.perf_counter() - t0
        recs = got.records()  # own first (none yet), then the class's: those never a reason to hold untried
        b, res_b, wall_b = fleet.run(seed, recs[: got.own], obj, memo, recs[got.own :])
        # after its day, B's own trials are tested against the class (A's): the same model, no drift
        store.add(fleet.save(res_b, host_b, obj))
        after = class_history(store, host_b, cls.id, limit=args.limit)
        store.close()
    row: dict = {
        "sla": f"p{obj.percentile:g} < {obj.sla_us:g} us",
        "seed_a": args.seed_a,
        "seed_b": seed,
        "host_a": None,
        "host_b_from_class": {
            **b,
            "wall_s": round(wall_b, 1),
            "history_trials": len(got.entries),
            "drift_at_start": {"drifting": got.drift.drifting, "t": got.drift.t, "n": got.drift.n},
            "warm_start_query_s": round(query_s, 4),
            "drift_after_day": {
                "drifting": after.drift.drifting,
                "t": after.drift.t,
                "n": after.drift.n,
                "metrics": after.drift.metrics,
            },
        },
    }
    if not args.no_fresh:
        f, _, wall_f = fleet.run(seed, [], obj, memo)
        row["host_b_fresh"] = {**f, "wall_s": round(wall_f, 1)}
    row["met"] = {k: b[k] is not None and b[k] <= v for k, v in TARGETS.items()}
    return row


if __name__ == "__main__":
    raise SystemExit(main())
