"""Unit and property tests of the capacity engine (deploy_suite.judges.capacity)."""

from __future__ import annotations

import itertools
import time
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from deploy_suite.judges.capacity import check_capacity
from deploy_suite.model.dgd import PodDemand, load_dgd, parse_dgd
from deploy_suite.model.scheduling import LabelSelector, PodAffinityTerm, Scheduling, Toleration

DATA = Path(__file__).parent / "data"
GPU = "nvidia.com/gpu"
NS = "dynamo"


def node(
    name: str,
    gpus: int = 8,
    labels: dict[str, str] | None = None,
    taints: list[tuple[str, str, str]] = (),
    cordoned: bool = False,
    allocatable: bool = True,
) -> dict[str, Any]:
    status = {"capacity": {GPU: str(gpus)}}
    if allocatable:
        status["allocatable"] = {GPU: str(gpus)}
    return {
        "metadata": {"name": name, "labels": {"kubernetes.io/hostname": name, **(labels or {})}},
        "spec": {"unschedulable": cordoned, "taints": [{"key": k, "value": v, "effect": e} for k, v, e in taints]},
        "status": status,
    }


def pod(
    name: str,
    node_name: str | None,
    gpus: int = 1,
    phase: str = "Running",
    ns: str = "other",
    labels: dict[str, str] | None = None,
    requests: int | None = None,
    waiting: str | None = None,
    spec_extra: dict[str, Any] | None = None,
) -> dict[str, Any]:
    res: dict[str, Any] = {"limits": {GPU: str(gpus)}}
    if requests is not None:
        res["requests"] = {GPU: str(requests)}
    status: dict[str, Any] = {"phase": phase}
    if waiting:
        status["containerStatuses"] = [{"name": "c", "state": {"waiting": {"reason": waiting}}}]
    spec: dict[str, Any] = {"containers": [{"name": "c", "resources": res}], **(spec_extra or {})}
    if node_name:
        spec["nodeName"] = node_name
    return {"metadata": {"name": name, "namespace": ns, "labels": labels or {}}, "spec": spec, "status": status}


def demand(
    name: str,
    gpus: int,
    *,
    component: str = "w",
    selector: dict[str, str] | None = None,
    tolerations: tuple[Toleration, ...] = (),
    anti: tuple[PodAffinityTerm, ...] = (),
    aff: tuple[PodAffinityTerm, ...] = (),
) -> PodDemand:
    sched = Scheduling(tuple(sorted((selector or {}).items())), None, tolerations, aff, anti)
    labels = {"nvidia.com/dynamo-component": component, "app": component}
    return PodDemand(name, component, "worker", 0, 0, gpus, GPU, sched, labels, NS)


def anti_term(component: str, key: str = "kubernetes.io/hostname") -> PodAffinityTerm:
    return PodAffinityTerm(LabelSelector((("app", component),)), key)


def worker_dgd(replicas: int, gpus: int, extra_pod_spec: str = "") -> str:
    return f"""
apiVersion: nvidia.com/v1alpha1
kind: DynamoGraphDeployment
metadata: {{name: t, namespace: {NS}}}
spec:
  services:
    W:
      componentType: worker
      replicas: {replicas}
      resources: {{limits: {{gpu: "{gpus}"}}, requests: {{gpu: "{gpus}"}}}}
      extraPodSpec:
{extra_pod_spec or "        mainContainer: {image: x}"}
"""


# ---------------------------------------------------------------- held GPUs


@pytest.mark.parametrize(
    ("holder", "held"),
    [
        (pod("running", "n1", 4), 4),
        (pod("pulling", "n1", 4, phase="Pending", waiting="ImagePullBackOff"), 4),
        (pod("creating", "n1", 4, phase="Pending", waiting="ContainerCreating"), 4),
        (pod("unknown-phase", "n1", 4, phase="Unknown"), 4),
        (pod("done", "n1", 4, phase="Succeeded"), 0),
        (pod("failed", "n1", 4, phase="Failed"), 0),
        (pod("unbound", None, 4, phase="Pending"), 0),
        (pod("req-and-limit", "n1", 4, requests=4), 4),
        (pod("on-a-node-not-in-the-snapshot", "gone", 4), 0),
        (pod("init", "n1", 1, spec_extra={"initContainers": [{"name": "i", "resources": {"limits": {GPU: "6"}}}]}), 6),
    ],
    ids=lambda v: v["metadata"]["name"] if isinstance(v, dict) else str(v),
)
def test_a_bound_non_terminal_pod_holds_its_full_gpu_request(holder, held):
    result = check_capacity([demand("w-0", 1)], [node("n1", 8)], [holder])
    (row,) = result.table()
    assert row["held"] == held
    assert row["free"] == 8 - held


