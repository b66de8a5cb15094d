"""GPU capacity engine: can a DGD's pods be placed on the cluster as it is right now?

Pure logic over plain dicts (``kubectl get nodes/pods -o json`` items) and the DGD model, so that
preflight, the offline tests and the benchmark share one implementation; reading the cluster is
``deploy_suite.kube``'s job. Rules (seed step 2, contracts "preflight" 7):

* a pod bound to a node (``spec.nodeName``) and not ``Succeeded``/``Failed`` holds its full GPU
  request whatever its container state; a container's request is max(request, limit), init
  containers follow Kubernetes' effective-request rule;
* cordoned nodes, untolerated NoSchedule/NoExecute taints, node selectors and required node
  affinity exclude nodes (Kubernetes semantics); required pod (anti-)affinity is evaluated against
  existing pods and between planned pods; tolerations are never invented;
* every pod demand is placed against per-node free GPUs, decrementing as it goes.

Two answers are computed. The *scheduler simulation* places pods in creation order like the
default kube-scheduler (filter, then NodeResourcesFit LeastAllocated on GPUs, ties by node name).
If it places everything, that placement is itself a proof of sufficiency. Otherwise the *exact
search* (complete DFS with symmetric-node dedup, memoised failures and a free-GPU bound) either
finds a witness packing (then a fragmentation warning is raised: the real scheduler may leave
pods pending) or proves that none exists. A step budget bounds it; when exhausted the answer is
``unknown``, never a guessed ``sufficient``.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from deploy_suite.dgd import (
    BLOCKING_TAINT_EFFECTS,
    DEFAULT_GPU_RESOURCE,
    Dgd,
    FieldReader,
    PodAffinityTerm,
    PodDemand,
    Scheduling,
    Taint,
    parse_count,
    parse_scheduling,
    pod_gpus,
)
from deploy_suite.errors import InputError

Outcome = Literal["sufficient", "insufficient", "unknown"]
TERMINAL_PHASES = frozenset({"Succeeded", "Failed"})
HOSTNAME_LABEL = "kubernetes.io/hostname"
UNSCHEDULABLE_TAINT = Taint("node.kubernetes.io/unschedulable", "", "NoSchedule")
# Search steps (DFS nodes) before the exact answer gives up with "unknown".
DEFAULT_BUDGET = 200_000
# Failed states remembered by the search; bounded so a hard instance cannot eat the memory.
MEMO_LIMIT = 200_000
EXAMPLES = 5  # node names quoted per explanation line

_Key = tuple[tuple[int, ...], int, tuple[int, ...]]  # (free per resource, static class, placed groups)


# --------------------------------------------------------------------------------------------
# Result
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class CapacityResult:
    """The answer plus the evidence (capacity table and grid) for the ledger and the report."""

    outcome: Outcome
    reasons: list[str]  # why: actionable lines (what does not fit where, and why nodes were excluded)
    warnings: list[str]
    gpus_requested: int
    exact: str  # "feasible" | "infeasible" | "budget exhausted" | "not run"
    simulation_ok: bool
    placement: dict[str, str] | None  # demand name -> node (witness), None when there is none
    simulation_placement: dict[str, str]
    simulation_unplaced: list[str]
    search_steps: int
    limitations: list[str]
    _rows: list[dict[str, Any]] = field(repr=False, default_factory=list)

    def table(self, only_gpu_nodes: bool = True) -> list[dict[str, Any]]:
        """Per node and GPU resource: total/held/free/planned and holders, JSON-ready."""
        return [dict(r) for r in self._rows if r["total"] > 0 or r["planned"] > 0 or not only_gpu_nodes]

    def grid(self) -> list[dict[str, Any]]:
        """Nodes x GPU slots, each slot {kind: other|planned|free|over, holder}: an HTML picture's data."""
        out = []
        for row in self.table():
            slots: list[dict[str, Any]] = []
            for h in row["holders"]:
                slots.extend({"kind": h["kind"], "holder": h["pod"]} for _ in range(h["gpus"]))
            for i in range(len(slots)):
                if i >= row["total"]:
                    slots[i] = {"kind": "over", "holder": slots[i]["holder"]}
            slots.extend({"kind": "free", "holder": None} for _ in range(max(0, row["total"] - len(slots))))
            out.append({"node": row["node"], "resource": row["resource"], "slots": slots})
        return out

    def to_dict(self) -> dict[str, Any]:
        return {
            "capacity": self.outcome,
            "reasons": self.reasons,
            "warnings": self.warnings,
            "limitations": self.limitations,
            "gpus_requested": self.gpus_requested,
            "exact": self.exact,
            "simulation_ok": self.simulation_ok,
            "placement": self.placement,
            "simulation_unplaced": self.simulation_unplaced,
            "search_steps": self.search_steps,
            "table": self.table(),
        }


