"""The operator simulator's plan and status, without a cluster: what a DGD object asks for."""

from __future__ import annotations

import copy
import functools
from pathlib import Path
from typing import Any

import pytest

from deploy_suite import clock, yamlio
from deploy_suite_offline.errors import ReconcileError
from deploy_suite_offline.operator_sim.controller import _same_status, status_for
from deploy_suite_offline.operator_sim.plan import build_plan, deployment_readiness

DATA = Path(__file__).parents[1] / "integration" / "data"


def stored(name: str, namespace: str = "ns") -> dict[str, Any]:
    """A DGD as the apiserver returns it: namespace and uid filled in."""
    doc: dict[str, Any] = yamlio.load_one(DATA / name)
    doc["metadata"].update(namespace=namespace, uid="uid-1", generation=3)
    return doc


def main_container(dep: dict[str, Any]) -> dict[str, Any]:
    containers: list[dict[str, Any]] = dep["spec"]["template"]["spec"]["containers"]
    return next(c for c in containers if c["name"] == "main")


def test_a_v1beta1_dgd_becomes_one_deployment_per_component_and_a_frontend_service() -> None:
    plan = build_plan(stored("dgd-beta-agg.yaml"))
    assert (plan.key, plan.alpha, plan.served_model, plan.router_mode) == ("ns/beta-agg", False, "llama-beta",
                                                                          "round-robin")
    assert {d["metadata"]["name"] for d in plan.deployments.values()} == {"beta-agg-frontend", "beta-agg-decode"}
    decode = plan.deployments["decode"]
    assert decode["metadata"]["ownerReferences"] == [{
        "apiVersion": "nvidia.com/v1beta1", "kind": "DynamoGraphDeployment", "name": "beta-agg", "uid": "uid-1",
        "controller": True, "blockOwnerDeletion": True}]
    labels = decode["spec"]["template"]["metadata"]["labels"]
    assert labels["team"] == "inference"  # the pod template's own labels are kept
    assert labels["nvidia.com/selector"] == "beta-agg-decode" == decode["spec"]["selector"]["matchLabels"][
        "nvidia.com/selector"]
    assert labels["nvidia.com/dynamo-namespace"] == "ns-beta-agg"
    main = main_container(decode)
    # Passed through as written: a limit alone (the apiserver's defaulting adds the equal request).
    assert main["resources"] == {"limits": {"nvidia.com/gpu": "1"}}
    env = {e["name"]: e.get("value") for e in main["env"]}
    assert env == {"DYN_NAMESPACE": "ns-beta-agg", "DYN_COMPONENT": "decode", "DYN_DISCOVERY_BACKEND": "kubernetes"}
    volumes = decode["spec"]["template"]["spec"]["volumes"]
    assert {"name": "shared-memory", "emptyDir": {"medium": "Memory", "sizeLimit": "4Gi"}} in volumes
    [svc] = plan.services
    assert svc["metadata"]["name"] == "beta-agg-frontend"
    assert svc["spec"]["ports"] == [{"name": "http", "port": 8000, "targetPort": "http", "protocol": "TCP"}]
    frontend = main_container(plan.deployments["Frontend"])
    assert frontend["command"] == ["python3", "-m", "dynamo.frontend"]  # the operator's default
    assert frontend["ports"] == [{"name": "http", "containerPort": 8000, "protocol": "TCP"}]


def test_v1alpha1_fields_are_converted_into_the_pod_spec() -> None:
    plan = build_plan(stored("dgd-alpha-agg.yaml"))
    assert plan.alpha and plan.served_model == "qwen3-alpha-agg"
    worker = plan.deployments["VllmDecodeWorker"]
    spec = worker["spec"]["template"]["spec"]
    main = main_container(worker)
    assert main["envFrom"] == [{"secretRef": {"name": "hf-token-secret"}}]
    assert {"name": "HF_HOME", "value": "/opt/models"} in main["env"]  # graph-level envs merged in
    assert main["resources"]["limits"]["nvidia.com/gpu"] == "1"
    assert spec["imagePullSecrets"] == [{"name": "nvcr-pull"}]
    assert {"name": "shared-memory", "emptyDir": {"medium": "Memory", "sizeLimit": "16Gi"}} in spec["volumes"]


def test_direct_routing_is_read_from_the_frontend_arguments() -> None:
    doc = stored("dgd-alpha-agg.yaml")
    doc["spec"]["services"]["Frontend"]["extraPodSpec"]["mainContainer"]["args"] = ["--router-mode", "direct"]
    assert build_plan(doc).router_mode == "direct"


