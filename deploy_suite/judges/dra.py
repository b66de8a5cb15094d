"""DRA claims as far as the cluster says: which devices a pod's ``resourceClaims`` ask for, and
whether any node the pod may use can ever offer them.

A claim names a ResourceClaimTemplate (one claim per pod) or a ResourceClaim; their device requests
name a DeviceClass, whose CEL selectors name the driver (``device.driver == "gpu.nvidia.com"``);
the driver's ResourceSlices publish its devices, per node (``nodeName``) or for many nodes at once
(``allNodes``, ``nodeSelector``). Step 2 reads these objects read-only
(``deploy_suite.procedure.capacity_gate``); what it could not read (``Forbidden``, DRA not served) is a
limitation, never a block. What is read is judged as Kubernetes' scheduler would: a claim template
or claim neither the namespace nor the manifest holds (no claim is ever made for the pod), a
template a ComputeDomain of the manifest would create on a cluster that does not serve that kind or
has no DeviceClass of its channels' driver (NVIDIA's DRA driver not installed), a DeviceClass that
does not exist, or a driver that publishes fewer devices than one pod asks on every node the pod
may use, can never be allocated. Device selectors are CEL and
are not evaluated: counting every device of the driver is an upper bound, so such a verdict is
certain. A claim that asks for GPUs (a ``gpu``/``mig`` class or driver), or whose devices cannot be
read, leaves the GPU count unknown, as it was before DRA was read (docs/procedure.md, step 2).
Pure: plain dicts in (``kubectl get -o json`` items and the manifest's documents), verdicts out.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from deploy_suite.constants import Obj
from deploy_suite.model.scheduling import DraClaim

DRA_GROUP = "resource.k8s.io"
# The claim template a ComputeDomain's controller creates (NVIDIA's DRA driver for GPUs): IMEX
# channels of the domain, not GPUs; it exists only once the ComputeDomain is applied.
COMPUTE_DOMAIN_KIND = "ComputeDomain"
# The driver of a ComputeDomain's channels (its DeviceClass compute-domain-default-channel.nvidia.com
# selects `device.driver == 'compute-domain.nvidia.com'`, docs/procedure.md, step 2).
COMPUTE_DOMAIN_DRIVER = "compute-domain.nvidia.com"
_DRIVER = re.compile(r"""device\.driver\s*==\s*["']([^"']+)["']""")
_GPU_LABELS = frozenset({"gpu", "mig"})
NAMED = 5  # nodes named per line


@dataclass(frozen=True)
class Request:
    """One device request of a claim: ``classes`` are alternatives (``firstAvailable``)."""

    name: str
    classes: tuple[str, ...]
    count: int  # devices per claim; 1 for allocationMode All (at least one must exist)


@dataclass
class DraView:
    """What step 2 read of the cluster's DRA objects and the manifest's own. ``None``: not read,
    the reason in ``unread``."""

    classes: dict[str, Obj] | None = None
    slices: list[Obj] | None = None
    templates: dict[str, Obj] = field(default_factory=dict)  # ResourceClaimTemplate name -> object
    claims: dict[str, Obj] = field(default_factory=dict)  # ResourceClaim name -> object
    made_by: dict[str, str] = field(default_factory=dict)  # template name -> the manifest object creating it
    maker_api: dict[str, str] = field(default_factory=dict)  # template name -> its maker's apiVersion
    unserved: dict[str, str] = field(default_factory=dict)  # a maker's apiVersion the cluster does not serve -> why
    unread: dict[str, str] = field(default_factory=dict)  # what -> why
    missing: dict[str, str] = field(default_factory=dict)  # a template or claim read and absent -> what was read

    @classmethod
    def from_documents(cls, docs: Sequence[Any]) -> DraView:
        """The templates and claims the manifest itself holds, and the templates its ComputeDomains create."""
        view = cls()
        for doc in docs:
            if not isinstance(doc, dict):
                continue
            name = str((doc.get("metadata") or {}).get("name") or "")
            if doc.get("kind") == "ResourceClaimTemplate":
                view.templates[name] = doc
            elif doc.get("kind") == "ResourceClaim":
                view.claims[name] = doc
            elif doc.get("kind") == COMPUTE_DOMAIN_KIND:
                made = ((doc.get("spec") or {}).get("channel") or {}).get("resourceClaimTemplate") or {}
                if made.get("name"):
                    view.made_by[str(made["name"])] = f"{COMPUTE_DOMAIN_KIND} {name}"
                    view.maker_api[str(made["name"])] = str(doc.get("apiVersion") or "")
        return view


def slim_slice(obj: Mapping[str, Any]) -> Obj:
    """Keep what the judgement reads of a ResourceSlice (a big cluster publishes many)."""
    spec = obj.get("spec") or {}
    return {"spec": {"driver": spec.get("driver"), "nodeName": spec.get("nodeName"),
                     "shared": bool(spec.get("allNodes") or spec.get("nodeSelector")
                                    or spec.get("perDeviceNodeSelection")),
                     "devices": len(spec.get("devices") or [])}}


def requests_of(obj: Mapping[str, Any]) -> list[Request]:
    """The device requests of a ResourceClaim's or a template's spec, in every served shape
    (``resource.k8s.io`` v1beta1: flat; v1beta2 and v1: ``exactly`` or ``firstAvailable``)."""
    spec = obj.get("spec") or {}
    if obj.get("kind") == "ResourceClaimTemplate" or "spec" in spec:
        spec = spec.get("spec") or {}
    out = []
    for raw in (spec.get("devices") or {}).get("requests") or []:
        exact = raw.get("exactly") or raw
        alternatives = raw.get("firstAvailable") or [exact]
        classes = tuple(str(a.get("deviceClassName")) for a in alternatives if a.get("deviceClassName"))
        count = int(exact.get("count") or 1) if exact.get("allocationMode", "ExactCount") == "ExactCount" else 1
        out.append(Request(str(raw.get("name") or ""), classes, count))
    return out


def driver_of(device_class: Mapping[str, Any]) -> str | None:
    """The driver a DeviceClass's CEL selectors require; None when they do not say it plainly."""
    for selector in (device_class.get("spec") or {}).get("selectors") or []:
        found = _DRIVER.search(str((selector.get("cel") or {}).get("expression") or ""))
        if found:
            return found.group(1)
    return None


