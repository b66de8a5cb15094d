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

import copy
from dataclasses import dataclass, field
from typing import Any

from deploy_suite.constants import (
    DGD_KIND,
    GPU_RESOURCE,
    LABEL_COMPONENT,
    LABEL_COMPONENT_TYPE,
    LABEL_DGD_NAME,
    LABEL_DYNAMO_NAMESPACE,
    LABEL_SELECTOR,
    LABEL_SUB_COMPONENT_TYPE,
    V1ALPHA1,
    V1BETA1,
)
from deploy_suite.errors import InputError
from deploy_suite.model import frontend
from deploy_suite.model.dgd import COMPONENT_TYPES, MAIN_CONTAINER, WORKER_TYPES, Component, Dgd, from_documents
from deploy_suite.model.podspec import flag_value, split_args
from deploy_suite_offline.errors import ReconcileError

Obj = dict[str, Any]

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


def is_alpha(obj: Obj) -> bool:
    """The shape is decided by content (``spec.services`` is v1alpha1, ``spec.components`` v1beta1):
    without the real conversion webhook, both API versions serve the same stored object."""
    spec = obj.get("spec") or {}
    return "services" in spec and "components" not in spec


@dataclass
class Plan:
    """Everything a DGD asks for, computed from its object alone."""

    namespace: str
    name: str
    alpha: bool
    model: Dgd
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


@dataclass
class _Pod:
    """A component's pod as written in the DGD, before the operator's defaults are added."""

    meta: Obj
    spec: Obj
    shm: str  # /dev/shm size; "0" when disabled
    gpu_sides: dict[str, str]  # v1alpha1 GPU count per side (requests/limits) as written; v1beta1: in the spec


def merge_env(*layers: list[Obj]) -> list[Obj]:
    """Later layers win by name, order of first appearance kept (the operator's merge)."""
    merged: dict[str, Obj] = {}
    for layer in layers:
        for item in layer:
            if isinstance(item, dict) and item.get("name"):
                merged[str(item["name"])] = item
    return list(merged.values())


def _set_default_env(container: Obj, values: dict[str, str]) -> None:
    env = container.setdefault("env", [])
    names = {e.get("name") for e in env}
    env.extend({"name": k, "value": v} for k, v in values.items() if k not in names)


def _alpha_resources(svc: Obj) -> Obj:
    """v1alpha1 ``resources`` (cpu, memory, custom) as container requests and limits."""
    resources = svc.get("resources") or {}
    out: Obj = {}
    for part in ("requests", "limits"):
        values = resources.get(part) or {}
        for key in ("cpu", "memory"):
            if values.get(key):
                out.setdefault(part, {})[key] = str(values[key])
        for key, value in (values.get("custom") or {}).items():
            out.setdefault(part, {})[key] = str(value)
    return out


def _alpha_pod(spec: Obj, svc: Obj, component: Component) -> _Pod:
    """v1alpha1 service -> pod, as conversion and the operator would build it."""
    extra = copy.deepcopy(svc.get("extraPodSpec") or {})
    main = extra.pop("mainContainer", None) or {}
    main["name"] = MAIN_CONTAINER
    sidecars = [c for c in extra.pop("containers", None) or [] if c.get("name") != MAIN_CONTAINER]
    main["env"] = merge_env(spec.get("envs") or [], svc.get("envs") or [], main.get("env") or [])
    if svc.get("envFromSecret"):
        main["envFrom"] = [{"secretRef": {"name": svc["envFromSecret"]}}, *(main.get("envFrom") or [])]
    resources = _alpha_resources(svc)
    if resources:
        main["resources"] = {**(main.get("resources") or {}), **resources}
    volumes = list(extra.get("volumes") or [])
    mounts = list(main.get("volumeMounts") or [])
    for vm in svc.get("volumeMounts") or []:
        name = vm.get("name")
        if not name:
            continue
        if all(v.get("name") != name for v in volumes):
            volumes.append({"name": name, "persistentVolumeClaim": {"claimName": name}})
        if vm.get("mountPoint") and all(m.get("name") != name for m in mounts):
            mounts.append({"name": name, "mountPath": vm["mountPoint"]})
    extra["volumes"] = volumes
    if mounts:
        main["volumeMounts"] = mounts
    extra["containers"] = [main, *sidecars]
    meta_src = svc.get("extraPodMetadata") or {}
    meta = {"labels": {**(svc.get("labels") or {}), **(meta_src.get("labels") or {})},
            "annotations": {**(svc.get("annotations") or {}), **(meta_src.get("annotations") or {})}}
    shm = svc.get("sharedMemory") or {}
    raw = svc.get("resources") or {}
    sides = {part: str((raw.get(part) or {})["gpu"]) for part in ("requests", "limits")
             if (raw.get(part) or {}).get("gpu") not in (None, "")}
    return _Pod(meta, extra, "0" if shm.get("disabled") else str(shm.get("size") or DEFAULT_SHM), sides)


