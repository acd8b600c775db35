"""The fleet view: best known point per hardware class and load band, from a real SQLite trial store."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from core.errors import InputError
from tests.store_fakes import entry
from tuner.cli.app import main
from tuner.store.fleet import band_of, check_query, fleet_view
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


@pytest.mark.parametrize("band_pct", [1e-300, 1e-15, 0.09, 1000.5, 1e300, math.inf, math.nan, -1.0])
def test_band_widths_outside_the_meaningful_range_are_refused(band_pct: float) -> None:
    with pytest.raises(InputError, match=r"band_pct .*: expected a band width in \[0.1, 1000\] %"):
        band_of(200e3, band_pct)  # safe on its own (1 + 1e-300/100 == 1.0 made the index divide by 0)
    with pytest.raises(InputError, match=r"--band-pct .*: expected a band width in \[0.1, 1000\] %"):
        check_query(99.0, 500.0, band_pct, names=("--percentile", "--sla", "--band-pct"))


def test_band_edges_and_extreme_loads_stay_finite() -> None:
    for pct in (0.1, 1000.0):
        check_query(99.0, 500.0, pct, names=("p", "s", "b"))
        for qps in (0.0, 0.5, 1.0, 200e3, 1e300, 1.7e308):
            k, lo, hi = band_of(qps, pct)
            assert math.isfinite(lo) and math.isfinite(hi) and lo < hi
    with pytest.raises(InputError, match="qps nan: expected a finite load"):
        band_of(math.nan, 10.0)


@pytest.mark.parametrize("value", ["1e-15", "1e-300", "0.05", "1001", "nan", "inf"])
def test_fleet_cli_refuses_a_band_width_in_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], value: str
) -> None:
    s = SqliteStore(tmp_path / "trials.sqlite")
    _fill(s)
    s.close()
    assert main(["trials", "fleet", "--state-dir", str(tmp_path), f"--band-pct={value}"]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "--band-pct" in err and "expected a band width in [0.1, 1000] %" in err
    assert "Traceback" not in err
    assert main(["trials", "fleet", "--state-dir", str(tmp_path), "--band-pct", "0.1", "--json"]) == 0
    assert main(["trials", "fleet", "--state-dir", str(tmp_path), "--class", "c" * 65]) == 2
    assert "--class" in capsys.readouterr().err


def test_daemon_serves_the_fleet_view_over_grpc(tmp_path: Path) -> None:
    """`GetFleetView` through a real gRPC channel to a running daemon, answered from its trial store: the
    policy's SLA by default, a request's SLA / class / band, drifting hosts left out, trials another process
    adds while it runs seen at the next call, and bad queries refused with INVALID_ARGUMENT."""
    import grpc

    from tests.daemon_fakes import Running, wait_for, write_config
    from tuner.daemon.service import protos

    cfg = write_config(tmp_path, sla_us=900.0, window_s=0.05)
    s = SqliteStore(tmp_path / "state" / "trials.sqlite")  # the fleet's trials, in the store the daemon opens
    _fill(s)
    s.set_host("bad", "c1", {"cpu_model": "X", "cores": 8}, drift=True, drift_z=9.0, drift_n=12)
    s.close()
    pb, services = protos()
    with Running(cfg) as r:
        wait_for(lambda: r.daemon.status().state == "holding")
        with grpc.insecure_channel(r.daemon.grpc_address) as ch:
            stub = services.TunerStub(ch)
            # the policy's SLA (900 µs): the 40 W point measured at exactly 900 µs meets it
            v = stub.GetFleetView(pb.GetFleetViewRequest(hw_class="c1"), timeout=10)
            assert (v.sla_us, v.percentile, v.band_pct) == (900.0, 99.0, 10.0)
            assert v.store.endswith("trials.sqlite") and list(v.drifting_hosts) == ["bad"]
            first = v.bands[0]
            assert (
                first.hw_class == "c1" and first.meets_sla and (first.point.itr_us, first.point.dvfs_ghz) == (400, 1.2)
            )
            assert first.qps_low <= 200e3 < first.qps_high and (first.trials, first.hosts) == (4, 2)
            # 500 µs re-scores the same trials; the 400 kQPS band has no point meeting it
            v = stub.GetFleetView(pb.GetFleetViewRequest(sla_us=500, hw_class="c1"), timeout=10)
            got = [(b.meets_sla, b.point.itr_us if b.HasField("point") else None) for b in v.bands]
            assert got == [(True, 64), (False, None)]
            assert v.bands[0].power_w == pytest.approx(61.0, abs=1e-3) and v.bands[0].latency_us == pytest.approx(430)
            assert not v.bands[1].HasField("power_w") and v.bands[1].trials == 1
            assert [(c.id, dict(c.fields)) for c in v.classes] == [("c1", {"cpu_model": "X", "cores": "8"})]
            # another process's writer adds a cheaper c2 trial: the next answer has it
            w = SqliteStore(tmp_path / "state" / "trials.sqlite")
            w.add([entry(8, "d", "c2", qps=201e3, itr=120, ghz=1.8, power_w=70, p99_us=350)])
            w.close()
            c2 = stub.GetFleetView(pb.GetFleetViewRequest(sla_us=500, hw_class="c2", band_pct=25), timeout=10)
            assert c2.band_pct == 25.0 and [(b.point.itr_us, b.trials, b.hosts) for b in c2.bands] == [(120, 2, 2)]
            for bad, word in (
                ({"percentile": 97.0}, "percentile 97"),
                ({"band_pct": -1.0}, "band_pct -1"),
                ({"band_pct": 1e-300}, "band_pct 1e-300: expected a band width in [0.1, 1000] %"),
                ({"band_pct": 5000.0}, "band_pct 5000"),
                ({"hw_class": "c1\x00" * 30}, "hw_class"),
            ):
                with pytest.raises(grpc.RpcError) as err:
                    stub.GetFleetView(pb.GetFleetViewRequest(**bad), timeout=10)
                assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT and word in (err.value.details() or "")
