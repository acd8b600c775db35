"""The code's shape holds: import-linter's contracts, ruff (lint and format) and mypy as configured in
pyproject.toml, no module that names an issue number, and no function or module over its length."""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]


def _tool(name: str) -> str:
    """The executable `name` of this interpreter's environment (the venv the tests run in), else on PATH."""
    exe = shutil.which(name, path=str(Path(sys.executable).parent)) or shutil.which(name)
    if exe is None:
        pytest.fail(f"{name} is not installed: pip install -e '.[test]'")
    return exe


def _run(*cmd: str, timeout: float = 300) -> subprocess.CompletedProcess[str]:
    return subprocess.run([_tool(cmd[0]), *cmd[1:]], cwd=REPO, capture_output=True, text=True, timeout=timeout)


def test_import_contracts_hold():
    """Arrows go down (tuner -> actuators | traces | reward -> core) and no two modules import each other."""
    r = _run("lint-imports", "--no-cache")
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-2000:]
    assert "0 broken" in r.stdout


def test_ruff_lint_is_clean():
    """`ruff check` (rules in pyproject.toml) finds nothing."""
    r = _run("ruff", "check", "--no-cache", "--output-format", "concise", ".")
    assert r.returncode == 0, r.stdout[-4000:] + r.stderr[-2000:]


def test_ruff_format_is_applied():
    """The tree is as `ruff format` leaves it (run `ruff format` to fix)."""
    r = _run("ruff", "format", "--no-cache", "--check", ".")
    assert r.returncode == 0, r.stdout[-4000:] + r.stderr[-2000:]


def test_mypy_is_clean():
    """mypy as configured in pyproject.toml: strict for actuators, reward, traces and core, untyped function
    bodies checked in tuner. Its cache (.mypy_cache) makes reruns take seconds; a cold run ~10 s of CPU."""
    r = _run("mypy", timeout=600)
    assert r.returncode == 0, r.stdout[-6000:] + r.stderr[-2000:]
    assert "Success" in r.stdout


def test_no_issue_numbers_in_the_product():
    """Users cannot look up a tracker's numbers: the product says what a target is and why instead."""
    tracked = subprocess.run(["git", "ls-files"], cwd=REPO, capture_output=True, text=True).stdout.split()
    if not tracked:
        pytest.skip("not a git checkout")
    pattern = re.compile(r"issue[ -]?#?[0-9]+", re.IGNORECASE)
    hits = []
    for name in tracked:
        path = REPO / name
        if not path.is_file() or path.suffix in {".zst", ".png", ".whl"}:
            continue
        try:
            text = path.read_text()
        except UnicodeDecodeError:
            continue
        hits += [f"{name}:{i}" for i, line in enumerate(text.splitlines(), 1) if pattern.search(line)]
    assert not hits, hits[:20]


def _python_files(*top: str) -> list[str]:
    """Tracked Python files under `top` (all when none), generated protobuf code left out."""
    out = subprocess.run(["git", "ls-files", "*.py"], cwd=REPO, capture_output=True, text=True).stdout.split()
    if not out:
        pytest.skip("not a git checkout")
    return [
        n
        for n in out
        if (not top or n.split("/", 1)[0] in top) and not n.startswith("tuner/proto/") and "_pb2" not in n
    ]


#: The members of the optional host abilities (`actuators.abilities`, `actuators.host.LoadControl`).
ABILITY_MEMBERS = {
    "expected",
    "expected_cache",
    "expected_itr_anchors",
    "expected_draws_kept",
    "apply",
    "close",
    "hardware_class",
    "interrupt",
    "warnings",
    "warnings_by_source",
    "absent",
    "set_offered_qps",
}


def test_optional_host_abilities_are_declared_not_probed():
    """An optional ability is asked for with `isinstance(host, Ability)` (`actuators.abilities`), never looked up
    by name with getattr/hasattr: a Protocol says what a host may offer and mypy checks who offers it."""
    import ast

    probes = set()
    for name in _python_files("tuner", "actuators", "traces", "reward", "core", "bench"):
        tree = ast.parse((REPO / name).read_text(), name)
        for node in ast.walk(tree):
            if (
                isinstance(node, ast.Call)
                and isinstance(node.func, ast.Name)
                and node.func.id in ("getattr", "hasattr")
                and len(node.args) >= 2
                and isinstance(node.args[1], ast.Constant)
                and node.args[1].value in ABILITY_MEMBERS
            ):
                probes.add((name, node.args[1].value, node.lineno))
    assert not probes, [f"{n}:{line}: {fn!r}" for n, fn, line in sorted(probes)]


#: Longest a function may be, in lines (decorators and docstring included).
MAX_FUNCTION_LINES = 80


def test_no_function_is_over_80_lines():
    """A function a reader takes in at once: the product, the benches and the tests (generated code aside)."""
    import ast

    long = []
    for name in _python_files():
        for node in ast.walk(ast.parse((REPO / name).read_text(), name)):
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                start = min([node.lineno, *(d.lineno for d in node.decorator_list)])
                lines = (node.end_lineno or node.lineno) - start + 1
                if lines > MAX_FUNCTION_LINES:
                    long.append(f"{name}:{node.lineno}: {node.name} ({lines} lines)")
    assert not long, long


#: Longest a module may be, in lines: "no module over ~500 lines", the tilde's 10 % and no more.
MAX_MODULE_LINES = 550


def test_no_module_is_over_550_lines():
    """One module, one job: the product, the benches and the tests (generated code aside). A module that grows
    past this is two jobs; split it by concern (the tests by the product module they test)."""
    long = []
    for name in _python_files():
        lines = len((REPO / name).read_text().splitlines())
        if lines > MAX_MODULE_LINES:
            long.append(f"{name}: {lines} lines")
    assert not long, long
