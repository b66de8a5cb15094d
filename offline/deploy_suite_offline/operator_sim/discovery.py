"""Kubernetes discovery as the operator sets it up for a DGD's pods (``--discovery kubernetes``).

What a Dynamo 1.6.1 pod needs to find the others with ``DYN_DISCOVERY_BACKEND=kubernetes``, as
docs/offline-cluster.md ("Discovery between pods on kind") records from ai-dynamo's source: each
runtime writes a ``DynamoWorkerMetadata`` object named after its pod (owner: the pod, from
``POD_NAME``/``POD_UID``/``POD_NAMESPACE`` given by the downward API) and watches the namespace's
EndpointSlices labelled ``nvidia.com/dynamo-discovery-backend=kubernetes`` and
``nvidia.com/dynamo-discovery-enabled=true``: an instance is seen when its pod is a ready endpoint
of such a slice and its metadata object exists. So the operator writes, per DGD, a ServiceAccount
``<dgd>-k8s-service-discovery`` with a Role (read endpoints, pods and EndpointSlices; write
``dynamoworkermetadatas``) and its RoleBinding; the pods run as that account with the downward-API
env and the discovery labels; every component has a Service carrying the labels (its
EndpointSlices inherit them); workers serve the system port (``DYN_SYSTEM_*``) their probes ask.
The CRD itself is the platform's (installed with the cluster: ``MANIFESTS/discovery-crd.yaml``).

Pure: manifests from the plan, no Kubernetes access.
"""

from __future__ import annotations

import copy

from deploy_suite.constants import LABEL_COMPONENT, LABEL_COMPONENT_TYPE, LABEL_DGD_NAME, LABEL_DYNAMO_NAMESPACE, Obj
from deploy_suite_offline.operator_sim.plan import (
    FRONTEND_PORT,
    LABEL_MANAGED_BY,
    MANAGED_BY,
    SYSTEM_PORT,
    Plan,
    child_name,
)
from deploy_suite_offline.operator_sim.spec import MAIN_CONTAINER, WORKER_TYPES

BACKEND_LABEL = "nvidia.com/dynamo-discovery-backend"
ENABLED_LABEL = "nvidia.com/dynamo-discovery-enabled"
LABELS = {BACKEND_LABEL: "kubernetes", ENABLED_LABEL: "true"}
DOWNWARD = (("POD_NAME", "metadata.name"), ("POD_NAMESPACE", "metadata.namespace"), ("POD_UID", "metadata.uid"))
WORKER_ENV = {"DYN_SYSTEM_ENABLED": "true", "DYN_SYSTEM_USE_ENDPOINT_HEALTH_STATUS": '["generate"]',
              "DYN_SYSTEM_PORT": str(SYSTEM_PORT), "DYN_HEALTH_CHECK_ENABLED": "false"}
RBAC_API = "rbac.authorization.k8s.io/v1"


def account_name(dgd: str) -> str:
    return f"{dgd}-k8s-service-discovery"


def rbac(plan: Plan, owner: Obj) -> list[Obj]:
    """The ServiceAccount, Role and RoleBinding the DGD's pods discover each other with."""
    name = account_name(plan.name)
    meta = {"namespace": plan.namespace, "ownerReferences": [owner],
            "labels": {LABEL_DGD_NAME: plan.name, LABEL_MANAGED_BY: MANAGED_BY, "app.kubernetes.io/component": "rbac"}}
    read = ["get", "list", "watch"]
    return [
        {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": name, **copy.deepcopy(meta)}},
        {"apiVersion": RBAC_API, "kind": "Role", "metadata": {"name": f"{name}-role", **copy.deepcopy(meta)},
         "rules": [{"apiGroups": [""], "resources": ["endpoints", "pods"], "verbs": read},
                   {"apiGroups": ["discovery.k8s.io"], "resources": ["endpointslices"], "verbs": read},
                   {"apiGroups": ["nvidia.com"], "resources": ["dynamoworkermetadatas"],
                    "verbs": ["create", "get", "list", "watch", "update", "patch", "delete"]}]},
        {"apiVersion": RBAC_API, "kind": "RoleBinding", "metadata": {"name": f"{name}-binding", **copy.deepcopy(meta)},
         "subjects": [{"kind": "ServiceAccount", "name": name, "namespace": plan.namespace}],
         "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": f"{name}-role"}},
    ]


