"""The DynamoGraphDeployment (DGD) model: one typed, frozen view over v1alpha1 and v1beta1 manifests.

Recipes ship DGDs in two API shapes (v1alpha1 ``spec.services`` map, v1beta1 ``spec.components``
list) and often as multi-document files where ConfigMaps, ComputeDomains or PVCs come first. Every
later step (preflight, capacity, pinned-knob checks, smoke) wants the same facts, so they are read
once here and normalised into :class:`Dgd` / :class:`Component`. The Kubernetes scheduling
primitives (selectors, tolerations, affinity terms) live here too because both the model and
``deploy_suite.capacity`` evaluate them; capacity owns the placement logic.

Two kinds of trouble are kept apart on purpose:

* malformed input (not YAML, no DGD, wrong field types) raises :class:`InputError`: nothing later
  can work, the user must fix the file;
* a valid manifest the model cannot represent faithfully (DRA GPU claims, templated replicas,
  unsupported affinity operators, an unknown apiVersion, several DGDs) is parsed as far as
  possible and the reason lands in :attr:`Dgd.unrepresentable`, so capacity answers ``unknown``
  rather than a false ``sufficient``.
"""

from __future__ import annotations

import re
import shlex
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from deploy_suite.errors import InputError

DGD_KIND = "DynamoGraphDeployment"
V1ALPHA1 = "nvidia.com/v1alpha1"
V1BETA1 = "nvidia.com/v1beta1"
SUPPORTED_API_VERSIONS = (V1ALPHA1, V1BETA1)
DEFAULT_GPU_RESOURCE = "nvidia.com/gpu"
# CRD default for multinode.nodeCount ("≥2, default 2").
DEFAULT_MULTINODE_NODE_COUNT = 2
COMPONENT_TYPES = frozenset({"frontend", "worker", "prefill", "decode", "planner", "epp"})
WORKER_TYPES = frozenset({"worker", "prefill", "decode"})
MAIN_CONTAINER = "main"

# Labels the operator puts on every pod it creates (reference: operator "pod labels").
LABEL_DGD_NAME = "nvidia.com/dynamo-graph-deployment-name"
LABEL_COMPONENT = "nvidia.com/dynamo-component"
LABEL_COMPONENT_TYPE = "nvidia.com/dynamo-component-type"
LABEL_SUB_COMPONENT_TYPE = "nvidia.com/dynamo-sub-component-type"
LABEL_DYNAMO_NAMESPACE = "nvidia.com/dynamo-namespace"
GPU_PRODUCT_LABEL = "nvidia.com/gpu.product"

NODE_SELECTOR_OPERATORS = frozenset({"In", "NotIn", "Exists", "DoesNotExist", "Gt", "Lt"})
LABEL_SELECTOR_OPERATORS = frozenset({"In", "NotIn", "Exists", "DoesNotExist"})
# Only these effects keep a pod off a node; PreferNoSchedule is a score, not a filter.
BLOCKING_TAINT_EFFECTS = frozenset({"NoSchedule", "NoExecute"})

_FIX_YAML = "pass a DynamoGraphDeployment manifest (YAML, apiVersion nvidia.com/v1alpha1 or v1beta1)"


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
# Typed accessors: wrong field types are input errors naming the field
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


# --------------------------------------------------------------------------------------------
# The model
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class EnvVar:
    name: str
    value: str | None = None
    value_from: Mapping[str, Any] | None = None


@dataclass(frozen=True)
class EnvFrom:
    kind: str  # "secret" | "configMap"
    name: str
    prefix: str = ""


@dataclass(frozen=True)
class Pvc:
    """A graph-level ``spec.pvcs`` entry (v1alpha1 only)."""

    name: str
    create: bool = False
    storage_class: str | None = None
    size: str | None = None
    access_mode: str | None = None


@dataclass(frozen=True)
class OtherDocument:
    """A non-DGD object in the same file (must be applied too; never inferred from the filename)."""

    kind: str
    api_version: str
    name: str | None


_VAR = re.compile(r"\$(?:\{([A-Za-z_][A-Za-z0-9_]*)\}|\(([A-Za-z_][A-Za-z0-9_]*)\)|([A-Za-z_][A-Za-z0-9_]*))")


def expand_vars(text: str, env: Mapping[str, str]) -> str:
    """Expand ``$VAR``, ``${VAR}`` (shell) and ``$(VAR)`` (Kubernetes) from known values; keep others."""

    def sub(m: re.Match[str]) -> str:
        name = m.group(1) or m.group(2) or m.group(3)
        return env.get(name, m.group(0))

    return _VAR.sub(sub, text)