def is_gpu(class_name: str, driver: str | None) -> bool:
    """A GPU or a MIG slice of one: the class's or the driver's first name is ``gpu``/``mig``
    (``gpu.nvidia.com``, ``mig.nvidia.com``, ``gpu.intel.com``, ``gpu.amd.com``)."""
    return any(name.split(".", 1)[0] in _GPU_LABELS for name in (class_name, driver or "") if name)


@dataclass
class DraVerdict:
    """What the claims of a DGD's pods come to: ``never`` lines (no node can ever offer them),
    ``gpu_unknown`` (the GPU count cannot be told), limitations and per-claim evidence."""

    never: list[str] = field(default_factory=list)
    gpu_unknown: list[str] = field(default_factory=list)
    limitations: list[str] = field(default_factory=list)
    evidence: list[Obj] = field(default_factory=list)


class Devices:
    """Devices per driver: per node, and published for many nodes at once."""

    def __init__(self, slices: Sequence[Mapping[str, Any]]) -> None:
        self.per_node: dict[str, Counter[str]] = {}
        self.shared: Counter[str] = Counter()
        for item in slices:
            listed = isinstance((item.get("spec") or {}).get("devices"), list)  # as listed, not slimmed yet
            spec = (slim_slice(item) if listed else item).get("spec") or {}
            driver, count = str(spec.get("driver") or ""), int(spec.get("devices") or 0)
            if spec.get("nodeName"):
                self.per_node.setdefault(driver, Counter())[str(spec["nodeName"])] += count
            elif spec.get("shared"):
                self.shared[driver] += count


def _why_not(view: DraView, name: str, default: str) -> str:
    return view.missing.get(name) or view.unread.get(name, default)


def _source(claim: DraClaim, view: DraView) -> tuple[Obj | None, str]:
    """The object a pod claim's devices are read from, or why there is none."""
    if claim.template:
        if claim.template in view.made_by:
            return None, f"made by {view.made_by[claim.template]} of the manifest (its channels, not GPUs)"
        found = view.templates.get(claim.template)
        return found, "" if found else _why_not(view, claim.template, f"template {claim.template} not found")
    if claim.claim:
        found = view.claims.get(claim.claim)
        return found, "" if found else _why_not(view, claim.claim, f"ResourceClaim {claim.claim} not found")
    return None, "names neither a template nor a claim"


def judge(components: Mapping[str, tuple[DraClaim, ...]], may_use: Mapping[str, Sequence[str]],
          view: DraView | None) -> DraVerdict:
    """Every component's claims against the cluster's DeviceClasses and ResourceSlices;
    ``may_use`` is, per component, the nodes its pods may use (selectors, affinity, taints)."""
    judged = _Judge(view if view is not None else DraView())
    for component, claims in components.items():
        for claim in claims:
            if view is None:
                judged.out.gpu_unknown.append(f"component {component}'s DRA claim {claim}: the cluster's DRA "
                                              "objects were not read (GPU count unknown)")
            else:
                judged.claim(component, claim, may_use.get(component, ()))
    return judged.out


