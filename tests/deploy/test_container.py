"""The DaemonSet's container image (deploy/Containerfile), checked offline: the tests build no image (that takes a
base image, PyPI, the PyTorch index and ~30 min; docs/deployment-kubernetes.md says how it was built once by hand),
so the file is parsed and held against the repository and the DaemonSet, and its wheel stage's step is run."""

from __future__ import annotations

import json
import shlex
import shutil
import subprocess
import sys
import tomllib
import zipfile
from pathlib import Path

import pytest
import yaml

REPO = Path(__file__).resolve().parents[2]
CONTAINERFILE = REPO / "deploy" / "Containerfile"
DAEMONSET = REPO / "deploy" / "kubernetes" / "daemonset.yaml"


def instructions(path: Path) -> list[tuple[str, str]]:
    """(INSTRUCTION, arguments) in order: comments dropped, backslash continuations joined."""
    out: list[tuple[str, str]] = []
    pending = ""
    for raw in path.read_text().splitlines():
        line = raw.strip()
        if not pending and (not line or line.startswith("#")):
            continue
        if line.endswith("\\"):
            pending += line[:-1] + " "
            continue
        line, pending = pending + line, ""
        word, _, rest = line.partition(" ")
        out.append((word.upper(), rest.strip()))
    assert not pending, f"{path}: a continuation runs off the end"
    return out


def stages(ins: list[tuple[str, str]]) -> list[list[tuple[str, str]]]:
    """The instructions of each build stage (a FROM starts one)."""
    out: list[list[tuple[str, str]]] = []
    for i in ins:
        if i[0] == "FROM":
            out.append([])
        if out:
            out[-1].append(i)
    return out


def container() -> dict:
    docs = list(yaml.safe_load_all(DAEMONSET.read_text()))
    (ds,) = [d for d in docs if d and d.get("kind") == "DaemonSet"]
    (c,) = [c for c in ds["spec"]["template"]["spec"]["containers"] if c["name"] == "tuner"]
    return {"pod": ds["spec"]["template"]["spec"], "container": c}


def test_every_copy_source_exists_and_the_wheel_gets_every_package():
    ins = instructions(CONTAINERFILE)
    copies = [shlex.split(a) for w, a in ins if w == "COPY"]
    local = [c for c in copies if not any(x.startswith("--from=") for x in c)]
    sources = [s for c in local for s in c[:-1] if not s.startswith("--")]
    assert sources, "no COPY from the build context"
    for s in sources:
        assert (REPO / s).exists(), f"COPY source {s} is not in the repository"
    # the wheel stage copies every top-level package setuptools packs, and the files pyproject names
    project = tomllib.loads((REPO / "pyproject.toml").read_text())
    patterns = project["tool"]["setuptools"]["packages"]["find"]["include"]
    packs = {p.rstrip("*") for p in patterns}
    assert packs <= set(sources), f"packages not copied into the wheel stage: {sorted(packs - set(sources))}"
    assert {"pyproject.toml", project["project"]["readme"]} <= set(sources)
    # every stage copies from a stage defined before it
    names = [a.split()[-1] for w, a in ins if w == "FROM" and " AS " in a.upper()]
    for c in copies:
        for x in c:
            if x.startswith("--from="):
                assert x.removeprefix("--from=") in names


def test_entrypoint_and_cmd_are_the_daemonsets_command_and_user_matches_its_security_context():
    last = stages(instructions(CONTAINERFILE))[-1]
    final = dict(last)
    command = json.loads(final["ENTRYPOINT"]) + json.loads(final["CMD"])
    k8s = container()
    assert command == k8s["container"]["command"] == ["tuner", "daemon", "--config", "/etc/tuner/tuner.toml"]
    # the image's own user: numeric and unprivileged (so runAsNonRoot can verify it), created in the image
    uid, _, gid = final["USER"].partition(":")
    assert uid.isdigit() and int(uid) > 0 and gid.isdigit() and int(gid) > 0
    assert f"--uid {uid}" in final["RUN"] and f"--gid {gid}" in final["RUN"]
    # ... which the DaemonSet overrides explicitly: root with every capability dropped but NET_ADMIN (no
    # ambient capabilities in Kubernetes), never relying on the image's default user
    pod_sc, sc = k8s["pod"]["securityContext"], k8s["container"]["securityContext"]
    assert pod_sc["runAsUser"] == 0 and pod_sc["runAsNonRoot"] is False
    assert sc["capabilities"] == {"drop": ["ALL"], "add": ["NET_ADMIN"]} and sc["allowPrivilegeEscalation"] is False


