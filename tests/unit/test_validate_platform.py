"""Step 2's platform checks (deploy_suite.procedure.platform) and the DGD API version the access layer
resolves from discovery (deploy_suite.access.kube.Kube.resolve_versions), against the in-memory apiserver."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from deploy_suite.access.kube import DGD, KNOWN, Kube, Obj, Resource
from deploy_suite.access.watch import Watch
from deploy_suite.model.dgd import from_documents
from deploy_suite.procedure import platform
from tests import fakekube
from tests.fakekube import FakeApi

DATA = Path(__file__).parent / "data"
NS = "demo"
OP_NS = "dynamo-system"
DCD = KNOWN["DynamoComponentDeployment"]


def dgd_resource(version: str, kind: str = "DynamoGraphDeployment") -> Resource:
    plural = "dynamographdeployments" if kind == "DynamoGraphDeployment" else "dynamocomponentdeployments"
    return Resource("nvidia.com", version, plural, True, kind)


GROVE = Resource("grove.io", "v1alpha1", "podcliquesets", True, "PodCliqueSet")
LWS = Resource("leaderworkerset.x-k8s.io", "v1", "leaderworkersets", True, "LeaderWorkerSet")
VOLCANO = Resource("scheduling.volcano.sh", "v1beta1", "podgroups", True, "PodGroup")
KAI_QUEUE = Resource("scheduling.run.ai", "v2", "queues", False, "Queue")
WEBHOOK_SERVICE = "dynamo-platform-dynamo-operator-webhook-service"


@pytest.fixture
def fake() -> Iterator[tuple[FakeApi, Kube, list[Any]]]:
    with fakekube.installed() as found:
        yield found


def doc(path: str = "dgd_v1alpha1_agg.yaml", annotations: dict[str, str] | None = None) -> Obj:
    out: Obj = next(d for d in yaml.safe_load_all((DATA / path).read_text()) if d["kind"] == "DynamoGraphDeployment")
    if annotations:
        out["metadata"]["annotations"] = annotations
    return out


def check(kube: Kube, manifest: Obj, crd: Obj | None = None, nodes: list[Obj] | None = None) -> platform.Verdicts:
    return platform.check_platform(kube, from_documents([manifest]), manifest, crd, nodes)


def serve(api: FakeApi, *resources: Resource) -> None:
    api.served.extend([dgd_resource("v1alpha1"), dgd_resource("v1alpha1", "DynamoComponentDeployment"), *resources])


def classes(out: platform.Verdicts) -> list[str]:
    return [cls for cls, _, _ in out.blockers]


# ------------------------------------------------------------------ multinode orchestrators


@pytest.mark.parametrize(("served", "orchestrator"), [
    ((), None),
    ((LWS,), None),  # the newest operator needs Volcano beside LWS
    ((VOLCANO,), None),
    ((LWS, VOLCANO), "lws"),
    ((GROVE,), "grove"),
])
def test_a_multinode_dgd_needs_grove_or_lws_with_volcano(
        fake: tuple[FakeApi, Kube, list[Any]], served: tuple[Resource, ...], orchestrator: str | None) -> None:
    api, kube, _ = fake
    serve(api, *served)
    out = check(kube, doc("dgd_multinode.yaml"))
    assert out.evidence["needs"]["orchestrator"] == orchestrator
    if orchestrator is None:
        [(cls, message, fix)] = out.blockers
        assert cls == "platform" and "decode nodeCount 2" in message
        assert "no multinode orchestrator available" in message
        assert "install Grove, or LeaderWorkerSet and Volcano" in fix
    else:
        assert out.blockers == []


@pytest.mark.parametrize(("available", "state"), [(True, "available"), (False, "unavailable"), (None, "unknown")])
def test_grove_s_operator_must_be_available_when_the_dgd_goes_the_grove_way(
        fake: tuple[FakeApi, Kube, list[Any]], available: bool | None, state: str) -> None:
    api, kube, _ = fake
    serve(api, GROVE)
    if available is not None:
        api.put(KNOWN["Deployment"], {"metadata": {"name": "grove-operator", "namespace": "grove-system",
                                                   "labels": {"app.kubernetes.io/name": "grove-operator"}},
                                      "status": {"conditions": [{"type": "Available", "status": str(available)}]}})
    out = check(kube, doc("dgd_multinode.yaml"))
    assert out.evidence["needs"]["grove_operator"].endswith(state)
    assert classes(out) == ([] if available is not False else ["platform"])


def test_grove_switched_off_by_annotation_does_not_count(fake: tuple[FakeApi, Kube, list[Any]]) -> None:
    api, kube, _ = fake
    serve(api, GROVE)
    out = check(kube, doc("dgd_multinode.yaml", {platform.GROVE_ANNOTATION: "false"}))
    assert classes(out) == ["platform"]


def test_a_single_node_dgd_needs_no_orchestrator_and_discovery_is_asked_once(
        fake: tuple[FakeApi, Kube, list[Any]]) -> None:
    api, kube, records = fake
    serve(api)
    out = check(kube, doc())
    check(kube, doc())
    assert out.blockers == [] and out.evidence["needs"]["multinode"] == {}
    assert out.evidence["api_groups"] == {"grove.io": False, "leaderworkerset.x-k8s.io": False,
                                          "scheduling.volcano.sh": False, "scheduling.run.ai": False}
    assert [r.path for r in api.requests].count("/apis") == 1
    assert any(r.command.endswith("api-versions") for r in records)
    assert out.evidence["kubernetes_version"] == "v1.36.1"


def test_forbidden_discovery_is_a_limitation(fake: tuple[FakeApi, Kube, list[Any]]) -> None:
    api, kube, _ = fake
    api.fail("GET", "/apis", fakekube.forbidden("get", "apis"))
    api.fail("GET", "/version", fakekube.forbidden("get", "version"))
    out = check(kube, doc("dgd_multinode.yaml"))
    assert out.blockers == [] and out.evidence["api_groups"] == "forbidden"
    assert out.evidence["kubernetes_version"] == "forbidden"
    assert any("orchestrators the DGD needs are unverified" in w for w in out.limitations)


def test_forbidden_group_discovery_is_a_limitation(fake: tuple[FakeApi, Kube, list[Any]]) -> None:
    api, kube, _ = fake
    serve(api)
    api.fail("GET", "/apis/nvidia.com/v1alpha1", fakekube.forbidden("get", "nvidia.com"))
    out = check(kube, doc())
    assert out.blockers == [] and "served" not in out.evidence["dgd_api"]
    assert any("API discovery of nvidia.com forbidden" in w for w in out.limitations)


# ------------------------------------------------------------------ Grove and KAI asked for by annotation


def test_grove_asked_for_but_not_installed_blocks(fake: tuple[FakeApi, Kube, list[Any]]) -> None:
    api, kube, _ = fake
    serve(api)
    out = check(kube, doc(annotations={platform.GROVE_ANNOTATION: "true"}))
    [(cls, message, _)] = out.blockers
    assert cls == "platform" and "grove.io" in message


@pytest.mark.parametrize(("kai", "queue", "blocked"), [
    (False, False, "KAI scheduler's API"), (True, False, "does not exist"), (True, True, None)])
def test_the_kai_queue_of_the_annotation_must_exist(fake: tuple[FakeApi, Kube, list[Any]], kai: bool, queue: bool,
                                                    blocked: str | None) -> None:
    api, kube, _ = fake
    serve(api, *([KAI_QUEUE] if kai else []))
    if queue:
        api.put(KAI_QUEUE, {"metadata": {"name": "team-a"}})
    out = check(kube, doc(annotations={platform.KAI_QUEUE_ANNOTATION: "team-a"}))
    if blocked is None:
        assert out.blockers == [] and out.evidence["needs"]["kai_queue_exists"] is True
    else:
        [(cls, message, _)] = out.blockers
        assert cls == "platform" and blocked in message and "team-a" in message


# ------------------------------------------------------------------ the DGD API version


def test_a_manifest_version_the_cluster_does_not_serve_blocks(fake: tuple[FakeApi, Kube, list[Any]]) -> None:
    api, kube, _ = fake
    api.served.extend([dgd_resource("v1beta1"), dgd_resource("v1beta1", "DynamoComponentDeployment")])
    crd = {"spec": {"versions": [{"name": "v1alpha1", "served": False, "storage": False},
                                 {"name": "v1beta1", "served": True, "storage": True}]}}
    out = check(kube, doc(), crd=crd)
    [(cls, message, fix)] = out.blockers
    assert cls == "platform" and "nvidia.com/v1alpha1 is not served" in message and "v1beta1" in message
    assert "nvidia.com/v1beta1" in fix
    assert out.evidence["dgd_api"] == {"manifest": "nvidia.com/v1alpha1", "crd_served": ["v1beta1"],
                                       "crd_storage": "v1beta1", "served": ["v1beta1"], "preferred": "v1beta1",
                                       "used": {"DynamoGraphDeployment": "v1beta1",
                                                "DynamoComponentDeployment": "v1beta1"}}


def test_the_manifests_served_version_is_kept_beside_a_preferred_newer_one(
        fake: tuple[FakeApi, Kube, list[Any]]) -> None:
    api, kube, _ = fake
    api.served.extend([dgd_resource("v1beta1"), dgd_resource("v1alpha1"),
                       dgd_resource("v1beta1", "DynamoComponentDeployment")])
    out = check(kube, doc())
    assert out.blockers == []
    assert out.evidence["dgd_api"]["used"] == {"DynamoGraphDeployment": "v1alpha1",
                                               "DynamoComponentDeployment": "v1beta1"}


def test_the_access_layer_reads_dgds_in_the_resolved_version(fake: tuple[FakeApi, Kube, list[Any]]) -> None:
    api, kube, _ = fake
    api.served.extend([dgd_resource("v1beta1"), dgd_resource("v1beta1", "DynamoComponentDeployment")])
    api.put(dgd_resource("v1beta1"), fakekube.dgd("d", NS))
    # The fast path: no discovery until asked, the table's v1alpha1.
    assert kube.get_or_none(DGD, "d", NS) is None and not [r for r in api.requests if r.path.startswith("/apis/nv")
                                                           and r.path.count("/") == 3]
    assert kube.resolve_versions("nvidia.com/v1alpha1") == {"DynamoGraphDeployment": "v1beta1",
                                                            "DynamoComponentDeployment": "v1beta1"}
    assert kube.get(DGD, "d", NS)["metadata"]["name"] == "d"
    assert api.requests[-1].path == f"/apis/nvidia.com/v1beta1/namespaces/{NS}/dynamographdeployments/d"
    assert [i["metadata"]["name"] for i in kube.list_items(DGD, NS)[0]] == ["d"]
    assert kube.list_collection(Watch(DGD, NS))[0][0]["metadata"]["name"] == "d"
    kube.list_items(DCD, NS)
    assert api.requests[-1].path == f"/apis/nvidia.com/v1beta1/namespaces/{NS}/dynamocomponentdeployments"
    # A caller naming a version explicitly keeps it.
    kube.get_or_none(dgd_resource("v1alpha1"), "d", NS)
    assert api.requests[-1].path.startswith("/apis/nvidia.com/v1alpha1/")


def test_nothing_served_keeps_the_table(fake: tuple[FakeApi, Kube, list[Any]]) -> None:
    api, kube, _ = fake
    assert kube.resolve_versions("nvidia.com/v1beta1") == {"DynamoGraphDeployment": None,
                                                           "DynamoComponentDeployment": None}
    kube.get_or_none(DGD, "d", NS)
    assert api.requests[-1].path.startswith("/apis/nvidia.com/v1alpha1/")


# ------------------------------------------------------------------ the operator and its webhooks


def operator_deployment(available: bool = True, labels: dict[str, str] | None = None) -> Obj:
    return {"metadata": {"name": "dynamo-platform-dynamo-operator-controller-manager", "namespace": OP_NS,
                         "labels": labels or {}},
            "spec": {"replicas": 1, "template": {
                "metadata": {"labels": {"control-plane": "controller-manager", "app.kubernetes.io/name": "op"}},
                "spec": {"containers": [
                    {"name": "kube-rbac-proxy", "image": "quay.io/brancz/kube-rbac-proxy:v0.15.0"},
                    {"name": "manager", "image": "nvcr.io/nvidia/ai-dynamo/kubernetes-operator:0.7.1",
                     "args": ["--config=/etc/x", "--operator-version=0.7.1"]}]}}},
            "status": {"readyReplicas": 1 if available else 0, "conditions": [
                {"type": "Available", "status": "True" if available else "False"}]}}


def webhook_config(service: str = WEBHOOK_SERVICE) -> Obj:
    return {"metadata": {"name": "dynamo-platform-dynamo-operator-validating"}, "webhooks": [
        {"name": "vdynamographdeployment.kb.io", "failurePolicy": "Fail",
         "clientConfig": {"service": {"namespace": OP_NS, "name": service}},
         "rules": [{"apiGroups": ["nvidia.com"], "resources": ["dynamographdeployments"]}]},
        {"name": "vother.kb.io", "clientConfig": {"service": {"namespace": OP_NS, "name": service}},
         "rules": [{"apiGroups": ["apps"], "resources": ["deployments"]}]}]}


def operator_platform(api: FakeApi, available: bool = True) -> None:
    serve(api)
    api.put(platform.WEBHOOK_CONFIGS["validating"], webhook_config())
    api.put(KNOWN["Service"], {"metadata": {"name": WEBHOOK_SERVICE, "namespace": OP_NS},
                               "spec": {"selector": {"control-plane": "controller-manager"}}})
    api.put(KNOWN["Deployment"], operator_deployment(available))


def test_the_operator_is_found_through_its_webhook_service(fake: tuple[FakeApi, Kube, list[Any]]) -> None:
    api, kube, _ = fake
    operator_platform(api)
    out = check(kube, doc())
    assert out.blockers == []
    assert out.evidence["operator"] == {
        "state": "available", "found_by": f"the webhook Service {OP_NS}/{WEBHOOK_SERVICE}",
        "deployment": f"{OP_NS}/dynamo-platform-dynamo-operator-controller-manager", "ready": "1/1",
        "image": "nvcr.io/nvidia/ai-dynamo/kubernetes-operator:0.7.1", "version": "0.7.1"}
    assert out.evidence["webhooks"] == {"conversion": None, "mutating": [], "validating": [
        {"config": "dynamo-platform-dynamo-operator-validating", "webhook": "vdynamographdeployment.kb.io",
         "service": f"{OP_NS}/{WEBHOOK_SERVICE}", "failure_policy": "Fail"}]}


def test_the_operator_is_found_through_the_crds_conversion_webhook(fake: tuple[FakeApi, Kube, list[Any]]) -> None:
    api, kube, _ = fake
    serve(api)
    api.put(KNOWN["Service"], {"metadata": {"name": "conv", "namespace": OP_NS},
                               "spec": {"selector": {"control-plane": "controller-manager"}}})
    api.put(KNOWN["Deployment"], operator_deployment())
    crd = {"spec": {"conversion": {"strategy": "Webhook", "webhook": {
        "clientConfig": {"service": {"namespace": OP_NS, "name": "conv"}}}}}}
    out = check(kube, doc(), crd=crd)
    assert out.evidence["webhooks"]["conversion"] == f"{OP_NS}/conv"
    assert out.evidence["operator"]["found_by"] == f"the webhook Service {OP_NS}/conv"


def test_a_dead_operator_blocks_as_a_platform_fault(fake: tuple[FakeApi, Kube, list[Any]]) -> None:
    api, kube, _ = fake
    operator_platform(api, available=False)
    out = check(kube, doc())
    [(cls, message, fix)] = out.blockers
    assert cls == "platform" and "not Available (0/1 ready)" in message
    assert fix.startswith(f"check the operator pod: kubectl -n {OP_NS} get pods")
    assert out.evidence["operator"]["state"] == "unavailable"


def test_the_operator_is_found_by_its_charts_labels(fake: tuple[FakeApi, Kube, list[Any]]) -> None:
    api, kube, _ = fake
    serve(api)
    api.put(KNOWN["Deployment"], operator_deployment(labels={"app.kubernetes.io/part-of": "dynamo-operator",
                                                             "app.kubernetes.io/version": "0.7.1"}))
    out = check(kube, doc())
    assert out.evidence["operator"]["found_by"] == "the label app.kubernetes.io/part-of=dynamo-operator"


def test_no_operator_found_is_unknown_not_a_blocker(fake: tuple[FakeApi, Kube, list[Any]]) -> None:
    api, kube, _ = fake
    serve(api)
    out = check(kube, doc())
    assert out.blockers == [] and out.warnings == [] and out.evidence["operator"] == {"state": "unknown"}


def test_forbidden_platform_reads_are_limitations(fake: tuple[FakeApi, Kube, list[Any]]) -> None:
    api, kube, _ = fake
    serve(api)
    api.fail("GET", "/apis/apps/v1/deployments", fakekube.forbidden("list", "deployments"))
    for res in platform.WEBHOOK_CONFIGS.values():
        api.fail("GET", f"/apis/{res.group}/{res.version}/{res.plural}", fakekube.forbidden("list", res.plural))
    out = check(kube, doc())
    assert out.blockers == [] and out.evidence["operator"] == {"state": "forbidden"}
    assert out.evidence["webhooks"]["validating"] == "forbidden" == out.evidence["webhooks"]["mutating"]
    assert len(out.limitations) == 3


# ------------------------------------------------------------------ GPU nodes


def node(name: str, gpus: int, labelled: bool = True) -> Obj:
    labels = {"nvidia.com/gpu.product": "NVIDIA-H200", "nvidia.com/gpu.count": "8"} if labelled else {}
    return {"metadata": {"name": name, "labels": labels}, "status": {"allocatable": {"nvidia.com/gpu": str(gpus)}}}


def test_gpu_nodes_without_allocatable_gpus_are_a_platform_fault(fake: tuple[FakeApi, Kube, list[Any]]) -> None:
    api, kube, _ = fake
    serve(api)
    out = check(kube, doc(), nodes=[node("h200-0", 0), node("h200-1", 0), node("cpu-0", 0, labelled=False)])
    [(cls, message, fix)] = out.blockers
    assert cls == "platform" and "h200-0, h200-1" in message and "device plugin" in message
    assert "nvidia-device-plugin" in fix
    assert out.evidence["gpu_nodes"] == {"with_allocatable_gpus": 0,
                                         "labelled_without_allocatable": ["h200-0", "h200-1"],
                                         "without_gfd_labels": []}


def test_some_gpu_nodes_without_allocatable_gpus_warn(fake: tuple[FakeApi, Kube, list[Any]]) -> None:
    api, kube, _ = fake
    serve(api)
    out = check(kube, doc(), nodes=[node("h200-0", 0), node("h200-1", 8), node("h100-0", 8, labelled=False)])
    assert out.blockers == [] and len(out.warnings) == 1 and "h200-0" in out.warnings[0]
    assert out.evidence["gpu_nodes"]["without_gfd_labels"] == ["h100-0"]


def test_a_gpu_less_dgd_is_not_blocked_by_gpu_nodes(fake: tuple[FakeApi, Kube, list[Any]]) -> None:
    api, kube, _ = fake
    serve(api)
    mocker = doc()
    for svc in mocker["spec"]["services"].values():
        svc.pop("resources", None)
    out = check(kube, mocker, nodes=[node("h200-0", 0)])
    assert out.blockers == [] and out.warnings == []
