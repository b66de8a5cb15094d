"""Kubernetes discovery as the replica sets it up on kind (operator_sim/discovery.py): what each
Dynamo runtime needs to find the others, read from the children the replica applies."""

from __future__ import annotations

from typing import Any

from deploy_suite_offline.operator_sim import discovery
from deploy_suite_offline.operator_sim.plan import build_plan, owner_reference
from tests.unit.test_offline_plan import main_container, stored


def _shaped(name: str) -> tuple[Any, list[dict[str, Any]]]:
    obj = stored(name)
    plan = build_plan(obj)
    children = [*plan.deployments.values(), *plan.services]
    return plan, discovery.shape(children, plan, owner_reference(obj))


def test_each_dgd_gets_its_discovery_account_with_the_rights_the_runtime_uses() -> None:
    plan, children = _shaped("dgd-alpha-agg.yaml")
    by_kind = {c["kind"]: c for c in children}
    account = discovery.account_name(plan.name)
    assert by_kind["ServiceAccount"]["metadata"]["name"] == account
    rules = {r["apiGroups"][0]: (r["resources"], r["verbs"]) for r in by_kind["Role"]["rules"]}
    assert rules["discovery.k8s.io"] == (["endpointslices"], ["get", "list", "watch"])
    assert {"create", "patch", "watch"} <= set(rules["nvidia.com"][1])
    assert rules["nvidia.com"][0] == ["dynamoworkermetadatas"]
    binding = by_kind["RoleBinding"]
    assert binding["subjects"] == [{"kind": "ServiceAccount", "name": account, "namespace": plan.namespace}]
    assert binding["roleRef"]["name"] == by_kind["Role"]["metadata"]["name"]
    # Owned by the DGD: the garbage collector removes them with it.
    assert all(c["metadata"]["ownerReferences"][0]["uid"] == "uid-1" for c in children)


def test_pods_run_as_that_account_with_the_downward_api_and_the_discovery_labels() -> None:
    plan, children = _shaped("dgd-alpha-agg.yaml")
    deployments = [c for c in children if c["kind"] == "Deployment"]
    assert len(deployments) == len(plan.deployments)
    for dep in deployments:
        template = dep["spec"]["template"]
        assert template["metadata"]["labels"][discovery.BACKEND_LABEL] == "kubernetes"
        assert template["metadata"]["labels"][discovery.ENABLED_LABEL] == "true"
        assert template["spec"]["serviceAccountName"] == discovery.account_name(plan.name)
        env = {e["name"]: e for e in main_container(dep)["env"]}
        assert env["POD_UID"]["valueFrom"]["fieldRef"]["fieldPath"] == "metadata.uid"
        assert env["POD_NAME"]["valueFrom"]["fieldRef"]["fieldPath"] == "metadata.name"
        assert env["DYN_DISCOVERY_BACKEND"]["value"] == "kubernetes"
    worker = next(d for d in deployments if "frontend" not in d["metadata"]["name"])
    assert {e["name"]: e.get("value") for e in main_container(worker)["env"]}["DYN_SYSTEM_PORT"] == "9090"
    # The plan itself is left as it was (kwok's path never sees these).
    assert "serviceAccountName" not in next(iter(plan.deployments.values()))["spec"]["template"]["spec"]


def test_every_component_has_a_labelled_service_so_its_endpoint_slices_are_watched() -> None:
    plan, children = _shaped("dgd-alpha-agg.yaml")
    services = {c["metadata"]["name"]: c for c in children if c["kind"] == "Service"}
    assert len(services) == len(plan.model.components)
    for service in services.values():
        assert {k: service["metadata"]["labels"][k] for k in discovery.LABELS} == discovery.LABELS
    worker = next(s for n, s in services.items() if s["spec"]["ports"][0]["name"] == "system")
    assert worker["spec"]["ports"][0]["port"] == 9090
