"""What a DGD asks for: its child Deployments and Services, computed from the object alone (pure).

The real operator's observable contract, as :mod:`deploy_suite_offline.operator_sim` describes it:
per component an ``apps/v1`` Deployment ``<dgd>-<lowercased component>`` (multinode: replicas x
nodeCount pods) whose pods carry the operator's labels and the DGD's pod spec (image, command,
args, env + DYN_NAMESPACE/DYN_COMPONENT/DYN_DISCOVERY_BACKEND, envFrom, GPU requests and limits,
scheduling, pull secrets, PVC volumes, /dev/shm); a frontend sidecar where the component asks for
one (v1alpha1 ``frontendSidecar: {image, args, ...}`` built into a container ``sidecar-frontend``,
v1beta1 ``frontendSidecar: <container>`` given the frontend's defaults); a frontend Service
``<dgd>-<frontend>`` on port 8000; ownerReferences on every child. No Kubernetes access here:
:func:`build_plan` takes the DGD object and returns a :class:`Plan`, or raises ``ReconcileError``
for what the operator rejects.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from deploy_suite.constants import (
    DGD_KIND,
    LABEL_COMPONENT,
    LABEL_COMPONENT_TYPE,
    LABEL_DGD_NAME,
    LABEL_DYNAMO_NAMESPACE,
    LABEL_SELECTOR,
    LABEL_SUB_COMPONENT_TYPE,
    V1BETA1,
    Obj,
)
from deploy_suite_offline.errors import ReconcileError
from deploy_suite_offline.operator_sim.spec import (
    COMPONENT_TYPES,
    FRONTEND_ARGS,
    FRONTEND_COMMAND,
    MAIN_CONTAINER,
    WORKER_TYPES,
    Graph,
    Part,
    PodShape,
    flag_value,
    is_alpha,
    read,
    split_args,
)

LABEL_MANAGED_BY = "app.kubernetes.io/managed-by"
MANAGED_BY = "deploy-suite-operator-sim"
FRONTEND_PORT = 8000
SYSTEM_PORT = 9090
# The EPP's gRPC port and gRPC health port, as the operator sets them (docs/offline-cluster.md, "The EPP").
EPP_GRPC_PORT = 9002
EPP_HEALTH_PORT = 9003
DEFAULT_SHM = "8Gi"
_FAILED = "failed to reconcile Dynamo components deployments"


def child_name(dgd_name: str, component: str) -> str:
    """The operator's resource name for a component: ``<dgd>-<lowercase(component)>``, dots -> '-'."""
    return f"{dgd_name}-{component.lower()}".replace(".", "-")


def dynamo_namespace(namespace: str, dgd_name: str) -> str:
    return f"{namespace}-{dgd_name}"



@dataclass
class Plan:
    """Everything a DGD asks for, computed from its object alone."""

    namespace: str
    name: str
    alpha: bool
    model: Graph
    deployments: dict[str, Obj]  # component name -> Deployment manifest
    services: list[Obj]
    frontends: list[str]  # frontend component names
    gaie: bool  # no frontend component: the frontend is a sidecar in other components' pods
    served_model: str
    router_mode: str
    sidecars: dict[str, str] = field(default_factory=dict)  # component -> frontend sidecar container

    @property
    def key(self) -> str:
        return f"{self.namespace}/{self.name}"

    @property
    def serves(self) -> bool:
        return bool(self.frontends) or self.gaie

    def served_components(self) -> list[str]:
        """Components whose pods expose the OpenAI port (frontends, or those with a frontend sidecar)."""
        if self.frontends:
            return list(self.frontends)
        return list(self.sidecars) if self.gaie else []

    @property
    def signature(self) -> tuple[str, str]:
        return self.served_model, self.router_mode


def _set_default_env(container: Obj, values: dict[str, str]) -> None:
    env = container.setdefault("env", [])
    names = {e.get("name") for e in env}
    env.extend({"name": k, "value": v} for k, v in values.items() if k not in names)