# --------------------------------------------------------------------------------------------
# Cluster snapshot
# --------------------------------------------------------------------------------------------


@dataclass
class _Node:
    name: str
    labels: dict[str, str]
    taints: tuple[Taint, ...]  # blocking effects only
    cordoned: bool
    total: list[int]  # per resource index
    held: list[int]
    holders: list[tuple[str, int, int]] = field(default_factory=list)  # (ns/pod, resource idx, gpus)


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


def _parse_nodes(raw_nodes: Sequence[Mapping[str, Any]], resources: list[str]) -> list[_Node]:
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
        nodes.append(
            _Node(
                name,
                labels,
                taints,
                bool(_node_value(raw, "spec", "unschedulable")),
                total,
                [0] * len(resources),
            )
        )
    nodes.sort(key=lambda n: n.name)  # index order = name order: ties resolve by name everywhere
    return nodes


# --------------------------------------------------------------------------------------------
# Problem preparation: groups, static eligibility, affinity terms
# --------------------------------------------------------------------------------------------


@dataclass
class _Group:
    """Identical demands (same GPUs, constraints and labels): interchangeable in the search."""

    demands: list[int]
    gpus: int
    resource: int
    scheduling: Scheduling
    labels: Mapping[str, str]
    namespace: str | None
    sig: int = 0  # static eligibility signature index
    anti: list[int] = field(default_factory=list)  # own anti-affinity term ids
    aff: list[int] = field(default_factory=list)  # own affinity term ids
    selected_by_anti: list[int] = field(default_factory=list)  # planned anti terms that select this group
    blocked: set[tuple[str, str]] = field(default_factory=set)  # domains blocked by existing pods' anti terms
    aff_matchers: list[int] = field(default_factory=list)  # groups whose pods match ALL of our affinity terms


class _Problem:
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
        self.resources = sorted({d.gpu_resource for d in demands} | {DEFAULT_GPU_RESOURCE})
        res_index = {r: i for i, r in enumerate(self.resources)}
        self.nodes = _parse_nodes(raw_nodes, self.resources)
        self.node_index = {n.name: i for i, n in enumerate(self.nodes)}

        # Groups of identical demands, in creation order of their first member.
        by_key: dict[tuple[Any, ...], _Group] = {}
        self.group_of: list[int] = []
        self.groups: list[_Group] = []
        for i, d in enumerate(self.demands):
            ns = d.namespace or namespace
            key = (d.gpus, d.gpu_resource, d.scheduling, tuple(sorted(d.labels.items())), ns)
            grp = by_key.get(key)
            if grp is None:
                grp = _Group([], d.gpus, res_index[d.gpu_resource], d.scheduling, d.labels, ns)
                by_key[key] = grp
                self.groups.append(grp)
            grp.demands.append(i)
            self.group_of.append(self.groups.index(grp))

        # Static eligibility per distinct (node filter, resource, gpus): computed once per signature.
        sigs: dict[tuple[Any, ...], int] = {}
        self.sig_keys: list[tuple[Scheduling, int, int]] = []
        for grp in self.groups:
            skey = (grp.scheduling.node_filter(), grp.resource, grp.gpus)
            if skey not in sigs:
                sigs[skey] = len(sigs)
                self.sig_keys.append((grp.scheduling.node_filter(), grp.resource, grp.gpus))
            grp.sig = sigs[skey]
        self.exclusion: list[list[str | None]] = [
            [_exclusion(n, sched, self.resources[r], r, g) for n in self.nodes] for sched, r, g in self.sig_keys
        ]
        self.mask = [0] * len(self.nodes)
        for s, excl in enumerate(self.exclusion):
            for i, why in enumerate(excl):
                if why is None:
                    self.mask[i] |= 1 << s

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


def _exclusion(node: _Node, sched: Scheduling, resource: str, r: int, gpus: int) -> str | None:
    """Why ``node`` can never host this pod (Kubernetes filter order), or None when eligible."""
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
    if gpus > node.total[r]:
        return f"only {node.total[r]} {resource} allocatable, pod needs {gpus}"
    return None