def test_a_read_only_root_filesystem_suffices():
    """Everything the image points the process at for writing lies on one of the DaemonSet's writable mounts."""
    k8s = container()
    assert k8s["container"]["securityContext"]["readOnlyRootFilesystem"] is True
    writable = [m["mountPath"] for m in k8s["container"]["volumeMounts"] if not m.get("readOnly")]
    final = stages(instructions(CONTAINERFILE))[-1]
    env = {}
    for w, a in final:
        if w == "ENV":
            for item in shlex.split(a):
                k, _, v = item.partition("=")
                env[k] = v
    assert env["PYTHONDONTWRITEBYTECODE"] == "1"
    for key in ("HOME", "MPLCONFIGDIR"):
        assert any(env[key] == p or env[key].startswith(p + "/") for p in writable), (key, env[key], writable)
    ds_env = {e["name"]: e["value"] for e in k8s["container"].get("env", [])}
    assert ds_env.get("HOME", env["HOME"]) == env["HOME"]
    # the daemon's state, runtime and config directories are mounts, not image paths
    mounts = {m["mountPath"] for m in k8s["container"]["volumeMounts"]}
    assert {"/var/lib/tuner", "/run/tuner", "/etc/tuner", "/tmp"} <= mounts


def test_the_image_tag_is_the_projects_version():
    project = tomllib.loads((REPO / "pyproject.toml").read_text())
    kust = yaml.safe_load((REPO / "deploy" / "kubernetes" / "kustomization.yaml").read_text())
    (img,) = [i for i in kust["images"] if i["name"] == container()["container"]["image"]]
    assert img["newTag"] == project["project"]["version"]


def test_the_wheel_stage_builds_a_wheel_with_the_entry_point_and_package_data(tmp_path):
    """The first stage's step, run here offline (no build isolation: this venv's setuptools): the wheel has
    every package, the .proto the daemon compiles at run time, the bundled trace and the `tuner` script."""
    pytest.importorskip("setuptools")
    src = tmp_path / "src"
    src.mkdir()
    for w, a in instructions(CONTAINERFILE):
        if w == "COPY" and "--from=" not in a:
            *items, dest = shlex.split(a)
            for s in items:  # the wheel stage mirrors the repository's layout under its WORKDIR
                assert dest in ("./", f"./{s}"), f"COPY {a}: expected the repository layout"
                if (REPO / s).is_dir():
                    shutil.copytree(REPO / s, src / s, ignore=shutil.ignore_patterns("__pycache__"))
                else:
                    shutil.copy(REPO / s, src / s)
    out = subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "wheel",
            "--no-deps",
            "--no-build-isolation",
            "-q",
            "-w",
            str(tmp_path / "d"),
            ".",
        ],
        cwd=src,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert out.returncode == 0, out.stderr[-2000:]
    (whl,) = (tmp_path / "d").glob("tuner-*.whl")
    names = zipfile.ZipFile(whl).namelist()
    assert "tuner/proto/tuner/v1/tuner.proto" in names
    assert any(n.startswith("traces/data/") for n in names)
    for pkg in ("tuner", "actuators", "reward", "traces", "core"):
        assert f"{pkg}/__init__.py" in names
    entry = next(n for n in names if n.endswith(".dist-info/entry_points.txt"))
    assert "tuner = tuner.cli:main" in zipfile.ZipFile(whl).read(entry).decode()
