"""GPU SKU check (step 2): can the DGD's GPU pods land on the GPU type the workload was sized for?

``user_workload.yaml`` names the hardware the experiment is for (``hardware[].gpu_type``, e.g.
``H200``); a DGD without a ``nvidia.com/gpu.product`` selector may land on any GPU node. The nodes
that can take each GPU component's pods (the same static filters as the capacity check: cordons,
taints, selectors, required node affinity, allocatable GPUs; see ``deploy_suite.judges.placement``) are
compared with those types through GPU Feature Discovery's product label:

* none of the expected type among them: a blocker (the run would measure other hardware);
* some of another type too: a warning naming those nodes (the scheduler may pick them);
* nodes without the label: they cannot be judged, a warning says so.

Pure logic over ``kubectl get nodes`` items, like ``deploy_suite.judges.capacity``.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from deploy_suite.constants import GPU_PRODUCT_LABEL
from deploy_suite.judges.placement import Problem
from deploy_suite.model.dgd import Dgd

EXAMPLES = 5  # node names quoted per line
SKU_FIX = (f"pin the GPU components to the workload's GPU type (nodeSelector {GPU_PRODUCT_LABEL}), or run on a "
           "cluster with that hardware (hardware[].gpu_type is frozen in user_workload.yaml)")


def expected_types(workload: Mapping[str, Any]) -> tuple[str, ...]:
    """``hardware[].gpu_type`` of the (already validated) workload mapping."""
    hardware = workload.get("hardware") or []
    return tuple(str(h["gpu_type"]) for h in hardware if isinstance(h, Mapping) and h.get("gpu_type"))


def _words(text: str) -> list[str]:
    words = [w for w in re.split(r"[^A-Z0-9]+", text.upper()) if w]
    return words[1:] if words[:1] == ["NVIDIA"] else words


def sku_matches(gpu_type: str, product: str) -> bool:
    """``H100`` matches ``NVIDIA-H100-80GB-HBM3``; ``A100-80GB`` matches ``NVIDIA-A100-SXM4-80GB``;
    ``B200`` does not match ``NVIDIA-GB200``: the model word must be equal, the other words of the
    type must follow in order."""
    want, have = _words(gpu_type), _words(product)
    if not want or not have or want[0] != have[0]:
        return False
    rest = iter(have[1:])
    return all(any(w == h for h in rest) for w in want[1:])


def _named(names: Sequence[str], products: Mapping[str, str]) -> str:
    shown = [f"{n} ({products[n]})" if products.get(n) else n for n in names[:EXAMPLES]]
    more = len(names) - EXAMPLES
    return ", ".join(shown) + (f" and {more} more" if more > 0 else "")


@dataclass(frozen=True)
class SkuResult:
    outcome: str  # matches | other types possible | mismatch | unverified | not needed | not checked
    expected: tuple[str, ...]
    components: dict[str, dict[str, list[str]]] = field(default_factory=dict)  # matching/other/unlabelled
    blockers: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        return {"outcome": self.outcome, "expected": list(self.expected), "components": self.components,
                "warnings": self.warnings}


def check_sku(dgd: Dgd, nodes: Sequence[Mapping[str, Any]], gpu_types: Sequence[str],
              namespace: str | None = None) -> SkuResult:
    """Compare, per GPU component, the nodes that can take its pods with ``gpu_types``."""
    expected = tuple(gpu_types)
    firsts = [d for d in dgd.pod_demands(namespace, first_only=True) if d.gpus > 0]
    if not firsts:
        return SkuResult("not needed", expected)
    if not expected:
        return SkuResult("not checked", expected)  # user_workload.yaml requires hardware; a library caller may not
    pb = Problem(firsts, nodes, [], namespace)  # static eligibility only: what holds GPUs now is capacity's job
    products = {n.name: n.labels.get(GPU_PRODUCT_LABEL, "") for n in pb.nodes}
    wanted = " or ".join(expected)
    components: dict[str, dict[str, list[str]]] = {}
    blockers: list[str] = []
    warnings: list[str] = []
    for i, demand in enumerate(firsts):
        sig = pb.groups[pb.group_of[i]].sig
        eligible = [n.name for j, n in enumerate(pb.nodes) if pb.mask[j] >> sig & 1]
        split: dict[str, list[str]] = {"matching": [], "other": [], "unlabelled": []}
        for name in eligible:
            product = products[name]
            kind = "unlabelled" if not product else (
                "matching" if any(sku_matches(t, product) for t in expected) else "other")
            split[kind].append(name)
        components[demand.component] = split
        if not eligible:
            continue  # no node at all: the capacity check says why
        who = f"component {demand.component}'s GPU pods"
        if split["unlabelled"]:
            warnings.append(f"{who} may land on node(s) without a {GPU_PRODUCT_LABEL} label, whose GPU type "
                            f"cannot be checked against {wanted}: {_named(split['unlabelled'], products)}")
        # With unlabelled nodes in reach the right type may be there: a warning, never a blocker.
        if not split["matching"] and split["other"] and not split["unlabelled"]:
            blockers.append(f"{who} can only land on GPUs other than hardware[].gpu_type {wanted}: "
                            f"{_named(split['other'], products)}")
        elif split["other"]:
            warnings.append(f"{who} could land on another GPU type than hardware[].gpu_type {wanted}: "
                            f"{_named(split['other'], products)}")
    if blockers:
        outcome = "mismatch"
    elif any(s["other"] for s in components.values()):
        outcome = "other types possible"
    elif any(s["unlabelled"] for s in components.values()):
        outcome = "unverified"
    else:
        outcome = "matches"
    return SkuResult(outcome, expected, components, blockers, warnings)