def _set_env(container: Obj, values: list[Obj]) -> None:
    env = container.setdefault("env", [])
    names = {e.get("name") for e in env}
    env.extend(v for v in values if v["name"] not in names)


def shape_pods(deployment: Obj, plan: Plan, component_type: str) -> Obj:
    """The Deployment's pods as the operator shapes them for Kubernetes discovery (a copy)."""
    dep = copy.deepcopy(deployment)
    template = dep["spec"]["template"]
    template["metadata"].setdefault("labels", {}).update(LABELS)
    spec = template["spec"]
    spec.setdefault("serviceAccountName", account_name(plan.name))
    downward = [{"name": n, "valueFrom": {"fieldRef": {"fieldPath": path}}} for n, path in DOWNWARD]
    for container in spec.get("containers") or []:
        if container.get("name") == MAIN_CONTAINER or "dynamo" in " ".join(
                str(t) for t in [*(container.get("command") or []), *(container.get("args") or [])]):
            _set_env(container, downward)
        if container.get("name") == MAIN_CONTAINER and component_type in WORKER_TYPES:
            _set_env(container, [{"name": k, "value": v} for k, v in WORKER_ENV.items()])
    return dep


def labelled(service: Obj) -> Obj:
    out = copy.deepcopy(service)
    out["metadata"].setdefault("labels", {}).update(LABELS)
    return out


def component_services(plan: Plan, owner: Obj, have: set[str]) -> list[Obj]:
    """A Service per component that has none yet (the older operators' path writes the frontend's
    only), selecting its pods by type, Dynamo namespace and component, with the discovery labels."""
    out = []
    dyn_ns = f"{plan.namespace}-{plan.name}"
    for c in plan.model.components:
        name = child_name(plan.name, c.name)
        if name in have or (c.type not in WORKER_TYPES and c.type != "frontend"):
            continue
        port_name, port = ("http", FRONTEND_PORT) if c.type == "frontend" else ("system", SYSTEM_PORT)
        labels: dict[str, str] = {LABEL_DGD_NAME: plan.name, LABEL_COMPONENT: c.name, LABEL_MANAGED_BY: MANAGED_BY,
                                  **LABELS}
        out.append({"apiVersion": "v1", "kind": "Service",
                    "metadata": {"name": name, "namespace": plan.namespace, "ownerReferences": [owner],
                                 "labels": labels},
                    "spec": {"type": "ClusterIP",
                             "selector": {LABEL_COMPONENT_TYPE: c.label_type, LABEL_DYNAMO_NAMESPACE: dyn_ns,
                                          LABEL_COMPONENT: c.name},
                             "ports": [{"name": port_name, "port": port, "targetPort": port_name,
                                        "protocol": "TCP"}]}})
    return out


def shape(children: list[Obj], plan: Plan, owner: Obj) -> list[Obj]:
    """The children with Kubernetes discovery set up: RBAC first, pods shaped, Services labelled."""
    types = {c.name: c.type for c in plan.model.components}
    out: list[Obj] = rbac(plan, owner)
    services: set[str] = set()
    for child in children:
        if child.get("kind") == "Deployment":
            component = child["metadata"].get("labels", {}).get(LABEL_COMPONENT, "")
            out.append(shape_pods(child, plan, types.get(component, "")))
        elif child.get("kind") == "Service":
            services.add(child["metadata"]["name"])
            out.append(labelled(child))
        else:
            out.append(child)
    return out + component_services(plan, owner, services)
