"""The placement problem the capacity engine solves, and the placement state its two answers share.

``Problem`` is everything static about "place these pod demands on this cluster now": the nodes
(GPUs allocatable and held, the allocatable of every other resource the pods ask for, blocking
taints, cordons), identical demands grouped so the search treats them as interchangeable, each
group's static eligibility per node (Kubernetes filter order, then what the node can ever offer,
with the reason a node is out), the required pod (anti-)affinity terms and what existing
pods contribute to them, and node classes (nodes no placement can tell apart). ``State`` is the
mutable placement: free GPUs per node, planned pods per topology domain, and pools of
interchangeable nodes. The scheduler simulation and the exact search in
``deploy_suite.judges.capacity`` both run over these; neither reads the cluster.
"""

from __future__ import annotations

import functools
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from deploy_suite.constants import GPU_RESOURCE
from deploy_suite.errors import InputError
from deploy_suite.model.dgd import PodDemand
from deploy_suite.model.scheduling import (
    BLOCKING_TAINT_EFFECTS,
    FieldReader,
    PodAffinityTerm,
    Scheduling,
    Taint,
    parse_count,
    parse_scheduling,
    pod_gpus,
    quantity,
    show_quantity,
)

TERMINAL_PHASES = frozenset({"Succeeded", "Failed"})
HOSTNAME_LABEL = "kubernetes.io/hostname"
UNSCHEDULABLE_TAINT = Taint("node.kubernetes.io/unschedulable", "", "NoSchedule")

Key = tuple[tuple[int, ...], int, tuple[int, ...]]  # (free per resource, static class, placed groups)


# --------------------------------------------------------------------------------------------
# Cluster snapshot
# --------------------------------------------------------------------------------------------


@dataclass
class Node:
    name: str
    labels: dict[str, str]
    taints: tuple[Taint, ...]  # blocking effects only
    cordoned: bool
    total: list[int]  # per resource index
    held: list[int]
    holders: list[tuple[str, int, int]] = field(default_factory=list)  # (ns/pod, resource idx, gpus)
    alloc: dict[str, float] = field(default_factory=dict)  # the other resources the pods ask for

    def offers(self, resource: str) -> float:
        return self.alloc.get(resource, 0.0)


@dataclass(frozen=True)
class _ExistingAnti:
    namespace: str | None
    term: PodAffinityTerm
    node: int


def _node_value(obj: Mapping[str, Any], *path: str) -> Any:
    cur: Any = obj
    for p in path:
        if not isinstance(cur, dict):  # JSON input: dict is exact and much faster than Mapping
            return None
        cur = cur.get(p)
    return cur


def _parse_nodes(raw_nodes: Sequence[Mapping[str, Any]], resources: list[str], others: list[str]) -> list[Node]:
    nodes = []
    for raw in raw_nodes:
        name = _node_value(raw, "metadata", "name")
        if not isinstance(name, str):
            raise InputError("nodes", "a node has no metadata.name", "pass `kubectl get nodes -o json` items")
        labels = {str(k): str(v) for k, v in (_node_value(raw, "metadata", "labels") or {}).items()}
        # The kubelet always sets this label; synthetic snapshots often omit it.
        labels.setdefault(HOSTNAME_LABEL, name)
        taints = tuple(
            Taint(str(t.get("key", "")), str(t.get("value", "") or ""), str(t.get("effect", "")))
            for t in (_node_value(raw, "spec", "taints") or [])
            if isinstance(t, Mapping) and t.get("effect") in BLOCKING_TAINT_EFFECTS
        )
        alloc = _node_value(raw, "status", "allocatable") or {}
        cap = _node_value(raw, "status", "capacity") or {}
        total = []
        for r in resources:
            value = alloc.get(r) if r in alloc else cap.get(r)
            total.append(parse_count(value) or 0 if value is not None else 0)
        other = {}
        for r in others:
            value = alloc.get(r) if r in alloc else cap.get(r)
            other[r] = _offered(str(value)) if value is not None else 0.0
        nodes.append(
            Node(
                name,
                labels,
                taints,
                bool(_node_value(raw, "spec", "unschedulable")),
                total,
                [0] * len(resources),
                alloc=other,
            )
        )
    nodes.sort(key=lambda n: n.name)  # index order = name order: ties resolve by name everywhere
    return nodes


