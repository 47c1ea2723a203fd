"""kubernetes/: every manifest is valid KubeRay v1 (JSON Schema derived from the CRDs, vendored in
tests/schemas/), pins the project's Ray version, and every RayJob entrypoint composes with Hydra
into a config whose needs (GPUs, database passwords, object-store credentials) the pods meet."""
from __future__ import annotations

import json
import re
import shlex
import shutil
import subprocess
import tomllib
from pathlib import Path

import jsonschema
import pytest
import yaml

from polysql_ray.config import compose

ROOT = Path(__file__).resolve().parents[1]
K8S = ROOT / "kubernetes"
SCHEMAS = Path(__file__).parent / "schemas"
SCHEMA_FILES = {"RayCluster": "kuberay_v1_raycluster.schema.json", "RayJob": "kuberay_v1_rayjob.schema.json"}
IMAGE = "polysql-ray"


def _validator(kind: str) -> jsonschema.Draft202012Validator:
    return jsonschema.Draft202012Validator(json.loads((SCHEMAS / SCHEMA_FILES[kind]).read_text()))


def _schema_errors(doc: dict) -> list[str]:
    return [f"{'.'.join(map(str, e.absolute_path)) or '<root>'}: {e.message}"
            for e in _validator(doc["kind"]).iter_errors(doc)]


def _manifest_files() -> list[Path]:
    return sorted(p for p in K8S.rglob("*.yaml") if p.name != "kustomization.yaml")


def _docs() -> list[tuple[Path, dict]]:
    return [(p, d) for p in _manifest_files() for d in yaml.safe_load_all(p.read_text()) if d]


def _ray_docs(kind: str | None = None) -> list[tuple[Path, dict]]:
    return [(p, d) for p, d in _docs() if d.get("apiVersion") == "ray.io/v1" and kind in (None, d["kind"])]


def _cluster_spec(doc: dict) -> dict:
    return doc["spec"]["rayClusterSpec"] if doc["kind"] == "RayJob" else doc["spec"]


def _groups(doc: dict) -> list[tuple[str, dict, dict]]:
    """(name, group spec, pod spec) for the head and every worker group."""
    spec = _cluster_spec(doc)
    out = [("head", spec["headGroupSpec"], spec["headGroupSpec"]["template"]["spec"])]
    out += [(g["groupName"], g, g["template"]["spec"]) for g in spec.get("workerGroupSpecs", [])]
    return out


def _gpus(pod: dict) -> int:
    return sum(int((c.get("resources") or {}).get("limits", {}).get("nvidia.com/gpu", 0)) for c in pod["containers"])


def _env_names(pod: dict) -> set[str]:
    return {e["name"] for c in pod["containers"] for e in c.get("env", [])}


def _env_secrets(pod: dict) -> set[str]:
    return {s["secretRef"]["name"] for c in pod["containers"] for s in c.get("envFrom", []) if "secretRef" in s}


def _pinned_ray() -> str:
    deps = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["dependencies"]
    (pin,) = [m.group(1) for d in deps if (m := re.fullmatch(r"ray(?:\[[^\]]*\])?==(\S+)", d.replace(" ", "")))]
    return pin


def _entrypoint_overrides(doc: dict) -> list[str]:
    argv = shlex.split(doc["spec"]["entrypoint"])
    assert argv[:3] in (["python", "-m", "jobs.sweep"], ["python", "-m", "polysql_ray"]), argv
    return argv[3:]


def test_every_manifest_is_valid_kuberay_v1():
    docs = _ray_docs()
    assert {d["kind"] for _, d in docs} == {"RayCluster", "RayJob"}
    report = {f"{p.relative_to(ROOT)}:{d['kind']}/{d['metadata']['name']}": _schema_errors(d) for p, d in docs}
    print("\n".join(f"{k}: {'valid' if not v else v}" for k, v in report.items()))
    assert not any(report.values()), report


