"""Kubernetes scheduling primitives: where a pod may run and how many GPUs it holds.

Node selectors, required node affinity, tolerations and taints, required pod (anti-)affinity,
extended-resource counts, every resource's effective request and the DRA claims a pod names, with
Kubernetes' own matching semantics. Pure data read from plain
PodSpec dicts: the DGD model (``deploy_suite.model.dgd``) reads its components' constraints with these,
the capacity engine (``deploy_suite.judges.capacity``) places pods with them, and triage explains a
pending pod with them. Wrong field types raise :class:`InputError` naming the field; a valid
constraint the model cannot evaluate lands in the caller's ``problems`` list instead.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from deploy_suite.errors import InputError

NODE_SELECTOR_OPERATORS = frozenset({"In", "NotIn", "Exists", "DoesNotExist", "Gt", "Lt"})
LABEL_SELECTOR_OPERATORS = frozenset({"In", "NotIn", "Exists", "DoesNotExist"})
# Only these effects keep a pod off a node; PreferNoSchedule is a score, not a filter.
BLOCKING_TAINT_EFFECTS = frozenset({"NoSchedule", "NoExecute"})


# --------------------------------------------------------------------------------------------
# Kubernetes scheduling primitives (pure data + the exact Kubernetes matching semantics)
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Requirement:
    """One match expression (node selector requirement or label selector requirement)."""

    key: str
    operator: str
    values: tuple[str, ...] = ()

    def matches(self, labels: Mapping[str, str]) -> bool:
        present = self.key in labels
        value = labels.get(self.key)
        op = self.operator
        if op == "In":
            return present and value in self.values
        if op == "NotIn":
            return not present or value not in self.values
        if op == "Exists":
            return present
        if op == "DoesNotExist":
            return not present
        if op in ("Gt", "Lt"):
            # Kubernetes parses both sides as int64; a non-integer label simply does not match.
            if not present or len(self.values) != 1:
                return False
            try:
                have, want = int(str(value)), int(self.values[0])
            except ValueError:
                return False
            return have > want if op == "Gt" else have < want
        return False

    def __str__(self) -> str:
        if self.operator in ("Exists", "DoesNotExist"):
            return f"{self.key} {self.operator}"
        return f"{self.key} {self.operator} ({','.join(self.values)})"


@dataclass(frozen=True)
class NodeSelectorTerm:
    """Required node affinity term: expressions are ANDed; terms of a pod are ORed."""

    match_expressions: tuple[Requirement, ...] = ()
    match_fields: tuple[Requirement, ...] = ()

    def matches(self, labels: Mapping[str, str], node_name: str) -> bool:
        # Kubernetes: an empty term matches no node.
        if not self.match_expressions and not self.match_fields:
            return False
        fields = {"metadata.name": node_name}
        return all(r.matches(labels) for r in self.match_expressions) and all(
            r.matches(fields) for r in self.match_fields
        )

    def __str__(self) -> str:
        parts = [str(r) for r in self.match_expressions] + [f"field {r}" for r in self.match_fields]
        return " and ".join(parts) or "<empty term>"


@dataclass(frozen=True)
class Taint:
    key: str
    value: str = ""
    effect: str = ""

    def __str__(self) -> str:
        return f"{self.key}={self.value}:{self.effect}" if self.value else f"{self.key}:{self.effect}"


@dataclass(frozen=True)
class Toleration:
    key: str = ""
    operator: str = "Equal"
    value: str = ""
    effect: str = ""  # empty = all effects

    def tolerates(self, taint: Taint) -> bool:
        """Kubernetes ``ToleratesTaint``: effect, then key, then operator."""
        if self.effect and self.effect != taint.effect:
            return False
        if self.key and self.key != taint.key:
            return False
        if self.operator == "Exists":
            return True
        return self.operator in ("", "Equal") and self.value == taint.value


@dataclass(frozen=True)
class LabelSelector:
    match_labels: tuple[tuple[str, str], ...] = ()
    match_expressions: tuple[Requirement, ...] = ()

    def matches(self, labels: Mapping[str, str]) -> bool:
        # An empty selector ({}) matches every pod, as in Kubernetes.
        return all(labels.get(k) == v for k, v in self.match_labels) and all(
            r.matches(labels) for r in self.match_expressions
        )

    def __str__(self) -> str:
        parts = [f"{k}={v}" for k, v in self.match_labels] + [str(r) for r in self.match_expressions]
        return ", ".join(parts) or "<all pods>"


@dataclass(frozen=True)
class PodAffinityTerm:
    """A required pod (anti-)affinity term.

    ``label_selector`` None is Kubernetes' null selector (matches no pod). ``namespaces`` empty and
    ``all_namespaces`` False mean "the namespace of the pod that owns the term".
    """

    label_selector: LabelSelector | None
    topology_key: str
    namespaces: tuple[str, ...] = ()
    all_namespaces: bool = False

    def selects(self, pod_namespace: str | None, pod_labels: Mapping[str, str], owner_namespace: str | None) -> bool:
        if self.label_selector is None:
            return False
        if not self.all_namespaces:
            allowed = self.namespaces or (owner_namespace,)
            if pod_namespace not in allowed:
                return False
        return self.label_selector.matches(pod_labels)

    def __str__(self) -> str:
        ns = "all namespaces" if self.all_namespaces else ",".join(self.namespaces) or "own namespace"
        return f"[{self.label_selector if self.label_selector else '<no pods>'}] per {self.topology_key} ({ns})"


@dataclass(frozen=True)
class Scheduling:
    """Everything that restricts where a pod may run. Hashable: capacity groups demands by it."""

    node_selector: tuple[tuple[str, str], ...] = ()
    # None = no required node affinity; () = required affinity with no terms (matches no node).
    node_affinity: tuple[NodeSelectorTerm, ...] | None = None
    tolerations: tuple[Toleration, ...] = ()
    pod_affinity: tuple[PodAffinityTerm, ...] = ()
    pod_anti_affinity: tuple[PodAffinityTerm, ...] = ()

    def node_filter(self) -> Scheduling:
        """The part that depends on the node only (not on other pods)."""
        return Scheduling(self.node_selector, self.node_affinity, self.tolerations)


# --------------------------------------------------------------------------------------------
# Reading constraints from a PodSpec: wrong field types are input errors naming the field
# --------------------------------------------------------------------------------------------


class FieldReader:
    """Field readers that raise :class:`InputError` naming the source and the field path."""

    def __init__(self, source: str) -> None:
        self.source = source

    def fail(self, path: str, problem: str, fix: str) -> InputError:
        return InputError(self.source, f"{path}: {problem}", fix)

    def mapping(self, obj: Any, path: str) -> dict[str, Any]:
        if obj is None:
            return {}
        if not isinstance(obj, dict):
            raise self.fail(path, f"expected a mapping, got {type(obj).__name__}", f"make {path} a mapping")
        return obj

    def seq(self, obj: Any, path: str) -> list[Any]:
        if obj is None:
            return []
        if not isinstance(obj, list):
            raise self.fail(path, f"expected a list, got {type(obj).__name__}", f"make {path} a list")
        return obj

    def text(self, obj: Any, path: str, default: str | None = None) -> str | None:
        if obj is None:
            return default
        if isinstance(obj, bool) or not isinstance(obj, str | int | float):
            raise self.fail(path, f"expected a string, got {type(obj).__name__}", f"make {path} a string")
        return str(obj)

    def strs(self, obj: Any, path: str) -> tuple[str, ...]:
        out = []
        for i, item in enumerate(self.seq(obj, path)):
            value = self.text(item, f"{path}[{i}]")
            if value is not None:
                out.append(value)
        return tuple(out)

    def str_map(self, obj: Any, path: str) -> dict[str, str]:
        return {str(k): str(v) for k, v in self.mapping(obj, path).items() if v is not None}


def parse_count(value: Any) -> int | None:
    """A GPU count as Kubernetes writes it (int or digit string); None when not a whole number."""
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value if value >= 0 else None
    if isinstance(value, str) and value.strip().isdigit():
        return int(value.strip())
    return None


def _requirements(
    rd: FieldReader, raw: Any, path: str, allowed: frozenset[str], problems: list[str]
) -> tuple[Requirement, ...]:
    out = []
    for i, item in enumerate(rd.seq(raw, path)):
        expr = rd.mapping(item, f"{path}[{i}]")
        key = rd.text(expr.get("key"), f"{path}[{i}].key", "") or ""
        op = rd.text(expr.get("operator"), f"{path}[{i}].operator", "") or ""
        if op not in allowed:
            problems.append(f"{path}[{i}]: operator {op!r} is not one of {sorted(allowed)}")
        out.append(Requirement(key, op, rd.strs(expr.get("values"), f"{path}[{i}].values")))
    return tuple(out)


def _label_selector(rd: FieldReader, raw: Any, path: str, problems: list[str]) -> LabelSelector | None:
    if raw is None:
        return None
    sel = rd.mapping(raw, path)
    labels = tuple(sorted(rd.str_map(sel.get("matchLabels"), f"{path}.matchLabels").items()))
    exprs = _requirements(
        rd, sel.get("matchExpressions"), f"{path}.matchExpressions", LABEL_SELECTOR_OPERATORS, problems
    )
    return LabelSelector(labels, exprs)


def _pod_affinity_terms(rd: FieldReader, raw: Any, path: str, problems: list[str]) -> tuple[PodAffinityTerm, ...]:
    terms = []
    for i, item in enumerate(rd.seq(raw, path)):
        p = f"{path}[{i}]"
        term = rd.mapping(item, p)
        key = rd.text(term.get("topologyKey"), f"{p}.topologyKey", "") or ""
        if not key:
            problems.append(f"{p}: required pod affinity term without topologyKey")
        ns_sel = term.get("namespaceSelector")
        all_ns = False
        if ns_sel is not None:
            # {} selects every namespace; anything else needs namespace labels we do not have.
            if rd.mapping(ns_sel, f"{p}.namespaceSelector"):
                problems.append(f"{p}.namespaceSelector: selecting namespaces by label is not modelled")
            else:
                all_ns = True
        for unsupported in ("matchLabelKeys", "mismatchLabelKeys"):
            if term.get(unsupported):
                problems.append(f"{p}.{unsupported}: not modelled")
        terms.append(
            PodAffinityTerm(
                _label_selector(rd, term.get("labelSelector"), f"{p}.labelSelector", problems),
                key,
                rd.strs(term.get("namespaces"), f"{p}.namespaces"),
                all_ns,
            )
        )
    return tuple(terms)


def parse_tolerations(rd: FieldReader, raw: Any, path: str, problems: list[str]) -> tuple[Toleration, ...]:
    out = []
    for i, item in enumerate(rd.seq(raw, path)):
        t = rd.mapping(item, f"{path}[{i}]")
        op = rd.text(t.get("operator"), f"{path}[{i}].operator", "Equal") or "Equal"
        if op not in ("Equal", "Exists"):
            problems.append(f"{path}[{i}]: toleration operator {op!r} is not Equal or Exists")
        out.append(
            Toleration(
                rd.text(t.get("key"), f"{path}[{i}].key", "") or "",
                op,
                rd.text(t.get("value"), f"{path}[{i}].value", "") or "",
                rd.text(t.get("effect"), f"{path}[{i}].effect", "") or "",
            )
        )
    return tuple(out)


def parse_scheduling(rd: FieldReader, pod_spec: Mapping[str, Any], path: str, problems: list[str]) -> Scheduling:
    """Read nodeSelector, required affinity and tolerations of a core PodSpec.

    Preferred (soft) terms are ignored on purpose: they never make a pod unschedulable.
    """
    selector = tuple(sorted(rd.str_map(pod_spec.get("nodeSelector"), f"{path}.nodeSelector").items()))
    affinity = rd.mapping(pod_spec.get("affinity"), f"{path}.affinity")
    node_terms: tuple[NodeSelectorTerm, ...] | None = None
    node_aff = rd.mapping(affinity.get("nodeAffinity"), f"{path}.affinity.nodeAffinity")
    required = node_aff.get("requiredDuringSchedulingIgnoredDuringExecution")
    if required is not None:
        rp = f"{path}.affinity.nodeAffinity.requiredDuringSchedulingIgnoredDuringExecution"
        terms = []
        for i, item in enumerate(rd.seq(rd.mapping(required, rp).get("nodeSelectorTerms"), f"{rp}.nodeSelectorTerms")):
            tp = f"{rp}.nodeSelectorTerms[{i}]"
            term = rd.mapping(item, tp)
            fields = _requirements(rd, term.get("matchFields"), f"{tp}.matchFields", NODE_SELECTOR_OPERATORS, problems)
            for r in fields:
                if r.key != "metadata.name":
                    problems.append(f"{tp}.matchFields: field {r.key!r} is not supported by Kubernetes")
            terms.append(
                NodeSelectorTerm(
                    _requirements(
                        rd,
                        term.get("matchExpressions"),
                        f"{tp}.matchExpressions",
                        NODE_SELECTOR_OPERATORS,
                        problems,
                    ),
                    fields,
                )
            )
        node_terms = tuple(terms)
    req = "requiredDuringSchedulingIgnoredDuringExecution"
    pod_aff = rd.mapping(affinity.get("podAffinity"), f"{path}.affinity.podAffinity")
    anti = rd.mapping(affinity.get("podAntiAffinity"), f"{path}.affinity.podAntiAffinity")
    return Scheduling(
        node_selector=selector,
        node_affinity=node_terms,
        tolerations=parse_tolerations(rd, pod_spec.get("tolerations"), f"{path}.tolerations", problems),
        pod_affinity=_pod_affinity_terms(rd, pod_aff.get(req), f"{path}.affinity.podAffinity.{req}", problems),
        pod_anti_affinity=_pod_affinity_terms(rd, anti.get(req), f"{path}.affinity.podAntiAffinity.{req}", problems),
    )


# --------------------------------------------------------------------------------------------
# Resource quantities: the GPUs a container and a pod hold
# --------------------------------------------------------------------------------------------


def container_gpus(container: Mapping[str, Any], resource: str) -> int | None:
    """GPUs one container holds: max(request, limit), because a limit alone implies an equal request.

    Counting request and limit once (never their sum) is the known double-count bug to avoid.
    Returns None when a value is not a whole number.
    """
    resources = container.get("resources") or {}
    if not isinstance(resources, dict):
        return None
    best = 0
    for part in ("requests", "limits"):
        values = resources.get(part) or {}
        if not isinstance(values, dict) or resource not in values:
            continue
        count = parse_count(values[resource])
        if count is None:
            return None
        best = max(best, count)
    return best


def pod_gpus(pod_spec: Mapping[str, Any], resource: str) -> int | None:
    """Effective pod request for one extended resource (Kubernetes' init-container rule).

    max(sum of regular containers + restartable (sidecar) init containers, the largest one-shot
    init container plus the sidecars started before it). None when a count is not a whole number.
    """
    regular = 0
    for c in pod_spec.get("containers") or []:
        g = container_gpus(c, resource) if isinstance(c, dict) else 0
        if g is None:
            return None
        regular += g
    sidecars = 0
    init_peak = 0
    for c in pod_spec.get("initContainers") or []:
        g = container_gpus(c, resource) if isinstance(c, dict) else 0
        if g is None:
            return None
        if isinstance(c, dict) and c.get("restartPolicy") == "Always":
            sidecars += g
            init_peak = max(init_peak, sidecars)
        else:
            init_peak = max(init_peak, sidecars + g)
    return max(regular + sidecars, init_peak)


def is_gpu_resource(name: str) -> bool:
    """A resource name that is a GPU or a slice of one: ``nvidia.com/gpu``, the device plugin's
    time-sliced ``nvidia.com/gpu.shared`` (renameByDefault) and MIG ``nvidia.com/mig-<profile>``
    names (mixed strategy; NVIDIA/k8s-device-plugin README), another vendor's ``<domain>/gpu``."""
    domain, _, short = name.partition("/")
    if domain == "nvidia.com":
        return short == "gpu" or short.startswith(("gpu.", "mig-"))
    return bool(domain) and short == "gpu"


def resource_names(pod_spec: Mapping[str, Any]) -> set[str]:
    """Every resource the pod's containers name, in requests or limits."""
    names: set[str] = set()
    for key in ("initContainers", "containers"):
        for c in pod_spec.get(key) or []:
            resources = c.get("resources") if isinstance(c, dict) else None
            for part in ("requests", "limits"):
                values = resources.get(part) if isinstance(resources, dict) else None
                if isinstance(values, dict):
                    names.update(str(k) for k in values)
    return names


def gpu_resources(pod_spec: Mapping[str, Any]) -> list[str]:
    """The GPU resource names the pod's containers ask for (requests or limits), sorted."""
    return sorted(n for n in resource_names(pod_spec) if is_gpu_resource(n))


def pod_gpu_total(pod_spec: Mapping[str, Any]) -> int:
    """Every GPU and GPU slice a pod holds (:func:`is_gpu_resource`); a count that is not a whole
    number counts 0, as :func:`pod_gpus`' callers do."""
    return sum(pod_gpus(pod_spec, r) or 0 for r in gpu_resources(pod_spec))


@dataclass(frozen=True)
class DraClaim:
    """One entry of a pod's ``resourceClaims``: a claim made per pod from a ResourceClaimTemplate
    (``template``), or one ResourceClaim shared by name (``claim``)."""

    name: str
    template: str | None = None
    claim: str | None = None

    def __str__(self) -> str:
        source = f"template {self.template}" if self.template else f"claim {self.claim}" if self.claim else "no source"
        return f"{self.name} ({source})"


def dra_claims(rd: FieldReader, pod_spec: Mapping[str, Any], path: str, problems: list[str]) -> tuple[DraClaim, ...]:
    """The pod's DRA claims; what their devices are is the cluster's to say (step 2 reads its
    DeviceClasses and ResourceSlices). A container naming a claim the pod does not define is a
    problem recorded, never guessed."""
    out = []
    for i, item in enumerate(rd.seq(pod_spec.get("resourceClaims"), f"{path}.resourceClaims")):
        p = f"{path}.resourceClaims[{i}]"
        raw = rd.mapping(item, p)
        source = rd.mapping(raw.get("source"), f"{p}.source")  # before Kubernetes 1.28: under source
        template = raw.get("resourceClaimTemplateName", source.get("resourceClaimTemplateName"))
        claim = raw.get("resourceClaimName", source.get("resourceClaimName"))
        out.append(DraClaim(rd.text(raw.get("name"), f"{p}.name", "") or "",
                            rd.text(template, f"{p}.resourceClaimTemplateName"),
                            rd.text(claim, f"{p}.resourceClaimName")))
    names = {c.name for c in out}
    for c in [*(pod_spec.get("initContainers") or []), *(pod_spec.get("containers") or [])]:
        res = c.get("resources") if isinstance(c, dict) else None
        for ref in (res.get("claims") or []) if isinstance(res, dict) else []:
            wanted = ref.get("name") if isinstance(ref, dict) else ref
            if wanted not in names:
                problems.append(f"{path}: container {c.get('name')!r} resources.claims names {wanted!r}, which "
                                f"{path}.resourceClaims does not define")
    return tuple(out)


_SUFFIX = {"n": 1e-9, "u": 1e-6, "m": 1e-3, "": 1.0, "k": 1e3, "M": 1e6, "G": 1e9, "T": 1e12, "P": 1e15,
           "E": 1e18, "Ki": 2.0**10, "Mi": 2.0**20, "Gi": 2.0**30, "Ti": 2.0**40, "Pi": 2.0**50, "Ei": 2.0**60}
_QUANTITY = re.compile(r"^([+-]?(?:\d+\.?\d*|\.\d+)(?:[eE][+-]?\d+)?)(Ki|Mi|Gi|Ti|Pi|Ei|[numkMGTPE]?)$")


def quantity(raw: object) -> float | None:
    """A Kubernetes resource quantity (``500m``, ``64Gi``, ``1e3``) as a number; None when unreadable."""
    m = _QUANTITY.match(str(raw).strip())
    return float(m.group(1)) * _SUFFIX[m.group(2)] if m else None


def show_quantity(amount: float, resource: str) -> str:
    """A quantity as people write it: bytes in binary units (``850Gi``), anything else plain."""
    if resource in {"memory", "ephemeral-storage"} or resource.startswith("hugepages-"):
        for unit in ("Ei", "Pi", "Ti", "Gi", "Mi", "Ki"):
            if amount >= _SUFFIX[unit]:
                return f"{amount / _SUFFIX[unit]:g}{unit}"
    return f"{amount:g}"


def pod_request(pod_spec: Mapping[str, Any], resource: str) -> float:
    """The pod's effective request of ``resource`` (a container's request, else its limit, as the
    API server defaults it): the regular containers and sidecars together, or the largest one-shot
    init container when that is more. Unreadable values count 0."""
    def one(c: Any) -> float:
        res = (c.get("resources") or {}) if isinstance(c, dict) else {}
        raw = (res.get("requests") or {}).get(resource, (res.get("limits") or {}).get(resource))
        return (quantity(raw) or 0.0) if raw is not None else 0.0

    inits = [c for c in pod_spec.get("initContainers") or [] if isinstance(c, dict)]
    running = sum(map(one, pod_spec.get("containers") or [])) + sum(
        one(c) for c in inits if c.get("restartPolicy") == "Always")
    return max([running, *(one(c) for c in inits if c.get("restartPolicy") != "Always")])


def pod_requests(pod_spec: Mapping[str, Any], but: str | None = None) -> dict[str, float]:
    """Every resource the pod's containers name (requests or limits), ``but`` one, with the pod's
    effective request of it (:func:`pod_request`); resources it asks none of are left out."""
    names = sorted(resource_names(pod_spec) - {but})
    return {name: amount for name in names if (amount := pod_request(pod_spec, name)) > 0}