def _beta_pod(comp: Obj, component: Component) -> _Pod:
    template = copy.deepcopy(comp.get("podTemplate") or {})
    meta = template.get("metadata") or {}
    spec = template.get("spec") or {}
    return _Pod({"labels": dict(meta.get("labels") or {}), "annotations": dict(meta.get("annotations") or {})},
                spec, str(comp.get("sharedMemorySize") or DEFAULT_SHM), {})


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


def _operator_defaults(c: Component, pod: _Pod, dyn_ns: str, dgd: tuple[str, str] = ("", "")) -> Obj:
    """The main container with what the operator adds: frontend command and port, worker port and
    probes, the EPP's probes and arguments (``dgd``: the DGD's name and namespace), Dynamo env,
    v1alpha1 GPU requests and limits, /dev/shm. Returns the main container (changed in place)."""
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
    if pod.gpu_sides:
        # v1alpha1 `requests.gpu` and `limits.gpu` go to their own side, as written: a limit alone
        # is completed by the apiserver's defaulting, a request without a limit (or a different
        # one) is an invalid pod template the apiserver refuses.
        resources = main.setdefault("resources", {})
        for part, count in pod.gpu_sides.items():
            resources.setdefault(part, {})[c.gpu_resource or GPU_RESOURCE] = count
    if pod.shm not in ("0", ""):
        volumes = pod.spec.setdefault("volumes", [])
        if all(v.get("name") != "shared-memory" for v in volumes):
            volumes.append({"name": "shared-memory", "emptyDir": {"medium": "Memory", "sizeLimit": pod.shm}})
        mounts = main.setdefault("volumeMounts", [])
        if all(m.get("mountPath") != "/dev/shm" for m in mounts):
            mounts.append({"name": "shared-memory", "mountPath": "/dev/shm"})
    return main


def _deployment(model: Dgd, c: Component, pod: _Pod, namespace: str, owner: Obj, dyn_ns: str) -> Obj:
    name = model.name
    selector = child_name(name, c.name)
    labels = {**model.labels, **pod.meta.get("labels", {}),
              LABEL_DGD_NAME: name, LABEL_COMPONENT: c.name, LABEL_COMPONENT_TYPE: c.raw_type or c.type,
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
                                LABEL_COMPONENT_TYPE: c.raw_type or c.type, LABEL_SELECTOR: selector,
                                LABEL_MANAGED_BY: MANAGED_BY}},
        "spec": {"replicas": c.replicas * c.node_count, "selector": {"matchLabels": {LABEL_SELECTOR: selector}},
                 "template": {"metadata": template_meta, "spec": pod.spec}},
    }