def test_the_schema_rejects_what_the_api_server_rejects():
    """The derived schema can fail: an unknown field (strict field validation), a number where
    rayStartParams takes strings, and a missing required field are each reported."""
    _, cluster = _ray_docs("RayCluster")[0]
    typo = json.loads(json.dumps(cluster))
    typo["spec"]["headGroupSpec"]["rayStartParam"] = typo["spec"]["headGroupSpec"].pop("rayStartParams")
    assert any("rayStartParam" in e for e in _schema_errors(typo))
    number = json.loads(json.dumps(cluster))
    number["spec"]["headGroupSpec"]["rayStartParams"]["num-cpus"] = 0
    assert any("num-cpus" in e and "string" in e for e in _schema_errors(number))
    no_image = json.loads(json.dumps(cluster))
    del no_image["spec"]["workerGroupSpecs"][0]["template"]["spec"]["containers"][0]["name"]
    assert any("'name' is a required property" in e for e in _schema_errors(no_image))


def test_kustomization_lists_every_manifest_and_only_existing_ones():
    kust = yaml.safe_load((K8S / "kustomization.yaml").read_text())
    listed = {K8S / r for r in kust["resources"]}
    assert all(p.exists() for p in listed), sorted(map(str, listed))
    assert listed == set(_manifest_files())
    assert [i["name"] for i in kust["images"]] == [IMAGE]


@pytest.mark.skipif(shutil.which("kubectl") is None, reason="kubectl not installed: kustomize build not checked")
def test_kustomize_build_output_is_valid():
    out = subprocess.run(["kubectl", "kustomize", str(K8S)], capture_output=True, text=True, check=True).stdout
    docs = [d for d in yaml.safe_load_all(out) if d]
    assert {d["metadata"].get("namespace") for d in docs if d["kind"] != "Namespace"} == {"polysql"}
    for d in docs:
        if d["apiVersion"] == "ray.io/v1":
            assert _schema_errors(d) == [], d["metadata"]["name"]


def test_ray_version_is_the_pinned_ray():
    pin = _pinned_ray()
    assert pin == "2.60.0"
    assert {d["metadata"]["name"]: _cluster_spec(d)["rayVersion"] for _, d in _ray_docs()} == {
        d["metadata"]["name"]: pin for _, d in _ray_docs()}


