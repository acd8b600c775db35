"""bench/generalisation.py and bench/ablation.py end to end on a tiny configuration (one member, one hour, one
seed, two trials per retune), in this process: they run and print the JSON document their pages read."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[2]
TINY = ["--members", "ebbrt-sample", "--seeds", "1", "--slas", "99:500", "--hours", "1", "--trials", "2"]


def _bench(name: str) -> Any:
    spec = importlib.util.spec_from_file_location(f"zoo_bench_{name}", REPO / "bench" / f"{name}.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _run(name: str, capsys, *argv: str) -> dict:
    assert _bench(name).main(list(argv)) == 0
    return json.loads(capsys.readouterr().out)


def test_ablation_pairs_each_ablation_with_the_default_and_generalisation_reports_cells(capsys):
    doc = _run("ablation", capsys, *TINY, "--ablations", "warm-no-peak-step")
    assert [a["variant"] for a in doc["ablations"]] == ["warm", "warm-no-peak-step"]
    assert doc["ablations"][0]["delta_vs_warm_median"] == 0.0
    assert doc["ablations"][1]["runs"] == 1 and doc["engine"] == "serial"
    # the same run through the generalisation bench (the cells already computed are reused in this process)
    doc = _run("generalisation", capsys, *TINY)
    assert doc["engine"] == "serial" and doc["replays"] == 1
    (c,) = doc["cells"]
    assert c["member"] == "ebbrt-sample" and c["plant"] == "ebbrt"
    assert c["ratio_to_oracle"]["median"] > 0.9
    assert set(c["met"]) == {
        "ratio_median",
        "ratio_worst",
        "no_violating_windows",
        "above_sla_every_run",
        "trials_after_day1",
    }
    assert set(doc["halves"]) == {"tuning"}


def test_a_bad_member_is_one_line(capsys):
    assert _bench("generalisation").main(["--members", "nope"]) == 2
    assert "zoo member 'nope'" in capsys.readouterr().err
