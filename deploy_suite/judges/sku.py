"""GPU SKU check (step 2): can the DGD's GPU pods land on the GPU type the workload was sized for?

``user_workload.yaml`` names the hardware the experiment is for (``hardware[].gpu_type``, e.g.
``H200``); a DGD without a ``nvidia.com/gpu.product`` selector may land on any GPU node. The nodes
that can take each GPU component's pods (the same static filters as the capacity check: cordons,
taints, selectors, required node affinity, allocatable GPUs; see ``deploy_suite.judges.placement``) are
compared with those types through GPU Feature Discovery's product label:

* none of the expected type among them: a blocker (the run would measure other hardware);
* some of another type too: a warning naming those nodes (the scheduler may pick them);
* nodes without the label, or of the right family whose label does not say the memory or form
  factor the type names (``H100 SXM`` against ``NVIDIA-H100-80GB-HBM3``): a warning, never a blocker.

Names are compared by family, memory and form factor (:func:`sku_match`), not as strings.

Pure logic over ``kubectl get nodes`` items, like ``deploy_suite.judges.capacity``.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from deploy_suite.constants import GPU_MEMORY_LABEL, GPU_PRODUCT_LABEL
from deploy_suite.judges.placement import Problem
from deploy_suite.model.dgd import Dgd

EXAMPLES = 5  # node names quoted per line
SKU_FIX = (f"pin the GPU components to the workload's GPU type (nodeSelector {GPU_PRODUCT_LABEL}), or run on a "
           "cluster with that hardware (hardware[].gpu_type is frozen in user_workload.yaml)")


def expected_types(workload: Mapping[str, Any]) -> tuple[str, ...]:
    """``hardware[].gpu_type`` of the (already validated) workload mapping."""
    hardware = workload.get("hardware") or []
    return tuple(str(h["gpu_type"]) for h in hardware if isinstance(h, Mapping) and h.get("gpu_type"))


# GPU Feature Discovery's product label is the NVML device name with spaces as dashes
# (NVIDIA/gpu-feature-discovery README, "Generated Labels": ``Tesla-V100-SXM2-16GB``); memory is
# ``nvidia.com/gpu.memory`` in MiB. People write the marketing name ("H100 SXM", "H200 141GB").
VENDOR_WORDS = frozenset({"NVIDIA", "TESLA", "GEFORCE", "QUADRO"})
FORMS = {"SXM": "SXM", "PCIE": "PCIE", "NVL": "NVL"}  # SXM2/SXM4/SXM5 are SXM
MEMORY_WORD = re.compile(r"^(\d+)(?:GB|G|GIB)$")
RACK_WORD = re.compile(r"^NVL\d+$")  # "GB200 NVL72" names the rack, not the card's form factor
MEMORY_TOLERANCE = 0.1  # marketed GB against NVML's MiB: H200 141 GB reports 143771 MiB (140.4 GiB)
MATCH, AMBIGUOUS, OTHER = "match", "ambiguous", "other"


@dataclass(frozen=True)
class GpuName:
    family: str  # H100, GB200, L40S ...
    memory_gb: int | None
    form: str | None  # SXM | PCIE | NVL


def parse_gpu_name(text: str) -> GpuName | None:
    """``H200 141GB`` -> (H200, 141, None); ``NVIDIA-A100-SXM4-80GB`` -> (A100, 80, SXM); the words
    after ``MIG`` (a MIG profile, GFD's single strategy) are not the card's."""
    words = [w for w in re.split(r"[^A-Z0-9]+", text.upper()) if w]
    if "MIG" in words:
        words = words[:words.index("MIG")]
    words = [w for w in words if w not in VENDOR_WORDS]
    if not words:
        return None
    memory = form = None
    for w in words[1:]:
        if (m := MEMORY_WORD.match(w)) is not None:
            memory = int(m.group(1))
        elif not RACK_WORD.match(w):
            form = next((f for prefix, f in FORMS.items() if w.startswith(prefix)), form)
    return GpuName(words[0], memory, form)


def sku_match(gpu_type: str, product: str, memory_mib: str = "") -> str:
    """``match``, ``ambiguous`` (the family is right, the product does not say the memory or form
    factor the type names) or ``other``. ``B200`` is not ``GB200``: the family word must be equal."""
    want, have = parse_gpu_name(gpu_type), parse_gpu_name(product)
    if want is None or have is None or want.family != have.family:
        return OTHER
    verdict = MATCH
    if want.memory_gb is not None:
        have_gb = have.memory_gb
        if have_gb is None and memory_mib.isdigit():
            have_gb_f = int(memory_mib) / 1024
            if abs(have_gb_f - want.memory_gb) > MEMORY_TOLERANCE * want.memory_gb:
                return OTHER
        elif have_gb is None:
            verdict = AMBIGUOUS
        elif have_gb != want.memory_gb:
            return OTHER
    if want.form is not None and have.form != want.form:
        if have.form is not None:
            return OTHER
        verdict = AMBIGUOUS
    return verdict


def sku_matches(gpu_type: str, product: str) -> bool:
    """A certain match (see :func:`sku_match`)."""
    return sku_match(gpu_type, product) == MATCH


def _kind(expected: Sequence[str], product: str, memory_mib: str) -> str:
    if not product:
        return "unlabelled"
    verdicts = {sku_match(t, product, memory_mib) for t in expected}
    return "matching" if MATCH in verdicts else "ambiguous" if AMBIGUOUS in verdicts else "other"


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
    memory = {n.name: n.labels.get(GPU_MEMORY_LABEL, "") for n in pb.nodes}
    wanted = " or ".join(expected)
    components: dict[str, dict[str, list[str]]] = {}
    blockers: list[str] = []
    warnings: list[str] = []
    for i, demand in enumerate(firsts):
        sig = pb.groups[pb.group_of[i]].sig
        eligible = [n.name for j, n in enumerate(pb.nodes) if pb.mask[j] >> sig & 1]
        split: dict[str, list[str]] = {"matching": [], "ambiguous": [], "other": [], "unlabelled": []}
        for name in eligible:
            split[_kind(expected, products[name], memory[name])].append(name)
        components[demand.component] = split
        if not eligible:
            continue  # no node at all: the capacity check says why
        who = f"component {demand.component}'s GPU pods"
        if split["unlabelled"]:
            warnings.append(f"{who} may land on node(s) without a {GPU_PRODUCT_LABEL} label, whose GPU type "
                            f"cannot be checked against {wanted}: {_named(split['unlabelled'], products)}")
        if split["ambiguous"]:
            warnings.append(f"{who} may land on node(s) whose {GPU_PRODUCT_LABEL} is of the family of {wanted} "
                            f"but does not say its memory or form factor: {_named(split['ambiguous'], products)}")
        # With unlabelled or ambiguous nodes in reach the right type may be there: never a blocker.
        if not split["matching"] and split["other"] and not split["unlabelled"] and not split["ambiguous"]:
            blockers.append(f"{who} can only land on GPUs other than hardware[].gpu_type {wanted}: "
                            f"{_named(split['other'], products)}")
        elif split["other"]:
            warnings.append(f"{who} could land on another GPU type than hardware[].gpu_type {wanted}: "
                            f"{_named(split['other'], products)}")
    if blockers:
        outcome = "mismatch"
    elif any(s["other"] for s in components.values()):
        outcome = "other types possible"
    elif any(s["unlabelled"] or s["ambiguous"] for s in components.values()):
        outcome = "unverified"
    else:
        outcome = "matches"
    return SkuResult(outcome, expected, components, blockers, warnings)