@functools.lru_cache(maxsize=1024)
def _offered(value: str) -> float:
    """An allocatable quantity; nodes of a pool share their strings, so each is parsed once."""
    return quantity(value) or 0.0


def slim_node(node: Mapping[str, Any]) -> dict[str, Any]:
    """Keep what placement needs of a Node (``Kube.list_items(slim=...)``): a 5,000-node list stays small."""
    meta = node.get("metadata") or {}
    return {"metadata": {"name": meta.get("name"), "labels": meta.get("labels") or {}},
            "spec": {k: v for k, v in (node.get("spec") or {}).items() if k in {"taints", "unschedulable"}},
            "status": {k: v for k, v in (node.get("status") or {}).items() if k in {"allocatable", "capacity"}}}


def slim_pod(pod: Mapping[str, Any]) -> dict[str, Any]:
    """Keep what placement needs of a Pod: its node, GPU requests, affinity, labels and phase."""
    meta = pod.get("metadata") or {}
    spec = pod.get("spec") or {}
    keep = {"nodeName", "containers", "initContainers", "affinity", "overhead"}
    slim_spec = {k: v for k, v in spec.items() if k in keep}
    for key in ("containers", "initContainers"):
        if key in slim_spec:
            slim_spec[key] = [{"name": c.get("name"), "resources": c.get("resources") or {},
                               **({"restartPolicy": c["restartPolicy"]} if "restartPolicy" in c else {})}
                              for c in slim_spec[key]]
    return {"metadata": {"name": meta.get("name"), "namespace": meta.get("namespace"),
                         "labels": meta.get("labels") or {}},
            "spec": slim_spec, "status": {"phase": (pod.get("status") or {}).get("phase")}}


# --------------------------------------------------------------------------------------------
# Problem preparation: groups, static eligibility, affinity terms
# --------------------------------------------------------------------------------------------


@dataclass
class Group:
    """Identical demands (same GPUs, constraints and labels): interchangeable in the search."""

    demands: list[int]
    gpus: int
    resource: int
    scheduling: Scheduling
    labels: Mapping[str, str]
    namespace: str | None
    requests: tuple[tuple[str, float], ...] = ()  # every other resource, per pod
    sig: int = 0  # static eligibility signature index
    anti: list[int] = field(default_factory=list)  # own anti-affinity term ids
    aff: list[int] = field(default_factory=list)  # own affinity term ids
    selected_by_anti: list[int] = field(default_factory=list)  # planned anti terms that select this group
    blocked: set[tuple[str, str]] = field(default_factory=set)  # domains blocked by existing pods' anti terms
    aff_matchers: list[int] = field(default_factory=list)  # groups whose pods match ALL of our affinity terms