def split_args(items: Iterable[str], env: Mapping[str, str]) -> tuple[str, ...]:
    """Tokens of command + args; a string with spaces (``sh -c "python3 -m ... --model X"``) is split."""
    out: list[str] = []
    for item in items:
        if any(ch.isspace() for ch in item):
            try:
                parts = shlex.split(item)
            except ValueError:  # unbalanced quotes: best effort
                parts = item.split()
        else:
            parts = [item]
        out.extend(expand_vars(p, env) for p in parts)
    return tuple(out)


def flag_value(tokens: Sequence[str], names: Iterable[str]) -> str | None:
    """Value of the last ``--flag value`` or ``--flag=value`` among ``names`` (argparse: last wins)."""
    wanted = tuple(names)
    found: str | None = None
    for i, tok in enumerate(tokens):
        for name in wanted:
            if tok == name and i + 1 < len(tokens):
                found = tokens[i + 1]
            elif tok.startswith(name + "="):
                found = tok[len(name) + 1 :]
    return found


def has_flag(tokens: Sequence[str], names: Iterable[str]) -> bool:
    wanted = tuple(names)
    return any(tok in wanted or tok.split("=", 1)[0] in wanted for tok in tokens)


# Priority order for the served model name. ``--model-name`` is the mocker's spelling.
SERVED_MODEL_FLAGS = (("--served-model-name",), ("--model-name",), ("--model",), ("--model-path",))


@dataclass(frozen=True)
class Component:
    """One DGD component (v1alpha1 service / v1beta1 component), normalised."""

    name: str
    type: str  # frontend|worker|prefill|decode|planner|epp, or the raw value when unknown
    raw_type: str | None  # componentType / type as written
    sub_component_type: str | None
    replicas: int
    node_count: int
    multinode: bool
    gpus_per_pod: int
    gpu_resource: str
    scheduling: Scheduling
    image: str | None
    command: tuple[str, ...]
    args: tuple[str, ...]
    env: tuple[EnvVar, ...]
    env_from: tuple[EnvFrom, ...]
    image_pull_secrets: tuple[str, ...]
    pvc_claims: tuple[str, ...]
    volume_names: tuple[str, ...]
    shared_memory: str | None
    served_model: str | None
    tokens: tuple[str, ...]  # command + args split and env-expanded (what knobs read)
    pod_labels: Mapping[str, str] = field(default_factory=dict)  # user labels for the pod

    @property
    def node_selector(self) -> dict[str, str]:
        return dict(self.scheduling.node_selector)

    @property
    def node_affinity(self) -> list[list[Requirement]] | None:
        """Required node affinity: a list of ORed terms, each a list of ANDed expressions."""
        if self.scheduling.node_affinity is None:
            return None
        return [list(t.match_expressions) + list(t.match_fields) for t in self.scheduling.node_affinity]

    @property
    def tolerations(self) -> tuple[Toleration, ...]:
        return self.scheduling.tolerations

    @property
    def pod_affinity(self) -> tuple[PodAffinityTerm, ...]:
        return self.scheduling.pod_affinity

    @property
    def pod_anti_affinity(self) -> tuple[PodAffinityTerm, ...]:
        return self.scheduling.pod_anti_affinity

    @property
    def is_worker(self) -> bool:
        return self.type in WORKER_TYPES

    @property
    def gpus_per_replica(self) -> int:
        return self.gpus_per_pod * self.node_count

    @property
    def total_gpus(self) -> int:
        return self.replicas * self.gpus_per_replica

    def flag(self, *names: str) -> str | None:
        return flag_value(self.tokens, names)


@dataclass(frozen=True)
class PodDemand:
    """One pod the operator will create, with what the scheduler needs to place it."""

    name: str  # "<component>-<replica>" or "<component>-<replica>-<rank>" for multinode
    component: str
    component_type: str
    replica: int
    rank: int
    gpus: int
    gpu_resource: str
    scheduling: Scheduling
    labels: Mapping[str, str]
    namespace: str | None


