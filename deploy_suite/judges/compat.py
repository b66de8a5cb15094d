"""Which compatibility patches the cluster's own objects justify (pure: nodes and the DGD in,
proposals out). Each proposal carries its reason and the evidence that justified it; the caller
applies it to the run-scoped copy only (docs/procedure.md, "Compatibility patches").

Two kinds, both from the procedure: "adding a required node-taint toleration" (step 2) and, for a
selector or affinity that no node satisfies, "restore the recipe's scheduling MECHANISMS with
values retargeted to the contract's hardware; never observed cluster state such as a node name"
(step 6). Nothing else is ever tolerated or retargeted: another tenant's reservation taint, a
custom pool label, a node name stay as written and are the caller's to fix (``--compat-patch``).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from deploy_suite.constants import GPU_MEMORY_LABEL, GPU_PRODUCT_LABEL, ObjView
from deploy_suite.judges import sku
from deploy_suite.model.dgd import Dgd
from deploy_suite.model.patches import Proposal, append_ops, escape, value_at
from deploy_suite.model.scheduling import BLOCKING_TAINT_EFFECTS, Taint, quantity


@dataclass(frozen=True)
class GpuTaint:
    """A taint a provider documents as the one it puts on its GPU nodes (``value`` None: any value)."""

    key: str
    value: str | None
    source: str


# Taints providers document for their GPU node pools. A key not listed here (dedicated=..., a
# tenant's reservation) is never tolerated automatically.
DOCUMENTED_GPU_TAINTS: tuple[GpuTaint, ...] = (
    # GKE taints every GPU node nvidia.com/gpu=present:NoSchedule; EKS and the GPU Operator's guides use the key too.
    GpuTaint("nvidia.com/gpu", None, "https://cloud.google.com/kubernetes-engine/docs/how-to/gpus"),
    # AKS: `az aks nodepool add ... --node-taints sku=gpu:NoSchedule`.
    GpuTaint("sku", "gpu", "https://learn.microsoft.com/en-us/azure/aks/use-nvidia-gpu"),
)

# Node labels that name a GPU product, each from the component that writes it. A selector on one of
# these speaks hardware, which the contract's hardware[].gpu_type decides.
GPU_PRODUCT_LABELS: Mapping[str, str] = {
    GPU_PRODUCT_LABEL: "https://github.com/NVIDIA/gpu-feature-discovery#generated-labels",
    "nvidia.com/gpu.family": "https://github.com/NVIDIA/gpu-feature-discovery#generated-labels",
    "cloud.google.com/gke-accelerator": "https://cloud.google.com/kubernetes-engine/docs/how-to/gpus",
    "karpenter.k8s.aws/instance-gpu-name": "https://karpenter.sh/docs/reference/instance-types/",
}


def _gpu_count(node: ObjView, resource: str) -> int:
    raw = str(((node.get("status") or {}).get("allocatable") or {}).get(resource, "0"))
    return int(raw) if raw.isdigit() else 0


def _labels(node: ObjView) -> Mapping[str, str]:
    return (node.get("metadata") or {}).get("labels") or {}


def _name(node: ObjView) -> str:
    return str((node.get("metadata") or {}).get("name"))


def contract_nodes(nodes: Sequence[ObjView], gpu_types: Sequence[str], resource: str) -> list[ObjView]:
    """The nodes that hold the contract's GPUs: GPU nodes whose GFD product matches a type of
    ``hardware[].gpu_type`` (every GPU node when the contract names none)."""
    gpu_nodes = [n for n in nodes if _gpu_count(n, resource) > 0]
    if not gpu_types:
        return gpu_nodes
    return [n for n in gpu_nodes if any(sku.sku_match(t, _labels(n).get(GPU_PRODUCT_LABEL, ""),
                                                      _labels(n).get(GPU_MEMORY_LABEL, "")) == sku.MATCH
                                        for t in gpu_types)]


def _documented(taint: Taint) -> GpuTaint | None:
    return next((g for g in DOCUMENTED_GPU_TAINTS if g.key == taint.key and g.value in (None, taint.value)), None)


def _taints(node: ObjView) -> set[Taint]:
    return {Taint(key=str(t.get("key", "")), value=str(t.get("value", "") or ""), effect=str(t.get("effect", "")))
            for t in (node.get("spec") or {}).get("taints") or [] if t.get("effect") in BLOCKING_TAINT_EFFECTS}


def gpu_pool_tolerations(dgd: Dgd, doc: ObjView, nodes: Sequence[ObjView], gpu_types: Sequence[str],
                         pointers: Mapping[str, str]) -> list[Proposal]:
    """An exact toleration (key, value, effect; never ``Exists``) for each documented GPU-pool taint
    that every node of the contract's GPU type carries, on each GPU component lacking it.
    ``pointers`` maps a component to its pod spec's JSON pointer in the DGD document ``doc``."""
    out: list[Proposal] = []
    for comp in dgd.components:
        if comp.gpus_per_pod <= 0 or comp.name not in pointers:
            continue
        pool = contract_nodes(nodes, gpu_types, comp.gpu_resource)
        if not pool:
            continue
        common = set.intersection(*(_taints(n) for n in pool))
        wanted = sorted((t for t in common if _documented(t) and not any(tol.tolerates(t) for tol in comp.tolerations)),
                        key=lambda t: (t.key, t.value, t.effect))
        if not wanted:
            continue
        tolerations = [{"key": t.key, "operator": "Equal", "value": t.value, "effect": t.effect} for t in wanted]
        out.append(Proposal(
            "deploy", append_ops(doc, pointers[comp.name], "tolerations", tolerations),
            f"component {comp.name}: every node of the contract's GPU type carries the GPU-pool taint(s) "
            f"{', '.join(f'{t.key}={t.value}:{t.effect}' for t in wanted)}, which the provider documents for its GPU "
            "nodes; without the toleration the pods can never schedule",
            {"nodes": sorted(_name(n) for n in pool)[:10], "node_count": len(pool),
             "taints": [{"key": t.key, "value": t.value, "effect": t.effect} for t in wanted],
             "sources": sorted({g.source for t in wanted if (g := _documented(t))}),
             "gpu_types": list(gpu_types)}))
    return out


