"""A stand-in for the Dynamo operator on the offline cluster (run inside the controllers process).

The real operator cannot run here (its Go module is not served by the proxy, and it needs
webhooks), so this loop reproduces its *observable* contract, level-based like a controller:

* per DGD component an ``apps/v1`` Deployment ``<dgd>-<lowercased component>`` (multinode:
  replicas x nodeCount pods), whose pods carry the operator's labels and the DGD's pod spec (image,
  command, args, env + DYN_NAMESPACE/DYN_COMPONENT/DYN_DISCOVERY_BACKEND, envFrom, ``nvidia.com/gpu``
  requests and limits, scheduling, pull secrets, PVC volumes, /dev/shm); the real scheduler, the
  Deployment controller and kwok do the rest;
* a frontend Service ``<dgd>-<frontend component>`` on port 8000 (``http``);
* ownerReferences on every child, so deleting the DGD cascades through the real garbage collector;
* status written through the status subresource as the operator writes it (state, the Ready
  condition with its reasons, observedGeneration, per-service/component replica counts), and
  reconciliation errors reported as state ``failed`` with the error text.

On top, the serving wiring: each DGD with a frontend (or a gaie graph: an ``epp`` component and a
frontend sidecar in the worker pods) gets a real Dynamo frontend + mocker on 127.0.0.1
(:mod:`deploy_suite.offline.dynamo_runtime`), and kwok ``PortForward`` / ``Logs`` objects point the
frontend pods' port 8000 and ``kubectl logs`` at them. A frontend component only counts as ready
once that serving answers, as the real frontend pod's readiness probe would; if the Dynamo
environment cannot be built the error is logged and DGDs are reported from their Deployments only.

The shape of a DGD is decided by content (``spec.services`` is v1alpha1, ``spec.components``
v1beta1): without the real conversion webhook, both API versions serve the same stored object.
"""

from __future__ import annotations

import copy
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from deploy_suite import clock
from deploy_suite.dgd import (
    COMPONENT_TYPES,
    DEFAULT_GPU_RESOURCE,
    LABEL_COMPONENT,
    LABEL_COMPONENT_TYPE,
    LABEL_DGD_NAME,
    LABEL_DYNAMO_NAMESPACE,
    LABEL_SUB_COMPONENT_TYPE,
    MAIN_CONTAINER,
    V1ALPHA1,
    V1BETA1,
    WORKER_TYPES,
    Component,
    Dgd,
    container_gpus,
    flag_value,
    parse_dgd,
    split_args,
)
from deploy_suite.errors import InputError, KubeError, NotFound, ReconcileError, SuiteError
from deploy_suite.kube import Kube, Obj, Resource
from deploy_suite.offline import dynamo_runtime
from deploy_suite.offline.faults import cri_log, logs_object, port_forward_object

DGD_BETA = Resource("nvidia.com", "v1beta1", "dynamographdeployments", True, "DynamoGraphDeployment")
DGD_ALPHA = Resource("nvidia.com", "v1alpha1", "dynamographdeployments", True, "DynamoGraphDeployment")
PORT_FORWARDS = Resource("kwok.x-k8s.io", "v1alpha1", "portforwards", True, "PortForward")
LOGS = Resource("kwok.x-k8s.io", "v1alpha1", "logs", True, "Logs")

LABEL_SELECTOR = "nvidia.com/selector"
LABEL_MANAGED_BY = "app.kubernetes.io/managed-by"
MANAGED_BY = "deploy-suite-operator-sim"
FRONTEND_PORT = 8000
DEFAULT_SHM = "8Gi"
# Cluster-side serving fault switch: data `<namespace>.<dgd>: chat-500|never-list|error-object`,
# read when a DGD's serving starts (apply it before the DGD).
FAULTS_CONFIGMAP = ("kube-system", "deploy-suite-faults")

READY_REASON = "all_resources_are_ready"
NOT_READY_REASON = "some_resources_are_not_ready"
FAILED_REASON = "failed_to_reconcile_the_resources"

Log = Callable[[str], None]


def child_name(dgd_name: str, component: str) -> str:
    """The operator's resource name for a component: ``<dgd>-<lowercase(component)>``, dots -> '-'."""
    return f"{dgd_name}-{component.lower()}".replace(".", "-")


def dynamo_namespace(namespace: str, dgd_name: str) -> str:
    return f"{namespace}-{dgd_name}"