@dataclass(frozen=True)
class Dgd:
    api_version: str
    name: str
    namespace: str | None
    backend_framework: str | None
    components: list[Component]
    pvcs: list[Pvc] = field(default_factory=list)
    other_documents: list[OtherDocument] = field(default_factory=list)
    env: tuple[EnvVar, ...] = ()
    annotations: Mapping[str, str] = field(default_factory=dict)
    labels: Mapping[str, str] = field(default_factory=dict)
    unrepresentable: list[str] = field(default_factory=list)
    source: str = "<dgd>"

    def component(self, name: str) -> Component:
        for c in self.components:
            if c.name == name:
                return c
        raise KeyError(name)

    def total_gpus(self) -> int:
        return sum(c.total_gpus for c in self.components)

    def pod_demands(self, namespace: str | None = None) -> list[PodDemand]:
        """Every pod: component x replica x node (multinode), in creation order."""
        ns = namespace or self.namespace
        out = []
        for c in self.components:
            labels = {**self.labels, **c.pod_labels}
            labels[LABEL_DGD_NAME] = self.name
            labels[LABEL_COMPONENT] = c.name
            labels[LABEL_COMPONENT_TYPE] = c.raw_type or c.type
            if c.sub_component_type:
                labels[LABEL_SUB_COMPONENT_TYPE] = c.sub_component_type
            if ns:
                labels[LABEL_DYNAMO_NAMESPACE] = f"{ns}-{self.name}"
            for replica in range(c.replicas):
                for rank in range(c.node_count):
                    name = f"{c.name}-{replica}" + (f"-{rank}" if c.multinode else "")
                    out.append(
                        PodDemand(
                            name,
                            c.name,
                            c.type,
                            replica,
                            rank,
                            c.gpus_per_pod,
                            c.gpu_resource,
                            c.scheduling,
                            labels,
                            ns,
                        )
                    )
        return out

    def knobs(self, names: Iterable[str] | None = None) -> dict[str, Any]:
        """Knob name -> value per :data:`KNOBS`; unknown names raise :class:`KeyError` (see unknown_knobs)."""
        wanted = list(KNOBS) if names is None else list(names)
        bad = unknown_knobs(wanted)
        if bad:
            raise KeyError(f"unknown knob(s): {', '.join(bad)}; known: {', '.join(KNOBS)}")
        return {n: KNOBS[n].read(self) for n in wanted}


# --------------------------------------------------------------------------------------------
# Parsing
# --------------------------------------------------------------------------------------------


def load_dgd(path: str | Path) -> Dgd:
    p = Path(path)
    try:
        text = p.read_text(encoding="utf-8")
    except OSError as e:
        raise InputError(str(p), f"cannot read file ({e.strerror})", "pass an existing, readable DGD file") from e
    return parse_dgd(text, str(p))


def parse_dgd(text: str, source: str = "<dgd>") -> Dgd:
    """Parse a (multi-document) manifest and return its one DGD, normalised."""
    try:
        docs = [d for d in yaml.safe_load_all(text) if d is not None]
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None)
        where = f" at line {mark.line + 1}" if mark is not None else ""
        raise InputError(source, f"not valid YAML{where}", _FIX_YAML) from e
    rd = FieldReader(source)
    dgds: list[dict[str, Any]] = []
    others: list[OtherDocument] = []
    for i, doc in enumerate(docs):
        if not isinstance(doc, dict):
            raise rd.fail(f"document {i + 1}", f"expected a Kubernetes object, got {type(doc).__name__}", _FIX_YAML)
        kind = str(doc.get("kind", ""))
        api = str(doc.get("apiVersion", ""))
        name = rd.text(rd.mapping(doc.get("metadata"), f"document {i + 1}.metadata").get("name"), "metadata.name")
        if kind == DGD_KIND:
            dgds.append(doc)
        else:
            others.append(OtherDocument(kind, api, name))
    if not dgds:
        raise InputError(source, f"no {DGD_KIND} document among {len(docs)} document(s)", _FIX_YAML)
    problems: list[str] = []
    if len(dgds) > 1:
        names = [str((d.get("metadata") or {}).get("name")) for d in dgds]
        problems.append(
            f"{len(dgds)} DynamoGraphDeployments in one file ({', '.join(names)}); only the first is modelled"
        )
        others.extend(
            OtherDocument(DGD_KIND, str(d.get("apiVersion", "")), n) for d, n in zip(dgds[1:], names[1:], strict=True)
        )
    return _parse_one(rd, dgds[0], others, problems)


def _parse_one(rd: FieldReader, doc: dict[str, Any], others: list[OtherDocument], problems: list[str]) -> Dgd:
    api = str(doc.get("apiVersion", ""))
    meta = rd.mapping(doc.get("metadata"), "metadata")
    name = rd.text(meta.get("name"), "metadata.name")
    if not name:
        raise rd.fail("metadata.name", "missing", "give the DynamoGraphDeployment a metadata.name")
    spec = rd.mapping(doc.get("spec"), "spec")
    if api not in SUPPORTED_API_VERSIONS:
        problems.append(f"apiVersion {api!r} is not one of {', '.join(SUPPORTED_API_VERSIONS)}; read as best effort")
    graph_env = _env_list(rd, spec.get("envs") if "envs" in spec else spec.get("env"), "spec.env")
    beta = "components" in spec if api not in SUPPORTED_API_VERSIONS else api == V1BETA1
    pvcs = [] if beta else _pvcs(rd, spec.get("pvcs"))
    components = (
        _beta_components(rd, spec, graph_env, problems)
        if beta
        else _alpha_components(rd, spec, graph_env, pvcs, problems)
    )
    if not components:
        problems.append("the DGD has no components")
    return Dgd(
        api_version=api,
        name=name,
        namespace=rd.text(meta.get("namespace"), "metadata.namespace"),
        backend_framework=rd.text(spec.get("backendFramework"), "spec.backendFramework"),
        components=components,
        pvcs=pvcs,
        other_documents=others,
        env=graph_env,
        annotations=rd.str_map(spec.get("annotations"), "spec.annotations"),
        labels=rd.str_map(spec.get("labels"), "spec.labels"),
        unrepresentable=problems,
        source=rd.source,
    )