def retarget_gpu_selectors(dgd: Dgd, doc: ObjView, nodes: Sequence[ObjView], gpu_types: Sequence[str],
                           pointers: Mapping[str, str]) -> list[Proposal]:
    """A GPU-product nodeSelector entry or required node-affinity ``In`` expression that matches no
    node, on a GPU component, retargeted to the value the nodes of the contract's GPU type carry
    under the same key (one value only: two would be a guess). The mechanism is kept."""
    out: list[Proposal] = []
    for comp in dgd.components:
        if comp.gpus_per_pod <= 0 or comp.name not in pointers:
            continue
        pool = contract_nodes(nodes, gpu_types, comp.gpu_resource)
        spec = value_at(doc, pointers[comp.name]) or {}
        ops: list[ObjView] = []
        changed: list[str] = []
        keys: set[str] = set()
        for key, value in sorted((spec.get("nodeSelector") or {}).items()):
            target = _retarget(key, [str(value)], nodes, pool)
            if target is not None:
                ops.append({"op": "replace", "path": f"{pointers[comp.name]}/nodeSelector/{escape(key)}",
                            "value": target})
                changed.append(f"nodeSelector {key}: {value} -> {target}")
                keys.add(key)
        terms = (((spec.get("affinity") or {}).get("nodeAffinity") or {})
                 .get("requiredDuringSchedulingIgnoredDuringExecution") or {}).get("nodeSelectorTerms") or []
        for i, term in enumerate(terms):
            for j, expr in enumerate(term.get("matchExpressions") or []):
                if expr.get("operator") != "In":
                    continue
                target = _retarget(str(expr.get("key")), [str(v) for v in expr.get("values") or []], nodes, pool)
                if target is not None:
                    ops.append({"op": "replace", "value": [target], "path": (
                        f"{pointers[comp.name]}/affinity/nodeAffinity/requiredDuringSchedulingIgnoredDuringExecution"
                        f"/nodeSelectorTerms/{i}/matchExpressions/{j}/values")})
                    changed.append(f"required node affinity {expr.get('key')} In {expr.get('values')} -> [{target}]")
                    keys.add(str(expr.get("key")))
        if ops:
            out.append(Proposal(
                "deploy", tuple(ops),
                f"component {comp.name}: {'; '.join(changed)}: no node carries the value written, and the nodes of "
                f"the contract's GPU type ({' or '.join(gpu_types) or 'any'}) carry the new one; the mechanism is kept",
                {"nodes": sorted(_name(n) for n in pool)[:10], "node_count": len(pool), "gpu_types": list(gpu_types),
                 "sources": sorted({GPU_PRODUCT_LABELS[k] for k in keys})}))
    return out


def _retarget(key: str, values: Sequence[str], nodes: Sequence[ObjView], pool: Sequence[ObjView]) -> str | None:
    if key not in GPU_PRODUCT_LABELS or not pool:
        return None
    if any(_labels(n).get(key) in values for n in nodes):
        return None  # some node satisfies it as written: not a mismatch
    carried = {_labels(n).get(key) for n in pool}
    if len(carried) != 1 or None in carried:
        return None
    return str(next(iter(carried)))


def binds(claim: ObjView, volume: ObjView) -> bool:
    """Whether the PV controller could bind ``claim`` (``storageClassName: ""``) to ``volume``: an
    Available volume without a class, reserved for no other claim, of the claim's volume name when it
    names one, its selector's labels, every access mode asked, the volume mode and at least the
    size (k8s.io/component-helpers storage/volume/pv_helpers.go FindMatchingVolume, v0.31)."""
    spec, vspec = claim.get("spec") or {}, volume.get("spec") or {}
    meta, vmeta = claim.get("metadata") or {}, volume.get("metadata") or {}
    ref = vspec.get("claimRef") or {}
    labels = vmeta.get("labels") or {}
    wanted = quantity(((spec.get("resources") or {}).get("requests") or {}).get("storage", "0")) or 0.0
    size = quantity((vspec.get("capacity") or {}).get("storage", "0")) or 0.0
    checks = (
        (volume.get("status") or {}).get("phase") == "Available",
        vspec.get("storageClassName") in (None, ""),
        not ref or (ref.get("name"), ref.get("namespace")) == (meta.get("name"),
                                                                meta.get("namespace", ref.get("namespace"))),
        not spec.get("volumeName") or spec["volumeName"] == vmeta.get("name"),
        all(labels.get(k) == v for k, v in ((spec.get("selector") or {}).get("matchLabels") or {}).items()),
        set(spec.get("accessModes") or []) <= set(vspec.get("accessModes") or []),
        (spec.get("volumeMode") or "Filesystem") == (vspec.get("volumeMode") or "Filesystem"),
        size >= wanted,
    )
    return all(checks)