# --------------------------------------------------------------------------------------------
# Desired state (pure functions of the DGD object)
# --------------------------------------------------------------------------------------------


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
    gaie: bool  # an epp component and no frontend: the frontend is a sidecar in worker pods
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
        """Components whose pods expose the OpenAI port (frontends, or gaie workers)."""
        if self.frontends:
            return list(self.frontends)
        return [c.name for c in self.model.components if c.type in WORKER_TYPES] if self.gaie else []

    @property
    def signature(self) -> tuple[str, str]:
        return self.served_model, self.router_mode


def _merge_env(*layers: list[Obj]) -> list[Obj]:
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


def _alpha_pod(spec: Obj, svc: Obj, component: Component) -> tuple[Obj, Obj]:
    """v1alpha1 service -> (pod metadata, pod spec), as conversion and the operator would build them."""
    extra = copy.deepcopy(svc.get("extraPodSpec") or {})
    main = extra.pop("mainContainer", None) or {}
    main["name"] = MAIN_CONTAINER
    sidecars = [c for c in extra.pop("containers", None) or [] if c.get("name") != MAIN_CONTAINER]
    main["env"] = _merge_env(spec.get("envs") or [], svc.get("envs") or [], main.get("env") or [])
    if svc.get("envFromSecret"):
        main["envFrom"] = [{"secretRef": {"name": svc["envFromSecret"]}}, *(main.get("envFrom") or [])]
    resources = svc.get("resources") or {}
    out: Obj = {}
    for part in ("requests", "limits"):
        values = resources.get(part) or {}
        for key in ("cpu", "memory"):
            if values.get(key):
                out.setdefault(part, {})[key] = str(values[key])
        for key, value in (values.get("custom") or {}).items():
            out.setdefault(part, {})[key] = str(value)
    if out:
        main["resources"] = {**(main.get("resources") or {}), **out}
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
    extra["__shm"] = "0" if shm.get("disabled") else str(shm.get("size") or DEFAULT_SHM)
    extra["__gpus"] = component.gpus_per_pod
    return meta, extra


def _beta_pod(comp: Obj, component: Component) -> tuple[Obj, Obj]:
    template = copy.deepcopy(comp.get("podTemplate") or {})
    meta = template.get("metadata") or {}
    spec = template.get("spec") or {}
    mains = [c for c in spec.get("containers") or [] if c.get("name") == MAIN_CONTAINER]
    spec["__shm"] = str(comp.get("sharedMemorySize") or DEFAULT_SHM)
    spec["__gpus"] = container_gpus(mains[0], component.gpu_resource) or 0 if mains else 0
    return {"labels": dict(meta.get("labels") or {}), "annotations": dict(meta.get("annotations") or {})}, spec


