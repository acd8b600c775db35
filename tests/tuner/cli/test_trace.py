"""`tuner trace stats|synth` through `tuner.cli.app.main`."""

from __future__ import annotations

import json

import pytest

from traces.schedule import sample_trace_path
from tuner.cli.app import main


def run(capsys, *argv):
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def test_stats_json_of_bundled_sample(capsys):
    code, out, _ = run(capsys, "trace", "stats", str(sample_trace_path()), "--json", "--peak-qps", "600000")
    assert code == 0
    doc = json.loads(out)
    assert doc["full_bins"] == 24 and doc["seconds"] == 86400 and doc["rows"] == doc["lines"]
    assert sum(b["requests"] for b in doc["bins"]) == doc["rows"]
    assert max(b["scaled_qps"] for b in doc["bins"]) == pytest.approx(600000)
    assert doc["bins"][0]["op_mix"]["get"] == pytest.approx(0.92, abs=0.02)
    assert doc["skipped"] == {}


def test_stats_table(capsys, tmp_path):
    path = tmp_path / "t.csv"
    path.write_text("".join(f"{t},k{t},10,{t},1,{'get' if t % 2 else 'set'},0\n" for t in range(30)))
    code, out, _ = run(capsys, "trace", "stats", str(path), "--bin", "10", "--scale", "2")
    assert code == 0
    assert "30 requests over 30 s" in out.replace("\n", " ")
    assert "scale factor 2" in out and "peak 1.00 QPS" in out
    assert "sizes: mean [min-max] bytes" in out and "[10-10]" in out  # brackets are not rich markup


def test_stats_bad_row_exits_nonzero_with_file_line(capsys, tmp_path):
    path = tmp_path / "trace.csv"
    path.write_text("0,k,1,2,3,get,0\n1,k,x,2,3,get,0\n")
    code, out, err = run(capsys, "trace", "stats", str(path))
    assert code == 2 and out == ""
    assert err.strip() == (f"tuner: error: {path}:2: field 'key size': expected a non-negative integer, got 'x'")


def test_stats_skip_bad_reports_counts(capsys, tmp_path):
    path = tmp_path / "trace.csv"
    path.write_text("0,k,1,2,3,get,0\n1,k,x,2,3,get,0\nnope\n2,k,1,2,3,get,0\n")
    code, out, _ = run(capsys, "trace", "stats", str(path), "--skip-bad", "--bin", "1")
    assert code == 0
    assert "skipped 2 malformed row(s): 1 field 'key size', 1 field count" in out.replace("\n", " ")
    code, out, _ = run(capsys, "trace", "stats", str(path), "--skip-bad", "--json")
    assert json.loads(out)["skipped"] == {"field 'key size'": 1, "field count": 1}


def test_stats_tolerance_option(capsys, tmp_path):
    path = tmp_path / "trace.csv"
    path.write_text("10,k,1,2,3,get,0\n0,k,1,2,3,get,0\n")
    code, _, err = run(capsys, "trace", "stats", str(path))
    assert code == 2 and "timestamp 0 is 10 s earlier than 10" in err
    code, _, _ = run(capsys, "trace", "stats", str(path), "--tolerance", "10", "--json")
    assert code == 0


def test_stats_empty(capsys, tmp_path):
    path = tmp_path / "empty.csv"
    path.write_bytes(b"")
    code, _, err = run(capsys, "trace", "stats", str(path))
    assert code == 2 and f"{path}: empty trace" in err


def test_peak_and_scale_are_exclusive(capsys):
    with pytest.raises(SystemExit) as exc:
        main(["trace", "stats", "x.csv", "--peak-qps", "1", "--scale", "2"])
    assert exc.value.code == 2
    assert "not allowed with argument" in capsys.readouterr().err


def test_synth_then_stats(capsys, tmp_path):
    out_file = tmp_path / "c18.csv.zst"
    code, out, _ = run(
        capsys,
        "trace",
        "synth",
        "--cluster",
        "18",
        "--hours",
        "2",
        "--mean-qps",
        "5",
        "--seed",
        "3",
        "--out",
        str(out_file),
    )
    assert code == 0 and "wrote" in out and out_file.read_bytes()[:4] == b"\x28\xb5\x2f\xfd"
    code, out, _ = run(capsys, "trace", "stats", str(out_file), "--json")
    doc = json.loads(out)
    assert code == 0 and doc["full_bins"] == 2 and doc["seconds"] == 7200
    assert set(doc["bins"][0]["ops"]) <= {"get", "add", "gets", "cas"}


def test_synth_cluster_with_na_fields(capsys, tmp_path):
    code, _, err = run(capsys, "trace", "synth", "--cluster", "5", "--out", str(tmp_path / "x.csv"))
    assert code == 2 and "cluster5:" in err and "N/A" in err
    assert not (tmp_path / "x.csv").exists()


def test_series_out(capsys, tmp_path):
    path = tmp_path / "t.csv"
    path.write_text("5,k,1,2,3,get,0\n5,k,1,2,3,get,0\n7,k,1,2,3,get,0\n")
    series = tmp_path / "series.csv"
    code, _, _ = run(capsys, "trace", "stats", str(path), "--json", "--series-out", str(series))
    assert code == 0
    assert series.read_text() == "second,requests\n0,2\n1,0\n2,1\n"


def test_stats_several_files_and_start(capsys, tmp_path):
    a, b = tmp_path / "c.0.csv", tmp_path / "c.1.csv"
    a.write_text("".join(f"{t},k,1,2,3,get,0\n" for t in range(3600)))
    b.write_text("".join(f"{t},k,1,2,3,get,0\n{t},k,1,2,3,set,0\n" for t in range(3600, 7200)))
    code, out, _ = run(capsys, "trace", "stats", str(a), str(b), "--json")
    doc = json.loads(out)
    assert code == 0 and [x["qps"] for x in doc["bins"]] == [1.0, 2.0] and doc["lines"] == 3600 * 3
    code, out, _ = run(capsys, "trace", "stats", str(a), str(b), "--json", "--start-hours", "1")
    doc = json.loads(out)
    assert code == 0 and doc["start_s"] == 3600 and [x["qps"] for x in doc["bins"]] == [2.0]


@pytest.mark.parametrize(
    "option",
    [["--hours", "inf"], ["--start-hours", "nan"], ["--peak-qps", "inf"], ["--max-span-days", "-1"], ["--bin", "0"]],
)
def test_stats_refuses_non_finite_or_non_positive_options(capsys, option):
    with pytest.raises(SystemExit) as exc:
        main(["trace", "stats", "x.csv", *option])
    assert exc.value.code == 2 and "expected a finite" in capsys.readouterr().err