def _pvcs(rd: FieldReader, raw: Any) -> list[Pvc]:
    out = []
    for i, item in enumerate(rd.seq(raw, "spec.pvcs")):
        p = rd.mapping(item, f"spec.pvcs[{i}]")
        name = rd.text(p.get("name"), f"spec.pvcs[{i}].name")
        if not name:
            raise rd.fail(f"spec.pvcs[{i}].name", "missing", "name every spec.pvcs entry")
        out.append(
            Pvc(
                name,
                bool(p.get("create", False)),
                rd.text(p.get("storageClass"), f"spec.pvcs[{i}].storageClass"),
                rd.text(p.get("size"), f"spec.pvcs[{i}].size"),
                rd.text(p.get("volumeAccessMode"), f"spec.pvcs[{i}].volumeAccessMode"),
            )
        )
    return out


def _env_list(rd: FieldReader, raw: Any, path: str) -> tuple[EnvVar, ...]:
    out = []
    for i, item in enumerate(rd.seq(raw, path)):
        e = rd.mapping(item, f"{path}[{i}]")
        name = rd.text(e.get("name"), f"{path}[{i}].name") or ""
        vf = e.get("valueFrom")
        out.append(
            EnvVar(
                name,
                rd.text(e.get("value"), f"{path}[{i}].value"),
                rd.mapping(vf, f"{path}[{i}].valueFrom") if vf else None,
            )
        )
    return tuple(out)


def _env_from(rd: FieldReader, raw: Any, path: str) -> list[EnvFrom]:
    out = []
    for i, item in enumerate(rd.seq(raw, path)):
        e = rd.mapping(item, f"{path}[{i}]")
        prefix = rd.text(e.get("prefix"), f"{path}[{i}].prefix", "") or ""
        for key, kind in (("secretRef", "secret"), ("configMapRef", "configMap")):
            if key in e:
                ref = rd.mapping(e[key], f"{path}[{i}].{key}")
                out.append(EnvFrom(kind, rd.text(ref.get("name"), f"{path}[{i}].{key}.name", "") or "", prefix))
    return out


def _replicas(rd: FieldReader, raw: Any, path: str, problems: list[str]) -> int:
    if raw is None:
        return 1
    if isinstance(raw, bool) or not isinstance(raw, int | str):
        raise rd.fail(path, f"expected an integer, got {type(raw).__name__}", f"set {path} to a whole number")
    if isinstance(raw, str):
        # Templated ("${REPLICAS}") or quoted: Kubernetes would reject it; capacity cannot count it.
        problems.append(f"{path} is the string {raw!r}, not an integer")
        return parse_count(raw) or 0
    if raw < 0:
        raise rd.fail(path, f"negative ({raw})", f"set {path} to 0 or more")
    return raw


def _node_count(rd: FieldReader, multinode: Any, path: str, problems: list[str]) -> tuple[int, bool]:
    if multinode is None:
        return 1, False
    mn = rd.mapping(multinode, path)
    raw = mn.get("nodeCount", DEFAULT_MULTINODE_NODE_COUNT)
    count = parse_count(raw)
    if count is None or isinstance(raw, str):
        problems.append(f"{path}.nodeCount {raw!r} is not an integer")
        return count or DEFAULT_MULTINODE_NODE_COUNT, True
    return max(count, 1), True


def _normalise_type(raw: str | None, sub: str | None) -> str:
    if sub in ("prefill", "decode"):
        return sub
    return raw or "other"


def _volumes(rd: FieldReader, pod_spec: Mapping[str, Any], path: str) -> tuple[list[str], list[str]]:
    names, claims = [], []
    for i, item in enumerate(rd.seq(pod_spec.get("volumes"), f"{path}.volumes")):
        v = rd.mapping(item, f"{path}.volumes[{i}]")
        names.append(rd.text(v.get("name"), f"{path}.volumes[{i}].name", "") or "")
        pvc = v.get("persistentVolumeClaim")
        if pvc is not None:
            claim = rd.text(
                rd.mapping(pvc, f"{path}.volumes[{i}].persistentVolumeClaim").get("claimName"),
                f"{path}.volumes[{i}].claimName",
            )
            if claim:
                claims.append(claim)
    return names, claims


