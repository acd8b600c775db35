"""The tests mirror the code: each module's tests are found by its path and name.

A test module under `tests/<package>/<subpackage>/` tests the product package `<package>/<subpackage>/` and is
named `test_<module>.py` or `test_<module>_<feature>.py` after one of its modules (or sub-packages); tests that
cross the layers are in the declared places; helpers and shared fixtures are on top of `tests/`."""

from __future__ import annotations

import importlib
from pathlib import Path

TESTS = Path(__file__).resolve().parent
REPO = TESTS.parent
#: the product's top-level packages (pyproject.toml's import-linter root_packages)
PRODUCT = ("tuner", "actuators", "traces", "reward", "core")
#: test modules on top of tests/: the checks of the code's shape as a whole
TOP = {"test_architecture.py", "test_layout.py"}
#: directories of tests that cross the layers (not mirrors of one package): end to end, deploy/'s files
CROSS_CUTTING = {"system", "deploy"}
#: directories under tests/ that hold no Python
DATA = {"data", "__pycache__"}


def _test_dirs() -> list[Path]:
    return [d for d in TESTS.rglob("*") if d.is_dir() and not DATA & set(d.relative_to(TESTS).parts)]


def _owners(package: Path) -> set[str]:
    """The names a test module in the mirror of `package` may be named after: its modules and sub-packages."""
    mods = {p.stem for p in package.glob("*.py") if p.name != "__init__.py"}
    return mods | {d.name for d in package.iterdir() if (d / "__init__.py").is_file()}


def _misplaced(path: Path) -> str | None:
    """Why the test module at `path` is outside the layout, or None."""
    rel = path.relative_to(TESTS)
    if len(rel.parts) == 1:
        return None if rel.name in TOP else f"on top of tests/ (only {sorted(TOP)} are)"
    if rel.parts[0] in CROSS_CUTTING:
        return None
    if rel.parts[0] not in PRODUCT:
        return (
            f"{rel.parts[0]}/ is neither a product package {PRODUCT} nor a cross-cutting place {sorted(CROSS_CUTTING)}"
        )
    package = REPO.joinpath(*rel.parts[:-1])
    if not (package / "__init__.py").is_file():
        return f"no product package {package.relative_to(REPO)}/ to mirror"
    name = rel.stem.removeprefix("test_")
    owners = _owners(package)
    if not any(name == m or name.startswith(m + "_") for m in owners):
        return (
            f"names no module of {package.relative_to(REPO)}/ (test_<module>[_<feature>].py, modules: {sorted(owners)})"
        )
    return None


def test_every_test_module_mirrors_a_product_module_or_sits_in_a_declared_place() -> None:
    modules = sorted(TESTS.rglob("test_*.py"))
    assert len(modules) > 50  # the glob really found the suite
    bad = [f"{p.relative_to(REPO)}: {why}" for p in modules if (why := _misplaced(p)) is not None]
    assert not bad, "test modules outside the mirrored layout:\n" + "\n".join(bad)


def test_the_check_refuses_what_the_layout_forbids() -> None:
    assert _misplaced(TESTS / "tuner/daemon/test_guardrail.py") is None
    assert _misplaced(TESTS / "tuner/optimize/test_stopping_bisect.py") is None  # a feature of stopping.py
    assert _misplaced(TESTS / "system/test_anything.py") is None
    assert "names no module" in (_misplaced(TESTS / "tuner/optimize/test_bisect.py") or "")
    assert "on top of tests/" in (_misplaced(TESTS / "test_bisect.py") or "")
    assert "no product package" in (_misplaced(TESTS / "tuner/nowhere/test_x.py") or "")
    assert "neither a product package" in (_misplaced(TESTS / "misc/test_x.py") or "")


def test_test_directories_are_packages_holding_only_tests() -> None:
    """An empty __init__.py everywhere (module names are paths: tests.tuner.daemon.test_guardrail); helpers and
    shared fixtures stay on top of tests/, imported as tests.<name>."""
    assert (TESTS / "__init__.py").is_file()
    dirs = _test_dirs()
    missing = [str(d.relative_to(REPO)) for d in dirs if not (d / "__init__.py").is_file()]
    assert not missing, f"test directories without __init__.py: {missing}"
    inits = [TESTS / "__init__.py", *(d / "__init__.py" for d in dirs)]
    assert not [str(p.relative_to(REPO)) for p in inits if p.read_text().strip()], "__init__.py files must be empty"
    allowed = {"__init__.py", "conftest.py"}
    stray = [
        str(p.relative_to(REPO))
        for d in dirs
        for p in d.glob("*.py")
        if p.name not in allowed and not p.name.startswith("test_")
    ]
    assert not stray, f"helpers belong on top of tests/ (imported as tests.<name>): {stray}"


def test_no_test_directory_hides_a_product_package() -> None:
    """tests/tuner/ is tests.tuner: with tests/__init__.py, pytest puts the repository, not tests/, on sys.path."""
    for name in PRODUCT:
        module = importlib.import_module(name)
        assert Path(module.__file__ or "").resolve().parent == REPO / name, f"{name} resolves to {module.__file__}"
    assert importlib.import_module("tests.tuner").__name__ == "tests.tuner"