class Problem:
    """Everything static: nodes, eligibility per signature, terms, node classes."""

    def __init__(
        self,
        demands: Sequence[PodDemand],
        raw_nodes: Sequence[Mapping[str, Any]],
        raw_pods: Sequence[Mapping[str, Any]],
        namespace: str | None,
    ) -> None:
        self.demands = list(demands)
        self.limitations: list[str] = []
        self.resources = sorted({d.gpu_resource for d in demands} | {GPU_RESOURCE})
        res_index = {r: i for i, r in enumerate(self.resources)}
        self.others = sorted({r for d in demands for r, _ in d.requests})
        self.nodes = _parse_nodes(raw_nodes, self.resources, self.others)
        self.node_index = {n.name: i for i, n in enumerate(self.nodes)}

        # Groups of identical demands, in creation order of their first member.
        by_key: dict[tuple[Any, ...], Group] = {}
        self.group_of: list[int] = []
        self.groups: list[Group] = []
        for i, d in enumerate(self.demands):
            ns = d.namespace or namespace
            key = (d.gpus, d.gpu_resource, d.scheduling, tuple(sorted(d.labels.items())), ns, d.requests)
            grp = by_key.get(key)
            if grp is None:
                grp = Group([], d.gpus, res_index[d.gpu_resource], d.scheduling, d.labels, ns, d.requests)
                by_key[key] = grp
                self.groups.append(grp)
            grp.demands.append(i)
            self.group_of.append(self.groups.index(grp))

        self._signatures()

        # Pod (anti-)affinity terms owned by planned pods, deduplicated.
        terms: dict[tuple[PodAffinityTerm, str | None], int] = {}
        for grp in self.groups:
            for t in grp.scheduling.pod_anti_affinity:
                grp.anti.append(terms.setdefault((t, grp.namespace), len(terms)))
            for t in grp.scheduling.pod_affinity:
                grp.aff.append(terms.setdefault((t, grp.namespace), len(terms)))
        self.terms = list(terms)
        anti_ids = {t for grp in self.groups for t in grp.anti}
        for grp in self.groups:
            grp.selected_by_anti = [t for t in sorted(anti_ids) if self._selects(t, grp.namespace, grp.labels)]
        for grp in self.groups:
            if grp.aff:
                grp.aff_matchers = [
                    hi
                    for hi, h in enumerate(self.groups)
                    if all(self._selects(t, h.namespace, h.labels) for t in grp.aff)
                ]
        self.tracking = bool(self.terms)  # planned pods' positions matter only when terms exist
        self.inter_plan_affinity = any(
            any(h != gi for h in grp.aff_matchers) for gi, grp in enumerate(self.groups) if grp.aff
        )

        # Existing pods: GPU holdings, plus what affinity needs (counts per topology domain).
        self.existing_count: list[Counter[str]] = [Counter() for _ in self.terms]
        self.existing_aff: list[Counter[tuple[str, str]]] = [Counter() for _ in self.groups]
        self.existing_anti: list[_ExistingAnti] = []
        self._read_pods(raw_pods)
        for ea in self.existing_anti:
            for grp in self.groups:
                if ea.term.selects(grp.namespace, grp.labels, ea.namespace):
                    value = self.nodes[ea.node].labels.get(ea.term.topology_key)
                    if value is not None:
                        grp.blocked.add((ea.term.topology_key, value))

        self._classify_nodes()

    def _signatures(self) -> None:
        """Static eligibility per distinct (node filter, resource, gpus, other requests): computed
        once per signature, with the reason each node is out."""
        sigs: dict[tuple[Any, ...], int] = {}
        self.sig_keys: list[tuple[Scheduling, int, int]] = []
        self.sig_requests: list[tuple[tuple[str, float], ...]] = []
        for grp in self.groups:
            skey = (grp.scheduling.node_filter(), grp.resource, grp.gpus, grp.requests)
            if skey not in sigs:
                sigs[skey] = len(sigs)
                self.sig_keys.append((grp.scheduling.node_filter(), grp.resource, grp.gpus))
                self.sig_requests.append(grp.requests)
            grp.sig = sigs[skey]
        self.exclusion: list[list[str | None]] = []
        self.mask = [0] * len(self.nodes)  # bit s: the node can take a pod of signature s
        self.usable = [0] * len(self.nodes)  # bit s: its pods may use the node, whatever it offers
        for s, ((sched, r, g), asks) in enumerate(zip(self.sig_keys, self.sig_requests, strict=True)):
            excl: list[str | None] = []
            for i, node in enumerate(self.nodes):
                why = filter_reason(node, sched)
                if why is None:
                    self.usable[i] |= 1 << s
                    why = _short(node, self.resources[r], r, g, asks)
                    if why is None:
                        self.mask[i] |= 1 << s
                excl.append(why)
            self.exclusion.append(excl)

    def _selects(self, term_id: int, namespace: str | None, labels: Mapping[str, str]) -> bool:
        term, owner_ns = self.terms[term_id]
        return term.selects(namespace, labels, owner_ns)

    def _read_pods(self, raw_pods: Sequence[Mapping[str, Any]]) -> None:
        rd = FieldReader("pods")
        want_labels = bool(self.terms)
        skipped = 0
        for pod in raw_pods:
            spec = pod.get("spec") or {}
            node_name = spec.get("nodeName")
            if not node_name or _node_value(pod, "status", "phase") in TERMINAL_PHASES:
                continue
            idx = self.node_index.get(node_name)
            if idx is None:
                continue  # bound to a node not in the snapshot: holds nothing we can see
            node = self.nodes[idx]
            meta = pod.get("metadata") or {}
            ns = meta.get("namespace")
            pod_name = f"{ns}/{meta.get('name')}" if ns else str(meta.get("name"))
            for r, resource in enumerate(self.resources):
                g = pod_gpus(spec, resource)
                if g is None:
                    skipped += 1
                    continue
                if g:
                    node.held[r] += g
                    node.holders.append((pod_name, r, g))
            labels = meta.get("labels") or {}
            if want_labels:
                for t, (term, owner_ns) in enumerate(self.terms):
                    if term.selects(ns, labels, owner_ns):
                        value = node.labels.get(term.topology_key)
                        if value is not None:
                            self.existing_count[t][value] += 1
                for gi, grp in enumerate(self.groups):
                    if grp.aff and all(self._selects(t, ns, labels) for t in grp.aff):
                        for t in grp.aff:
                            key = self.terms[t][0].topology_key
                            value = node.labels.get(key)
                            if value is not None:
                                self.existing_aff[gi][(key, value)] += 1
            anti = _node_value(spec, "affinity", "podAntiAffinity", "requiredDuringSchedulingIgnoredDuringExecution")
            if anti:
                problems: list[str] = []
                try:
                    sched = parse_scheduling(rd, {"affinity": spec.get("affinity")}, pod_name, problems)
                except InputError:
                    self.limitations.append(f"pod {pod_name}: anti-affinity unreadable, ignored")
                    continue
                self.existing_anti.extend(_ExistingAnti(ns, t, idx) for t in sched.pod_anti_affinity)
        if skipped:
            self.limitations.append(f"{skipped} pod GPU request(s) were not whole numbers and were ignored")

    def _classify_nodes(self) -> None:
        """Static class per node: nodes of one class (and equal free GPUs) are interchangeable."""
        keys = sorted(
            {self.terms[t][0].topology_key for t in range(len(self.terms))}
            | {k for g in self.groups for k, _ in g.blocked}
        )
        shared: list[str] = []
        unique: list[str] = []
        for k in keys:
            values = [n.labels.get(k) for n in self.nodes]
            present = [v for v in values if v is not None]
            (unique if len(set(present)) == len(present) else shared).append(k)
        self.topology_keys = keys
        classes: dict[tuple[Any, ...], int] = {}
        self.static_class: list[int] = []
        for i, node in enumerate(self.nodes):
            local: list[Any] = []
            for k in unique:
                v = node.labels.get(k)
                local.append(v is None)
                local.extend(
                    self.existing_count[t][v] > 0
                    for t in range(len(self.terms))
                    if self.terms[t][0].topology_key == k and v is not None
                )
                local.extend((k, v) in g.blocked for g in self.groups)
                local.extend(self.existing_aff[gi][(k, v)] > 0 for gi in range(len(self.groups)) if v is not None)
            key = (tuple(node.total), self.mask[i], tuple(node.labels.get(k) for k in shared), tuple(local))
            self.static_class.append(classes.setdefault(key, len(classes)))
        self.class_mask = [0] * len(classes)
        for i, c in enumerate(self.static_class):
            self.class_mask[c] = self.mask[i]