# --------------------------------------------------------------------------------------------
# Mutable placement state shared by the simulation and the search
# --------------------------------------------------------------------------------------------


class _State:
    def __init__(self, pb: _Problem) -> None:
        self.pb = pb
        self.free = [[t - h for t, h in zip(n.total, n.held, strict=True)] for n in pb.nodes]
        self.placed: list[tuple[int, ...]] = [() for _ in pb.nodes]
        self.planned_count: list[Counter[str]] = [Counter() for _ in pb.terms]  # term -> domain -> pods
        self.owner_count: list[Counter[str]] = [Counter() for _ in pb.terms]  # anti term -> domain -> owners
        self.aff_count: list[Counter[tuple[str, str]]] = [Counter(c) for c in pb.existing_aff]
        self.pools: dict[_Key, list[int]] = {}
        self.key_of: list[_Key] = []
        for i in range(len(pb.nodes)):
            k = self._key(i)
            self.key_of.append(k)
            self.pools.setdefault(k, []).append(i)  # ascending: pools[k][0] is the first by name
        self.orig = list(self.key_of)
        self.touched: Counter[tuple[_Key, _Key]] = Counter()
        # Free GPUs on the nodes eligible for each signature (the search's bound).
        self.sig_nodes_free = [0] * len(pb.sig_keys)
        for i in range(len(pb.nodes)):
            for s, (_, r, _) in enumerate(pb.sig_keys):
                if pb.mask[i] >> s & 1:
                    self.sig_nodes_free[s] += max(0, self.free[i][r])

    def _key(self, i: int) -> _Key:
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

    def candidates(self, gi: int) -> list[tuple[_Key, int]]:
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


# --------------------------------------------------------------------------------------------
# The two answers
# --------------------------------------------------------------------------------------------


@dataclass
class _Simulation:
    placement: dict[int, int]
    unplaced: list[tuple[int, str]]  # (demand, explanation)


def _simulate(pb: _Problem) -> _Simulation:
    """kube-scheduler default, approximated: creation order, filters, LeastAllocated on GPUs, ties by name."""
    st = _State(pb)
    placement: dict[int, int] = {}
    unplaced: list[tuple[int, str]] = []
    explained: set[int] = set()
    for d in range(len(pb.demands)):
        gi = pb.group_of[d]
        grp = pb.groups[gi]
        best: tuple[float, int] | None = None
        for key, i in st.candidates(gi):
            total = pb.nodes[i].total[grp.resource]
            score = (key[0][grp.resource] - grp.gpus) / total if total else 1.0
            if best is None or (-score, i) < (-best[0], best[1]):
                best = (score, i)
        if best is None:
            # The full node-by-node explanation once per group keeps a big failure cheap and readable.
            if gi in explained:
                unplaced.append((d, f"pod {pb.demands[d].name} fits on no node either (same constraints)"))
            else:
                explained.add(gi)
                unplaced.append((d, _why_unplaced(pb, st, d)))
            continue
        st.place(best[1], gi)
        placement[d] = best[1]
    return _Simulation(placement, unplaced)


class _BudgetExhausted(Exception):
    pass


@dataclass
class _Search:
    status: str  # feasible | infeasible | budget exhausted
    placement: dict[int, int] | None
    steps: int


