"""Model caches survive every delete (docs/procedure.md, "Model caches survive every delete").

A DGD may ask the operator to create its claims (``spec.pvcs[].create: true``); every operator
generation creates them with the DGD as controller owner, so the garbage collector would delete
them with the DGD. Before step 3 or step 6 deletes a DGD, each claim that names the DGD (its uid)
as owner loses that one owner reference: a JSON patch that first tests the uid at that index, so
nothing else of the claim changes and a claim whose owners changed meanwhile is refused, never
another owner removed. The operator sets the reference only when it creates the claim, so a live
DGD never puts it back.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from deploy_suite.access.kube import DGD, Kube, Obj

PVC = "PersistentVolumeClaim"


def owned_by(claims: Sequence[Obj], uid: str) -> list[tuple[str, int]]:
    """(name, index of the owner reference) of each claim owned by the object with ``uid``."""
    found = []
    for claim in claims:
        meta = claim.get("metadata") or {}
        for index, ref in enumerate(meta.get("ownerReferences") or []):
            if isinstance(ref, Mapping) and ref.get("uid") == uid:
                found.append((str(meta.get("name")), index))
    return sorted(found)


def keep_claims(kube: Kube, namespace: str, uid: str) -> list[str]:
    """Orphan, from the DGD with ``uid``, every claim of ``namespace`` it owns (one metadata-only
    list, one patch per claim); their names. A KubeError (forbidden, changed meanwhile) propagates:
    the caller then must not delete the DGD."""
    claims, _ = kube.list_items(PVC, namespace, metadata_only=True)
    kept = []
    for name, index in owned_by(claims, uid):
        kube.patch_json(PVC, name, namespace, [{"op": "test", "path": f"/metadata/ownerReferences/{index}/uid",
                                                 "value": uid},
                                                {"op": "remove", "path": f"/metadata/ownerReferences/{index}"}])
        kept.append(name)
    return kept


def keep_claims_of(kube: Kube, namespace: str, dgd_name: str) -> list[str]:
    """:func:`keep_claims` for the live DGD of that name (none: nothing to keep)."""
    live = kube.get_or_none(DGD, dgd_name, namespace)
    uid = ((live or {}).get("metadata") or {}).get("uid")
    return keep_claims(kube, namespace, str(uid)) if uid else []


def fix(namespace: str, dgd_name: str) -> str:
    """The fix when a claim could not be kept: the one line a refusal gives."""
    return (f"grant list and patch on persistentvolumeclaims in {namespace}, or remove DGD {dgd_name}'s owner "
            "reference from the claims it created (kubectl patch pvc NAME --type=json -p "
            "'[{\"op\":\"remove\",\"path\":\"/metadata/ownerReferences/0\"}]'), then rerun")