def _epp_defaults(main: Obj, pool: str, namespace: str) -> None:
    """The operator's EPP container (docs/offline-cluster.md, "The EPP"): the picker's gRPC port, gRPC health on
    9003 for its startup, liveness and readiness probes, and the picker's arguments unless the DGD
    gives its own. (The EndpointPickerConfig ConfigMap the file names is not modelled.)"""
    ports = main.setdefault("ports", [])
    for name, number in (("grpc", EPP_GRPC_PORT), ("grpc-health", EPP_HEALTH_PORT), ("metrics", SYSTEM_PORT)):
        if all(p.get("name") != name for p in ports):
            ports.append({"name": name, "containerPort": number, "protocol": "TCP"})
    health = {"grpc": {"port": EPP_HEALTH_PORT, "service": "inference-extension"}}
    main.setdefault("livenessProbe", {**health, "initialDelaySeconds": 5, "periodSeconds": 10})
    main.setdefault("readinessProbe", {**health, "initialDelaySeconds": 5, "periodSeconds": 10})
    main.setdefault("startupProbe", {**health, "periodSeconds": 10, "failureThreshold": 180})
    if not main.get("args"):
        main["args"] = ["-pool-name", pool, "-pool-namespace", namespace, "-pool-group", "inference.networking.k8s.io",
                        "-v", "4", "--zap-encoder", "json", "-grpc-port", str(EPP_GRPC_PORT),
                        "-grpc-health-port", str(EPP_HEALTH_PORT), "-config-file", "/etc/epp/epp-config-dynamo.yaml"]
    _set_default_env(main, {"USE_STREAMING": "true", "NVIDIA_VISIBLE_DEVICES": "void"})


def _operator_defaults(c: Part, pod: PodShape, dyn_ns: str, dgd: tuple[str, str] = ("", "")) -> Obj:
    """The main container with what the operator adds: frontend command and port, worker port and
    probes, the EPP's probes and arguments (``dgd``: the DGD's name and namespace), Dynamo env,
    /dev/shm. Returns the main container (changed in place)."""
    main: Obj = next(ct for ct in pod.spec.setdefault("containers", []) if ct.get("name") == MAIN_CONTAINER)
    if c.type == "epp":
        _epp_defaults(main, f"{dgd[0]}-pool", dgd[1])
    if c.type == "frontend":
        if not main.get("command") and not main.get("args"):
            main["command"] = ["python3", "-m", "dynamo.frontend"]
        ports = main.setdefault("ports", [])
        if all(p.get("name") != "http" for p in ports):
            ports.append({"name": "http", "containerPort": FRONTEND_PORT, "protocol": "TCP"})
    elif c.type in WORKER_TYPES:
        ports = main.setdefault("ports", [])
        if all(p.get("name") != "system" for p in ports):
            ports.append({"name": "system", "containerPort": SYSTEM_PORT, "protocol": "TCP"})
        # A worker may load its model for up to 2 hours (720 x 10 s) before liveness applies.
        main.setdefault("startupProbe", {"httpGet": {"path": "/live", "port": "system"}, "periodSeconds": 10,
                                         "timeoutSeconds": 5, "failureThreshold": 720})
    if c.type == "frontend" or c.type in WORKER_TYPES:
        port = "http" if c.type == "frontend" else "system"
        main.setdefault("livenessProbe", {"httpGet": {"path": "/live", "port": port}, "periodSeconds": 5,
                                          "failureThreshold": 1})
        main.setdefault("readinessProbe", {"httpGet": {"path": "/health", "port": port}, "periodSeconds": 10,
                                           "failureThreshold": 3})
    _set_default_env(main, {"DYN_NAMESPACE": dyn_ns, "DYN_COMPONENT": c.name, "DYN_DISCOVERY_BACKEND": "kubernetes"})
    if pod.shm not in ("0", ""):
        volumes = pod.spec.setdefault("volumes", [])
        if all(v.get("name") != "shared-memory" for v in volumes):
            volumes.append({"name": "shared-memory", "emptyDir": {"medium": "Memory", "sizeLimit": pod.shm}})
        mounts = main.setdefault("volumeMounts", [])
        if all(m.get("mountPath") != "/dev/shm" for m in mounts):
            mounts.append({"name": "shared-memory", "mountPath": "/dev/shm"})
    return main


