"""What the nodes can ever offer: every resource a DGD's pods ask for, against allocatable.

The capacity engine places GPUs against what is free now (``deploy_suite.judges.capacity``). Every
other resource a pod asks for (CPU, memory, extended resources such as ``rdma/ib``) and its DRA
claims (``deploy_suite.judges.dra``) are judged against what the nodes the pod may use (selectors,
affinity, taints, cordons) can ever offer: their allocatable, whatever runs there. A request none
of them can ever hold, more pods than they could hold even empty, or a total beyond what they offer
together, never fits whatever is freed: step 2 blocks before any mutation, naming the resource and
the nodes. A shortage only of what other pods use now is contention, the wait step 6 judges
(docs/procedure.md, step 2). Pure: the placement problem in, lines and evidence out.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field

from deploy_suite.constants import Obj
from deploy_suite.judges import dra as dra_mod
from deploy_suite.judges.placement import Problem
from deploy_suite.model.scheduling import DraClaim, show_quantity

NAMED = 3  # nodes named per allocatable value
VALUES = 3  # allocatable values shown per line
EPSILON = 1e-9  # quantities are floats: "500m" x 3 is not more than "1500m"


@dataclass
class Offered:
    """``never``: what no node can ever offer (each line names the resource and the nodes);
    ``gpu_unknown``: why the GPU count cannot be told (DRA); ``resources`` and ``dra``: evidence."""

    never: list[str] = field(default_factory=list)
    gpu_unknown: list[str] = field(default_factory=list)
    limitations: list[str] = field(default_factory=list)
    resources: list[Obj] = field(default_factory=list)
    dra: list[Obj] = field(default_factory=list)


class _Offer:
    """One judgement over a problem: the nodes each signature may use, computed when needed."""

    def __init__(self, pb: Problem, pods: Sequence[int]) -> None:
        self.pb = pb
        self.out = Offered()
        self.pods: Counter[int] = Counter()
        self.components: dict[int, set[str]] = {}
        for gi, grp in enumerate(pb.groups):
            self.pods[grp.sig] += pods[gi]
            self.components.setdefault(grp.sig, set()).update(pb.demands[d].component for d in grp.demands)
        self._may: dict[int, list[int]] = {}
        self.short: set[str] = set()
        # (resource, per pod, nodes the pods may use) -> components none of those nodes can ever serve
        self.none: dict[tuple[str, float, tuple[int, ...]], set[str]] = {}

    def may_use(self, s: int) -> list[int]:
        """The nodes the pods of signature ``s`` may use (placement's filters), whatever they offer."""
        if s not in self._may:
            self._may[s] = [i for i, bits in enumerate(self.pb.usable) if bits >> s & 1]
        return self._may[s]

    def eligible(self, s: int) -> list[int]:
        return [i for i in range(len(self.pb.nodes)) if self.pb.mask[i] >> s & 1]

    def allocatable(self, nodes: Sequence[int], name: str) -> str:
        """``allocatable rdma/ib: 0 on 3 node(s) (a, b, c)``: the nodes grouped by what they offer."""
        by_value: dict[float, list[str]] = {}
        for i in nodes:
            by_value.setdefault(self.pb.nodes[i].offers(name), []).append(self.pb.nodes[i].name)
        parts = []
        for value, names in sorted(by_value.items(), reverse=True)[:VALUES]:
            more = f" and {len(names) - NAMED} more" if len(names) > NAMED else ""
            parts.append(f"{show_quantity(value, name)} on {len(names)} node(s) ({', '.join(names[:NAMED])}{more})")
        return f"allocatable {name}: " + "; ".join(parts)

    def signature(self, s: int) -> None:
        """One group of identical pods: each resource alone, then how many pods the nodes hold."""
        comps = sorted(self.components[s])
        who = f"component(s) {', '.join(comps)}"
        may, eligible, pods = self.may_use(s), self.eligible(s), self.pods[s]
        short = False
        for name, amount in self.pb.sig_requests[s]:
            asked = show_quantity(amount, name)
            offering = [i for i in may if self.pb.nodes[i].offers(name) + EPSILON >= amount]
            most = sum(int((self.pb.nodes[i].offers(name) + EPSILON) // amount) for i in eligible)
            self.out.resources.append({"components": comps, "resource": name, "per_pod": asked, "pods": pods,
                                       "nodes_may_use": len(may), "nodes_offering": len(offering),
                                       "pods_at_most": most})
            if not may:
                continue  # selectors or taints keep every node out: the GPU check says why
            if not offering:
                self.none.setdefault((name, amount, tuple(may)), set()).update(comps)
                short = True
            elif eligible and most < pods:
                self.out.never.append(f"{name}: {who} need {pods} pod(s) of {asked} each; the {len(eligible)} node(s) "
                                      f"that can take them hold at most {most} even when empty "
                                      f"({self.allocatable(eligible, name)})")
                self.short.add(name)
                short = True
        _, r, gpus = self.pb.sig_keys[s]
        gpu_offered = any(self.pb.nodes[i].total[r] >= gpus for i in may)
        if may and not eligible and not short and gpu_offered:
            parts = [f"{show_quantity(a, n)} {n}" for n, a in self.pb.sig_requests[s]]
            if gpus:
                parts.insert(0, f"{gpus} {self.pb.resources[r]}")
            self.out.never.append(f"{who} ask {', '.join(parts)} per pod; each is offered by some of the {len(may)} "
                                  "node(s) they may use, but none offers all of it at once")

    def never_served(self) -> None:
        """One line per resource and amount that none of the nodes some components may use offers."""
        lines = []
        for (name, amount, may), comps in self.none.items():
            self.short.add(name)
            lines.append(f"{name}: component(s) {', '.join(sorted(comps))} ask {show_quantity(amount, name)} per pod; "
                         f"none of the {len(may)} node(s) they may use offers that much "
                         f"({self.allocatable(may, name)})")
        self.out.never[:0] = sorted(lines)

    def totals(self) -> None:
        """Per resource, every pod asking it against all the nodes that can take any of them."""
        for name in self.pb.others:
            if name in self.short:
                continue
            sigs = [s for s, asks in enumerate(self.pb.sig_requests) if any(n == name for n, _ in asks)]
            need = sum(self.pods[s] * dict(self.pb.sig_requests[s])[name] for s in sigs)
            nodes = [i for i in range(len(self.pb.nodes)) if any(self.pb.mask[i] >> s & 1 for s in sigs)]
            have = sum(self.pb.nodes[i].offers(name) for i in nodes)
            if nodes and need > have + EPSILON:
                self.out.never.append(f"{name}: the DGD's pods ask {show_quantity(need, name)} in all; the "
                                      f"{len(nodes)} node(s) that can take them offer {show_quantity(have, name)} "
                                      f"in all even when empty ({self.allocatable(nodes, name)})")

    def claims(self, view: dra_mod.DraView | None) -> None:
        claims: dict[str, tuple[DraClaim, ...]] = {}
        sig_of: dict[str, int] = {}
        for grp in self.pb.groups:
            demand = self.pb.demands[grp.demands[0]]
            if demand.dra_claims:
                claims.setdefault(demand.component, demand.dra_claims)
                sig_of.setdefault(demand.component, grp.sig)
        if not claims:
            return
        may = {c: [self.pb.nodes[i].name for i in self.may_use(s)] for c, s in sig_of.items()}
        verdict = dra_mod.judge(claims, may, view)
        self.out.never.extend(verdict.never)
        self.out.gpu_unknown.extend(verdict.gpu_unknown)
        self.out.limitations.extend(verdict.limitations)
        self.out.dra.extend(verdict.evidence)


def judge(pb: Problem, pods: Sequence[int], view: dra_mod.DraView | None = None) -> Offered:
    """What the nodes can never offer the pods of ``pb``; ``pods[g]`` is how many pods group ``g``
    stands for (its demands, or a whole component when only its first pod was expanded)."""
    offer = _Offer(pb, pods)
    for s, asks in enumerate(pb.sig_requests):
        if asks:
            offer.signature(s)
    offer.never_served()
    offer.totals()
    offer.claims(view)
    if pb.others:
        offer.out.limitations.append(
            f"{', '.join(pb.others)}: checked against what the nodes can ever offer (allocatable), not against "
            "what other pods use now (a shortage in use is a contention wait at step 6)")
    return offer.out
