"""The custom resources' own OpenAPI schemas, vendored from the upstream CRD files, and the validation of the
exported objects against them (``jsonschema``).

``crds/*.json``: the ``openAPIV3Schema`` of one version of one CRD, as upstream generates it
(controller-gen), the descriptions removed and nothing else changed; ``source`` names the repository, the
file, the commit and ``git describe`` of it. docs/export.md lists them.

An API server prunes fields its schema does not know, silently: a misspelt field would vanish on apply. So
the validation here is stricter than the server's: where an object schema lists its ``properties`` and
neither allows more (``additionalProperties``) nor keeps unknown ones (``x-kubernetes-preserve-unknown-fields``),
an unknown field is an error.
"""

from __future__ import annotations

import functools
import json
from pathlib import Path
from typing import Any

from ..flags import PlanError

CRDS = Path(__file__).resolve().parent / "crds"
SCHEMAS = {  # (apiVersion, kind) -> vendored file
    ("workloads.x-k8s.io/v1alpha2", "RoleBasedGroup"): "rolebasedgroup-v1alpha2.json",
    ("leaderworkerset.x-k8s.io/v1", "LeaderWorkerSet"): "leaderworkerset-v1.json",
}


def _strict(node: Any) -> Any:
    if isinstance(node, dict):
        out = {k: _strict(v) for k, v in node.items()}
        if ("properties" in out and "additionalProperties" not in out
                and not out.get("x-kubernetes-preserve-unknown-fields")):  # fmt: skip
            out["additionalProperties"] = False
        return out
    if isinstance(node, list):
        return [_strict(v) for v in node]
    return node


@functools.cache
def vendored(api_version: str, kind: str) -> dict[str, Any]:
    """The vendored document (``source`` and ``schema``) of a custom resource."""
    return dict(json.loads((CRDS / SCHEMAS[(api_version, kind)]).read_text(encoding="utf-8")))


@functools.cache
def _validator(api_version: str, kind: str) -> Any:
    import jsonschema

    schema = _strict(vendored(api_version, kind)["schema"])
    cls = jsonschema.validators.validator_for(schema, default=jsonschema.Draft7Validator)
    return cls(schema)


def errors(obj: dict[str, Any]) -> list[str]:
    """Every schema violation of a custom object, ``path: message`` each; [] when it is valid."""
    key = (obj.get("apiVersion"), obj.get("kind"))
    if key not in SCHEMAS:
        return [f"no vendored schema for {key[0]} {key[1]}"]
    found = sorted(_validator(*key).iter_errors(obj), key=lambda e: list(map(str, e.absolute_path)))
    return [f"{'.'.join(map(str, e.absolute_path)) or '(root)'}: {e.message}" for e in found]


def check(obj: dict[str, Any]) -> str:
    """Validate ``obj``; the line that says what it was validated against. A violation is a PlanError (a bug
    in the exporter or a value the schema refuses: either way nothing is written)."""
    problems = errors(obj)
    name = obj.get("metadata", {}).get("name")
    if problems:
        raise PlanError(f"{obj.get('kind')} {name} does not match its CRD schema: {'; '.join(problems[:5])}")
    source = vendored(obj["apiVersion"], obj["kind"])["source"]
    return (f"{obj['kind']} {name}: valid against {obj['apiVersion']} from {source['repository']} "
            f"{source['describe']} ({source['commit'][:12]})")  # fmt: skip