def _deployment(model: Graph, c: Part, pod: PodShape, namespace: str, owner: Obj, dyn_ns: str) -> Obj:
    name = model.name
    selector = child_name(name, c.name)
    labels = {**model.labels, **pod.meta.get("labels", {}),
              LABEL_DGD_NAME: name, LABEL_COMPONENT: c.name, LABEL_COMPONENT_TYPE: c.label_type,
              LABEL_DYNAMO_NAMESPACE: dyn_ns, LABEL_SELECTOR: selector, "nvidia.com/metrics-enabled": "true"}
    if c.sub_component_type:
        labels[LABEL_SUB_COMPONENT_TYPE] = c.sub_component_type
    pod.spec["restartPolicy"] = "Always"
    template_meta: Obj = {"labels": labels}
    if pod.meta.get("annotations"):
        template_meta["annotations"] = pod.meta["annotations"]
    return {
        "apiVersion": "apps/v1", "kind": "Deployment",
        "metadata": {"name": selector, "namespace": namespace, "ownerReferences": [owner],
                     "labels": {LABEL_DGD_NAME: name, LABEL_COMPONENT: c.name,
                                LABEL_COMPONENT_TYPE: c.label_type, LABEL_SELECTOR: selector,
                                LABEL_MANAGED_BY: MANAGED_BY}},
        "spec": {"replicas": c.replicas * c.node_count, "selector": {"matchLabels": {LABEL_SELECTOR: selector}},
                 "template": {"metadata": template_meta, "spec": pod.spec}},
    }


def _frontend_service(model: Graph, c: Part, namespace: str, owner: Obj, dyn_ns: str) -> Obj:
    return {
        "apiVersion": "v1", "kind": "Service",
        "metadata": {"name": child_name(model.name, c.name), "namespace": namespace, "ownerReferences": [owner],
                     "labels": {LABEL_DGD_NAME: model.name, LABEL_COMPONENT: c.name, LABEL_MANAGED_BY: MANAGED_BY}},
        "spec": {"type": "ClusterIP",
                 "selector": {LABEL_COMPONENT_TYPE: c.label_type, LABEL_DYNAMO_NAMESPACE: dyn_ns,
                              LABEL_COMPONENT: c.name},
                 "ports": [{"name": "http", "port": FRONTEND_PORT, "targetPort": "http", "protocol": "TCP"}]},
    }


def owner_reference(obj: Obj) -> Obj:
    """The DGD as controller owner of a child (controllerutil.SetControllerReference)."""
    meta = obj["metadata"]
    return {"apiVersion": obj.get("apiVersion", V1BETA1), "kind": DGD_KIND, "name": meta["name"],
            "uid": meta["uid"], "controller": True, "blockOwnerDeletion": True}


def build_plan(obj: Obj) -> Plan:
    """The children a DGD object asks for; raises ReconcileError for what the operator rejects."""
    meta = obj["metadata"]
    namespace, name = meta["namespace"], meta["name"]
    alpha = is_alpha(obj)
    try:
        model = read(obj)
    except ReconcileError as exc:
        raise ReconcileError(f"{_FAILED}: {exc}") from exc
    owner = owner_reference(obj)
    dyn_ns = dynamo_namespace(namespace, name)
    deployments: dict[str, Obj] = {}
    services: list[Obj] = []
    sidecars: dict[str, str] = {}
    for c in model.components:
        if alpha and c.raw_type is not None and c.raw_type not in COMPONENT_TYPES:
            # Conversion to the v1beta1 hub maps componentType onto a strict enum.
            raise ReconcileError(f"{_FAILED}: cannot convert service {c.name!r} to nvidia.com/v1beta1: "
                                 f"componentType {c.raw_type!r} is not one of {sorted(COMPONENT_TYPES)}")
        if not c.image:
            raise ReconcileError(f"{_FAILED}: component {c.name!r}: container {MAIN_CONTAINER!r} has no image")
        pod = c.pod()
        _operator_defaults(c, pod, dyn_ns, (name, namespace))
        sidecar = _frontend_sidecar(c.frontend_sidecar, pod.spec["containers"])
        if sidecar and sidecar == c.frontend_sidecar:
            _frontend_defaults(next(ct for ct in pod.spec["containers"] if ct.get("name") == sidecar), dyn_ns)
        if sidecar:
            sidecars[c.name] = sidecar
        deployments[c.name] = _deployment(model, c, pod, namespace, owner, dyn_ns)
    frontends = [c.name for c in model.components if c.type == "frontend"]
    services = [_frontend_service(model, model.component(fe), namespace, owner, dyn_ns) for fe in frontends]
    gaie = not frontends and bool(sidecars)
    workers = [c for c in model.components if c.is_worker]
    served = next((c.served_model for c in workers if c.served_model), None) or name
    return Plan(namespace, name, alpha, model, deployments, services, frontends, gaie, served,
                _router_mode(deployments, frontends if frontends else list(sidecars), sidecars), sidecars)


