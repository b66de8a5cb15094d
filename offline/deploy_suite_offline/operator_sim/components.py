"""The newest operator's component path: DynamoComponentDeployments (DCDs) and per-component Services.

As ``docs/offline-cluster.md`` ("Operator profiles") records: the newest operator turns each DGD
component into a DCD named ``<dgd>-<lowercased component>``, plus ``-<workerHash>`` for worker,
prefill and decode components (the first 8 hex digits of a SHA-256 over the worker components'
specs, so a worker change makes new DCDs); each DCD owns an ``apps/v1`` Deployment of its own name
whose selector is ``nvidia.com/selector=<dcd>``. Owner chain: DGD -> DCD -> Deployment ->
ReplicaSet -> Pod. Every component gets a Service ``<dgd>-<lowercased component>``: frontends
``http`` 8000, workers ``system`` 9090, EPP ``grpc`` 9002.

Pure: manifests from the DGD object and its plan, no Kubernetes access.
"""

from __future__ import annotations

import copy
import hashlib
import json

from deploy_suite.constants import LABEL_COMPONENT, LABEL_COMPONENT_TYPE, LABEL_DGD_NAME, LABEL_SELECTOR, Obj
from deploy_suite_offline.operator_sim.plan import LABEL_MANAGED_BY, MANAGED_BY, Plan, child_name
from deploy_suite_offline.operator_sim.spec import WORKER_TYPES, Part

DCD_API = "nvidia.com/v1beta1"
DCD_KIND = "DynamoComponentDeployment"
LABEL_WORKER_HASH = "nvidia.com/dynamo-worker-hash"
# Ports of the per-component Services (name, port) by component type.
SERVICE_PORTS = {"frontend": ("http", 8000), "epp": ("grpc", 9002)}
WORKER_PORT = ("system", 9090)


def worker_hash(obj: Obj) -> str:
    """First 8 hex digits of SHA-256 over the worker components' specs, in name order."""
    spec = obj.get("spec") or {}
    if "components" in spec:
        raw = {str(c.get("name")): c for c in spec.get("components") or []
               if str(c.get("type") or c.get("componentType") or "") in WORKER_TYPES}
    else:
        raw = {str(k): v for k, v in (spec.get("services") or {}).items()
               if str((v or {}).get("componentType") or "") in WORKER_TYPES}
    data = json.dumps({k: raw[k] for k in sorted(raw)}, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(data.encode()).hexdigest()[:8]


def dcd_name(plan: Plan, component: Part, hash_: str) -> str:
    base = child_name(plan.name, component.name)
    return f"{base}-{hash_}" if component.type in WORKER_TYPES else base


def dcd_manifest(plan: Plan, component: Part, name: str, owner: Obj, raw: Obj) -> Obj:
    """The DCD for one component: the component's own spec, shared fields of the graph added."""
    spec = copy.deepcopy(raw)
    spec.pop("name", None)
    spec.update({"type": component.type, "replicas": component.replicas,
                 "dynamoNamespace": f"{plan.namespace}-{plan.name}", "componentName": component.name})
    if plan.model.backend_framework:
        spec["backendFramework"] = plan.model.backend_framework
    if component.node_count > 1:
        spec["multinode"] = {"nodeCount": component.node_count}
    return {"apiVersion": DCD_API, "kind": DCD_KIND,
            "metadata": {"name": name, "namespace": plan.namespace, "ownerReferences": [owner],
                         "labels": {LABEL_DGD_NAME: plan.name, LABEL_COMPONENT: component.name,
                                    LABEL_COMPONENT_TYPE: component.label_type,
                                    LABEL_MANAGED_BY: MANAGED_BY}},
            "spec": spec}


def owned_deployment(deployment: Obj, name: str, owner: Obj, hash_: str | None) -> Obj:
    """The plan's Deployment renamed after its DCD and owned by it (selector ``nvidia.com/selector=<dcd>``)."""
    dep = copy.deepcopy(deployment)
    dep["metadata"]["name"] = name
    dep["metadata"]["ownerReferences"] = [owner]
    labels = {LABEL_SELECTOR: name, **({LABEL_WORKER_HASH: hash_} if hash_ else {})}
    dep["metadata"]["labels"].update(labels)
    dep["spec"]["selector"] = {"matchLabels": {LABEL_SELECTOR: name}}
    dep["spec"]["template"]["metadata"]["labels"].update(labels)
    return dep


def component_service(plan: Plan, component: Part, owner: Obj) -> Obj | None:
    """The Service of one component (None for types without one, e.g. a planner)."""
    if component.type in WORKER_TYPES:
        port_name, port = WORKER_PORT
    elif component.type in SERVICE_PORTS:
        port_name, port = SERVICE_PORTS[component.type]
    else:
        return None
    return {
        "apiVersion": "v1", "kind": "Service",
        "metadata": {"name": child_name(plan.name, component.name), "namespace": plan.namespace,
                     "ownerReferences": [owner],
                     "labels": {LABEL_DGD_NAME: plan.name, LABEL_COMPONENT: component.name,
                                LABEL_MANAGED_BY: MANAGED_BY}},
        "spec": {"type": "ClusterIP",
                 "selector": {LABEL_DGD_NAME: plan.name, LABEL_COMPONENT: component.name},
                 "ports": [{"name": port_name, "port": port, "targetPort": port, "protocol": "TCP"}]},
    }


def available_condition(deployment: Obj | None, ready: bool, since: str, error: str | None = None) -> Obj:
    """The DCD's ``Available`` condition, mirrored from its Deployment as the operator does: a
    Deployment the apiserver refused (``error``) or a ReplicaSet that cannot create pods
    (``ReplicaFailure``) is the reason it stays False."""
    conds = {c.get("type"): c for c in ((deployment or {}).get("status") or {}).get("conditions") or []}
    if error:
        return {"type": "Available", "status": "False", "reason": "DeploymentFailed", "message": error,
                "lastTransitionTime": since}
    if ready:
        return {"type": "Available", "status": "True", "reason": "DeploymentAvailable",
                "message": "Deployment is available", "lastTransitionTime": since}
    failure = conds.get("ReplicaFailure")
    if failure and failure.get("status") == "True":
        reason, message = str(failure.get("reason") or "FailedCreate"), str(failure.get("message") or "")
    elif deployment is None:
        reason, message = "DeploymentNotFound", "Deployment not found"
    else:
        reason, message = "DeploymentNotAvailable", "Deployment does not have minimum availability"
    return {"type": "Available", "status": "False", "reason": reason, "message": message,
            "lastTransitionTime": since}
