"""The operator's validating admission rules for DGDs (``vdynamographdeployment.kb.io``), pure.

What is reproduced, and the wording, is listed in ``docs/offline-cluster.md`` ("Admission
webhook"). Create rules: every component's main container names an image; a v1alpha1
``volumeMounts[].mountPoint`` is required; an EPP component runs exactly one replica. Update rules
(only when the profile has them): the set of components is immutable, so is multinode on/off and
``nodeCount`` of each component, and ``backendFramework``. An object being deleted (a finalizer
removal) is judged on nothing but its metadata, so it always passes here.

Two message styles, as the generations write them: the 1.x webhook returns plain errors (HTTP 403,
reason ``Forbidden``); the newest returns a Kubernetes ``Invalid`` status (HTTP 422) whose message
is ``DynamoGraphDeployment.nvidia.com "<name>" is invalid: <field errors>``. The apiserver prefixes
either with ``admission webhook "vdynamographdeployment.kb.io" denied the request: ``.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from deploy_suite.constants import Obj

WEBHOOK_NAME = "vdynamographdeployment.kb.io"
TOPOLOGY = "component topology is immutable and cannot be modified after creation"
IMMUTABLE = "is immutable and cannot be changed after creation"
MAIN = "main"


@dataclass(frozen=True)
class FieldError:
    path: str
    kind: str  # Required value | Forbidden | Invalid value
    detail: str
    value: Any = None

    def field_style(self) -> str:
        if self.kind == "Invalid value":
            return f"{self.path}: Invalid value: {json.dumps(self.value)}: {self.detail}"
        return f"{self.path}: {self.kind}: {self.detail}"

    def plain_style(self) -> str:
        if self.kind == "Forbidden":
            return self.detail
        return f"{self.path} {self.detail}"


@dataclass(frozen=True)
class Verdict:
    allowed: bool
    code: int = 200
    reason: str = ""
    message: str = ""


def _components(obj: Obj) -> dict[str, tuple[str, Obj]]:
    """Component name -> (its field path, its raw entry), for either API shape."""
    spec = obj.get("spec") or {}
    if "components" in spec or "services" not in spec:
        return {str(c.get("name")): (f"spec.components[{i}]", c) for i, c in enumerate(spec.get("components") or [])}
    return {str(k): (f"spec.services[{k}]", v or {}) for k, v in (spec.get("services") or {}).items()}


def _main_image(raw: Obj) -> str | None:
    if "podTemplate" in raw or "extraPodSpec" not in raw:
        containers = ((raw.get("podTemplate") or {}).get("spec") or {}).get("containers") or []
        main = next((c for c in containers if c.get("name") == MAIN), None)
        return None if main is None else main.get("image")
    return ((raw.get("extraPodSpec") or {}).get("mainContainer") or {}).get("image")


def _node_count(raw: Obj) -> int:
    return int((raw.get("multinode") or {}).get("nodeCount") or 1)


def create_errors(obj: Obj) -> list[FieldError]:
    errors: list[FieldError] = []
    for _name, (path, raw) in _components(obj).items():
        alpha = path.startswith("spec.services")
        if not _main_image(raw):
            where = f"{path}.extraPodSpec.mainContainer.image" if alpha else \
                f"{path}.podTemplate.spec.containers[{MAIN}].image"
            errors.append(FieldError(where, "Required value", "image is required"))
        for i, vm in enumerate(raw.get("volumeMounts") or [] if alpha else []):
            if not (vm or {}).get("mountPoint"):
                errors.append(FieldError(f"{path}.volumeMounts[{i}].mountPoint", "Required value",
                                         "mountPoint is required"))
        kind = str(raw.get("type") or raw.get("componentType") or "")
        if kind == "epp" and int(raw.get("replicas", 1) or 0) != 1:
            errors.append(FieldError(f"{path}.replicas", "Invalid value", "EPP component must have exactly 1 replica",
                                     raw.get("replicas")))
    return errors


def update_errors(new: Obj, old: Obj) -> list[FieldError]:
    errors: list[FieldError] = []
    new_c, old_c = _components(new), _components(old)
    added, removed = sorted(set(new_c) - set(old_c)), sorted(set(old_c) - set(new_c))
    field = "spec.components" if "components" in (new.get("spec") or {}) else "spec.services"
    if added or removed:
        parts = ([f"components added: [{' '.join(added)}]"] if added else []) + \
            ([f"components removed: [{' '.join(removed)}]"] if removed else [])
        errors.append(FieldError(field, "Forbidden", f"{TOPOLOGY}: {', '.join(parts)}"))
    for name in sorted(set(new_c) & set(old_c)):
        path, raw = new_c[name]
        before, after = _node_count(old_c[name][1]), _node_count(raw)
        if (before > 1) != (after > 1):
            errors.append(FieldError(f"{path}.multinode", "Invalid value",
                                     f"multinode {'enablement' if after > 1 else 'removal'} {IMMUTABLE}",
                                     raw.get("multinode")))
        elif before != after:
            errors.append(FieldError(f"{path}.multinode.nodeCount", "Invalid value", IMMUTABLE, after))
    new_b, old_b = (new.get("spec") or {}).get("backendFramework"), (old.get("spec") or {}).get("backendFramework")
    if new_b != old_b:
        errors.append(FieldError("spec.backendFramework", "Invalid value", IMMUTABLE, new_b))
    return errors


def review(request: Obj, *, update_rules: bool, field_errors: bool) -> Verdict:
    """The verdict on one AdmissionReview request for a DGD."""
    new = request.get("object") or {}
    if request.get("operation") == "UPDATE":
        if (new.get("metadata") or {}).get("deletionTimestamp"):
            return Verdict(True)
        # Updates run the update rules only (the newest validator skips the stateless ones).
        errors = update_errors(new, request.get("oldObject") or {}) if update_rules else []
    else:
        errors = create_errors(new)
    if not errors:
        return Verdict(True)
    if field_errors:
        name = (new.get("metadata") or {}).get("name") or request.get("name", "")
        texts = [e.field_style() for e in errors]
        joined = texts[0] if len(texts) == 1 else f"[{', '.join(texts)}]"
        return Verdict(False, 422, "Invalid", f'DynamoGraphDeployment.nvidia.com "{name}" is invalid: {joined}')
    return Verdict(False, 403, "Forbidden", "; ".join(e.plain_style() for e in errors))