def test_an_imagepullbackoff_pod_makes_the_node_too_full():
    pods = [pod("stuck", "n1", 6, phase="Pending", waiting="ImagePullBackOff")]
    result = check_capacity([demand("w-0", 4)], [node("n1", 8)], pods)
    assert result.outcome == "insufficient"
    assert "w-0" in "\n".join(result.reasons)


def test_allocatable_falls_back_to_capacity():
    result = check_capacity([demand("w-0", 8)], [node("n1", 8, allocatable=False)], [])
    assert result.outcome == "sufficient"


# ---------------------------------------------------------------- node filters

FILTER_CASES = [
    # case, node, demand, outcome, text expected in the explanation
    (
        "an untolerated NoSchedule taint excludes the node",
        node("n1", taints=[("reserved", "team-x", "NoSchedule")]),
        demand("w-0", 1),
        "insufficient",
        "taint reserved=team-x:NoSchedule not tolerated",
    ),
    (
        "an untolerated NoExecute taint excludes the node",
        node("n1", taints=[("k", "", "NoExecute")]),
        demand("w-0", 1),
        "insufficient",
        "taint k:NoExecute",
    ),
    (
        "a PreferNoSchedule taint is ignored",
        node("n1", taints=[("k", "", "PreferNoSchedule")]),
        demand("w-0", 1),
        "sufficient",
        "",
    ),
    (
        "a tolerated taint keeps the node",
        node("n1", taints=[("nvidia.com/gpu", "present", "NoSchedule")]),
        demand("w-0", 1, tolerations=(Toleration("nvidia.com/gpu", "Exists"),)),
        "sufficient",
        "",
    ),
    (
        "a wildcard toleration tolerates every taint",
        node("n1", taints=[("a", "b", "NoSchedule"), ("c", "", "NoExecute")]),
        demand("w-0", 1, tolerations=(Toleration("", "Exists"),)),
        "sufficient",
        "",
    ),
    ("a cordoned node is excluded", node("n1", cordoned=True), demand("w-0", 1), "insufficient", "cordoned"),
    (
        "a cordoned node is usable only by a pod tolerating the unschedulable taint",
        node("n1", cordoned=True),
        demand("w-0", 1, tolerations=(Toleration("node.kubernetes.io/unschedulable", "Exists"),)),
        "sufficient",
        "",
    ),
    (
        "a node selector mismatch excludes the node",
        node("n1", labels={"nvidia.com/gpu.product": "H100"}),
        demand("w-0", 1, selector={"nvidia.com/gpu.product": "B200"}),
        "insufficient",
        "node selector nvidia.com/gpu.product=B200 not matched (node has nvidia.com/gpu.product=H100)",
    ),
    (
        "a node too small for the pod is excluded",
        node("n1", gpus=4),
        demand("w-0", 8),
        "insufficient",
        "only 4 nvidia.com/gpu allocatable",
    ),
]


@pytest.mark.parametrize(
    ("case", "the_node", "the_demand", "outcome", "text"), FILTER_CASES, ids=[c[0] for c in FILTER_CASES]
)
def test_node_filters(case, the_node, the_demand, outcome, text):
    result = check_capacity([the_demand], [the_node], [])
    assert result.outcome == outcome, case
    assert text in "\n".join(result.reasons)


def test_tolerations_are_never_invented_for_a_dgd():
    dgd = parse_dgd(worker_dgd(1, 1))
    result = check_capacity(dgd, [node("n1", taints=[("nvidia.com/gpu", "", "NoSchedule")])], [])
    assert result.outcome == "insufficient"


