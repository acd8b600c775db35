"""deploy/kubernetes/: the manifests validate offline against the Kubernetes schemas, the ServiceMonitor against
its CRD's (vendored subset), the Kustomize base renders, and everything agrees with the daemon's real config."""

from __future__ import annotations

import copy
import json
import shutil
import subprocess
from pathlib import Path

import pytest

yaml = pytest.importorskip("yaml")
kv = pytest.importorskip("kubernetes_validate")
jsonschema = pytest.importorskip("jsonschema")

from core.errors import InputError  # noqa: E402
from tuner.config import is_loopback, load_config  # noqa: E402

KUBE = Path(__file__).resolve().parents[2] / "deploy" / "kubernetes"
SM_SCHEMA = Path(__file__).resolve().parents[1] / "data" / "servicemonitor-v1.schema.json"
#: Oldest Kubernetes the manifests target (native gRPC probes are GA since 1.27) and the newest schemas shipped.
K8S_VERSIONS = ("1.30.0", "1.37.0")
KUBECTL = shutil.which("kubectl")


def _kustomization() -> dict:
    return yaml.safe_load((KUBE / "kustomization.yaml").read_text())


def _resources() -> list[dict]:
    docs = []
    for name in _kustomization()["resources"]:
        docs += [d for d in yaml.safe_load_all((KUBE / name).read_text()) if d]
    return docs


def _kind(docs: list[dict], kind: str) -> dict:
    (doc,) = [d for d in docs if d["kind"] == kind]
    return doc


def _validate(doc: dict, version: str) -> None:
    if doc["kind"] == "ServiceMonitor":
        jsonschema.validate(doc, json.loads(SM_SCHEMA.read_text()))
    else:
        kv.validate(doc, version, strict=True)


def _container(ds: dict) -> dict:
    (c,) = ds["spec"]["template"]["spec"]["containers"]
    return c


def _port(address: str) -> int:
    return int(address.rpartition(":")[2])


@pytest.mark.parametrize("version", K8S_VERSIONS)
def test_core_manifests_validate_strictly(version):
    docs = _resources()
    assert {d["kind"] for d in docs} == {"Namespace", "ServiceAccount", "DaemonSet", "Service", "ServiceMonitor"}
    for doc in docs:
        _validate(doc, version)
    # not vacuous: a misspelt field and a wrong type are refused
    ds = copy.deepcopy(_kind(docs, "DaemonSet"))
    _container(ds)["securityContext"]["readOnlyRootFileSystem"] = True
    with pytest.raises(kv.ValidationError):
        kv.validate(ds, version, strict=True)
    ds = copy.deepcopy(_kind(docs, "DaemonSet"))
    _container(ds)["startupProbe"]["grpc"]["port"] = "grpc"  # grpc probes take a number, not a port name
    with pytest.raises(kv.ValidationError):
        kv.validate(ds, version, strict=True)


def test_servicemonitor_schema_refuses_typos():
    sm = _kind(_resources(), "ServiceMonitor")
    schema = json.loads(SM_SCHEMA.read_text())
    jsonschema.validate(sm, schema)
    for mutate in (
        lambda s: s["spec"]["endpoints"][0].update(intervall="15s"),
        lambda s: s["spec"]["endpoints"][0].update(interval="15 seconds"),
        lambda s: s["spec"]["endpoints"][0]["relabelings"][0].update(action="rewrite"),
        lambda s: s["spec"].pop("selector"),
    ):
        bad = copy.deepcopy(sm)
        mutate(bad)
        with pytest.raises(jsonschema.ValidationError):
            jsonschema.validate(bad, schema)


