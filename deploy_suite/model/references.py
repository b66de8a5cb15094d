"""What a manifest names, found anywhere in its documents: secrets, PVC claims, images' tags.

Step 2 checks each by name (``deploy_suite.procedure.validate``: secrets with metadata-only requests, claims
and their storage class, placeholder image tags); these readers never touch a cluster.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from deploy_suite.constants import Obj
    from deploy_suite.model.dgd import Dgd


def walk(obj: Any) -> Iterator[tuple[str, Any]]:
    """Every (key, value) of nested mappings and lists, depth first."""
    if isinstance(obj, dict):
        for k, v in obj.items():
            yield k, v
            yield from walk(v)
    elif isinstance(obj, list):
        for v in obj:
            yield from walk(v)


def referenced_secrets(docs: list[Obj]) -> set[str]:
    """Every secret a manifest names: secretKeyRef, envFrom secretRef, envFromSecret,
    imagePullSecrets and secret volumes, found anywhere in the documents."""
    names: set[str] = set()
    for doc in docs:
        if doc.get("kind") == "Secret":
            continue
        for key, value in walk(doc):
            if key in {"secretKeyRef", "secretRef"} and isinstance(value, dict) and value.get("name"):
                names.add(str(value["name"]))
            elif key == "envFromSecret" and isinstance(value, str) and value:
                names.add(value)
            elif key == "imagePullSecrets" and isinstance(value, list):
                names.update(str(s["name"]) for s in value if isinstance(s, dict) and s.get("name"))
            elif key == "secret" and isinstance(value, dict) and value.get("secretName"):
                names.add(str(value["secretName"]))
    return names


def referenced_claims(docs: list[Obj], dgd: Dgd) -> set[str]:
    claims = {c for comp in dgd.components for c in comp.pvc_claims}
    for doc in docs:
        for key, value in walk(doc):
            if key == "persistentVolumeClaim" and isinstance(value, dict) and value.get("claimName"):
                claims.add(str(value["claimName"]))
    return claims


def image_tag(image: str) -> str:
    """The tag of an image reference (after the last path part's colon, before any digest); "" without one."""
    ref = image.split("@", 1)[0]
    last = ref.rsplit("/", 1)[-1]
    return last.split(":", 1)[1] if ":" in last else ""