@pytest.mark.parametrize(
    ("expr", "fits"),
    [
        ("{key: gpu.count, operator: Gt, values: ['4']}", True),
        ("{key: gpu.count, operator: Lt, values: ['4']}", False),
        ("{key: zone, operator: In, values: [a]}", True),
        ("{key: zone, operator: NotIn, values: [a]}", False),
        ("{key: missing, operator: DoesNotExist}", True),
        ("{key: zone, operator: Exists}", True),
    ],
)
def test_required_node_affinity_is_honoured(expr, fits):
    spec = (
        "        mainContainer: {image: x}\n        affinity:\n          nodeAffinity:\n"
        "            requiredDuringSchedulingIgnoredDuringExecution:\n"
        f"              nodeSelectorTerms: [{{matchExpressions: [{expr}]}}]"
    )
    dgd = parse_dgd(worker_dgd(1, 2, spec))
    result = check_capacity(dgd, [node("n1", labels={"gpu.count": "8", "zone": "a"})], [])
    assert result.outcome == ("sufficient" if fits else "insufficient")
    if not fits:
        assert "required node affinity not matched" in "\n".join(result.reasons)


# ---------------------------------------------------------------- placement


def test_two_pods_cannot_count_the_same_free_gpus():
    nodes = [node("n1", 8)]
    pods = [pod("t", "n1", 2)]
    assert check_capacity([demand("a", 6)], nodes, pods).outcome == "sufficient"
    result = check_capacity([demand("a", 4), demand("b", 4)], nodes, pods)
    assert result.outcome == "insufficient"
    assert "1 with 2 free" in "\n".join(result.reasons)


def test_free_gpus_split_across_nodes_do_not_add_up_for_one_pod():
    result = check_capacity([demand("a", 8)], [node("n1", 8), node("n2", 8)], [pod("x", "n1", 4), pod("y", "n2", 4)])
    assert result.outcome == "insufficient"
    assert "not enough free nvidia.com/gpu (4 free)" in "\n".join(result.reasons)


def test_anti_affinity_that_cannot_be_met_is_insufficient_and_says_why():
    demands = [demand(f"w-{i}", 1, anti=(anti_term("w"),)) for i in range(3)]
    result = check_capacity(demands, [node("n1"), node("n2")], [])
    assert result.outcome == "insufficient"
    text = "\n".join(result.reasons)
    assert "w-2" in text and "anti-affinity" in text


def test_anti_affinity_against_an_existing_pod_is_honoured():
    existing = pod("old", "n1", 0, ns=NS, labels={"app": "w"})
    demands = [demand("w-0", 1, anti=(anti_term("w"),))]
    result = check_capacity(demands, [node("n1"), node("n2")], [existing])
    assert result.placement == {"w-0": "n2"}
    result = check_capacity(demands, [node("n1")], [existing])
    assert result.outcome == "insufficient"


def test_anti_affinity_in_another_namespace_does_not_apply():
    existing = pod("old", "n1", 0, ns="elsewhere", labels={"app": "w"})
    result = check_capacity([demand("w-0", 1, anti=(anti_term("w"),))], [node("n1")], [existing])
    assert result.outcome == "sufficient"