def _check_dra(
    rd: FieldReader,
    pod_spec: Mapping[str, Any],
    containers: Sequence[Mapping[str, Any]],
    path: str,
    problems: list[str],
) -> None:
    if pod_spec.get("resourceClaims"):
        problems.append(f"{path}.resourceClaims: DRA device claims are not modelled (GPU count unknown)")
    for c in containers:
        res = c.get("resources")
        if isinstance(res, dict) and res.get("claims"):
            problems.append(f"{path}: container {c.get('name')!r} uses DRA resources.claims (GPU count unknown)")


def _pod_gpus_or_problem(pod_spec: Mapping[str, Any], resource: str, path: str, problems: list[str]) -> int:
    count = pod_gpus(pod_spec, resource)
    if count is None:
        problems.append(f"{path}: a {resource} count is not a whole number")
        return 0
    return count


def _served_model(tokens: Sequence[str]) -> str | None:
    for names in SERVED_MODEL_FLAGS:
        value = flag_value(tokens, names)
        if value:
            return value
    return None


def _env_values(*layers: Iterable[EnvVar]) -> dict[str, str]:
    """Later layers win (graph env < component env < container env), like the operator's merge."""
    out: dict[str, str] = {}
    for layer in layers:
        for e in layer:
            if e.value is not None:
                out[e.name] = e.value
    return out


def _alpha_components(
    rd: FieldReader,
    spec: Mapping[str, Any],
    graph_env: tuple[EnvVar, ...],
    pvcs: list[Pvc],
    problems: list[str],
) -> list[Component]:
    pvc_names = {p.name for p in pvcs}
    out = []
    services = rd.mapping(spec.get("services"), "spec.services")
    for svc_name, raw in services.items():
        path = f"spec.services.{svc_name}"
        svc = rd.mapping(raw, path)
        raw_type = rd.text(svc.get("componentType"), f"{path}.componentType")
        sub = rd.text(svc.get("subComponentType"), f"{path}.subComponentType")
        replicas = _replicas(rd, svc.get("replicas"), f"{path}.replicas", problems)
        node_count, multinode = _node_count(rd, svc.get("multinode"), f"{path}.multinode", problems)
        resources = rd.mapping(svc.get("resources"), f"{path}.resources")
        limits = rd.mapping(resources.get("limits"), f"{path}.resources.limits")
        requests = rd.mapping(resources.get("requests"), f"{path}.resources.requests")
        gpu_resource = (
            rd.text(limits.get("gpuType") or requests.get("gpuType"), f"{path}.resources.limits.gpuType")
            or DEFAULT_GPU_RESOURCE
        )
        service_gpus = 0
        for part, values in (("limits", limits), ("requests", requests)):
            if values.get("gpu") is None:
                continue
            count = parse_count(values["gpu"])
            if count is None:
                problems.append(f"{path}.resources.{part}.gpu {values['gpu']!r} is not a whole number")
            else:
                service_gpus = max(service_gpus, count)  # request and limit counted once
        if resources.get("claims"):
            problems.append(f"{path}.resources.claims: DRA device claims are not modelled (GPU count unknown)")
        pod_spec = rd.mapping(svc.get("extraPodSpec"), f"{path}.extraPodSpec")
        main = rd.mapping(pod_spec.get("mainContainer"), f"{path}.extraPodSpec.mainContainer")
        sidecars = [
            rd.mapping(c, f"{path}.extraPodSpec.containers[{i}]")
            for i, c in enumerate(rd.seq(pod_spec.get("containers"), f"{path}.extraPodSpec.containers"))
        ]
        _check_dra(rd, pod_spec, [main, *sidecars], f"{path}.extraPodSpec", problems)
        # The operator puts the service GPUs on the main container; sidecars and init containers add to it.
        main_gpus = max(container_gpus(main, gpu_resource) or 0, service_gpus)
        main_effective = {**main, "resources": {"limits": {gpu_resource: main_gpus}}}
        gpus = _pod_gpus_or_problem(
            {**pod_spec, "containers": [main_effective, *sidecars]}, gpu_resource, path, problems
        )
        sched = parse_scheduling(rd, pod_spec, f"{path}.extraPodSpec", problems)
        component_env = _env_list(rd, svc.get("envs"), f"{path}.envs")
        container_env = _env_list(rd, main.get("env"), f"{path}.extraPodSpec.mainContainer.env")
        env_from = _env_from(rd, main.get("envFrom"), f"{path}.extraPodSpec.mainContainer.envFrom")
        secret = rd.text(svc.get("envFromSecret"), f"{path}.envFromSecret")
        if secret:
            env_from.insert(0, EnvFrom("secret", secret))
        volume_names, claims = _volumes(rd, pod_spec, f"{path}.extraPodSpec")
        for i, item in enumerate(rd.seq(svc.get("volumeMounts"), f"{path}.volumeMounts")):
            vm = rd.mapping(item, f"{path}.volumeMounts[{i}]")
            vm_name = rd.text(vm.get("name"), f"{path}.volumeMounts[{i}].name")
            if vm_name:
                if vm_name not in pvc_names:
                    problems.append(f"{path}.volumeMounts[{i}] names {vm_name!r}, which is not in spec.pvcs")
                if vm_name not in claims:
                    claims.append(vm_name)
        shm = rd.mapping(svc.get("sharedMemory"), f"{path}.sharedMemory")
        shared_memory = "0" if shm.get("disabled") else rd.text(shm.get("size"), f"{path}.sharedMemory.size")
        command = rd.strs(main.get("command"), f"{path}.extraPodSpec.mainContainer.command")
        args = rd.strs(main.get("args"), f"{path}.extraPodSpec.mainContainer.args")
        env_values = _env_values(graph_env, component_env, container_env)
        tokens = split_args([*command, *args], env_values)
        meta = rd.mapping(svc.get("extraPodMetadata"), f"{path}.extraPodMetadata")
        labels = {
            **rd.str_map(svc.get("labels"), f"{path}.labels"),
            **rd.str_map(meta.get("labels"), f"{path}.extraPodMetadata.labels"),
        }
        out.append(
            Component(
                name=str(svc_name),
                type=_normalise_type(raw_type, sub),
                raw_type=raw_type,
                sub_component_type=sub,
                replicas=replicas,
                node_count=node_count,
                multinode=multinode,
                gpus_per_pod=gpus,
                gpu_resource=gpu_resource,
                scheduling=sched,
                image=rd.text(main.get("image"), f"{path}.extraPodSpec.mainContainer.image"),
                command=command,
                args=args,
                env=(*component_env, *container_env),
                env_from=tuple(env_from),
                image_pull_secrets=_pull_secrets(rd, pod_spec, f"{path}.extraPodSpec"),
                pvc_claims=tuple(claims),
                volume_names=tuple(volume_names),
                shared_memory=shared_memory,
                served_model=_served_model(tokens),
                tokens=tokens,
                pod_labels=labels,
            )
        )
    return out


