"""Model caches survive every delete (docs/procedure.md, "Model caches survive every delete").

A DGD may ask the operator to create its claims (``spec.pvcs[].create: true``); every operator
generation creates them with the DGD as controller owner, so the garbage collector would delete
them with the DGD. Before step 3 or step 6 deletes a DGD, each claim that names the DGD (its uid)
as owner loses that one owner reference: a JSON patch that first tests the uid at that index, so
nothing else of the claim changes and a claim whose owners changed meanwhile is refused, never
another owner removed. The operator sets the reference only when it creates the claim, so a live
DGD never puts it back.

The operator creates a claim only for a top-level ``spec.pvcs`` entry with ``create: true`` (a
v1alpha1 field; a native v1beta1 DGD declares none, and one converted from v1alpha1 keeps its
entries in an annotation: ai-dynamo/dynamo ``deploy/operator/internal/controller/dgd_pvc_reconciler.go``,
``reconcilePVC`` creates only "if create is enabled"). So a DGD that declares no such claim owns none:
when its claims cannot be listed (``Forbidden``), nothing needs keeping and the delete goes ahead.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from deploy_suite.access.kube import DGD, Kube, Obj
from deploy_suite.errors import Forbidden

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


def may_own_claims(dgd: Obj) -> bool:
    """Whether the operator may have created a claim owned by this DGD (as read from the server):
    a ``spec.pvcs[]`` entry with ``create: true``, or an annotation that may carry converted
    ``pvcs`` entries (we cannot tell which annotation a given operator uses, so any mentioning them)."""
    spec = dgd.get("spec") or {}
    pvcs = spec.get("pvcs") if isinstance(spec, Mapping) else None
    # Anything but an absent or false ``create`` may be one (the side that never loses a cache).
    if isinstance(pvcs, list) and any(not isinstance(p, Mapping) or p.get("create") not in (None, False)
                                      for p in pvcs):
        return True
    notes = (dgd.get("metadata") or {}).get("annotations") or {}
    return any("pvcs" in str(value) for value in notes.values()) if isinstance(notes, Mapping) else True


@dataclass
class Kept:
    """The claims orphaned before a delete, and why none could be listed when that did not matter."""

    names: list[str] = field(default_factory=list)
    unlisted: str = ""  # the claims were not listed (forbidden) and the DGD declares none to create


def keep_claims(kube: Kube, dgd: Obj) -> Kept:
    """Orphan, from the live DGD ``dgd``, every claim of its namespace it owns (one metadata-only
    list, one JSON patch per claim). A list that is forbidden is no obstacle when the DGD declares no
    claim for the operator to create (:func:`may_own_claims`): ``unlisted`` says so. Any other
    KubeError (the list forbidden for a DGD that may own claims, a patch refused or changed
    meanwhile) propagates: the caller then must not delete the DGD."""
    meta = dgd.get("metadata") or {}
    namespace, uid = str(meta.get("namespace")), str(meta.get("uid"))
    try:
        claims, _ = kube.list_items(PVC, namespace, metadata_only=True)
    except Forbidden as exc:
        if may_own_claims(dgd):
            raise
        return Kept(unlisted=f"the claims of {namespace} could not be listed ({exc}); DGD {meta.get('name')} "
                    "declares no spec.pvcs[] claim with create: true, so the operator created none it owns")
    kept = Kept()
    for name, index in owned_by(claims, uid):
        kube.patch_json(PVC, name, namespace, [{"op": "test", "path": f"/metadata/ownerReferences/{index}/uid",
                                                 "value": uid},
                                                {"op": "remove", "path": f"/metadata/ownerReferences/{index}"}])
        kept.names.append(name)
    return kept


def keep_claims_of(kube: Kube, namespace: str, dgd_name: str) -> Kept:
    """:func:`keep_claims` for the live DGD of that name (none: nothing to keep)."""
    live = kube.get_or_none(DGD, dgd_name, namespace)
    return keep_claims(kube, live) if live is not None and (live.get("metadata") or {}).get("uid") else Kept()


def fix(namespace: str, dgd_name: str) -> str:
    """The fix when a claim could not be kept: the one line a refusal gives."""
    return (f"grant list and patch on persistentvolumeclaims in {namespace}, or remove DGD {dgd_name}'s owner "
            "reference from the claims it created (kubectl patch pvc NAME --type=json -p "
            "'[{\"op\":\"remove\",\"path\":\"/metadata/ownerReferences/0\"}]'), then rerun")