def test_head_runs_no_work_and_gpu_groups_are_the_only_gpu_pods():
    for _, doc in _ray_docs():
        groups = _groups(doc)
        assert groups[0][1]["rayStartParams"]["num-cpus"] == "0", doc["metadata"]["name"]
        for name, group, pod in groups:
            images = {c["image"].split(":")[0] for c in pod["containers"]}
            assert images == {IMAGE}, (name, images)
            if name == "gpu":
                assert _gpus(pod) >= 1
                assert {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"} in pod["tolerations"]
            else:
                assert _gpus(pod) == 0, (doc["metadata"]["name"], name)
        assert "cpu" in {g[0] for g in groups}


@pytest.mark.parametrize("path", sorted(p.name for p in (K8S / "sweeps").glob("*.yaml")))
def test_rayjob_entrypoint_composes_and_the_pods_meet_its_needs(path):
    from polysql_ray.engines.registry import engine_for_dialect, engine_spec

    (doc,) = [d for d in yaml.safe_load_all((K8S / "sweeps" / path).read_text()) if d]
    assert doc["kind"] == "RayJob" and doc["spec"]["suspend"] is True  # applied with the kustomization, started by hand
    cfg, loader, _ = compose(_entrypoint_overrides(doc))  # raises on an unknown key or a missing group option
    assert cfg["results_dir"].startswith("s3://")
    assert not cfg["replication"]["dir"].startswith("s3://")  # embedded replicas are files on the shared volume
    groups = _groups(doc)
    # model generators that need GPUs fit the GPU group
    models = [loader("model", m) if isinstance(m, str) else m for m in (cfg["sweep"]["models"] or [cfg["model"]])]
    gpus_needed = max([m.get("num_actors", 1) * _gpus_per_actor(m) for m in models if m["generator"] == "vllm"] or [0])
    gpus = sum(_gpus(pod) * g.get("replicas", 1) for name, g, pod in groups)
    assert gpus_needed <= gpus, (gpus_needed, gpus)
    assert (gpus_needed > 0) == (gpus > 0)  # no idle GPU nodes on a replay sweep
    per_pod = max([_gpus(pod) for _, _, pod in groups] or [0])
    assert all(_gpus_per_actor(m) <= per_pod for m in models if m["generator"] == "vllm")  # an actor is one pod
    assert cfg["progress"] is True  # `ray job logs` shows a progress line every 15 s
    # every pod that runs driver, replication or execution gets the server passwords as env vars
    # from a Secret, and the object-store credentials
    needed_env = set()
    for dialect in cfg["dialects"]:
        engine = engine_for_dialect(dialect)
        if not engine_spec(engine).embedded:
            ecfg = cfg["engines"][engine]
            needed_env |= {ecfg["password_env"], ecfg["admin_password_env"]}
    for name, _, pod in groups:
        assert "polysql-object-store" in _env_secrets(pod), name
        if name != "gpu":
            assert needed_env <= _env_names(pod), (name, needed_env - _env_names(pod))
            secret_refs = {e["name"] for c in pod["containers"] for e in c.get("env", [])
                           if "secretKeyRef" in (e.get("valueFrom") or {})}
            assert needed_env <= secret_refs, name


def _gpus_per_actor(model: dict) -> float:
    """Ray ``num_gpus`` of one vLLM actor (``generation/vllm.py``: default tensor_parallel_size)."""
    g = model.get("gpus_per_actor")
    return float(model.get("tensor_parallel_size", 1) if g is None else g)


def test_every_vllm_model_config_fits_the_gpu_group():
    """The interactive cluster's GPU group can place every shipped vLLM config: each actor's
    GPUs on one pod (tensor parallelism stays inside a node) and all its actors within the
    group's maxReplicas."""
    (_, cluster), = _ray_docs("RayCluster")
    (gpu,) = [(g, pod) for name, g, pod in _groups(cluster) if name == "gpu"]
    per_pod, most = _gpus(gpu[1]), _gpus(gpu[1]) * gpu[0]["maxReplicas"]
    _, loader, _ = compose([])
    checked = []
    for path in sorted((ROOT / "conf" / "model").glob("*.yaml")):
        m = loader("model", path.stem)
        if m.get("generator") != "vllm":
            continue
        need = _gpus_per_actor(m)
        assert need <= per_pod, (path.name, need, per_pod)
        assert m.get("num_actors", 1) * need <= most, (path.name, most)
        checked.append((path.stem, need))
    assert ("qwen2_5_coder_32b", 2.0) in checked, checked


def test_the_image_has_every_engine_driver_and_a_small_build_context():
    optional = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"]
    (extras,) = re.findall(r"^ARG EXTRAS=(\S+)$", (ROOT / "Dockerfile").read_text(), re.M)
    assert "engines" in extras.split(",")
    from polysql_ray.engines.registry import declared_engines

    driver_extras = {name for name in declared_engines() if name in optional}  # clickhouse, snowflake, bigquery
    assert driver_extras == {"clickhouse", "snowflake", "bigquery"}
    (engines,) = optional["engines"]
    assert set(re.fullmatch(r"polysql_ray\[(.*)\]", engines).group(1).split(",")) == driver_extras
    ignored = (ROOT / ".dockerignore").read_text().split()
    assert {".git", ".venv*", "results", "replicas", "multirun"} <= set(ignored)


def test_dockerfile_installs_the_project_with_extras_that_exist():
    text = (ROOT / "Dockerfile").read_text()
    assert re.search(r"^FROM python:3\.11-slim$", text, re.M)
    (extras,) = re.findall(r"^ARG EXTRAS=(\S+)$", text, re.M)
    optional = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"]
    assert set(extras.split(",")) <= set(optional)
    # the cluster extra pins the same Ray as the project (dashboard/job server of the same release)
    assert any(d.replace(" ", "").endswith(f"=={_pinned_ray()}") and d.startswith("ray[")
               for d in optional["cluster"])
    assert 'pip install --no-cache-dir -e ".[${EXTRAS}]"' in text  # editable: conf/ is read from /app


def test_pods_can_write_the_shared_volume_as_the_image_user():
    (uid,) = re.findall(r"^USER (\d+)$", (ROOT / "Dockerfile").read_text(), re.M)
    for _, doc in _ray_docs():
        for name, _, pod in _groups(doc):
            assert pod.get("securityContext", {}).get("fsGroup") == int(uid), (doc["metadata"]["name"], name)