def _pull_secrets(rd: FieldReader, pod_spec: Mapping[str, Any], path: str) -> tuple[str, ...]:
    out = []
    for i, item in enumerate(rd.seq(pod_spec.get("imagePullSecrets"), f"{path}.imagePullSecrets")):
        name = rd.text(
            rd.mapping(item, f"{path}.imagePullSecrets[{i}]").get("name"),
            f"{path}.imagePullSecrets[{i}].name",
        )
        if name:
            out.append(name)
    return tuple(out)


def _beta_components(
    rd: FieldReader, spec: Mapping[str, Any], graph_env: tuple[EnvVar, ...], problems: list[str]
) -> list[Component]:
    out = []
    for idx, raw in enumerate(rd.seq(spec.get("components"), "spec.components")):
        path = f"spec.components[{idx}]"
        comp = rd.mapping(raw, path)
        name = rd.text(comp.get("name"), f"{path}.name")
        if not name:
            raise rd.fail(f"{path}.name", "missing", "name every component")
        path = f"spec.components[{name}]"
        raw_type = rd.text(comp.get("type"), f"{path}.type")
        if raw_type is not None and raw_type not in COMPONENT_TYPES:
            problems.append(f"{path}.type {raw_type!r} is not one of {sorted(COMPONENT_TYPES)}")
        replicas = _replicas(rd, comp.get("replicas"), f"{path}.replicas", problems)
        node_count, multinode = _node_count(rd, comp.get("multinode"), f"{path}.multinode", problems)
        template = rd.mapping(comp.get("podTemplate"), f"{path}.podTemplate")
        pod_spec = rd.mapping(template.get("spec"), f"{path}.podTemplate.spec")
        containers = [
            rd.mapping(c, f"{path}.podTemplate.spec.containers[{i}]")
            for i, c in enumerate(rd.seq(pod_spec.get("containers"), f"{path}.podTemplate.spec.containers"))
        ]
        mains = [c for c in containers if c.get("name") == MAIN_CONTAINER]
        if not mains:
            raise rd.fail(
                f"{path}.podTemplate.spec.containers",
                "no container named 'main'",
                "add the container named main with its image",
            )
        main = mains[0]
        _check_dra(rd, pod_spec, containers, f"{path}.podTemplate.spec", problems)
        gpu_resource = _beta_gpu_resource(main)
        gpus = _pod_gpus_or_problem(pod_spec, gpu_resource, path, problems)
        cpath = f"{path}.podTemplate.spec.containers[main]"
        container_env = _env_list(rd, main.get("env"), f"{cpath}.env")
        command = rd.strs(main.get("command"), f"{cpath}.command")
        args = rd.strs(main.get("args"), f"{cpath}.args")
        tokens = split_args([*command, *args], _env_values(graph_env, container_env))
        volume_names, claims = _volumes(rd, pod_spec, f"{path}.podTemplate.spec")
        cache = rd.mapping(comp.get("compilationCache"), f"{path}.compilationCache")
        cache_pvc = rd.text(cache.get("pvcName"), f"{path}.compilationCache.pvcName")
        if cache_pvc and cache_pvc not in claims:
            claims.append(cache_pvc)
        meta = rd.mapping(template.get("metadata"), f"{path}.podTemplate.metadata")
        out.append(
            Component(
                name=name,
                type=raw_type or "other",
                raw_type=raw_type,
                sub_component_type=None,
                replicas=replicas,
                node_count=node_count,
                multinode=multinode,
                gpus_per_pod=gpus,
                gpu_resource=gpu_resource,
                scheduling=parse_scheduling(rd, pod_spec, f"{path}.podTemplate.spec", problems),
                image=rd.text(main.get("image"), f"{cpath}.image"),
                command=command,
                args=args,
                env=container_env,
                env_from=tuple(_env_from(rd, main.get("envFrom"), f"{cpath}.envFrom")),
                image_pull_secrets=_pull_secrets(rd, pod_spec, f"{path}.podTemplate.spec"),
                pvc_claims=tuple(claims),
                volume_names=tuple(volume_names),
                shared_memory=rd.text(comp.get("sharedMemorySize"), f"{path}.sharedMemorySize"),
                served_model=_served_model(tokens),
                tokens=tokens,
                pod_labels=rd.str_map(meta.get("labels"), f"{path}.podTemplate.metadata.labels"),
            )
        )
    return out