def _search(pb: _Problem, budget: int) -> _Search:
    """Complete DFS over demands (biggest and most constrained groups first), one node per class."""
    n_eligible = [sum(1 for i in range(len(pb.nodes)) if pb.mask[i] >> g.sig & 1) for g in pb.groups]
    group_order = sorted(
        range(len(pb.groups)),
        key=lambda gi: (-pb.groups[gi].gpus, n_eligible[gi], -len(pb.groups[gi].anti), gi),
    )
    order = [d for gi in group_order for d in pb.groups[gi].demands]
    # need[pos][s]: GPUs still to place on nodes eligible for signature s.
    need = [[0] * len(pb.sig_keys) for _ in range(len(order) + 1)]
    for pos in range(len(order) - 1, -1, -1):
        need[pos] = list(need[pos + 1])
        grp = pb.groups[pb.group_of[order[pos]]]
        need[pos][grp.sig] += grp.gpus
    if any(n == 0 for n in n_eligible):
        return _Search("infeasible", None, 0)  # a pod no node can ever take: no search needed
    st = _State(pb)
    failed: set[tuple[int, frozenset[tuple[tuple[_Key, _Key], int]]]] = set()
    assign: dict[int, int] = {}
    steps = 0

    def dfs(pos: int) -> bool:
        nonlocal steps
        if pos == len(order):
            return True
        steps += 1
        if steps > budget:
            raise _BudgetExhausted
        if any(n > f for n, f in zip(need[pos], st.sig_nodes_free, strict=True)):
            return False
        memo = (pos, frozenset(st.touched.items()))
        if memo in failed:
            return False
        d = order[pos]
        gi = pb.group_of[d]
        res = pb.groups[gi].resource
        # Best fit first: the tightest class that still fits keeps big holes for big pods.
        for _, i in sorted(st.candidates(gi), key=lambda c: (c[0][0][res], c[1])):
            st.place(i, gi)
            assign[d] = i
            if dfs(pos + 1):
                return True
            st.unplace(i, gi)
            del assign[d]
        if len(failed) < MEMO_LIMIT:
            failed.add(memo)
        return False

    try:
        ok = dfs(0)
    except _BudgetExhausted:
        return _Search("budget exhausted", None, steps)
    return _Search("feasible" if ok else "infeasible", dict(assign) if ok else None, steps)


# --------------------------------------------------------------------------------------------
# Explanations
# --------------------------------------------------------------------------------------------


def _summarise(counter: Counter[str], examples: dict[str, list[str]]) -> list[str]:
    return [f"{n} node(s) {why} (e.g. {', '.join(examples[why][:EXAMPLES])})" for why, n in counter.most_common()]


def _why_unplaced(pb: _Problem, st: _State, d: int) -> str:
    """Which nodes were eligible and what was free there, and why every other node was out."""
    gi = pb.group_of[d]
    grp = pb.groups[gi]
    res = pb.resources[grp.resource]
    reasons: Counter[str] = Counter()
    examples: dict[str, list[str]] = {}
    eligible_free: Counter[int] = Counter()
    for i, node in enumerate(pb.nodes):
        why = pb.exclusion[grp.sig][i]
        if why is None:
            free = st.free[i][grp.resource]
            eligible_free[free] += 1
            block = st.affinity_block(gi, i) if (pb.tracking or grp.blocked or grp.aff) else None
            why = block or (f"not enough free {res} ({free} free)" if free < grp.gpus else None)
        if why is not None:
            reasons[why] += 1
            examples.setdefault(why, []).append(node.name)
    demand = pb.demands[d]
    eligible = sum(eligible_free.values())
    free_txt = ", ".join(f"{n} with {f} free" for f, n in sorted(eligible_free.items(), reverse=True)) or "none"
    lines = [
        f"pod {demand.name} (component {demand.component}, {grp.gpus} x {res}) fits on no node: "
        f"{eligible} eligible node(s) [{free_txt}]"
    ]
    lines += [f"  - {line}" for line in _summarise(reasons, examples)]
    return "\n".join(lines)


def _gpu_summary(pb: _Problem) -> list[str]:
    """Per component group: GPUs needed vs free on the nodes it may use (the headline shortfall)."""
    out = []
    st = _State(pb)
    for s, (_, r, _) in enumerate(pb.sig_keys):
        comps = sorted({pb.demands[d].component for g in pb.groups if g.sig == s for d in g.demands})
        need = sum(g.gpus * len(g.demands) for g in pb.groups if g.sig == s)
        nodes = sum(1 for i in range(len(pb.nodes)) if pb.mask[i] >> s & 1)
        if need:
            out.append(
                f"component(s) {', '.join(comps)} need {need} {pb.resources[r]} in total; "
                f"{st.sig_nodes_free[s]} free on the {nodes} node(s) they may use"
            )
    return out


# --------------------------------------------------------------------------------------------
# Entry point
# --------------------------------------------------------------------------------------------


