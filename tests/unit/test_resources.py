"""Capacity over every resource a pod asks for (deploy_suite.judges.offer, dra; model.scheduling's
arithmetic): what no node the pods may use can ever offer is ``insufficient`` before any mutation,
what other pods only use now is not counted (a contention wait at step 6), and DRA claims are judged
as far as the cluster's DeviceClasses and ResourceSlices say."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from deploy_suite.access.kube import Kube, Resource
from deploy_suite.judges import dra
from deploy_suite.judges.capacity import check_capacity
from deploy_suite.model.dgd import load_dgd, parse_dgd
from deploy_suite.model.scheduling import DraClaim, pod_requests, show_quantity
from deploy_suite.procedure.validate import ValidationInputs, Validator
from deploy_suite.vocab import BlockerClass
from deploy_suite.yamlio import load_all, load_yaml_text
from tests import fakekube
from tests.fakekube import FakeApi, forbidden

DATA = Path(__file__).parent / "data" / "resources"
V1BETA1 = DATA / "rdma-v1beta1.yaml"  # rdma/ib "4" per worker pod, 3 worker pods of 4 GPUs
V1ALPHA1 = DATA / "rdma-v1alpha1-custom.yaml"  # rdma/ib "1" per worker pod, 2 worker pods of 1 GPU
GB200 = DATA / "computedomain-v1alpha1.yaml"
GPU, GIB = "nvidia.com/gpu", 2.0**30
NS = "dynamo"


def node(name: str, *, gpus: int = 8, cpu: str = "192", memory: str = "2048Gi", taint: str | None = None,
         **extra: str) -> dict[str, Any]:
    alloc = {"cpu": cpu, "memory": memory, "ephemeral-storage": "10Ti", "pods": "110", **extra}
    if gpus:
        alloc[GPU] = str(gpus)
    taints = [{"key": taint, "value": "x", "effect": "NoSchedule"}] if taint else []
    return {"metadata": {"name": name, "labels": {"kubernetes.io/hostname": name}}, "spec": {"taints": taints},
            "status": {"allocatable": alloc, "capacity": dict(alloc)}}


def rdma_nodes(per_node: str | None, n: int = 2) -> list[dict[str, Any]]:
    extra = {"rdma/ib": per_node} if per_node is not None else {}
    return [*(node(f"gpu-{i}", **extra) for i in range(n)), node("cpu-0", gpus=0, cpu="32", memory="128Gi")]


# ------------------------------------------------------------------ the arithmetic


def test_a_pods_effective_request_of_every_resource() -> None:
    spec = {"containers": [{"resources": {"requests": {"cpu": "1", "memory": "1Gi"}, "limits": {"cpu": "4"}}},
                           {"resources": {"limits": {"cpu": "500m", "rdma/ib": "1"}}}],
            "initContainers": [{"resources": {"requests": {"cpu": "3", "memory": "8Gi"}}},
                               {"restartPolicy": "Always", "resources": {"requests": {"memory": "512Mi"}}}]}
    # cpu: running 1 + 0.5 (a limit alone is the request) = 1.5 < the one-shot init's 3;
    # memory: 1Gi + the sidecar's 512Mi < 8Gi; rdma/ib: the limit.
    assert pod_requests(spec) == {"cpu": 3.0, "memory": 8 * GIB, "rdma/ib": 1.0}
    assert pod_requests({"containers": [{"resources": {"requests": {"cpu": "0"}}}]}) == {}


@pytest.mark.parametrize(("amount", "resource", "shown"), [
    (850 * GIB, "memory", "850Gi"), (16 * GIB, "ephemeral-storage", "16Gi"), (1536 * 2.0**20, "memory", "1.5Gi"),
    (0.5, "cpu", "0.5"), (8.0, "rdma/ib", "8"), (0.0, "memory", "0")])
def test_quantities_are_shown_as_people_write_them(amount: float, resource: str, shown: str) -> None:
    assert show_quantity(amount, resource) == shown


def test_a_v1beta1_recipe_asks_rdma_cpu_memory_and_storage_next_to_its_gpus() -> None:
    dgd = load_dgd(V1BETA1)
    prefill = dgd.component("PrefillWorker")
    assert prefill.gpus_per_pod == 4
    assert prefill.requests == {"cpu": 8.0, "ephemeral-storage": 16 * GIB, "memory": 512 * GIB, "rdma/ib": 4.0}
    assert dgd.component("Frontend").requests == {"cpu": 4.0, "memory": 8 * GIB}
    assert dict(dgd.pod_demands()[1].requests) == prefill.requests


def test_v1alpha1_custom_resources_reach_the_main_container_as_the_operator_writes_them() -> None:
    dgd = load_dgd(V1ALPHA1)
    assert dgd.component("SglangPrefillWorker").requests == {"cpu": 8.0, "memory": 64 * GIB, "rdma/ib": 1.0}
    # The mainContainer's own resources win key by key over the service's (it is merged over them with
    # override: api/v1alpha1/shared_spec_conversion.go buildPodTemplateToHub); the service's others are kept.
    decode = dgd.component("SglangDecodeWorker")
    assert decode.requests == {"cpu": 2.0, "ephemeral-storage": 10 * GIB, "memory": 64 * GIB, "rdma/ib": 1.0}
    assert decode.gpus_per_pod == 1 and decode.gpu_resource == GPU


# ------------------------------------------------------------------ what the nodes can ever offer


@pytest.mark.parametrize(("path", "asked"), [(V1BETA1, "4"), (V1ALPHA1, "1")])
def test_rdma_that_no_node_advertises_is_insufficient_naming_the_resource_and_the_nodes(path: Path,
                                                                                        asked: str) -> None:
    result = check_capacity(load_dgd(path), rdma_nodes(None), [], namespace=NS)
    assert result.outcome == "insufficient"
    (line,) = result.never_offered  # one line for the workers' resource, however many components ask it
    assert line.startswith("rdma/ib: component(s) ") and f"ask {asked} per pod" in line
    assert "none of the 3 node(s) they may use offers that much" in line
    assert "allocatable rdma/ib: 0 on 3 node(s) (cpu-0, gpu-0, gpu-1)" in line
    assert result.reasons[0] == line
    rows = {r["components"][0]: r for r in result.resources if r["resource"] == "rdma/ib"}
    assert all(r["nodes_offering"] == 0 and r["nodes_may_use"] == 3 for r in rows.values())


def test_rdma_offered_by_the_nodes_fits_and_is_evidenced() -> None:
    result = check_capacity(load_dgd(V1BETA1), rdma_nodes("8"), [], namespace=NS)
    assert result.outcome == "sufficient" and result.never_offered == []
    (workers,) = [r for r in result.resources if r["resource"] == "rdma/ib"]  # one shape: one group
    assert workers == {"components": ["DecodeWorker", "PrefillWorker"], "resource": "rdma/ib", "per_pod": "4",
                       "pods": 3, "nodes_may_use": 3, "nodes_offering": 2, "pods_at_most": 4}
    assert any("not against what other pods use now" in limit for limit in result.limitations)


def test_more_pods_than_their_nodes_could_hold_even_empty_are_insufficient() -> None:
    # Two nodes of 8 GPUs and rdma/ib 4: the GPUs fit the 3 workers of 4, the HCAs 2 pods in all.
    result = check_capacity(load_dgd(V1BETA1), rdma_nodes("4"), [], namespace=NS)
    assert result.outcome == "insufficient" and result.exact == "feasible"  # the GPUs alone would fit
    assert result.never_offered == [
        "rdma/ib: component(s) DecodeWorker, PrefillWorker need 3 pod(s) of 4 each; the 2 node(s) that can take "
        "them hold at most 2 even when empty (allocatable rdma/ib: 4 on 2 node(s) (gpu-0, gpu-1))"]


def test_a_total_beyond_what_the_nodes_offer_together_is_insufficient() -> None:
    # The two workers differ (one asks ephemeral storage): each fits alone on the one HCA, not both.
    result = check_capacity(load_dgd(V1ALPHA1), rdma_nodes("1", n=1), [], namespace=NS)
    assert result.never_offered == [
        "rdma/ib: the DGD's pods ask 2 in all; the 1 node(s) that can take them offer 1 in all even when empty "
        "(allocatable rdma/ib: 1 on 1 node(s) (gpu-0))"]


def test_memory_beyond_every_node_is_insufficient() -> None:
    small = [node("gpu-0", memory="256Gi", **{"rdma/ib": "8"}), node("gpu-1", memory="384Gi", **{"rdma/ib": "8"})]
    result = check_capacity(load_dgd(V1BETA1), small, [], namespace=NS)
    assert result.outcome == "insufficient"
    assert result.never_offered[0] == (
        "memory: component(s) DecodeWorker, PrefillWorker ask 512Gi per pod; none of the 2 node(s) they may use "
        "offers that much (allocatable memory: 384Gi on 1 node(s) (gpu-1); 256Gi on 1 node(s) (gpu-0))")


def test_resources_offered_apart_but_never_together() -> None:
    nodes = [node("gpu-0"), node("nic-0", gpus=0, **{"rdma/ib": "8"})]
    result = check_capacity(load_dgd(V1ALPHA1), nodes, [], namespace=NS)
    assert result.outcome == "insufficient"
    assert result.never_offered == [  # the two workers differ (ephemeral storage): one line each
        "component(s) SglangPrefillWorker ask 1 nvidia.com/gpu, 8 cpu, 64Gi memory, 1 rdma/ib per pod; each is "
        "offered by some of the 2 node(s) they may use, but none offers all of it at once",
        "component(s) SglangDecodeWorker ask 1 nvidia.com/gpu, 2 cpu, 10Gi ephemeral-storage, 64Gi memory, "
        "1 rdma/ib per pod; each is offered by some of the 2 node(s) they may use, but none offers all of it at once"]


def test_what_other_pods_use_now_is_not_counted_it_stays_a_contention_wait() -> None:
    # Every CPU and every HCA of the GPU nodes is in use by another tenant's pods: step 2 still says
    # sufficient (step 6 waits on "Insufficient cpu" as contention); the GPUs stay counted as today.
    busy = [{"metadata": {"name": f"t-{i}", "namespace": "other"},
             "spec": {"nodeName": f"gpu-{i}", "containers": [{"resources": {"requests": {"cpu": "192",
                                                                                         "rdma/ib": "8"}}}]},
             "status": {"phase": "Running"}} for i in range(2)]
    result = check_capacity(load_dgd(V1BETA1), rdma_nodes("8"), busy, namespace=NS)
    assert result.outcome == "sufficient" and result.never_offered == []


def test_a_node_the_pods_may_not_use_does_not_offer_them_anything() -> None:
    nodes = [node("gpu-0"), node("reserved-0", taint="example.com/reserved-for", **{"rdma/ib": "8"})]
    result = check_capacity(load_dgd(V1ALPHA1), nodes, [], namespace=NS)
    (line,) = result.never_offered
    assert "none of the 1 node(s) they may use" in line and "(gpu-0)" in line and "reserved-0" not in line


def test_a_gpu_less_dgd_is_not_needed_unless_a_resource_is_never_offered() -> None:
    mocker = """