def _beta_gpu_resource(main: Mapping[str, Any]) -> str:
    """The GPU resource the main container asks for: nvidia.com/gpu unless another ``*/gpu*`` is named."""
    resources = main.get("resources") or {}
    for part in ("limits", "requests"):
        values = resources.get(part) if isinstance(resources, dict) else None
        if isinstance(values, dict):
            for key in values:
                if key == DEFAULT_GPU_RESOURCE:
                    return DEFAULT_GPU_RESOURCE
            for key in values:
                if "/gpu" in str(key) or "/mig-" in str(key):
                    return str(key)
    return DEFAULT_GPU_RESOURCE


# --------------------------------------------------------------------------------------------
# Knobs (for resources.pinned): what each name means, in one documented table
# --------------------------------------------------------------------------------------------

KnobValue = str | int | None | dict[str, Any]

_PRECISION_TOKENS = ("nvfp4", "mxfp4", "fp4", "fp8", "bf16", "fp16", "int8", "int4", "awq", "gptq")
_PRECISION_RE = re.compile(r"(?<![a-z0-9])(" + "|".join(_PRECISION_TOKENS) + r")(?![a-z0-9])", re.IGNORECASE)
_FRAMEWORK_HINTS = (
    ("tensorrtllm", "trtllm"),
    ("trtllm", "trtllm"),
    ("vllm", "vllm"),
    ("sglang", "sglang"),
    ("mocker", "mocker"),
)
TP_FLAGS = ("--tensor-parallel-size", "--tensor_parallel_size", "--tp-size", "--tp")
PP_FLAGS = ("--pipeline-parallel-size", "--pipeline_parallel_size", "--pp-size", "--pp")
DP_FLAGS = ("--data-parallel-size", "--data_parallel_size", "--dp-size", "--dp")
PREFILL_FLAGS = ("--is-prefill-worker",)


@dataclass(frozen=True)
class Knob:
    name: str
    doc: str
    read: Callable[[Dgd], KnobValue]


def _workers(dgd: Dgd) -> list[Component]:
    return [c for c in dgd.components if c.is_worker]


def _joined(values: Iterable[str | None]) -> str | None:
    """One value when the workers agree, else the sorted distinct values joined by ',' (still comparable)."""
    distinct = sorted({v for v in values if v})
    return ",".join(distinct) if distinct else None


def _int_or_raw(value: str | None) -> int | str | None:
    if value is None:
        return None
    return int(value) if value.isdigit() else value