def filter_reason(node: Node, sched: Scheduling) -> str | None:
    """Why the pod may not use ``node`` whatever it offers (Kubernetes filter order), or None."""
    if node.cordoned and not any(t.tolerates(UNSCHEDULABLE_TAINT) for t in sched.tolerations):
        return "cordoned (spec.unschedulable)"
    for taint in node.taints:
        if not any(t.tolerates(taint) for t in sched.tolerations):
            return f"taint {taint} not tolerated"
    for k, v in sched.node_selector:
        if node.labels.get(k) != v:
            return f"node selector {k}={v} not matched (node has {k}={node.labels.get(k, '<unset>')})"
    if sched.node_affinity is not None and not any(t.matches(node.labels, node.name) for t in sched.node_affinity):
        terms = " or ".join(f"({t})" for t in sched.node_affinity) or "<no terms>"
        return f"required node affinity not matched: {terms}"
    return None


def _short(node: Node, resource: str, r: int, gpus: int, asks: tuple[tuple[str, float], ...]) -> str | None:
    """What ``node`` can never offer the pod (its allocatable, whatever runs there), or None."""
    if gpus > node.total[r]:
        return f"only {node.total[r]} {resource} allocatable, pod needs {gpus}"
    for name, amount in asks:
        if amount > node.offers(name):
            return (f"only {show_quantity(node.offers(name), name)} {name} allocatable, "
                    f"pod needs {show_quantity(amount, name)}")
    return None