def test_an_existing_pods_anti_affinity_keeps_our_pod_away():
    term = {"labelSelector": {"matchLabels": {"app": "w"}}, "topologyKey": "kubernetes.io/hostname", "namespaces": [NS]}
    spec = {"affinity": {"podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [term]}}}
    existing = pod("loner", "n1", 0, spec_extra=spec)
    result = check_capacity([demand("w-0", 1)], [node("n1"), node("n2")], [existing])
    assert result.placement == {"w-0": "n2"}


def test_zone_anti_affinity_spreads_pods_across_zones():
    nodes = [node(f"n{i}", labels={"zone": z}) for i, z in enumerate(["a", "a", "b"])]
    demands = [demand(f"w-{i}", 1, anti=(anti_term("w", "zone"),)) for i in range(3)]
    assert check_capacity(demands[:2], nodes, []).outcome == "sufficient"
    assert check_capacity(demands, nodes, []).outcome == "insufficient"


def test_pod_affinity_to_an_existing_pod_follows_its_node():
    existing = pod("cache", "n2", 0, ns=NS, labels={"app": "kv"})
    term = PodAffinityTerm(LabelSelector((("app", "kv"),)), "kubernetes.io/hostname")
    result = check_capacity([demand("w-0", 1, aff=(term,))], [node("n1"), node("n2")], [existing])
    assert result.placement == {"w-0": "n2"}


def test_self_affine_pods_may_start_a_series_and_then_stay_together():
    term = PodAffinityTerm(LabelSelector((("app", "w"),)), "kubernetes.io/hostname")
    demands = [demand(f"w-{i}", 4, aff=(term,)) for i in range(2)]
    assert check_capacity(demands, [node("n1"), node("n2")], []).outcome == "sufficient"
    result = check_capacity([*demands, demand("w-2", 4, aff=(term,))], [node("n1"), node("n2")], [])
    assert result.outcome in ("insufficient", "unknown")  # never sufficient: only 8 GPUs per node


def test_multinode_dgd_needs_whole_nodes_per_rank():
    dgd = load_dgd(DATA / "dgd_multinode.yaml")
    nodes = [node(f"n{i}") for i in range(6)]
    assert check_capacity(dgd, nodes, []).outcome == "sufficient"
    assert check_capacity(dgd, nodes[:5], []).outcome == "insufficient"


def test_fragmentation_that_the_scheduler_would_hit_is_a_warning_not_a_failure():
    # Least-allocated spreading puts the 4-GPU pod on the emptier node n2 and strands the 8-GPU pod.
    nodes = [node("n1", 8), node("n2", 8)]
    pods = [pod("t", "n1", 4)]
    demands = [demand("small", 4, component="s"), demand("big", 8, component="b")]
    result = check_capacity(demands, nodes, pods)
    assert result.outcome == "sufficient"
    assert not result.simulation_ok and result.simulation_unplaced == ["big"]
    assert result.placement == {"big": "n2", "small": "n1"}
    assert any("fragmented" in w for w in result.warnings)


def test_unrepresentable_dgd_gives_unknown_never_sufficient():
    dgd = parse_dgd(worker_dgd(1, 1, "        mainContainer: {image: x}\n        resourceClaims: [{name: gpu}]"))
    result = check_capacity(dgd, [node("n1")], [])
    assert result.outcome == "unknown"
    assert any("DRA claim gpu" in r and "GPU count unknown" in r for r in result.reasons)


def test_an_exhausted_search_budget_gives_unknown():
    # 5 pods of 3 GPUs on 4 nodes of 4: infeasible, but the greedy fails fast and the search needs steps.
    demands = [demand(f"w-{i}", 3) for i in range(5)] + [demand("x", 1, component="x")]
    result = check_capacity(demands, [node(f"n{i}", 4) for i in range(4)], [], budget=1)
    assert result.outcome == "unknown"
    assert "budget" in result.reasons[0]


def test_no_pods_is_trivially_sufficient():
    assert check_capacity([], [node("n1")], []).outcome == "sufficient"


# ---------------------------------------------------------------- evidence


def test_capacity_table_separates_other_tenants_from_planned_pods():
    nodes = [node("n1", 8), node("cpu", 0)]
    pods = [pod("t", "n1", 3, ns="team")]
    result = check_capacity([demand("w-0", 2)], nodes, pods)
    (row,) = result.table()
    assert row == {
        "node": "n1",
        "resource": GPU,
        "total": 8,
        "held": 3,
        "free": 5,
        "planned": 2,
        "free_after": 3,
        "cordoned": False,
        "taints": [],
        "holders": [{"pod": "team/t", "gpus": 3, "kind": "other"}, {"pod": "w-0", "gpus": 2, "kind": "planned"}],
    }
    (cell,) = result.grid()
    assert [s["kind"] for s in cell["slots"]] == ["other"] * 3 + ["planned"] * 2 + ["free"] * 3
    ledger = result.to_dict()
    assert ledger["capacity"] == "sufficient" and ledger["gpus_requested"] == 2


def test_a_dgd_fixture_places_with_a_valid_witness():
    dgd = load_dgd(DATA / "dgd_v1alpha1_agg.yaml")
    nodes = [
        node(
            "a",
            labels={"nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3"},
            taints=[("nvidia.com/gpu", "", "NoSchedule")],
        ),
        node("cpu", 0),
    ]
    result = check_capacity(dgd, nodes, [], always_search=True)
    assert result.outcome == "sufficient"
    assert result.placement == {"Frontend-0": "cpu", "VllmWorker-0": "a", "VllmWorker-1": "a"}


# ---------------------------------------------------------------- property: exact answer == brute force

TAINTS = [("reserved", "x", "NoSchedule"), ("gpu", "", "NoExecute"), ("soft", "", "PreferNoSchedule")]
TOLERATIONS = [Toleration("reserved", "Equal", "x"), Toleration("gpu", "Exists"), Toleration("", "Exists")]


@st.composite
def instances(draw):
    n_nodes = draw(st.integers(1, 5))
    nodes, frees = [], []
    for i in range(n_nodes):
        total = draw(st.sampled_from([0, 2, 4, 8]))
        held = draw(st.integers(0, total))
        labels = {"zone": draw(st.sampled_from(["a", "b"])), "kind": draw(st.sampled_from(["h100", "b200"]))}
        taints = draw(st.lists(st.sampled_from(TAINTS), max_size=2, unique=True))
        nodes.append(node(f"n{i}", total, labels, taints, cordoned=draw(st.booleans()) and draw(st.booleans())))
        frees.append(held)
    pods = [pod(f"h{i}", f"n{i}", h, ns=NS, labels={"app": f"c{i % 3}"}) for i, h in enumerate(frees) if h]
    n_comp = draw(st.integers(1, 3))
    comps = []
    for _ in range(n_comp):
        comps.append(
            dict(
                gpus=draw(st.sampled_from([0, 1, 2, 4, 8])),
                selector={"kind": draw(st.sampled_from(["h100", "b200"]))} if draw(st.booleans()) else {},
                tolerations=tuple(draw(st.lists(st.sampled_from(TOLERATIONS), max_size=2, unique=True))),
                anti=tuple(
                    anti_term(f"c{t}", draw(st.sampled_from(["kubernetes.io/hostname", "zone"])))
                    for t in draw(st.lists(st.integers(0, n_comp - 1), max_size=1))
                ),
            )
        )
    demands = []
    for _ in range(draw(st.integers(1, 6))):
        c = draw(st.integers(0, n_comp - 1))
        spec = comps[c]
        demands.append(
            demand(
                f"d{len(demands)}",
                spec["gpus"],
                component=f"c{c}",
                selector=spec["selector"],
                tolerations=spec["tolerations"],
                anti=spec["anti"],
            )
        )
    return nodes, pods, demands


def _eligible(n: dict, d: PodDemand) -> bool:
    taints = list(n["spec"]["taints"])
    if n["spec"]["unschedulable"]:
        # Kubernetes' NodeUnschedulable filter: only a pod tolerating this taint may go to a cordoned node.
        taints.append({"key": "node.kubernetes.io/unschedulable", "value": "", "effect": "NoSchedule"})
    for t in taints:
        if t["effect"] == "PreferNoSchedule":
            continue
        ok = False
        for tol in d.scheduling.tolerations:
            key_ok = not tol.key or tol.key == t["key"]
            eff_ok = not tol.effect or tol.effect == t["effect"]
            val_ok = tol.operator == "Exists" or tol.value == t["value"]
            ok = ok or (key_ok and eff_ok and val_ok)
        if not ok:
            return False
    labels = n["metadata"]["labels"]
    return all(labels.get(k) == v for k, v in d.scheduling.node_selector)


def _valid(nodes, pods, demands, assign) -> bool:
    """Independent check of a full assignment: eligibility, GPU sums, anti-affinity both ways."""
    used = {n["metadata"]["name"]: 0 for n in nodes}
    for p in pods:
        used[p["spec"]["nodeName"]] += int(p["spec"]["containers"][0]["resources"]["limits"][GPU])
    by_name = {n["metadata"]["name"]: n for n in nodes}
    for d, n in zip(demands, assign, strict=False):
        if not _eligible(by_name[n], d):
            return False
        used[n] += d.gpus
    if any(used[n] > int(by_name[n]["status"]["allocatable"][GPU]) for n in used):
        return False
    others = [(p["metadata"]["labels"], p["spec"]["nodeName"], None) for p in pods]
    planned = [(d.labels, n, i) for i, (d, n) in enumerate(zip(demands, assign, strict=False))]
    for i, (d, n) in enumerate(zip(demands, assign, strict=False)):
        for term in d.scheduling.pod_anti_affinity:
            mine = by_name[n]["metadata"]["labels"].get(term.topology_key)
            for labels, m, j in others + planned:
                if j == i or not term.label_selector.matches(labels):
                    continue
                if mine is not None and by_name[m]["metadata"]["labels"].get(term.topology_key) == mine:
                    return False
    return True


def _brute_force(nodes, pods, demands) -> bool:
    names = [n["metadata"]["name"] for n in nodes]
    return any(_valid(nodes, pods, demands, a) for a in itertools.product(names, repeat=len(demands)))


@settings(max_examples=250, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(instances(), st.booleans())
def test_exact_answer_agrees_with_brute_force(instance, always_search):
    nodes, pods, demands = instance
    result = check_capacity(demands, nodes, pods, always_search=always_search)
    feasible = _brute_force(nodes, pods, demands)
    assert result.outcome == ("sufficient" if feasible else "insufficient")
    if result.placement is not None:
        assign = [result.placement[d.name] for d in demands]
        assert _valid(nodes, pods, demands, assign)


@settings(max_examples=100, deadline=None)
@given(instances())
def test_sufficient_is_never_reported_without_a_placement(instance):
    nodes, pods, demands = instance
    result = check_capacity(demands, nodes, pods, budget=3)
    if result.outcome == "sufficient":
        assert result.placement is not None
        assert _valid(nodes, pods, demands, [result.placement[d.name] for d in demands])
    elif result.outcome == "insufficient":
        assert not _brute_force(nodes, pods, demands)


# ---------------------------------------------------------------- no GPU, huge DGDs (issue 13)


def test_a_dgd_without_gpu_requests_needs_no_capacity():
    dgd = parse_dgd(worker_dgd(2, 0))
    result = check_capacity(dgd, [node("n1")], [pod("held", "n1", 8)], namespace=NS)
    assert result.outcome == "not needed" and result.reasons == ["no GPU requested"]
    assert result.gpus_requested == 0 and result.to_dict()["capacity"] == "not needed"


@pytest.mark.parametrize("replicas", [100_000, 1_000_000_000])
def test_a_demand_above_the_free_gpus_is_insufficient_at_once_without_expanding(replicas: int):
    started = time.monotonic()
    result = check_capacity(parse_dgd(worker_dgd(replicas, 1)), [node("n1"), node("n2")], [pod("h", "n1", 3)],
                            namespace=NS)
    assert time.monotonic() - started < 1.0
    assert result.outcome == "insufficient" and result.gpus_requested == replicas
    assert result.reasons[0].startswith(f"the DGD has {replicas} pods, more than the 10000")
    assert result.reasons[1] == f"component(s) W need {replicas} nvidia.com/gpu in total; 13 free on the 2 node(s) " \
        "they may use"
    assert len(result.reasons) == 2 and result.simulation_unplaced == []


def test_a_large_dgd_within_the_free_gpus_is_unknown_never_a_guess():
    nodes = [node(f"n{i}", gpus=8) for i in range(2000)]
    result = check_capacity(parse_dgd(worker_dgd(12_000, 1)), nodes, [], namespace=NS)
    assert result.outcome == "unknown"
    assert "16000 free on the 2000 node(s)" in result.reasons[1]


def test_a_long_explanation_is_summarised_per_component():
    result = check_capacity(parse_dgd(worker_dgd(500, 4)), [node("n1"), node("n2")], [], namespace=NS)
    assert result.outcome == "insufficient"
    # The headline, one explanation of the first pod that did not fit, one line for the rest.
    assert len(result.reasons) == 3, result.reasons
    assert result.reasons[2] == "and 495 more pod(s) of component(s) W fit on no node either (same constraints)"
    assert len(result.simulation_unplaced) == 21 and result.simulation_unplaced[-1] == "... and 476 more"