def test_a_gaie_graph_is_served_by_its_workers_frontend_sidecar() -> None:
    plan = build_plan(stored("dgd-gaie-direct.yaml"))
    assert plan.gaie and not plan.frontends and not plan.services
    assert plan.served_components() == ["VllmWorker"]
    assert plan.sidecars == {"VllmWorker": "frontend-sidecar"}
    assert plan.router_mode == "direct"


def test_the_epp_gets_the_operators_grpc_probes_ports_and_picker_arguments() -> None:
    plan = build_plan(stored("dgd-gaie-direct.yaml"))
    epp = main_container(plan.deployments["Epp"])
    assert {p["name"]: p["containerPort"] for p in epp["ports"]} == {"grpc": 9002, "grpc-health": 9003, "metrics": 9090}
    for probe in ("startupProbe", "livenessProbe", "readinessProbe"):
        assert epp[probe]["grpc"] == {"port": 9003, "service": "inference-extension"}, probe
    args = epp["args"]
    assert args[args.index("-pool-name") + 1] == "gaie-direct-pool"
    assert args[args.index("-grpc-health-port") + 1] == "9003" and "command" not in epp
    # The DGD's own arguments win over the operator's.
    doc = stored("dgd-gaie-direct.yaml")
    doc["spec"]["components"][0]["podTemplate"]["spec"]["containers"][0]["args"] = ["-pool-name", "mine"]
    assert main_container(build_plan(doc).deployments["Epp"])["args"] == [
        "-pool-name", "mine"]


@pytest.mark.parametrize(("mutate", "needle"), [
    (lambda d: d["spec"]["services"]["VllmDecodeWorker"].update(componentType="main"), "componentType 'main'"),
    (lambda d: d["spec"]["services"]["Frontend"]["extraPodSpec"]["mainContainer"].pop("image"), "has no image"),
])
def test_what_the_operator_rejects_is_a_reconcile_error(mutate: Any, needle: str) -> None:
    doc = stored("dgd-alpha-agg.yaml")
    mutate(doc)
    with pytest.raises(ReconcileError, match=needle) as info:
        build_plan(doc)
    assert str(info.value).startswith("failed to reconcile Dynamo components deployments")


def test_the_plan_does_not_change_the_object_it_reads() -> None:
    doc = stored("dgd-alpha-agg.yaml")
    before = copy.deepcopy(doc)
    build_plan(doc)
    assert doc == before


@pytest.mark.parametrize(("status", "generation", "ready"), [
    ({"observedGeneration": 2, "replicas": 2, "updatedReplicas": 2, "availableReplicas": 2}, 2, True),
    ({"observedGeneration": 1, "replicas": 2, "updatedReplicas": 2, "availableReplicas": 2}, 2, False),  # stale
    ({"observedGeneration": 2, "replicas": 3, "updatedReplicas": 2, "availableReplicas": 3}, 2, False),  # surge
    ({"observedGeneration": 2, "replicas": 2, "updatedReplicas": 2, "availableReplicas": 1}, 2, False),
])
def test_deployment_readiness(status: dict[str, int], generation: int, ready: bool) -> None:
    dep = {"metadata": {"generation": generation}, "status": status}
    assert deployment_readiness(dep, 2)[0] is ready
    assert deployment_readiness(None, 2)[:2] == (False, "deployment not found")


def test_the_ready_condition_keeps_its_transition_time_until_it_flips(request: pytest.FixtureRequest) -> None:
    fake = clock.FakeClock()
    request.addfinalizer(functools.partial(clock.install, clock.install(fake)))
    obj: dict[str, Any] = {"metadata": {"generation": 4}, "status": {}}
    pending = status_for(obj, "pending", "some_resources_are_not_ready", "x", {"a": {"readyReplicas": 0}}, False)
    obj["status"] = pending
    fake.advance(60)
    still = status_for(obj, "pending", "some_resources_are_not_ready", "y", {"a": {"readyReplicas": 0}}, False)
    assert still["conditions"][-1]["lastTransitionTime"] == pending["conditions"][-1]["lastTransitionTime"]
    obj["status"] = still
    done = status_for(obj, "successful", "all_resources_are_ready", "ok", {}, False)
    assert done["conditions"][-1]["lastTransitionTime"] != pending["conditions"][-1]["lastTransitionTime"]
    assert done["observedGeneration"] == 4
    assert done["components"] == {"a": None}  # a component that went away is nulled in the merge patch
    failed = status_for(obj, "failed", "failed_to_reconcile_the_resources", "boom", None, None)
    assert "observedGeneration" not in failed  # only a successful reconcile advances it
    assert _same_status(still, status_for({**obj, "status": still}, "pending", "some_resources_are_not_ready", "y",
                                          {"a": {"readyReplicas": 0}}, False))