# --------------------------------------------------------------------------------------------
# Mutable placement state shared by the simulation and the search
# --------------------------------------------------------------------------------------------


class State:
    def __init__(self, pb: Problem) -> None:
        self.pb = pb
        self.free = [[t - h for t, h in zip(n.total, n.held, strict=True)] for n in pb.nodes]
        self.placed: list[tuple[int, ...]] = [() for _ in pb.nodes]
        self.planned_count: list[Counter[str]] = [Counter() for _ in pb.terms]  # term -> domain -> pods
        self.owner_count: list[Counter[str]] = [Counter() for _ in pb.terms]  # anti term -> domain -> owners
        self.aff_count: list[Counter[tuple[str, str]]] = [Counter(c) for c in pb.existing_aff]
        self.pools: dict[Key, list[int]] = {}
        self.key_of: list[Key] = []
        for i in range(len(pb.nodes)):
            k = self._key(i)
            self.key_of.append(k)
            self.pools.setdefault(k, []).append(i)  # ascending: pools[k][0] is the first by name
        self.orig = list(self.key_of)
        self.touched: Counter[tuple[Key, Key]] = Counter()
        # Free GPUs on the nodes eligible for each signature (the search's bound).
        self.sig_nodes_free = [0] * len(pb.sig_keys)
        for i in range(len(pb.nodes)):
            for s, (_, r, _) in enumerate(pb.sig_keys):
                if pb.mask[i] >> s & 1:
                    self.sig_nodes_free[s] += max(0, self.free[i][r])

    def _key(self, i: int) -> Key:
        return (tuple(self.free[i]), self.pb.static_class[i], self.placed[i] if self.pb.tracking else ())

    def _move(self, i: int, change: int, gi: int) -> None:
        pb, grp = self.pb, self.pb.groups[gi]
        old = self.key_of[i]
        pool = self.pools[old]
        pool.remove(i)
        if not pool:
            del self.pools[old]
        self.free[i][grp.resource] -= change * grp.gpus
        if pb.tracking:
            placed = list(self.placed[i])
            if change > 0:
                placed.append(gi)
            else:
                placed.remove(gi)
            self.placed[i] = tuple(sorted(placed))
        new = self._key(i)
        self.key_of[i] = new
        _insort(self.pools.setdefault(new, []), i)
        for key, delta in (((self.orig[i], old), -1), ((self.orig[i], new), 1)):
            if key[0] != key[1]:
                self.touched[key] += delta
                if not self.touched[key]:
                    del self.touched[key]
        for s, (_, r, _) in enumerate(pb.sig_keys):
            if r == grp.resource and pb.mask[i] >> s & 1:
                self.sig_nodes_free[s] -= change * grp.gpus
        if pb.tracking:
            labels = pb.nodes[i].labels
            for t, (term, owner_ns) in enumerate(pb.terms):
                v = labels.get(term.topology_key)
                if v is None:
                    continue
                if term.selects(grp.namespace, grp.labels, owner_ns):
                    self.planned_count[t][v] += change
                if t in grp.anti:
                    self.owner_count[t][v] += change
            for hi, h in enumerate(pb.groups):
                if gi in h.aff_matchers:
                    for t in h.aff:
                        tkey = pb.terms[t][0].topology_key
                        v = labels.get(tkey)
                        if v is not None:
                            self.aff_count[hi][(tkey, v)] += change

    def place(self, i: int, gi: int) -> None:
        self._move(i, 1, gi)

    def unplace(self, i: int, gi: int) -> None:
        self._move(i, -1, gi)

    def affinity_block(self, gi: int, i: int) -> str | None:
        """Why pod (anti-)affinity keeps group ``gi`` off node ``i`` now (kube-scheduler InterPodAffinity)."""
        pb, grp = self.pb, self.pb.groups[gi]
        labels = pb.nodes[i].labels
        for t in grp.anti:
            term = pb.terms[t][0]
            v = labels.get(term.topology_key)
            if v is not None and pb.existing_count[t][v] + self.planned_count[t][v] > 0:
                return f"anti-affinity {term} (a matching pod already runs in {term.topology_key}={v})"
        for t in grp.selected_by_anti:
            term = pb.terms[t][0]
            v = labels.get(term.topology_key)
            if v is not None and self.owner_count[t][v] > 0:
                return f"anti-affinity of another planned pod {term} in {term.topology_key}={v}"
        for key, v in grp.blocked:
            if labels.get(key) == v:
                return f"anti-affinity of an existing pod in {key}={v}"
        if grp.aff:
            counts = self.aff_count[gi]
            exist = True
            for t in grp.aff:
                key = pb.terms[t][0].topology_key
                v = labels.get(key)
                if v is None:
                    return f"pod affinity needs node label {key}"
                if counts[(key, v)] <= 0:
                    exist = False
            if not exist:
                # Kubernetes lets the first pod of a self-affine series through.
                self_match = gi in grp.aff_matchers
                if not (self_match and not any(c > 0 for c in counts.values())):
                    return f"pod affinity {', '.join(str(pb.terms[t][0]) for t in grp.aff)} not satisfied here"
        return None

    def candidates(self, gi: int) -> list[tuple[Key, int]]:
        """One representative node per interchangeable class that can take a pod of group ``gi`` now."""
        pb, grp = self.pb, self.pb.groups[gi]
        bit = 1 << grp.sig
        out = []
        for key, pool in self.pools.items():
            if not pb.class_mask[key[1]] & bit or key[0][grp.resource] < grp.gpus:
                continue
            i = pool[0]
            # One check per class is enough: nodes of a class share every domain fact (see _classify_nodes).
            if (pb.tracking or grp.blocked or grp.aff) and self.affinity_block(gi, i) is not None:
                continue
            out.append((key, i))
        return out


def _insort(lst: list[int], value: int) -> None:
    lo, hi = 0, len(lst)
    while lo < hi:
        mid = (lo + hi) // 2
        if lst[mid] < value:
            lo = mid + 1
        else:
            hi = mid
    lst.insert(lo, value)
