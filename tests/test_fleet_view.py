"""The fleet view: best known point per hardware class and load band, from a real SQLite trial store."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from store_fakes import entry

from tuner.cli.app import main
from tuner.store.fleet import band_of, fleet_view
from tuner.store.sqlite import SqliteStore


def _fill(store: SqliteStore) -> None:
    store.add(
        [
            # class c1 around 200 kQPS: (64, 1.6) is cheapest under 500 µs over two hosts' trials
            entry(1, "a", qps=200e3, itr=64, ghz=1.6, power_w=60, p99_us=420),
            entry(2, "b", qps=205e3, itr=64, ghz=1.6, power_w=62, p99_us=440),
            entry(3, "a", qps=201e3, itr=32, ghz=2.4, power_w=80, p99_us=150),
            entry(4, "b", qps=199e3, itr=400, ghz=1.2, power_w=40, p99_us=900),  # cheaper but over the SLA
            entry(5, "bad", qps=200e3, itr=200, ghz=1.2, power_w=30, p99_us=200),  # a drifting host's claim
            # class c1 at 400 kQPS: nothing met the SLA
            entry(6, "a", qps=400e3, itr=300, ghz=1.2, power_w=70, p99_us=2000),
            # class c2 at 200 kQPS
            entry(7, "c", "c2", qps=200e3, itr=100, ghz=2.0, power_w=90, p99_us=300),
        ]
    )


def test_best_point_per_class_and_band(tmp_path: Path) -> None:
    s = SqliteStore(tmp_path / "trials.sqlite")
    _fill(s)
    rows = fleet_view(s.read(), sla_us=500, drifting=frozenset({"bad"}))
    got = [(r.hw_class, round(r.qps_low), r.itr_us, r.dvfs_ghz, r.trials_at_point, r.trials, r.hosts) for r in rows]
    k200, lo200, _ = band_of(200e3, 10)
    assert lo200 <= 200e3 < lo200 * 1.1 and band_of(205e3, 10)[0] == k200
    assert got == [
        ("c1", round(lo200), 64, 1.6, 2, 4, 2),
        ("c1", round(band_of(400e3, 10)[1]), None, None, 0, 1, 1),
        ("c2", round(lo200), 100, 2.0, 1, 1, 1),
    ]
    assert rows[0].power_w == pytest.approx(61.0, abs=1e-3) and rows[0].latency_us == pytest.approx(430.0)
    tight = fleet_view(s.read(), sla_us=200, drifting=frozenset({"bad"}))
    assert (tight[0].itr_us, tight[0].dvfs_ghz) == (32, 2.4)  # the SLA re-scores the same trials
    assert fleet_view(s.read(), sla_us=500)[0].itr_us == 200  # not left out: its cheap claim wins


def test_fleet_cli_json_leaves_drifting_hosts_out(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    s = SqliteStore(tmp_path / "trials.sqlite")
    _fill(s)
    s.set_host("bad", "c1", {"cpu_model": "X"}, drift=True, drift_z=9.0, drift_n=12)
    s.close()
    assert main(["trials", "fleet", "--state-dir", str(tmp_path), "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["drifting_hosts"] == ["bad"] and out["classes"]["c1"] == {"cpu_model": "X"}
    assert [b["point"] for b in out["bands"]] == [
        {"itr_us": 64, "dvfs_ghz": 1.6},
        None,
        {"itr_us": 100, "dvfs_ghz": 2.0},
    ]
    assert main(["trials", "fleet", "--state-dir", str(tmp_path), "--sla", "200"]) == 0
    table = capsys.readouterr().out
    assert "no point met the SLA" in table and "left out (drifting from their class): bad" in table


def test_fleet_cli_errors_are_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["trials", "fleet", "--state-dir", str(tmp_path / "none")]) != 0
    assert capsys.readouterr().err.strip().endswith("no trial store here (expected trials.sqlite, or give --url)")
    assert main(["trials", "fleet", "--state-dir", str(tmp_path), "--percentile", "97"]) != 0
    assert "--percentile 97: expected one of" in capsys.readouterr().err
