"""Shared CLI plumbing: `tuner --help` lists the commands and stays light; `make_host` errors are one line."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from actuators.host import Host, LoadControl
from core.errors import TunerError
from tuner.cli.app import COMMANDS
from tuner.hosts import make_host

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))  # `tests.fakes` as a host spec

HEAVY = ("ax", "torch", "botorch", "matplotlib", "scipy", "grpc", "pyroute2")
# command names: a module `tuner/cli/a_b.py` registers the command `a-b`
BUILT = [n.replace("_", "-") for n in COMMANDS if (REPO / "tuner" / "cli" / f"{n}.py").exists()]

# Builds the parser, renders top-level and every subcommand's help, and reports heavy modules loaded.
PROBE = """
import contextlib, io, json, sys
from tuner.cli.app import build_parser
parser = build_parser()
helps = {}
for argv in [["--help"]] + [[name, "--help"] for name in sys.argv[1:]]:
    buf = io.StringIO()
    with contextlib.redirect_stdout(buf):
        try:
            parser.parse_args(argv)
        except SystemExit as exc:
            assert exc.code == 0, (argv, exc.code)
    helps[" ".join(argv)] = buf.getvalue()
heavy = sorted(m for m in sys.modules if m.split(".")[0] in %r)
print(json.dumps({"helps": helps, "heavy": heavy}))
""" % (HEAVY,)


def _env() -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": str(REPO)}


def test_help_lists_every_built_command_without_heavy_imports():
    proc = subprocess.run(
        [sys.executable, "-c", PROBE, *BUILT], capture_output=True, text=True, env=_env(), cwd=REPO, timeout=60
    )
    assert proc.returncode == 0, proc.stderr
    report = json.loads(proc.stdout)
    top = report["helps"]["--help"]
    assert "sweep" in BUILT
    for name in BUILT:
        assert re.search(rf"^    {re.escape(name)}\s", top, re.M), f"{name} missing from tuner --help"
        assert report["helps"][f"{name} --help"].startswith(f"usage: tuner {name}")
    assert report["heavy"] == [], f"importing the CLI pulled in {report['heavy']}"


def test_console_script_help_exits_zero():
    exe = Path(sys.executable).with_name("tuner")
    if not exe.exists():
        pytest.skip("console script not installed in this environment")
    proc = subprocess.run([str(exe), "--help"], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0 and "sweep" in proc.stdout


def _one_line_error(spec: str, **options) -> str:
    with pytest.raises(TunerError) as info:
        make_host(spec, **options)
    msg = str(info.value)
    assert "\n" not in msg and msg.startswith(f"--host {spec!r}")
    return msg


@pytest.mark.parametrize("spec", ["nocolon", ":make", "tests.fakes:", "", ":"])
def test_make_host_bad_spec(spec):
    assert "expected 'sim', 'real' or 'module:factory'" in _one_line_error(spec)


def test_make_host_module_that_does_not_import(tmp_path, monkeypatch):
    assert "cannot import 'no_such_module_xyz'" in _one_line_error("no_such_module_xyz:make")
    (tmp_path / "broken_host_mod.py").write_text("import os\nraise RuntimeError('boom at import')\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    msg = _one_line_error("broken_host_mod:make")
    assert "cannot import 'broken_host_mod'" in msg and "boom" in msg
    (tmp_path / "syntax_host_mod.py").write_text("def make(:\n")
    assert "cannot import 'syntax_host_mod'" in _one_line_error("syntax_host_mod:make")


def test_make_host_factory_missing_or_not_callable():
    assert "has no callable 'no_factory'" in _one_line_error("tests.fakes:no_factory")
    assert "has no callable 'NOT_CALLABLE'" in _one_line_error("tests.fakes:NOT_CALLABLE")


def test_make_host_object_not_implementing_protocol():
    msg = _one_line_error("tests.fakes:make_not_a_host")
    assert "does not implement the Host protocol" in msg and "knobs" in msg and "measure" in msg
    assert "missing: attribute 'name'" in _one_line_error("tests.fakes:make_nameless_host")


def test_make_host_factory_failure_and_bad_options():
    msg = _one_line_error("tests.fakes:make_bad_factory")
    assert "factory failed: ValueError: no such device" in msg
    msg = _one_line_error("tests.fakes:make_fake_host", turbo=True)  # checked against the signature first
    assert "option turbo: not an option of host 'tests.fakes:make_fake_host' (accepted: " in msg


def test_make_host_multiline_exception_text_stays_one_line(tmp_path, monkeypatch):
    (tmp_path / "multiline_host_mod.py").write_text("raise RuntimeError('boom\\nat import')\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    assert "boom" in _one_line_error("multiline_host_mod:make")
    assert "cannot open device" in _one_line_error("tests.fakes:make_broken_host")


def test_make_host_success_passes_options():
    host = make_host("tests.fakes:make_fake_host", seed=3, qps=5000.0)
    assert isinstance(host, Host) and isinstance(host, LoadControl)
    assert host.seed == 3 and host.offered_qps() == 5000.0
    fixed = make_host("tests.fakes:make_fixed_load_host")
    assert isinstance(fixed, Host) and not isinstance(fixed, LoadControl)


def test_cli_reports_host_errors_as_one_line_exit_2(tmp_path):
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "tuner.cli",
            "sweep",
            "--host",
            "tests.fakes:make_not_a_host",
            "--out",
            str(tmp_path / "o"),
        ],
        capture_output=True,
        text=True,
        env=_env(),
        cwd=REPO,
        timeout=60,
    )
    assert proc.returncode == 2
    assert proc.stderr.count("\n") == 1 and proc.stderr.startswith("tuner: error: --host ")
    assert "Traceback" not in proc.stderr


def test_sim_host_implements_the_protocol():
    pytest.importorskip("actuators.sim.host")
    host = make_host("sim", seed=1)
    assert isinstance(host, Host) and isinstance(host, LoadControl)
    knobs = host.knobs()
    assert knobs.itr_us[0] == 2 and knobs.itr_us[-1] == 1022 and len(knobs.dvfs_ghz) == 18
    host.restore()