apiVersion: nvidia.com/v1beta1
kind: DynamoGraphDeployment
metadata: {name: mocker}
spec:
  components:
  - name: Frontend
    type: frontend
    podTemplate: {spec: {containers: [{name: main, image: x, resources: {requests: {cpu: "CPU"}}}]}}
"""
    fits = check_capacity(parse_dgd(mocker.replace("CPU", "2")), rdma_nodes(None), [])
    assert fits.outcome == "not needed" and fits.table() == []
    never = check_capacity(parse_dgd(mocker.replace("CPU", "500")), rdma_nodes(None), [])
    assert never.outcome == "insufficient" and never.reasons == never.never_offered
    assert never.never_offered[0].startswith("cpu: component(s) Frontend ask 500 per pod")


def test_a_dgd_too_big_to_expand_is_still_judged_on_what_is_never_offered() -> None:
    text = V1BETA1.read_text().replace("replicas: 2", "replicas: 20000")
    result = check_capacity(parse_dgd(text), rdma_nodes(None), [], namespace=NS)
    assert result.outcome == "insufficient" and result.never_offered[0].startswith("rdma/ib: ")


# ------------------------------------------------------------------ DRA claims


def device_class(name: str, driver: str | None) -> dict[str, Any]:
    selectors = [{"cel": {"expression": f'device.driver == "{driver}"'}}] if driver else []
    return {"kind": "DeviceClass", "metadata": {"name": name}, "spec": {"selectors": selectors}}


def template(name: str, cls: str, count: int = 1, *, v1: bool = True) -> dict[str, Any]:
    req = {"name": "r", "exactly": {"deviceClassName": cls, "count": count}} if v1 else \
        {"name": "r", "deviceClassName": cls, "count": count}
    return {"kind": "ResourceClaimTemplate", "metadata": {"name": name},
            "spec": {"spec": {"devices": {"requests": [req]}}}}


def a_slice(driver: str, node_name: str | None, devices: int) -> dict[str, Any]:
    spec: dict[str, Any] = {"driver": driver, "devices": [{"name": f"d{i}"} for i in range(devices)]}
    spec.update({"nodeName": node_name} if node_name else {"allNodes": True})
    return dra.slim_slice({"spec": spec})


def claiming(template_name: str) -> str:
    """The v1alpha1 sample with one worker claiming ``template_name`` per pod."""
    return V1ALPHA1.read_text().replace(
        "          args: [python3 -m dynamo.sglang --model-path Qwen/Qwen3-32B --disaggregation-mode prefill]",
        "          args: [python3 -m dynamo.sglang --model-path Qwen/Qwen3-32B --disaggregation-mode prefill]\n"
        f"        resourceClaims: [{{name: nic, resourceClaimTemplateName: {template_name}}}]")


def view(*, classes: list[dict[str, Any]] | None, slices: list[dict[str, Any]] | None = None,
         templates: list[dict[str, Any]] = ()) -> dra.DraView:
    return dra.DraView(classes=None if classes is None else {c["metadata"]["name"]: c for c in classes},
                       slices=slices, templates={t["metadata"]["name"]: t for t in templates})


NODES = rdma_nodes("1")


def test_the_device_requests_of_every_served_shape() -> None:
    assert dra.requests_of(template("t", "nic.example.com", 2)) == [dra.Request("r", ("nic.example.com",), 2)]
    assert dra.requests_of(template("t", "nic.example.com", 2, v1=False)) == [
        dra.Request("r", ("nic.example.com",), 2)]
    claim = {"kind": "ResourceClaim", "spec": {"devices": {"requests": [
        {"name": "any", "firstAvailable": [{"deviceClassName": "a"}, {"deviceClassName": "b"}]},
        {"name": "all", "exactly": {"deviceClassName": "c", "allocationMode": "All"}}]}}}
    assert dra.requests_of(claim) == [dra.Request("any", ("a", "b"), 1), dra.Request("all", ("c",), 1)]
    assert dra.driver_of(device_class("x", "gpu.nvidia.com")) == "gpu.nvidia.com"
    assert dra.driver_of(device_class("x", None)) is None
    assert dra.is_gpu("mig.nvidia.com", None) and dra.is_gpu("x", "gpu.amd.com")
    assert not dra.is_gpu("compute-domain-default-channel.nvidia.com", "compute-domain.nvidia.com")


def test_a_claim_of_a_device_class_the_cluster_does_not_define_is_never_offered() -> None:
    seen = view(classes=[], slices=[], templates=[template("nic", "rdma.example.com")])
    result = check_capacity(parse_dgd(claiming("nic")), NODES, [], namespace=NS, dra=seen)
    assert result.outcome == "insufficient"
    (line,) = result.never_offered
    assert line == ("component SglangPrefillWorker's DRA claim nic (template nic) asks device class "
                    "rdma.example.com, which the cluster does not define (no such DeviceClass): no node can ever "
                    "offer it")


def test_a_driver_that_publishes_no_device_on_the_nodes_the_pods_may_use_is_never_offered() -> None:
    classes = [device_class("rdma.example.com", "rdma.example.com")]
    tmpl = [template("nic", "rdma.example.com", 2)]
    none = view(classes=classes, slices=[a_slice("rdma.example.com", "gpu-0", 1)], templates=tmpl)
    result = check_capacity(parse_dgd(claiming("nic")), NODES, [], namespace=NS, dra=none)
    (line,) = result.never_offered
    assert "asks 2 device(s) of class rdma.example.com (driver rdma.example.com); none of the 3 node(s)" in line
    assert "(devices in ResourceSlices: gpu-0 (1), cpu-0 (0), gpu-1 (0))" in line
    as_listed = {"spec": {"driver": "rdma.example.com", "nodeName": "gpu-1", "devices": [{"name": "a"}, {"name": "b"}]}}
    for slices in ([a_slice("rdma.example.com", "gpu-1", 2)], [a_slice("rdma.example.com", None, 4)], [as_listed]):
        ok = check_capacity(parse_dgd(claiming("nic")), NODES, [], namespace=NS,
                            dra=view(classes=classes, slices=slices, templates=tmpl))
        assert ok.outcome == "sufficient" and not ok.never_offered, slices


def test_a_computedomain_channel_leaves_the_gpu_count_known() -> None:
    # The GB200 recipes: the template is made by the manifest's ComputeDomain; the GPUs are gpu: "4".
    docs = load_all(GB200, "gb200")
    dgd = load_dgd(GB200)
    assert dgd.component("decode").dra_claims == (
        DraClaim("compute-domain-channel", template="trtllm-test-compute-domain-channel"),)
    result = check_capacity(dgd, rdma_nodes(None, n=2), [], namespace=NS, dra=dra.DraView.from_documents(docs))
    assert result.outcome == "sufficient" and result.gpus_requested == 8
    assert result.dra == [{"component": "decode", "claim": "compute-domain-channel",
                           "devices": "made by ComputeDomain trtllm-test-compute-domain of the manifest (its "
                                      "channels, not GPUs)"}]


@pytest.mark.parametrize(("seen", "why"), [
    (None, "DRA objects were not read"),
    (view(classes=None, templates=[template("nic", "gpu.nvidia.com")]), "DeviceClasses not read"),
    (view(classes=[device_class("gpu.nvidia.com", "gpu.nvidia.com")], slices=[a_slice("gpu.nvidia.com", "gpu-0", 8)],
          templates=[template("nic", "gpu.nvidia.com")]), "asks GPUs through DRA"),
    (view(classes=[], slices=[]), "template nic not found"),
])
def test_a_claim_that_may_hide_gpus_leaves_capacity_unknown_never_sufficient(seen: dra.DraView | None,
                                                                               why: str) -> None:
    result = check_capacity(parse_dgd(claiming("nic")), NODES, [], namespace=NS, dra=seen)
    assert result.outcome == "unknown"
    assert any(why in r and "GPU count unknown" in r for r in result.reasons), result.reasons


# ------------------------------------------------------------------ step 2's reads and verdicts


RES = "resource.k8s.io"
CLASSES, SLICES = Resource(RES, "v1", "deviceclasses", False, "DeviceClass"), \
    Resource(RES, "v1", "resourceslices", False, "ResourceSlice")
TEMPLATES = Resource(RES, "v1", "resourceclaimtemplates", True, "ResourceClaimTemplate")


@pytest.fixture
def fake() -> Iterator[tuple[FakeApi, Kube, list[Any]]]:
    with fakekube.installed() as made:
        yield made


def validator(kube: Kube, tmp_path: Path, nodes: list[dict[str, Any]]) -> Validator:
    checker = Validator(kube, ValidationInputs(NS, tmp_path / "deploy.yaml", {}, None, {}, tmp_path))
    checker.nodes = nodes
    return checker


def gate(kube: Kube, tmp_path: Path, text: str) -> Validator:
    checker = validator(kube, tmp_path, NODES)
    checker.check_capacity(parse_dgd(text), {"deploy": [d for d in load_yaml_text(text, "deploy", "fix it") if d]})
    return checker


def test_step_2_blocks_rdma_no_node_offers_before_any_mutation(fake, tmp_path: Path) -> None:
    api, kube, _ = fake
    checker = validator(kube, tmp_path, rdma_nodes(None))
    checker.check_capacity(load_dgd(V1BETA1))
    (finding,) = checker.report.blockers
    assert finding.category == BlockerClass.RESOURCE_CAPACITY == "resource-capacity"
    assert finding.message.startswith("no node the pods may use can ever offer what they ask: rdma/ib: component(s) "
                                      "DecodeWorker, PrefillWorker ask 4 per pod")
    assert "(cpu-0, gpu-0, gpu-1)" in finding.message and "device plugin or DRA driver" in finding.fix
    assert checker.report.capacity is not None and checker.report.capacity["capacity"] == "insufficient"
    assert checker.report.capacity["never_offered"] and not checker.report.limitations
    assert {r.method for r in api.requests} == {"GET"}  # read-only: the pods, nothing else


def test_dra_not_served_is_a_limitation_never_a_block(fake, tmp_path: Path) -> None:
    _, kube, _ = fake
    checker = gate(kube, tmp_path, claiming("nic"))
    assert checker.report.ok and checker.report.capacity["capacity"] == "unknown"
    assert "DRA claims: resource.k8s.io not served" in checker.report.limitations


def test_dra_objects_this_identity_may_not_list_are_limitations_never_a_block(fake, tmp_path: Path) -> None:
    api, kube, _ = fake
    api.served = [CLASSES, SLICES, TEMPLATES]
    api.fail("GET", "/apis/resource.k8s.io/v1/deviceclasses", forbidden("list", "deviceclasses"))
    api.fail("GET", "/apis/resource.k8s.io/v1/resourceslices", forbidden("list", "resourceslices"))
    api.fail("GET", f"/apis/resource.k8s.io/v1/namespaces/{NS}/resourceclaimtemplates/nic",
             forbidden("get", "resourceclaimtemplates"))
    checker = gate(kube, tmp_path, claiming("nic"))
    assert checker.report.ok and checker.report.capacity["capacity"] == "unknown"
    assert {line for line in checker.report.limitations if line.startswith("DRA claims")} == {
        "DRA claims: DeviceClasses list forbidden", "DRA claims: ResourceSlices list forbidden",
        "DRA claims: ResourceClaimTemplate nic: read forbidden"}


def test_a_cluster_template_naming_a_device_class_that_does_not_exist_blocks(fake, tmp_path: Path) -> None:
    api, kube, _ = fake
    api.served = [CLASSES, SLICES, TEMPLATES]
    api.put(CLASSES, device_class("gpu.nvidia.com", "gpu.nvidia.com"))
    api.put(TEMPLATES, {**template("nic", "rdma.example.com"), "metadata": {"name": "nic", "namespace": NS}})
    checker = gate(kube, tmp_path, claiming("nic"))
    (finding,) = checker.report.blockers
    assert finding.category == "resource-capacity" and "asks device class rdma.example.com" in finding.message
    assert checker.report.capacity["dra"][0]["devices"] == "no such DeviceClass"