def build_plan(obj: Obj) -> Plan:
    """The children a DGD object asks for; raises ReconcileError for what the operator rejects."""
    meta = obj["metadata"]
    namespace, name = meta["namespace"], meta["name"]
    spec = obj.get("spec") or {}
    alpha = "services" in spec and "components" not in spec
    doc = {**obj, "apiVersion": V1ALPHA1 if alpha else V1BETA1}
    try:
        model = parse_dgd(yaml.safe_dump(doc, sort_keys=False), f"{namespace}/{name}")
    except InputError as exc:
        raise ReconcileError(f"failed to reconcile Dynamo components deployments: {exc}") from exc
    raw_by_name: dict[str, Obj] = (
        {str(k): v or {} for k, v in (spec.get("services") or {}).items()} if alpha
        else {str(c.get("name")): c for c in spec.get("components") or []})
    owner = {"apiVersion": obj.get("apiVersion", V1BETA1), "kind": "DynamoGraphDeployment", "name": name,
             "uid": meta["uid"], "controller": True, "blockOwnerDeletion": True}
    dyn_ns = dynamo_namespace(namespace, name)
    deployments: dict[str, Obj] = {}
    frontends: list[str] = []
    sidecars: dict[str, str] = {}
    for c in model.components:
        raw = raw_by_name.get(c.name, {})
        if alpha and c.raw_type is not None and c.raw_type not in COMPONENT_TYPES:
            # Conversion to the v1beta1 hub maps componentType onto a strict enum.
            raise ReconcileError(
                f"failed to reconcile Dynamo components deployments: cannot convert service {c.name!r} to "
                f"nvidia.com/v1beta1: componentType {c.raw_type!r} is not one of {sorted(COMPONENT_TYPES)}")
        if not c.image:
            raise ReconcileError(
                f"failed to reconcile Dynamo components deployments: component {c.name!r}: "
                f"container {MAIN_CONTAINER!r} has no image")
        pod_meta, pod_spec = _alpha_pod(spec, raw, c) if alpha else _beta_pod(raw, c)
        shm = str(pod_spec.pop("__shm"))
        gpus = int(pod_spec.pop("__gpus"))
        containers: list[Obj] = pod_spec.setdefault("containers", [])
        main = next(ct for ct in containers if ct.get("name") == MAIN_CONTAINER)
        if c.type == "frontend":
            frontends.append(c.name)
            if not main.get("command") and not main.get("args"):
                main["command"] = ["python3", "-m", "dynamo.frontend"]
            ports = main.setdefault("ports", [])
            if all(p.get("name") != "http" for p in ports):
                ports.append({"name": "http", "containerPort": FRONTEND_PORT, "protocol": "TCP"})
        _set_default_env(main, {"DYN_NAMESPACE": dyn_ns, "DYN_COMPONENT": c.name,
                                "DYN_DISCOVERY_BACKEND": "kubernetes"})
        if gpus:
            resources = main.setdefault("resources", {})
            gpu_key = c.gpu_resource or DEFAULT_GPU_RESOURCE
            # One count on both sides: a limit alone implies the request; never their sum.
            for part in ("requests", "limits"):
                resources.setdefault(part, {})[gpu_key] = str(gpus)
        if shm not in ("0", ""):
            volumes = pod_spec.setdefault("volumes", [])
            if all(v.get("name") != "shared-memory" for v in volumes):
                volumes.append({"name": "shared-memory", "emptyDir": {"medium": "Memory", "sizeLimit": shm}})
            mounts = main.setdefault("volumeMounts", [])
            if all(m.get("mountPath") != "/dev/shm" for m in mounts):
                mounts.append({"name": "shared-memory", "mountPath": "/dev/shm"})
        sidecar = _frontend_sidecar(raw, containers)
        if sidecar:
            sidecars[c.name] = sidecar
        selector = child_name(name, c.name)
        labels = {**model.labels, **pod_meta.get("labels", {}),
                  LABEL_DGD_NAME: name, LABEL_COMPONENT: c.name, LABEL_COMPONENT_TYPE: c.raw_type or c.type,
                  LABEL_DYNAMO_NAMESPACE: dyn_ns, LABEL_SELECTOR: selector,
                  "nvidia.com/metrics-enabled": "true"}
        if c.sub_component_type:
            labels[LABEL_SUB_COMPONENT_TYPE] = c.sub_component_type
        pod_spec["restartPolicy"] = "Always"
        template_meta: Obj = {"labels": labels}
        if pod_meta.get("annotations"):
            template_meta["annotations"] = pod_meta["annotations"]
        deployments[c.name] = {
            "apiVersion": "apps/v1", "kind": "Deployment",
            "metadata": {"name": selector, "namespace": namespace, "ownerReferences": [owner],
                         "labels": {LABEL_DGD_NAME: name, LABEL_COMPONENT: c.name,
                                    LABEL_COMPONENT_TYPE: c.raw_type or c.type, LABEL_SELECTOR: selector,
                                    LABEL_MANAGED_BY: MANAGED_BY}},
            "spec": {"replicas": c.replicas * c.node_count, "selector": {"matchLabels": {LABEL_SELECTOR: selector}},
                     "template": {"metadata": template_meta, "spec": pod_spec}},
        }
    services = []
    for fe in frontends:
        c = model.component(fe)
        services.append({
            "apiVersion": "v1", "kind": "Service",
            "metadata": {"name": child_name(name, fe), "namespace": namespace, "ownerReferences": [owner],
                         "labels": {LABEL_DGD_NAME: name, LABEL_COMPONENT: fe, LABEL_MANAGED_BY: MANAGED_BY}},
            "spec": {"type": "ClusterIP",
                     "selector": {LABEL_COMPONENT_TYPE: c.raw_type or c.type, LABEL_DYNAMO_NAMESPACE: dyn_ns,
                                  LABEL_COMPONENT: fe},
                     "ports": [{"name": "http", "port": FRONTEND_PORT, "targetPort": "http", "protocol": "TCP"}]},
        })
    gaie = not frontends and any(c.type == "epp" for c in model.components)
    workers = [c for c in model.components if c.is_worker]
    served = next((c.served_model for c in workers if c.served_model), None) or name
    return Plan(namespace, name, alpha, model, deployments, services, frontends, gaie, served,
                _router_mode(deployments, frontends if frontends else list(sidecars), sidecars), sidecars)