def test_privileges_are_the_least_that_works():
    ds = _kind(_resources(), "DaemonSet")
    pod = ds["spec"]["template"]["spec"]
    c = _container(ds)
    sc = c["securityContext"]
    assert pod["hostNetwork"] is True and pod["hostPID"] is False and pod["hostIPC"] is False
    assert pod["automountServiceAccountToken"] is False
    assert sc["privileged"] is False and sc["allowPrivilegeEscalation"] is False
    assert sc["readOnlyRootFilesystem"] is True
    assert sc["capabilities"] == {"drop": ["ALL"], "add": ["NET_ADMIN"]}
    assert pod["securityContext"]["seccompProfile"]["type"] == "RuntimeDefault"
    # every host path is read-only except the CPU directory (cpufreq writes) and the state directory
    vols = {v["name"]: v for v in pod["volumes"]}
    writable = set()
    for m in c["volumeMounts"]:
        if "hostPath" in vols[m["name"]] and not m.get("readOnly", False):
            writable.add(vols[m["name"]]["hostPath"]["path"])
    assert writable == {"/sys/devices/system/cpu", "/var/lib/tuner"}
    host_paths = {v["hostPath"]["path"] for v in vols.values() if "hostPath" in v}
    assert not host_paths & {"/", "/sys", "/proc", "/dev", "/etc", "/var/run", "/run"}
    # the SIGTERM path (finish the window, restore the knobs) has the unit's TimeoutStopSec
    assert pod["terminationGracePeriodSeconds"] == 90


def test_config_is_the_daemons_and_ports_agree(tmp_path):
    docs = _resources()
    ds, svc, sm = (_kind(docs, k) for k in ("DaemonSet", "Service", "ServiceMonitor"))
    c = _container(ds)
    # the ConfigMap is generated from tuner.toml and mounted where the container's command reads it
    (gen,) = _kustomization()["configMapGenerator"]
    assert gen["files"] == ["tuner.toml"]
    mounts = {m["name"]: m["mountPath"] for m in c["volumeMounts"]}
    vols = {v["name"]: v for v in ds["spec"]["template"]["spec"]["volumes"]}
    assert vols["config"]["configMap"]["name"] == gen["name"]
    assert c["command"][-2:] == ["--config", f"{mounts['config']}/tuner.toml"]
    # the daemon's own loader accepts it (the token file is the Secret's mount; point it at a real file)
    text = (KUBE / "tuner.toml").read_text()
    token_path = f"{mounts['grpc-token']}/token"
    assert token_path in text
    (tmp_path / "token").write_text("s3cret\n")
    (tmp_path / "tuner.toml").write_text(text.replace(token_path, str(tmp_path / "token")))
    cfg = load_config(tmp_path / "tuner.toml")
    assert cfg.host.spec == "real" and cfg.host.options["root"] == "/host" and cfg.host.options["live_root"] is True
    assert cfg.host.mode == "observe"  # the safe order: observe first, the operator switches to "tune"
    assert str(cfg.state_dir) == mounts["state"] == cfg.host.options["state_dir"]
    # probes and scrapes come from the node's network: both listeners are beyond loopback, the API behind a token
    assert not is_loopback(cfg.grpc.listen) and cfg.grpc.token_file is not None
    assert cfg.metrics_listen is not None and not is_loopback(cfg.metrics_listen)
    ports = {p["name"]: p["containerPort"] for p in c["ports"]}
    assert ports == {"grpc": _port(cfg.grpc.listen), "metrics": _port(cfg.metrics_listen)}
    for probe in ("startupProbe", "readinessProbe", "livenessProbe"):
        assert c[probe]["grpc"]["port"] == ports["grpc"]
    assert c["readinessProbe"]["grpc"]["service"] == "tuner.v1.Tuner"
    # the headless Service selects the pods and names the ports the ServiceMonitor scrapes
    assert svc["spec"]["clusterIP"] == "None"
    labels = ds["spec"]["template"]["metadata"]["labels"]
    assert all(labels.get(k) == v for k, v in svc["spec"]["selector"].items())
    assert {p["name"]: p["targetPort"] for p in svc["spec"]["ports"]} == {"grpc": "grpc", "metrics": "metrics"}
    assert all(svc["metadata"]["labels"].get(k) == v for k, v in sm["spec"]["selector"]["matchLabels"].items())
    assert [e["port"] for e in sm["spec"]["endpoints"]] == ["metrics"]


