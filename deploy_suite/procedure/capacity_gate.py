"""Step 2's capacity gate: what it reads of the cluster, read-only, and the verdicts it records.

GPUs are placed against what is free now; every other resource the pods ask for, and their DRA
claims, against what the nodes they may use can ever offer (``deploy_suite.judges.capacity``,
``offer``, ``dra``). The reads: the nodes (read once by the validator), every pod bound to a node
(cluster-wide, only when GPUs are placed), and for DRA claims the cluster's DeviceClasses and
ResourceSlices and the claim templates and claims the manifest does not hold. A read this identity
may not make, or an API the cluster does not serve, is a limitation, never a block.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from deploy_suite.access.kube import Kube, Obj, Resource
from deploy_suite.constants import LABEL_DGD_NAME
from deploy_suite.errors import Forbidden, NotFound
from deploy_suite.judges import capacity, dra, placement
from deploy_suite.model.dgd import Dgd
from deploy_suite.model.scheduling import DraClaim
from deploy_suite.procedure.platform import Verdicts
from deploy_suite.vocab import BlockerClass

NEVER_FIX = ("ask only for what the cluster's nodes offer, or run where they do (the device plugin or DRA driver "
             "that advertises it installed, the claim templates the pods name created)")
GPU_FIX = "free GPUs on eligible nodes, or change the candidate's placement constraints"


def _dra_kind(kube: Kube, version: str, kind: str) -> Resource:
    return kube.resource(f"{dra.DRA_GROUP}/{version}", kind)


def read_dra(kube: Kube, dgd: Dgd, docs: Sequence[Any], namespace: str) -> dra.DraView:
    """The DRA objects the DGD's claims need: the manifest's own first, then the cluster's."""
    view = dra.DraView.from_documents(docs)
    _read_makers(kube, view)
    try:
        served = kube.served_versions(dra.DRA_GROUP, "DeviceClass")
    except Forbidden:
        served = []
    if not served:
        view.unread.update({"DeviceClasses": f"{dra.DRA_GROUP} not served", "ResourceSlices": "not served"})
        return view
    for kind, key in (("DeviceClass", "DeviceClasses"), ("ResourceSlice", "ResourceSlices")):
        try:
            items = kube.list_items(_dra_kind(kube, served[0], kind),
                                    slim=dra.slim_slice if kind == "ResourceSlice" else None)[0]
        except (Forbidden, NotFound) as exc:
            view.unread[key] = f"{key} list {_refused(exc)}"
            continue
        if kind == "DeviceClass":
            view.classes = {str(i["metadata"]["name"]): i for i in items}
        else:
            view.slices = items
    for claim in {c for comp in dgd.components for c in comp.dra_claims}:
        _read_claim(kube, view, claim, served[0], namespace)
    return view


def _read_makers(kube: Kube, view: dra.DraView) -> None:
    """Whether the cluster serves the kind of each manifest object that makes a claim template (a
    ComputeDomain: its CRD comes with NVIDIA's DRA driver); discovery this identity may not read is
    no verdict."""
    for api in sorted(set(view.maker_api.values())):
        group, _, version = api.rpartition("/")
        try:
            served = kube.served_versions(group, dra.COMPUTE_DOMAIN_KIND)
        except Forbidden:
            continue
        if version not in served:
            view.unserved[api] = (f"the cluster does not serve {dra.COMPUTE_DOMAIN_KIND} {api} (NVIDIA's DRA driver "
                                  "for GPUs, which defines it, is not installed)")


def _refused(exc: Exception) -> str:
    return "forbidden" if isinstance(exc, Forbidden) else "not served"


def _read_claim(kube: Kube, view: dra.DraView, claim: DraClaim, version: str, namespace: str) -> None:
    """A claim's template or claim object from the namespace, unless the manifest holds or makes it."""
    name, kind, known = ((claim.template, "ResourceClaimTemplate", view.templates) if claim.template
                         else (claim.claim, "ResourceClaim", view.claims))
    if not name or name in known or name in view.made_by:
        return
    try:
        found = kube.get_or_none(_dra_kind(kube, version, kind), name, namespace)
    except (Forbidden, NotFound) as exc:
        view.unread[name] = f"{kind} {name}: read {_refused(exc)}"
        return
    if found is None:
        view.missing[name] = f"{kind} {name} not found in {namespace} nor in the manifest"
    else:
        known[name] = found


def check(kube: Kube, dgd: Dgd, docs: Sequence[Any], nodes: list[Obj] | None, *, namespace: str,
          excluded: Sequence[tuple[str, str]]) -> tuple[dict[str, Any], Verdicts]:
    """The capacity section of the ledger and the gate's verdicts. ``excluded`` are the DGDs
    whose pods hold nothing by the time step 5 applies (the retiring one, a rerun's own)."""
    found = Verdicts()
    gpu_less = capacity.gpu_less(dgd)
    if nodes is None and not gpu_less:
        return {"capacity": "unknown", "reasons": ["node list forbidden"]}, found
    view = read_dra(kube, dgd, docs, namespace) if any(c.dra_claims for c in dgd.components) else None
    found.limitations.extend(f"DRA claims: {why}" for why in (view.unread.values() if view else ()))
    pods: list[Obj] = []
    if not gpu_less:
        try:
            pods = kube.list_items("Pod", None, slim=placement.slim_pod,
                                   field_selector="status.phase!=Succeeded,status.phase!=Failed")[0]
        except Forbidden:
            found.limitations.append("cluster-wide pod list forbidden: GPUs held by other pods are unknown")
            return {"capacity": "unknown", "reasons": ["pod list forbidden"]}, found
        pods = [p for p in pods if ((p["metadata"].get("namespace"), (p["metadata"].get("labels") or {})
                                     .get(LABEL_DGD_NAME)) not in excluded)]
    result = capacity.check_capacity(dgd, nodes or [], pods, namespace=namespace, dra=view)
    section = {**result.to_dict(), "excluded_dgds": [f"{ns}/{name}" for ns, name in excluded]}
    found.warnings.extend(result.warnings)
    if result.never_offered:
        found.block("no node the pods may use can ever offer what they ask: " + "; ".join(result.never_offered[:4]),
                    NEVER_FIX, BlockerClass.RESOURCE_CAPACITY)
    elif result.outcome == "insufficient":
        found.block("GPU capacity insufficient: " + "; ".join(result.reasons[:6]), GPU_FIX, BlockerClass.GPU_CAPACITY)
    elif result.outcome == "unknown":
        found.limitations.append("GPU capacity unknown: " + "; ".join(result.reasons[:3]))
    return section, found