def _frontend_sidecar(raw: Obj, containers: list[Obj]) -> str | None:
    """The container running a Dynamo frontend next to ``main`` (gaie worker pods)."""
    named = raw.get("frontendSidecar")
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


# --------------------------------------------------------------------------------------------
# The controller
# --------------------------------------------------------------------------------------------


class WorkQueue:
    """Keys to reconcile, deduplicated: a burst of pod events becomes one reconcile."""

    def __init__(self) -> None:
        self._cond = threading.Condition()
        self._keys: list[str] = []

    def add(self, key: str) -> None:
        with self._cond:
            if key not in self._keys:
                self._keys.append(key)
                self._cond.notify()

    def get(self, stop: threading.Event, timeout: float = 1.0) -> str | None:
        with self._cond:
            if not self._keys:
                self._cond.wait(timeout)
            if stop.is_set() or not self._keys:
                return None
            return self._keys.pop(0)

    def wake(self) -> None:
        with self._cond:
            self._cond.notify_all()


class LogMirror:
    """Copies growing process logs into CRI-format files that kwok's ``Logs`` can serve.

    kwok hands ``kubectl logs`` to the kubelet's CRI log reader, which only accepts
    ``<time> <stream> F <line>`` lines, while the Dynamo processes write plain text. A daemon thread
    appends each new complete line, so ``kubectl logs -f`` follows the live process.
    """

    # Not a wait: the copy interval of a background tailer (files have no change notification here).
    INTERVAL_S = 0.25

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._files: dict[Path, tuple[Path, int]] = {}  # destination -> (source, bytes copied)

    def mirror(self, source: Path) -> Path:
        dest = source.parent / "k8s-logs" / source.name
        with self._lock:
            if dest not in self._files:
                dest.parent.mkdir(parents=True, exist_ok=True)
                dest.write_text("")
                self._files[dest] = (source, 0)
        self.copy_once()
        return dest

    def forget(self, root: Path) -> None:
        with self._lock:
            for dest in [d for d in self._files if root in d.parents]:
                del self._files[dest]

    def copy_once(self) -> None:
        with self._lock:
            for dest, (source, copied) in list(self._files.items()):
                try:
                    # A restarted serving truncated its log: start over.
                    done = 0 if source.stat().st_size < copied else copied
                    with source.open("rb") as f:
                        f.seek(done)
                        chunk = f.read()
                except OSError:
                    continue
                complete = chunk[: chunk.rfind(b"\n") + 1]
                if not complete:
                    continue
                with dest.open("a") as out:
                    out.write(cri_log(complete.decode("utf-8", errors="replace")))
                self._files[dest] = (source, done + len(complete))

    def run(self, stop: threading.Event) -> None:
        while not stop.wait(self.INTERVAL_S):
            self.copy_once()


@dataclass
class ServingState:
    signature: tuple[str, str]
    state: str = "starting"  # starting | ready | failed | stopped
    serving: dynamo_runtime.Serving | None = None
    error: str = ""