class _Judge:
    def __init__(self, view: DraView) -> None:
        self.view = view
        self.devices = Devices(view.slices) if view.slices is not None else None
        self.out = DraVerdict()

    def claim(self, component: str, claim: DraClaim, may_use: Sequence[str]) -> None:
        where = f"component {component}'s DRA claim {claim}"
        obj, why = _source(claim, self.view)
        if obj is None:
            self.out.evidence.append({"component": component, "claim": claim.name, "devices": why})
            if claim.template in self.view.made_by:
                self.made(where, claim.template)
            elif (claim.template or claim.claim) in self.view.missing:
                self.out.never.append(f"{where}: {why}: no claim is ever made for its pods, which can never be "
                                      "scheduled (create it first, or drop the claim)")
            else:
                self.out.gpu_unknown.append(f"{where}: {why} (GPU count unknown)")
                self.out.limitations.append(f"{where}: {why}")
            return
        for request in requests_of(obj):
            row: Obj = {"component": component, "claim": claim.name, "request": request.name,
                        "classes": list(request.classes), "count": request.count}
            self.out.evidence.append(row)
            self.request(where, request, may_use, row)

    def made(self, where: str, template: str) -> None:
        """A template a ComputeDomain of the manifest creates: only where the cluster has the kind
        and its channels' driver (NVIDIA's DRA driver); else the pods never get their channel."""
        view, maker = self.view, self.view.made_by[template]
        api = view.maker_api.get(template, "")
        if api in view.unserved:
            self.out.never.append(f"{where} names template {template}, which {maker} of the manifest would create, "
                                  f"but {view.unserved[api]}: the template never exists and its pods can never be "
                                  "scheduled")
        elif view.classes is not None and not any(driver_of(c) == COMPUTE_DOMAIN_DRIVER
                                                  for c in view.classes.values()):
            self.out.never.append(f"{where} names template {template} of {maker} (IMEX channels), but no DeviceClass "
                                  f"of driver {COMPUTE_DOMAIN_DRIVER} exists (NVIDIA's DRA driver for GPUs, "
                                  "ComputeDomains enabled, is not installed): no node can ever offer a channel")

    def request(self, where: str, request: Request, may_use: Sequence[str], row: Obj) -> None:
        view, out = self.view, self.out
        if view.classes is None:
            reason = view.unread.get("DeviceClasses", "DeviceClasses not read")
            out.gpu_unknown.append(f"{where}: device class {', '.join(request.classes)} unchecked ({reason}; GPU "
                                   "count unknown)")
            out.limitations.append(f"{where}: device classes unchecked ({reason})")
            return
        known = [c for c in request.classes if c in view.classes]
        if not known:
            out.never.append(f"{where} asks device class {' or '.join(request.classes) or '<none>'}, which the "
                             "cluster does not define (no such DeviceClass): no node can ever offer it")
            row["devices"] = "no such DeviceClass"
            return
        drivers = {c: driver_of(view.classes[c]) for c in known}
        if any(is_gpu(c, d) for c, d in drivers.items()):
            out.gpu_unknown.append(f"{where} asks GPUs through DRA (device class {', '.join(known)}): GPU count "
                                   "unknown")
        if self.devices is None or any(d is None for d in drivers.values()):
            out.limitations.append(f"{where}: devices of class {', '.join(known)} unchecked ("
                                   f"{view.unread.get('ResourceSlices', 'their driver is not named plainly')})")
            return
        self.offered(where, request, [str(d) for d in drivers.values()], may_use, row)

    def offered(self, where: str, request: Request, drivers: list[str], may_use: Sequence[str], row: Obj) -> None:
        """Whether a node the pods may use publishes as many devices of the drivers as one claim asks."""
        devices = self.devices or Devices(())
        per_node, usable = devices.per_node, set(may_use)
        offering = {node for d in drivers for node, n in per_node.get(d, Counter()).items()
                    if n >= request.count and node in usable}
        row["nodes_offering"] = len(offering)
        if offering or max(devices.shared[d] for d in drivers) >= request.count:
            return
        have = sorted(((node, max(per_node.get(d, Counter())[node] for d in drivers)) for node in may_use),
                      key=lambda x: (-x[1], x[0]))
        named = ", ".join(f"{n} ({c})" for n, c in have[:NAMED])
        named += f" and {len(have) - NAMED} more" if len(have) > NAMED else ""
        self.out.never.append(f"{where} asks {request.count} device(s) of class {', '.join(row['classes'])} (driver "
                              f"{', '.join(sorted(set(drivers)))}); none of the {len(may_use)} node(s) its pods may "
                              f"use publishes that many (devices in ResourceSlices: {named or 'no node'})")