def _frontend_defaults(container: Obj, dyn_ns: str) -> None:
    """What the operator merges into a frontend sidecar (its FrontendDefaults): the command, port
    ``http`` 8000, probes on it and the Dynamo env, under what the container says."""
    container["command"] = container.get("command") or list(FRONTEND_COMMAND)
    container["args"] = container.get("args") or list(FRONTEND_ARGS)
    ports = container.setdefault("ports", [])
    if all(p.get("name") != "http" for p in ports):
        ports.append({"name": "http", "containerPort": FRONTEND_PORT, "protocol": "TCP"})
    container.setdefault("livenessProbe", {"httpGet": {"path": "/live", "port": "http"}, "periodSeconds": 10})
    container.setdefault("readinessProbe", {"httpGet": {"path": "/health", "port": "http"}, "periodSeconds": 10})
    _set_default_env(container, {"DYNAMO_PORT": str(FRONTEND_PORT), "DYN_HTTP_PORT": str(FRONTEND_PORT),
                                 "DYN_NAMESPACE_PREFIX": dyn_ns, "DYN_DISCOVERY_BACKEND": "kubernetes"})


def _frontend_sidecar(named: str | None, containers: list[Obj]) -> str | None:
    """The container running a Dynamo frontend next to ``main``: the one ``frontendSidecar`` names
    (v1alpha1: the container built from it), else one whose command runs the frontend."""
    if named and any(c.get("name") == named for c in containers):
        return named
    for c in containers:
        if c.get("name") == MAIN_CONTAINER:
            continue
        text = " ".join(str(t) for t in [*(c.get("command") or []), *(c.get("args") or [])])
        if "dynamo.frontend" in text or "frontend" in str(c.get("name", "")):
            return str(c.get("name"))
    return None


def _router_mode(deployments: dict[str, Obj], components: list[str], sidecars: dict[str, str]) -> str:
    """``direct`` when the frontend (or gaie sidecar) runs ``--router-mode direct`` or sets
    DYN_ROUTER_MODE=direct; everything else is served round-robin."""
    for comp in components:
        dep = deployments.get(comp)
        if dep is None:
            continue
        wanted = sidecars.get(comp, MAIN_CONTAINER)
        for c in dep["spec"]["template"]["spec"].get("containers") or []:
            if c.get("name") != wanted:
                continue
            env = {str(e.get("name")): str(e.get("value")) for e in c.get("env") or [] if "value" in e}
            tokens = split_args([str(t) for t in [*(c.get("command") or []), *(c.get("args") or [])]], env)
            if flag_value(tokens, ["--router-mode"]) == "direct" or env.get("DYN_ROUTER_MODE") == "direct":
                return "direct"
    return "round-robin"


def deployment_readiness(dep: Obj | None, desired: int) -> tuple[bool, str, Obj]:
    """(ready, reason, replica status) of one child Deployment, as the DCD reports it."""
    st = (dep or {}).get("status") or {}
    counts = {k: int(st.get(k) or 0) for k in ("replicas", "updatedReplicas", "readyReplicas", "availableReplicas")}
    if dep is None:
        return False, "deployment not found", counts
    fresh = int(st.get("observedGeneration") or 0) >= int(dep["metadata"].get("generation") or 0)
    ready = fresh and counts["updatedReplicas"] >= desired and counts["availableReplicas"] >= desired \
        and counts["replicas"] <= desired
    return ready, f"desired={desired}, ready={counts['readyReplicas']}, available={counts['availableReplicas']}", counts