def check_capacity(
    dgd: Dgd | Sequence[PodDemand],
    nodes: Sequence[Mapping[str, Any]],
    pods: Sequence[Mapping[str, Any]],
    *,
    namespace: str | None = None,
    budget: int = DEFAULT_BUDGET,
    always_search: bool = False,
) -> CapacityResult:
    """Decide whether the DGD's pods fit now; see the module docstring for the rules.

    ``dgd`` may be a :class:`Dgd` (its ``unrepresentable`` reasons force ``unknown``) or a list of
    pod demands. ``namespace`` is where the DGD will run (for pod affinity namespace matching).
    ``always_search`` runs the exact search even when the simulation already placed everything.
    """
    unrepresentable: list[str] = []
    if isinstance(dgd, Dgd):
        demands = dgd.pod_demands(namespace)
        unrepresentable = list(dgd.unrepresentable)
    else:
        demands = list(dgd)
    pb = _Problem(demands, nodes, pods, namespace)
    gpus_requested = sum(d.gpus for d in demands)
    limitations = [*pb.limitations, "CPU, memory and other resources are not checked (GPUs only)"]
    warnings: list[str] = []
    reasons: list[str] = []

    sim = _simulate(pb)
    sim_ok = not sim.unplaced
    search = _Search("not run", None, 0)
    if always_search or not sim_ok:
        search = _search(pb, budget)
    witness = search.placement if search.placement is not None else (sim.placement if sim_ok else None)

    outcome: Outcome
    if sim_ok or search.status == "feasible":
        outcome = "sufficient"
        if not sim_ok:
            warnings.append(
                "a packing exists but the default scheduler (pods in creation order, least-allocated "
                "spreading) would likely leave pods pending because free GPUs are fragmented:"
            )
            warnings.extend(why for _, why in sim.unplaced)
    elif search.status == "infeasible" and not pb.inter_plan_affinity:
        outcome = "insufficient"
        reasons.extend(_gpu_summary(pb))
        reasons.extend(why for _, why in sim.unplaced)
    else:
        outcome = "unknown"
        if search.status == "budget exhausted":
            reasons.append(
                f"the exact search stopped after {search.steps} steps (budget {budget}) without a proof "
                "either way; the scheduler simulation could not place every pod:"
            )
        else:
            reasons.append(
                "required pod affinity between planned pods depends on creation order, which the search "
                "does not control; no placement was found in the orders tried:"
            )
        reasons.extend(why for _, why in sim.unplaced)
    if unrepresentable:
        head = [f"the DGD cannot be expanded faithfully: {why}" for why in unrepresentable]
        if outcome != "unknown":
            head.append(f"(ignoring that, the placement check alone says {outcome})")
        reasons = [*head, *reasons]
        outcome = "unknown"

    exact = search.status if search.status != "not run" else ("feasible" if sim_ok else "not run")
    return CapacityResult(
        outcome=outcome,
        reasons=reasons,
        warnings=warnings,
        gpus_requested=gpus_requested,
        exact=exact,
        simulation_ok=sim_ok,
        placement={pb.demands[d].name: pb.nodes[i].name for d, i in witness.items()} if witness is not None else None,
        simulation_placement={pb.demands[d].name: pb.nodes[i].name for d, i in sim.placement.items()},
        simulation_unplaced=[pb.demands[d].name for d, _ in sim.unplaced],
        search_steps=search.steps,
        limitations=limitations,
        _rows=_rows(pb, witness if witness is not None else sim.placement),
    )


def _rows(pb: _Problem, placement: Mapping[int, int]) -> list[dict[str, Any]]:
    planned: dict[tuple[int, int], list[tuple[str, int]]] = {}
    for d, i in placement.items():
        dem = pb.demands[d]
        r = pb.groups[pb.group_of[d]].resource
        if dem.gpus:
            planned.setdefault((i, r), []).append((dem.name, dem.gpus))
    rows = []
    for i, node in enumerate(pb.nodes):
        for r, resource in enumerate(pb.resources):
            mine = planned.get((i, r), [])
            if node.total[r] == 0 and not mine and not any(h[1] == r for h in node.holders):
                continue
            held = node.held[r]
            plan = sum(g for _, g in mine)
            rows.append(
                {
                    "node": node.name,
                    "resource": resource,
                    "total": node.total[r],
                    "held": held,
                    "free": node.total[r] - held,
                    "planned": plan,
                    "free_after": node.total[r] - held - plan,
                    "cordoned": node.cordoned,
                    "taints": [str(t) for t in node.taints],
                    "holders": [{"pod": p, "gpus": g, "kind": "other"} for p, rr, g in node.holders if rr == r]
                    + [{"pod": p, "gpus": g, "kind": "planned"} for p, g in mine],
                }
            )
    return rows