def _framework(dgd: Dgd) -> str | None:
    if dgd.backend_framework:
        return dgd.backend_framework.lower()
    for c in _workers(dgd) or dgd.components:
        hay = f"{c.image or ''} {' '.join(c.tokens)}".lower()
        for hint, name in _FRAMEWORK_HINTS:
            if hint in hay:
                return name
    return None


def _is_prefill(c: Component) -> bool:
    mode = c.flag("--disaggregation-mode")
    return c.type == "prefill" or has_flag(c.tokens, PREFILL_FLAGS) or mode == "prefill"


def _mode(dgd: Dgd) -> str:
    # A prefill worker is what makes a graph disaggregated: the mocker "agg" recipe runs its single
    # worker as type decode, so a decode-only graph is still aggregated.
    return "disagg" if any(_is_prefill(c) for c in dgd.components) else "agg"


def _model(dgd: Dgd) -> str | None:
    return _joined(c.served_model for c in _workers(dgd))


def _precision(dgd: Dgd) -> str | None:
    found = []
    for c in _workers(dgd):
        q = c.flag("--quantization")
        if q:
            found.append(q.lower())
            continue
        for model in (c.served_model, c.flag("--model"), c.flag("--model-path")):
            m = _PRECISION_RE.search(model or "")
            if m:
                found.append(m.group(1).lower())
                break
    return _joined(found)


def _gpu_type(dgd: Dgd) -> str | None:
    found = []
    for c in _workers(dgd):
        product = c.node_selector.get(GPU_PRODUCT_LABEL)
        if product is None and c.scheduling.node_affinity:
            ins = [
                r
                for t in c.scheduling.node_affinity
                for r in t.match_expressions
                if r.key == GPU_PRODUCT_LABEL and r.operator == "In"
            ]
            product = "|".join(sorted({v for r in ins for v in r.values})) or None
        found.append(product)
    return _joined(found)


def _per_worker(flags: tuple[str, ...]) -> Callable[[Dgd], KnobValue]:
    def read(dgd: Dgd) -> KnobValue:
        return {c.name: _int_or_raw(c.flag(*flags)) for c in _workers(dgd)}

    return read


KNOBS: dict[str, Knob] = {
    k.name: k
    for k in (
        Knob(
            "framework",
            "spec.backendFramework, else inferred from the worker image / module name (vllm, sglang, trtllm, mocker)",
            _framework,
        ),
        Knob(
            "mode",
            "'disagg' when a component is a prefill worker (type/subComponentType prefill, "
            "--is-prefill-worker or --disaggregation-mode prefill), else 'agg'",
            _mode,
        ),
        Knob(
            "model",
            "served model of the workers: --served-model-name, else --model-name, --model, "
            "--model-path ($VAR expanded); distinct values joined by ','",
            _model,
        ),
        Knob(
            "precision",
            "worker --quantization value, else an nvfp4/mxfp4/fp4/fp8/bf16/fp16/int8/int4/awq/gptq "
            "token in the served model name or model path (lowercase)",
            _precision,
        ),
        Knob(
            "tensor_parallel_size",
            "per worker component: --tensor-parallel-size/--tp-size/--tp",
            _per_worker(TP_FLAGS),
        ),
        Knob(
            "pipeline_parallel_size",
            "per worker component: --pipeline-parallel-size/--pp-size/--pp",
            _per_worker(PP_FLAGS),
        ),
        Knob(
            "data_parallel_size",
            "per worker component: --data-parallel-size/--dp-size/--dp",
            _per_worker(DP_FLAGS),
        ),
        Knob(
            "gpu_type",
            "worker nodeSelector nvidia.com/gpu.product (or required node affinity In values)",
            _gpu_type,
        ),
        Knob("replicas", "per component: replicas", lambda d: {c.name: c.replicas for c in d.components}),
        Knob(
            "gpus_per_worker",
            "per worker component: GPUs per replica (per-pod GPUs x multinode nodeCount)",
            lambda d: {c.name: c.gpus_per_replica for c in _workers(d)},
        ),
    )
}


def unknown_knobs(names: Iterable[str]) -> list[str]:
    """Names that are not in :data:`KNOBS` (a pinned list must be checked with this first)."""
    return [n for n in names if n not in KNOBS]


def changed_knobs(before: Dgd, after: Dgd, names: Iterable[str]) -> dict[str, tuple[KnobValue, KnobValue]]:
    """Knobs among ``names`` whose value differs between two DGDs: name -> (before, after)."""
    wanted = list(names)
    a, b = before.knobs(wanted), after.knobs(wanted)
    return {n: (a[n], b[n]) for n in wanted if a[n] != b[n]}