def _frontend_service(model: Dgd, c: Component, namespace: str, owner: Obj, dyn_ns: str) -> Obj:
    return {
        "apiVersion": "v1", "kind": "Service",
        "metadata": {"name": child_name(model.name, c.name), "namespace": namespace, "ownerReferences": [owner],
                     "labels": {LABEL_DGD_NAME: model.name, LABEL_COMPONENT: c.name, LABEL_MANAGED_BY: MANAGED_BY}},
        "spec": {"type": "ClusterIP",
                 "selector": {LABEL_COMPONENT_TYPE: c.raw_type or c.type, LABEL_DYNAMO_NAMESPACE: dyn_ns,
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
    spec = obj.get("spec") or {}
    alpha = is_alpha(obj)
    try:
        model = from_documents([{**obj, "apiVersion": V1ALPHA1 if alpha else V1BETA1}], f"{namespace}/{name}")
    except InputError as exc:
        raise ReconcileError(f"{_FAILED}: {exc}") from exc
    raw_by_name: dict[str, Obj] = (
        {str(k): v or {} for k, v in (spec.get("services") or {}).items()} if alpha
        else {str(c.get("name")): c for c in spec.get("components") or []})
    owner = owner_reference(obj)
    dyn_ns = dynamo_namespace(namespace, name)
    deployments: dict[str, Obj] = {}
    services: list[Obj] = []
    sidecars: dict[str, str] = {}
    for c in model.components:
        raw = raw_by_name.get(c.name, {})
        if alpha and c.raw_type is not None and c.raw_type not in COMPONENT_TYPES:
            # Conversion to the v1beta1 hub maps componentType onto a strict enum.
            raise ReconcileError(f"{_FAILED}: cannot convert service {c.name!r} to nvidia.com/v1beta1: "
                                 f"componentType {c.raw_type!r} is not one of {sorted(COMPONENT_TYPES)}")
        if not c.image:
            raise ReconcileError(f"{_FAILED}: component {c.name!r}: container {MAIN_CONTAINER!r} has no image")
        pod = _alpha_pod(spec, raw, c) if alpha else _beta_pod(raw, c)
        _operator_defaults(c, pod, dyn_ns, (name, namespace))
        if alpha and isinstance(raw.get("frontendSidecar"), dict):
            pod.spec["containers"].append(_alpha_frontend_sidecar(raw["frontendSidecar"]))
        sidecar = _frontend_sidecar(raw, pod.spec["containers"])
        if sidecar and raw.get("frontendSidecar") is not None:
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


def _alpha_frontend_sidecar(spec: Obj) -> Obj:
    """The container the operator builds from a v1alpha1 ``frontendSidecar`` spec (its
    ``generateFrontendSidecar``): ``args`` replace the default ones, ``envs`` and ``envFromSecret`` added."""
    container: Obj = {"name": frontend.SIDECAR_CONTAINER, "image": spec.get("image"),
                      "args": list(spec.get("args") or frontend.DEFAULT_ARGS)}
    if spec.get("envs"):
        container["env"] = copy.deepcopy(spec["envs"])
    if spec.get("envFromSecret"):
        container["envFrom"] = [{"secretRef": {"name": spec["envFromSecret"]}}]
    return container


def _frontend_defaults(container: Obj, dyn_ns: str) -> None:
    """What the operator merges into a frontend sidecar (its FrontendDefaults): the command, port
    ``http`` 8000, probes on it and the Dynamo env, under what the container says."""
    container["command"] = container.get("command") or list(frontend.DEFAULT_COMMAND)
    container["args"] = container.get("args") or list(frontend.DEFAULT_ARGS)
    ports = container.setdefault("ports", [])
    if all(p.get("name") != "http" for p in ports):
        ports.append({"name": "http", "containerPort": FRONTEND_PORT, "protocol": "TCP"})
    container.setdefault("livenessProbe", {"httpGet": {"path": "/live", "port": "http"}, "periodSeconds": 10})
    container.setdefault("readinessProbe", {"httpGet": {"path": "/health", "port": "http"}, "periodSeconds": 10})
    _set_default_env(container, {"DYNAMO_PORT": str(FRONTEND_PORT), "DYN_HTTP_PORT": str(FRONTEND_PORT),
                                 "DYN_NAMESPACE_PREFIX": dyn_ns, "DYN_DISCOVERY_BACKEND": "kubernetes"})


def _frontend_sidecar(raw: Obj, containers: list[Obj]) -> str | None:
    """The container running a Dynamo frontend next to ``main``: the one ``frontendSidecar`` names
    (v1alpha1: the container built from it), else one whose command runs the frontend."""
    named = raw.get("frontendSidecar")
    if isinstance(named, dict):
        named = frontend.SIDECAR_CONTAINER
    if isinstance(named, str) and any(c.get("name") == named for c in containers):
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
