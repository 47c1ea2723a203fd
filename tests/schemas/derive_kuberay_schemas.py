"""Derive the JSON Schemas in this folder from KubeRay's CRDs (run by hand, not by the tests).

    python tests/schemas/derive_kuberay_schemas.py KUBERAY_CHECKOUT COMMIT

reads ``ray-operator/config/crd/bases/ray.io_{rayclusters,rayjobs}.yaml`` of a KubeRay
checkout (https://github.com/ray-project/kuberay, Apache-2.0) and writes
``kuberay_v1_{raycluster,rayjob}.schema.json``: the served ``v1`` version's
``openAPIV3Schema`` turned into plain JSON Schema (draft 2020-12) the way the Kubernetes API
server reads it (Kubernetes docs, "Extend the Kubernetes API with CustomResourceDefinitions",
sections "Specifying a structural schema", "Field pruning", "IntOrString"):

* ``description`` dropped (size), ``x-kubernetes-validations`` (CEL) dropped: not checkable here;
* ``x-kubernetes-int-or-string`` -> ``anyOf: [integer, string]``; ``nullable`` -> adds ``null``;
* an object with ``properties`` and neither ``additionalProperties`` nor
  ``x-kubernetes-preserve-unknown-fields`` gets ``additionalProperties: false``: the API server's
  strict field validation (kubectl's default since 1.27) rejects unknown fields;
* the top level requires ``apiVersion: ray.io/v1``, the kind, and ``metadata.name``.
"""
from __future__ import annotations

import json
import sys
from pathlib import Path

import yaml

DROP = {"description", "x-kubernetes-validations", "x-kubernetes-list-map-keys", "x-kubernetes-list-type",
        "x-kubernetes-map-type", "format"}


def convert(node):
    if isinstance(node, list):
        return [convert(x) for x in node]
    if not isinstance(node, dict):
        return node
    out = {k: convert(v) for k, v in node.items() if k not in DROP and not k.startswith("x-kubernetes-")}
    if node.get("x-kubernetes-int-or-string"):
        out.pop("type", None)
        out = {"anyOf": [{"type": "integer"}, {"type": "string"}], **out}
    if node.get("nullable"):
        out.pop("nullable")
        if "type" in out:
            out["type"] = [out["type"], "null"]
    if node.get("x-kubernetes-embedded-resource"):
        out.setdefault("properties", {}).update(
            {"apiVersion": {"type": "string"}, "kind": {"type": "string"}, "metadata": {"type": "object"}})
    if ("properties" in out and "additionalProperties" not in out
            and not node.get("x-kubernetes-preserve-unknown-fields")):
        out["additionalProperties"] = False
    return out


def derive(crd_path: Path, commit: str) -> dict:
    crd = yaml.safe_load(crd_path.read_text())
    (version,) = [v for v in crd["spec"]["versions"] if v["name"] == "v1"]
    schema = convert(version["schema"]["openAPIV3Schema"])
    kind = crd["spec"]["names"]["kind"]
    schema["properties"]["apiVersion"] = {"const": "ray.io/v1"}
    schema["properties"]["kind"] = {"const": kind}
    schema["properties"]["metadata"] = {"type": "object", "required": ["name"],
                                        "properties": {"name": {"type": "string", "minLength": 1}}}
    schema["required"] = ["apiVersion", "kind", "metadata", "spec"]
    return {"$schema": "https://json-schema.org/draft/2020-12/schema",
            "$comment": f"Derived from KubeRay {crd_path.name} (ray.io/v1) at commit {commit}, "
                        "https://github.com/ray-project/kuberay, Apache-2.0; see README.md here.",
            "title": f"{kind} ray.io/v1", **schema}


def main(argv: list[str]) -> None:
    root, commit = Path(argv[1]), argv[2]
    here = Path(__file__).parent
    for crd, name in (("ray.io_rayclusters.yaml", "raycluster"), ("ray.io_rayjobs.yaml", "rayjob")):
        schema = derive(root / "ray-operator/config/crd/bases" / crd, commit)
        (here / f"kuberay_v1_{name}.schema.json").write_text(json.dumps(schema, separators=(",", ":"), sort_keys=True) + "\n")


if __name__ == "__main__":
    main(sys.argv)