def test_config_without_token_is_refused_beyond_loopback(tmp_path):
    """The shipped listeners are only accepted because of the token: the daemon refuses an open API."""
    text = (KUBE / "tuner.toml").read_text()
    lines = [ln for ln in text.splitlines() if not ln.startswith("token_file")]
    (tmp_path / "tuner.toml").write_text("\n".join(lines) + "\n")
    with pytest.raises(InputError, match=r"grpc.*listen.*expected a unix socket or loopback address"):
        load_config(tmp_path / "tuner.toml")


def _render(path: Path) -> list[dict]:
    r = subprocess.run([KUBECTL, "kustomize", str(path)], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    return [d for d in yaml.safe_load_all(r.stdout) if d]


@pytest.mark.skipif(KUBECTL is None, reason="kubectl (with its built-in kustomize) not installed")
def test_kustomize_base_and_msr_component_render_and_validate(tmp_path):
    base = _render(KUBE)
    kinds = sorted(d["kind"] for d in base)
    assert kinds == ["ConfigMap", "DaemonSet", "Namespace", "Service", "ServiceAccount", "ServiceMonitor"]
    for doc in base:
        _validate(doc, K8S_VERSIONS[0])
        assert doc["metadata"].get("namespace", "tuner") == "tuner"
    cm, ds = _kind(base, "ConfigMap"), _kind(base, "DaemonSet")
    assert cm["data"]["tuner.toml"] == (KUBE / "tuner.toml").read_text()
    # the generated, hash-suffixed name is the one the pod mounts
    vols = {v["name"]: v for v in ds["spec"]["template"]["spec"]["volumes"]}
    assert vols["config"]["configMap"]["name"] == cm["metadata"]["name"] != "tuner-config"

    # an overlay with the MSR component: CAP_SYS_RAWIO and /dev/cpu, nothing else
    shutil.copytree(KUBE, tmp_path / "base")
    (tmp_path / "msr").mkdir()
    (tmp_path / "msr" / "kustomization.yaml").write_text(
        "apiVersion: kustomize.config.k8s.io/v1beta1\nkind: Kustomization\n"
        "resources: [../base]\ncomponents: [../base/components/msr]\n"
    )
    msr = _render(tmp_path / "msr")
    ds_msr = _kind(msr, "DaemonSet")
    _validate(ds_msr, K8S_VERSIONS[0])
    caps = _container(ds_msr)["securityContext"]["capabilities"]
    assert caps == {"drop": ["ALL"], "add": ["NET_ADMIN", "SYS_RAWIO"]}
    vols = {v["name"]: v for v in ds_msr["spec"]["template"]["spec"]["volumes"]}
    assert vols["host-dev-cpu"]["hostPath"]["path"] == "/dev/cpu"
    assert len(vols) == len(ds["spec"]["template"]["spec"]["volumes"]) + 1


def test_live_root_reads_host_paths_but_tunes_the_live_nic(monkeypatch, tmp_path):
    """`live_root` (the pod's /host mirror): sysfs/procfs under root, NIC ioctls to the live kernel; a fake root
    without it never reaches a real NIC."""
    import contextlib

    import actuators.real as real
    from actuators.linux.hwio import UnavailableNic
    from core.errors import TunerError

    asked: list[Path] = []
    monkeypatch.setattr(real, "default_nic", lambda root: asked.append(Path(root)) or UnavailableNic("test"))
    for live in (True, False):
        with contextlib.suppress(TunerError):  # the empty tree has no NIC to tune: only the ioctl's root matters
            real.make_real_host(root=tmp_path, live_root=live, parts=("itr",))
    assert asked == [Path("/"), tmp_path]
