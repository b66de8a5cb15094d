"""GPU capacity engine: can a DGD's pods be placed on the cluster as it is right now?

Pure logic over plain dicts (``kubectl get nodes/pods -o json`` items) and the DGD model, so that
preflight, the offline tests and the benchmark share one implementation; reading the cluster is
``deploy_suite.access.kube``'s job. Rules (docs/procedure.md, "Step 2: every resource a pod asks for"):

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
``unknown``, never a guessed ``sufficient``. The problem both answers work on (nodes, groups of
identical demands, eligibility, affinity terms) and the placement state they share live in
``deploy_suite.judges.placement``. Every other resource the pods ask for, and their DRA claims, is
judged against what the nodes can ever offer (``deploy_suite.judges.offer``): what none can is
``insufficient`` (``never_offered``), whatever the GPUs say.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from deploy_suite.errors import SearchBudgetExhausted
from deploy_suite.judges import offer
from deploy_suite.judges.dra import DraView
from deploy_suite.judges.placement import Key, Problem, State
from deploy_suite.model.dgd import Dgd, PodDemand

# "not needed": the DGD requests no GPU (NVIDIA's CPU-only mocker DGDs), nothing to place.
Outcome = Literal["sufficient", "insufficient", "unknown", "not needed"]
# Search steps (DFS nodes) before the exact answer gives up with "unknown".
DEFAULT_BUDGET = 200_000
# Failed states remembered by the search; bounded so a hard instance cannot eat the memory.
MEMO_LIMIT = 200_000
EXAMPLES = 5  # node names quoted per explanation line
# Pods expanded one by one at most: above it (``replicas: 1000000000``) only GPU totals are compared,
# so step 2 answers at once instead of building a billion demands (issue 13).
EXPANSION_LIMIT = 10_000
NAMES_LISTED = 20  # unplaced pod names kept in the result; the rest are counted
NO_GPU = "no GPU requested"


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
    # What no node the pods may use can ever offer (each line names the resource and the nodes).
    never_offered: list[str] = field(default_factory=list)
    resources: list[dict[str, Any]] = field(default_factory=list)  # every other resource asked: who offers it
    dra: list[dict[str, Any]] = field(default_factory=list)  # the DRA claims as the cluster says
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
            "never_offered": self.never_offered,
            "resources": self.resources,
            "dra": self.dra,
            "table": self.table(),
        }



# --------------------------------------------------------------------------------------------
# The two answers
# --------------------------------------------------------------------------------------------


@dataclass
class _Simulation:
    placement: dict[int, int]
    unplaced: list[tuple[int, str]]  # (demand, explanation); "" for a later pod of an explained group
    repeats: Counter[int] = field(default_factory=Counter)  # group -> unplaced pods after the explained one

    def explanations(self, pb: Problem) -> list[str]:
        """One explanation per group that did not fit, and one summary line for the rest of it."""
        lines = [why for _, why in self.unplaced if why]
        for gi, n in self.repeats.items():
            comps = sorted({pb.demands[d].component for d in pb.groups[gi].demands})
            lines.append(f"and {n} more pod(s) of component(s) {', '.join(comps)} fit on no node either "
                         "(same constraints)")
        return lines

    def unplaced_names(self, pb: Problem) -> list[str]:
        names = [pb.demands[d].name for d, _ in self.unplaced[:NAMES_LISTED]]
        more = len(self.unplaced) - NAMES_LISTED
        return names + ([f"... and {more} more"] if more > 0 else [])


def _simulate(pb: Problem) -> _Simulation:
    """kube-scheduler default, approximated: creation order, filters, LeastAllocated on GPUs, ties by name."""
    st = State(pb)
    placement: dict[int, int] = {}
    sim = _Simulation(placement, [])
    unplaced = sim.unplaced
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
                unplaced.append((d, ""))
                sim.repeats[gi] += 1
            else:
                explained.add(gi)
                unplaced.append((d, _why_unplaced(pb, st, d)))
            continue
        st.place(best[1], gi)
        placement[d] = best[1]
    return sim


@dataclass
class _Search:
    status: str  # feasible | infeasible | budget exhausted
    placement: dict[int, int] | None
    steps: int


def _search(pb: Problem, budget: int) -> _Search:
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
    st = State(pb)
    failed: set[tuple[int, frozenset[tuple[tuple[Key, Key], int]]]] = set()
    assign: dict[int, int] = {}
    steps = 0

    def dfs(pos: int) -> bool:
        nonlocal steps
        if pos == len(order):
            return True
        steps += 1
        if steps > budget:
            raise SearchBudgetExhausted
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
    except SearchBudgetExhausted:
        return _Search("budget exhausted", None, steps)
    return _Search("feasible" if ok else "infeasible", dict(assign) if ok else None, steps)


# --------------------------------------------------------------------------------------------
# Explanations
# --------------------------------------------------------------------------------------------


def _summarise(counter: Counter[str], examples: dict[str, list[str]]) -> list[str]:
    return [f"{n} node(s) {why} (e.g. {', '.join(examples[why][:EXAMPLES])})" for why, n in counter.most_common()]


def _why_unplaced(pb: Problem, st: State, d: int) -> str:
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


def _gpu_summary(pb: Problem) -> list[str]:
    """Per component group: GPUs needed vs free on the nodes it may use (the headline shortfall)."""
    out = []
    st = State(pb)
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
    dra: DraView | None = None,
) -> CapacityResult:
    """Decide whether the DGD's pods fit now; see the module docstring for the rules.

    ``dgd`` may be a :class:`Dgd` (its ``unrepresentable`` reasons force ``unknown``) or a list of
    pod demands. ``namespace`` is where the DGD will run (for pod affinity namespace matching).
    ``always_search`` runs the exact search even when the simulation already placed everything.
    ``dra`` is what the cluster says of DRA claims (None: not read, so a claim leaves the GPU
    count unknown).
    """
    unrepresentable: list[str] = []
    if isinstance(dgd, Dgd):
        if gpu_less(dgd) or dgd.pod_count() > EXPANSION_LIMIT:
            return _unexpanded(dgd, nodes, pods, namespace, dra)
        demands = dgd.pod_demands(namespace)
        unrepresentable = list(dgd.unrepresentable)
    else:
        demands = list(dgd)
    pb = Problem(demands, nodes, pods, namespace)
    offered = offer.judge(pb, [len(g.demands) for g in pb.groups], dra)
    unrepresentable += offered.gpu_unknown
    gpus_requested = sum(d.gpus for d in demands)
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
            warnings.extend(sim.explanations(pb))
    elif search.status == "infeasible" and not pb.inter_plan_affinity:
        outcome = "insufficient"
        reasons.extend(_gpu_summary(pb))
        reasons.extend(sim.explanations(pb))
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
        reasons.extend(sim.explanations(pb))
    outcome, reasons = _overall(outcome, reasons, unrepresentable, offered.never)

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
        simulation_unplaced=sim.unplaced_names(pb),
        search_steps=search.steps,
        limitations=[*pb.limitations, *offered.limitations],
        never_offered=offered.never,
        resources=offered.resources,
        dra=offered.dra,
        _rows=_rows(pb, witness if witness is not None else sim.placement),
    )


def gpu_less(dgd: Dgd) -> bool:
    """No GPU to place: no device-plugin GPU, nothing unrepresentable, no DRA claim that may hide GPUs."""
    return dgd.total_gpus() == 0 and not dgd.unrepresentable and not any(c.dra_claims for c in dgd.components)


def _overall(outcome: Outcome, reasons: list[str], unrepresentable: list[str],
             never: list[str]) -> tuple[Outcome, list[str]]:
    """The GPU answer with what else is known: what no node can ever offer is ``insufficient``
    whatever the GPUs say; a DGD not expanded faithfully is otherwise ``unknown``."""
    if never:
        head = list(never)
        if outcome != "insufficient" and reasons:
            head.append(f"(the GPU placement alone says {outcome})")
        return "insufficient", [*head, *reasons]
    if unrepresentable:
        head = [f"the DGD cannot be expanded faithfully: {why}" for why in unrepresentable]
        if outcome != "unknown":
            head.append(f"(ignoring that, the placement check alone says {outcome})")
        return "unknown", [*head, *reasons]
    return outcome, reasons


def _unplaced_result(outcome: Outcome, reasons: list[str], gpus: int, pb: Problem,
                     offered: offer.Offered) -> CapacityResult:
    """A result without a placement: nothing to place (no GPU table), or a DGD too large to expand."""
    return CapacityResult(outcome=outcome, reasons=reasons, warnings=[], gpus_requested=gpus, exact="not run",
                          simulation_ok=outcome == "not needed", placement=None, simulation_placement={},
                          simulation_unplaced=[], search_steps=0,
                          limitations=[*pb.limitations, *offered.limitations], never_offered=offered.never,
                          resources=offered.resources, dra=offered.dra, _rows=_rows(pb, {}) if gpus else [])


def _unexpanded(dgd: Dgd, nodes: Sequence[Mapping[str, Any]], pods: Sequence[Mapping[str, Any]],
                namespace: str | None, dra: DraView | None) -> CapacityResult:
    """One pod per component carries its constraints: a GPU-less DGD (``not needed`` unless a
    resource it asks can never be offered), or one of more pods than :data:`EXPANSION_LIMIT`."""
    firsts = dgd.pod_demands(namespace, first_only=True)
    pb = Problem(firsts, nodes, pods, namespace)
    per_pod = {c.name: c.replicas * c.node_count for c in dgd.components}
    offered = offer.judge(pb, [sum(per_pod[pb.demands[d].component] for d in g.demands) for g in pb.groups], dra)
    if gpu_less(dgd):
        if offered.never:
            return _unplaced_result("insufficient", offered.never, 0, pb, offered)
        return _unplaced_result("not needed", [NO_GPU], 0, pb, offered)
    outcome, reasons = _totals_only(dgd, pb)
    outcome, reasons = _overall(outcome, reasons, offered.gpu_unknown if outcome == "unknown" else [], offered.never)
    return _unplaced_result(outcome, reasons, dgd.total_gpus(), pb, offered)


def _totals_only(dgd: Dgd, pb: Problem) -> tuple[Outcome, list[str]]:
    """More pods than :data:`EXPANSION_LIMIT`: each component's GPU total against the free GPUs on
    the nodes it may use. A shortfall is ``insufficient`` whatever the placement; otherwise the
    answer is ``unknown``, never a guess."""
    st = State(pb)
    need: Counter[int] = Counter()
    comps: dict[int, list[str]] = {}
    for i, demand in enumerate(pb.demands):
        sig = pb.groups[pb.group_of[i]].sig
        need[sig] += dgd.component(demand.component).total_gpus
        comps.setdefault(sig, []).append(demand.component)
    reasons = [f"the DGD has {dgd.pod_count()} pods, more than the {EXPANSION_LIMIT} the placement check expands "
               "one by one: GPU totals compared instead"]
    short = False
    for sig, n in sorted(need.items()):
        if not n:
            continue
        free = st.sig_nodes_free[sig]
        short = short or n > free
        eligible = sum(1 for i in range(len(pb.nodes)) if pb.mask[i] >> sig & 1)
        reasons.append(f"component(s) {', '.join(comps[sig])} need {n} {pb.resources[pb.sig_keys[sig][1]]} in "
                       f"total; {free} free on the {eligible} node(s) they may use")
    return ("insufficient" if short else "unknown"), reasons


def _rows(pb: Problem, placement: Mapping[int, int]) -> list[dict[str, Any]]:
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