class OperatorSim:
    def __init__(self, kube: Kube, cluster_dir: Path, log: Log, serve: bool = True,
                 dynamo_version: str = dynamo_runtime.DEFAULT_VERSION) -> None:
        self.kube = kube
        self.dynamo_root = cluster_dir / "dynamo"
        self.log = log
        self.serve = serve
        self.dynamo_version = dynamo_version
        self.queue = WorkQueue()
        self._lock = threading.Lock()
        self._servings: dict[str, ServingState] = {}
        self._env: dynamo_runtime.DynamoEnv | None = None
        self._env_error: str | None = None
        self._env_ready = threading.Event()
        self._applied: dict[str, tuple[str, int]] = {}  # key -> (uid, generation) children applied for
        self._wired: dict[str, int] = {}  # pod uid -> serving port its PortForward points at
        self.logs = LogMirror()

    # ------------------------------------------------------------------ wiring into controllers
    def loops(self, stop: threading.Event) -> list[tuple[str, Callable[[], Iterator[tuple[str, Obj]]],
                                                          Callable[[str, Obj], None]]]:
        sel = LABEL_DGD_NAME
        return [
            ("operator-sim/dgds", lambda: self.kube.watch_events(DGD_BETA, stop), self.on_dgd),
            ("operator-sim/deployments", lambda: self.kube.watch_events("Deployment", stop, label_selector=sel),
             self.on_owned),
            ("operator-sim/pods", lambda: self.kube.watch_events("Pod", stop, label_selector=sel), self.on_owned),
        ]

    def start(self, stop: threading.Event) -> list[threading.Thread]:
        threads = [threading.Thread(target=self._worker, args=(stop,), daemon=True, name="operator-sim/worker"),
                   threading.Thread(target=self.logs.run, args=(stop,), daemon=True, name="operator-sim/logs")]
        if self.serve:
            threads.append(threading.Thread(target=self._build_env, daemon=True, name="operator-sim/env"))
        else:
            self._env_error = "serving disabled"
            self._env_ready.set()
        for t in threads:
            t.start()
        return threads

    def on_dgd(self, etype: str, obj: Obj) -> None:
        meta = obj.get("metadata") or {}
        key = f"{meta.get('namespace')}/{meta.get('name')}"
        if etype == "DELETED":
            self.forget(key)
        else:
            self.queue.add(key)

    def on_owned(self, etype: str, obj: Obj) -> None:
        meta = obj.get("metadata") or {}
        name = (meta.get("labels") or {}).get(LABEL_DGD_NAME)
        if not name:
            return
        key = f"{meta.get('namespace')}/{name}"
        if etype == "DELETED" and obj.get("kind") == "Deployment":
            self._applied.pop(key, None)  # a child went away: apply the children again
        self.queue.add(key)

    # ------------------------------------------------------------------ the work loop
    def _worker(self, stop: threading.Event) -> None:
        self._cleanup_orphans()
        while not stop.is_set():
            key = self.queue.get(stop)
            if key is None:
                continue
            try:
                self.reconcile(key)
            except KubeError as exc:
                self.log(f"operator-sim: reconcile {key}: {exc}")
                # Requeue after a short backoff (the apiserver may be restarting).
                timer = threading.Timer(1.0, self.queue.add, args=(key,))
                timer.daemon = True
                timer.start()
            except Exception as exc:  # a bug must not kill the loop; the log says what happened
                self.log(f"operator-sim: reconcile {key} crashed: {type(exc).__name__}: {exc}")

    def _cleanup_orphans(self) -> None:
        """Servings left by an earlier controllers process whose DGD is gone are stopped."""
        if not self.dynamo_root.is_dir():
            return
        try:
            items, _ = self.kube.list_items(DGD_BETA)
        except KubeError as exc:
            self.log(f"operator-sim: cannot list DGDs for orphan cleanup: {exc}")
            return
        alive = {f"{i['metadata']['namespace']}/{i['metadata']['name']}" for i in items}
        for workdir in sorted(p for p in self.dynamo_root.glob("*/*") if p.is_dir()):
            key = f"{workdir.parent.name}/{workdir.name}"
            if key not in alive:
                stopped = dynamo_runtime.stop_all(workdir)
                if stopped:
                    self.log(f"operator-sim: stopped orphaned serving {key} ({len(stopped)} process groups)")

    def reconcile(self, key: str) -> None:
        namespace, name = key.split("/", 1)
        obj = self.kube.get_or_none(DGD_BETA, name, namespace)
        if obj is None:
            self.forget(key)
            return
        meta = obj["metadata"]
        if meta.get("deletionTimestamp"):
            return  # the garbage collector removes the children; nothing to report
        res = DGD_ALPHA if "services" in (obj.get("spec") or {}) and "components" not in obj["spec"] else DGD_BETA
        try:
            plan = build_plan(obj)
            self._check_pvcs(obj, plan)
            deployments = self._apply_children(obj, plan)
        except ReconcileError as exc:
            self._write_status(res, obj, self._status(obj, "failed", FAILED_REASON, str(exc), None, None))
            return
        if plan.serves and self.serve:
            self._ensure_serving(plan)
        component_status: dict[str, Obj] = {}
        not_ready: list[str] = []
        serving = self._serving_ready(plan)
        for c in plan.model.components:
            dep_name = child_name(plan.name, c.name)
            desired = c.replicas * c.node_count
            ready, reason, counts = deployment_readiness(deployments.get(dep_name), desired)
            if ready and c.name in plan.served_components() and serving is not None and desired:
                ready, reason = serving
            if not ready:
                not_ready.append(f"{dep_name}: {reason}")
            component_status[c.name] = {"componentKind": "Deployment", "componentNames": [dep_name],
                                        "replicas": counts["replicas"], "updatedReplicas": counts["updatedReplicas"],
                                        "readyReplicas": counts["readyReplicas"],
                                        "availableReplicas": counts["availableReplicas"]}
            if plan.alpha:
                component_status[c.name]["componentName"] = dep_name
        if not_ready:
            state, reason, message = "pending", NOT_READY_REASON, f"Resources not ready: {'; '.join(not_ready)}"
        else:
            state, reason, message = "successful", READY_REASON, "All resources are ready"
        self._write_status(res, obj, self._status(obj, state, reason, message, component_status, plan.alpha))
        if plan.serves and self.serve:
            self._wire_pods(plan)

    # ------------------------------------------------------------------ children
    def _check_pvcs(self, obj: Obj, plan: Plan) -> None:
        """Top-level PVCs must exist (create: false) or are created (create: true), as reconcilePVCs does."""
        for pvc in plan.model.pvcs:
            if pvc.create:
                if self.kube.get_or_none("PersistentVolumeClaim", pvc.name, plan.namespace) is None:
                    self.kube.apply({
                        "apiVersion": "v1", "kind": "PersistentVolumeClaim",
                        "metadata": {"name": pvc.name, "namespace": plan.namespace},
                        "spec": {"accessModes": [pvc.access_mode or "ReadWriteOnce"],
                                 **({"storageClassName": pvc.storage_class} if pvc.storage_class else {}),
                                 "resources": {"requests": {"storage": pvc.size or "1Gi"}}}})
                continue
            if self.kube.get_or_none("PersistentVolumeClaim", pvc.name, plan.namespace, metadata_only=True) is None:
                raise ReconcileError(f"failed to reconcile top-level PVCs: persistentvolumeclaims "
                                     f"\"{pvc.name}\" not found")
        raw: list[Obj] = [] if plan.alpha else list(obj["spec"].get("components") or [])
        for c in plan.model.components:
            entry: Obj = next((x for x in raw if x.get("name") == c.name), {})
            cache = (entry.get("compilationCache") or {}).get("pvcName")
            if cache and self.kube.get_or_none("PersistentVolumeClaim", cache, plan.namespace,
                                               metadata_only=True) is None:
                raise ReconcileError(f"failed to reconcile Dynamo components deployments: component {c.name!r}: "
                                     f"compilation cache persistentvolumeclaims \"{cache}\" not found")

    def _apply_children(self, obj: Obj, plan: Plan) -> dict[str, Obj]:
        meta = obj["metadata"]
        stamp = (str(meta["uid"]), int(meta.get("generation") or 0))
        if self._applied.get(plan.key) != stamp:
            for dep in plan.deployments.values():
                self.kube.apply(dep, plan.namespace)
            for svc in plan.services:
                self.kube.apply(svc, plan.namespace)
            wanted = {d["metadata"]["name"] for d in plan.deployments.values()} | \
                     {s["metadata"]["name"] for s in plan.services}
            for kind in ("Deployment", "Service"):
                items, _ = self.kube.list_items(kind, plan.namespace, label_selector=f"{LABEL_DGD_NAME}={plan.name}")
                for item in items:
                    owners = item["metadata"].get("ownerReferences") or []
                    if item["metadata"]["name"] not in wanted and any(o.get("uid") == meta["uid"] for o in owners):
                        self.kube.delete(kind, item["metadata"]["name"], plan.namespace)
            self._applied[plan.key] = stamp
        items, _ = self.kube.list_items("Deployment", plan.namespace, label_selector=f"{LABEL_DGD_NAME}={plan.name}")
        return {i["metadata"]["name"]: i for i in items}

    # ------------------------------------------------------------------ status
    def _status(self, obj: Obj, state: str, reason: str, message: str, components: dict[str, Obj] | None,
                alpha: bool | None) -> Obj:
        old = obj.get("status") or {}
        now = _now()
        ready = "True" if state == "successful" else "False"
        previous = next((c for c in old.get("conditions") or [] if c.get("type") == "Ready"), None)
        since = now if previous is None or previous.get("status") != ready else \
            str(previous.get("lastTransitionTime") or now)
        condition = {"type": "Ready", "status": ready, "reason": reason, "message": message,
                     "lastTransitionTime": since}
        others = [c for c in old.get("conditions") or [] if c.get("type") != "Ready"]
        status: Obj = {"state": state, "conditions": [*others, condition]}
        if state != "failed":
            # Only a successful reconcile advances observedGeneration (the operator's contract).
            status["observedGeneration"] = int(obj["metadata"].get("generation") or 0)
        if components is not None:
            field_name = "services" if alpha else "components"
            # A merge patch keeps map entries it does not mention: null out components that went away.
            stale = {k: None for k in (old.get(field_name) or {}) if k not in components}
            status[field_name] = {**stale, **components}
        return status

    def _write_status(self, res: Resource, obj: Obj, status: Obj) -> None:
        old = obj.get("status") or {}
        if _same_status(old, status):
            return
        meta = obj["metadata"]
        try:
            self.kube.patch_status(res, meta["name"], meta["namespace"], status)
        except NotFound:
            return

    # ------------------------------------------------------------------ serving
    def _build_env(self) -> None:
        try:
            self._env = dynamo_runtime.ensure_dynamo_env(self.dynamo_version,
                                                         log=lambda m: self.log(f"operator-sim: {m}"))
        except Exception as exc:  # any failure: serve nothing, keep reconciling the rest
            self._env_error = f"{type(exc).__name__}: {exc}"
            self.log(f"operator-sim: the Dynamo environment cannot be built, DGDs get no serving "
                     f"(port-forward/logs): {self._env_error}")
        self._env_ready.set()
        with self._lock:
            keys = list(self._servings)
        for key in keys:
            self.queue.add(key)

    def _serving_ready(self, plan: Plan) -> tuple[bool, str] | None:
        """None when serving does not gate readiness, else (ready, reason) for served components."""
        if not (plan.serves and self.serve) or self._env_error is not None:
            return None
        with self._lock:
            st = self._servings.get(plan.key)
        if st is None or st.state == "starting":
            return False, "frontend not serving yet"
        if st.state == "ready" and st.serving is not None and st.serving.alive():
            return True, ""
        if st.state == "ready":
            return False, "frontend process exited"
        return None  # failed to start: logged; the Deployments alone decide

    def _ensure_serving(self, plan: Plan) -> None:
        with self._lock:
            st = self._servings.get(plan.key)
            if st is not None and st.signature == plan.signature and (
                    st.state in ("starting", "failed") or (st.serving is not None and st.serving.alive())):
                return
            old = st
            new = ServingState(plan.signature)
            self._servings[plan.key] = new
        threading.Thread(target=self._start_serving, args=(plan, new, old), daemon=True,
                         name=f"operator-sim/serve {plan.key}").start()

    def _fault_for(self, key: str) -> str | None:
        """The serving fault for ``<ns>/<dgd>``, keyed ``<ns>.<dgd>`` in the ConfigMap (data keys
        cannot hold '/'; a namespace holds no '.', so the first dot splits the key unambiguously)."""
        cm = self.kube.get_or_none("ConfigMap", FAULTS_CONFIGMAP[1], FAULTS_CONFIGMAP[0])
        value = ((cm or {}).get("data") or {}).get(key.replace("/", ".", 1))
        if value and value not in dynamo_runtime.FAULTS:
            self.log(f"operator-sim: {FAULTS_CONFIGMAP[0]}/{FAULTS_CONFIGMAP[1]} names unknown fault {value!r} "
                     f"for {key}; known: {', '.join(dynamo_runtime.FAULTS)}")
            return None
        return value or None

    def _start_serving(self, plan: Plan, st: ServingState, old: ServingState | None) -> None:
        workdir = self.dynamo_root / plan.namespace / plan.name
        try:
            if old is not None and old.serving is not None:
                old.serving.stop()
            self._env_ready.wait()
            if self._env is None:
                st.state = "failed"
                return
            fault = self._fault_for(plan.key)
            adopted = self._adopt(workdir, plan, fault)
            if adopted is not None:
                serving = adopted
            else:
                dynamo_runtime.stop_all(workdir)
                started = _monotonic()
                serving = dynamo_runtime.start_serving(plan.key, plan.served_model, workdir,
                                                       router_mode=plan.router_mode, env=self._env, fault=fault)
                self.log(f"operator-sim: serving {plan.key} ({plan.served_model}, {plan.router_mode}"
                         f"{', fault ' + fault if fault else ''}) on 127.0.0.1:{serving.port}")
                serving.wait_model_listed(60.0)
                self.log(f"operator-sim: {plan.key} lists {plan.served_model} "
                         f"{_monotonic() - started:.1f}s after start")
            serving.worker_instance_ids()  # also writes the gaie sidecar's log line (hex id)
            with self._lock:
                current = self._servings.get(plan.key) is st
            if not current:  # the DGD went away (or changed) while we were starting
                serving.stop()
                return
            st.serving = serving
            st.state = "ready"
        except Exception as exc:  # logged; the DGD keeps being reported from its Deployments
            st.state = "failed"
            st.error = f"{type(exc).__name__}: {exc}"
            self.log(f"operator-sim: serving {plan.key} failed to start: {st.error}")
        self.queue.add(plan.key)

    def _adopt(self, workdir: Path, plan: Plan, fault: str | None) -> dynamo_runtime.Serving | None:
        """A serving a previous controllers process started for the same DGD and settings."""
        if not (workdir / "serving.json").is_file():
            return None
        try:
            serving = dynamo_runtime.load_serving(workdir)
        except SuiteError:
            return None
        same = (serving.served_model, serving.router_mode, serving.fault) == (plan.served_model, plan.router_mode,
                                                                            fault)
        return serving if same and serving.alive() else None

    def forget(self, key: str) -> None:
        """The DGD is gone: stop its processes (no finalizer: the DELETED event is enough)."""
        self._applied.pop(key, None)
        with self._lock:
            st = self._servings.pop(key, None)
        namespace, name = key.split("/", 1)
        workdir = self.dynamo_root / namespace / name

        def stop() -> None:
            if st is not None and st.serving is not None:
                st.serving.stop()
            self.logs.forget(workdir)
            stopped = dynamo_runtime.stop_all(workdir) if workdir.is_dir() else []
            if st is not None or stopped:
                self.log(f"operator-sim: {key} deleted: serving stopped")

        threading.Thread(target=stop, daemon=True, name=f"operator-sim/stop {key}").start()

    def _wire_pods(self, plan: Plan) -> None:
        """PortForward + Logs for each served pod, once its serving is up."""
        with self._lock:
            st = self._servings.get(plan.key)
        serving = st.serving if st is not None and st.state == "ready" else None
        if serving is None:
            return
        served = set(plan.served_components())
        pods, _ = self.kube.list_items("Pod", plan.namespace, label_selector=f"{LABEL_DGD_NAME}={plan.name}")
        for item in pods:
            meta = item["metadata"]
            labels = meta.get("labels") or {}
            component = labels.get(LABEL_COMPONENT, "")
            if meta.get("deletionTimestamp") or not (item.get("spec") or {}).get("nodeName"):
                continue
            if self._wired.get(meta["uid"]) == serving.port:
                continue
            pod = {**item, "apiVersion": "v1", "kind": "Pod"}
            files: dict[str, Path] = {}
            if component in served:
                self.kube.apply(port_forward_object(pod, FRONTEND_PORT, serving.port), plan.namespace)
                files[MAIN_CONTAINER] = self.logs.mirror(serving.frontend_log if plan.frontends
                                                         else serving.worker_log)
                sidecar = plan.sidecars.get(component)
                if sidecar:
                    files[sidecar] = self.logs.mirror(serving.sidecar_log)
            else:
                files[MAIN_CONTAINER] = self.logs.mirror(serving.worker_log)
            self.kube.apply(logs_object(pod, files), plan.namespace)
            self._wired[meta["uid"]] = serving.port


def _same_status(old: Obj, new: Obj) -> bool:
    for key, value in new.items():
        if key == "conditions":
            def strip(conds: list[Obj]) -> list[tuple[Any, ...]]:
                return [(c.get("type"), c.get("status"), c.get("reason"), c.get("message")) for c in conds]
            if strip(old.get("conditions") or []) != strip(value):
                return False
        elif isinstance(value, dict):
            if {k: v for k, v in value.items() if v is not None} != (old.get(key) or {}):
                return False
        elif old.get(key) != value:
            return False
    return True


def _now() -> str:
    return clock.iso_now()


def _monotonic() -> float:
    return clock.monotonic()
