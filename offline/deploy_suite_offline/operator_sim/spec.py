"""The operator replica's own reading of a DynamoGraphDeployment, written from the operator's API types.

The harness reads DGDs in ``deploy_suite.model``; the replica must not borrow that reader, or a misreading
there is made identically by the test double and every offline test agrees with it. This module reads
the object the way the real operator's types and conversion do (ai-dynamo/dynamo, ``deploy/operator/``):

* The operator stores v1beta1 (the hub) and converts v1alpha1 on the way in, so a v1alpha1 service is
  first converted into the hub's component (``api/v1alpha1/shared_spec_conversion.go``,
  ``buildPodTemplateToHub``): ``extraPodSpec`` is the pod spec; its ``mainContainer`` is the container
  ``main``, merged over the dedicated fields (``resources``, ``envs``, ``envFromSecret``, probes,
  ``volumeMounts``), the mainContainer winning except for env and mounts, which add up; ``resources``
  map ``cpu``, ``memory``, ``gpu`` (under ``gpuType``, default ``nvidia.com/gpu``) and ``custom`` keys
  onto the container (``resourcesToNative``); a ``frontendSidecar`` spec becomes the container
  ``sidecar-frontend`` (image, args, envs, envFromSecret; ``appendFrontendSidecar``), which the hub's
  ``frontendSidecar`` then names; ``extraPodMetadata`` is the template's metadata.
* The type is the v1beta1 enum (``api/v1beta1/common.go``: frontend, worker, prefill, decode, planner,
  epp). v1alpha1's ``componentType`` is copied, and only ``worker`` with ``subComponentType``
  prefill or decode is promoted to that type (``sharedComponentTypeToHub``).
* ``replicas`` is optional (nil: the workload's default, one); the node count is ``multinode.nodeCount``
  when ``multinode`` is set (CRD default 2) and 1 otherwise (``GetNumberOfNodes`` in
  ``api/v1beta1/dynamocomponentdeployment_types.go``); ``sharedMemorySize`` nil is 8Gi, "0" disables.
* The graph's env (v1alpha1 ``spec.envs``, v1beta1 ``spec.env``) is merged under the main container's
  (``applyDGDTemplateDefaults`` in ``internal/dynamo/graph.go``).

Shares with the harness only the names of ``deploy_suite.constants``. Pure: an object in, a
:class:`Graph` out; a shape the operator cannot convert raises :class:`ReconcileError`.
"""

from __future__ import annotations

import copy
import re
import shlex
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from deploy_suite.constants import GPU_RESOURCE, V1ALPHA1, Obj
from deploy_suite_offline.errors import ReconcileError

# api/v1beta1/common.go: the ComponentType enum.
COMPONENT_TYPES = ("frontend", "worker", "prefill", "decode", "planner", "epp")
WORKER_TYPES = frozenset({"worker", "prefill", "decode"})
# api/v1beta1/dynamocomponentdeployment_types.go: MainContainerName.
MAIN_CONTAINER = "main"
# api/v1alpha1/shared_spec_conversion.go: defaultFrontendSidecarContainerName.
SIDECAR_CONTAINER = "sidecar-frontend"
# The frontend's command when the container names none (the operator's frontend defaults).
FRONTEND_COMMAND = ("python3",)
FRONTEND_ARGS = ("-m", "dynamo.frontend")
DEFAULT_NODE_COUNT = 2  # MultinodeSpec.nodeCount: +kubebuilder:default=2
DEFAULT_SHM = "8Gi"
# Served-model flags, by priority (``--model-name`` is the mocker's spelling).
_MODEL_FLAGS = ("--served-model-name", "--model-name", "--model", "--model-path")


@dataclass
class PodShape:
    """A component's pod template in the hub shape, before the operator's defaults are added."""

    meta: Obj  # labels, annotations
    spec: Obj  # PodSpec; ``main`` first among the containers
    shm: str  # /dev/shm size; "0" when disabled


@dataclass(frozen=True)
class Part:
    """One component as the operator reads it (a v1alpha1 service after conversion)."""

    name: str  # services-map key / components[].name
    raw_type: str | None  # v1alpha1 componentType / v1beta1 type, as written
    type: str  # ComponentType in the hub ("" unset; a v1alpha1 value outside the enum kept as written)
    sub_component_type: str | None  # v1alpha1 subComponentType
    node_count: int  # GetNumberOfNodes
    replicas: int  # pods (groups, multinode) per component
    frontend_sidecar: str | None  # the container the hub's frontendSidecar names
    template: PodShape = field(repr=False, compare=False)

    @property
    def multinode(self) -> bool:
        return self.node_count > 1

    @property
    def is_worker(self) -> bool:
        return self.type in WORKER_TYPES

    @property
    def label_type(self) -> str:
        """The value of the component-type label on its pods and Service selector."""
        return self.raw_type or self.type

    def pod(self) -> PodShape:
        """A fresh copy of the pod template (the plan adds the operator's defaults to it)."""
        return copy.deepcopy(self.template)

    def container(self, name: str) -> Obj | None:
        return next((c for c in self.template.spec.get("containers") or [] if c.get("name") == name), None)

    @property
    def image(self) -> str | None:
        main = self.container(MAIN_CONTAINER)
        return str(main["image"]) if main and main.get("image") else None

    @property
    def gpu_resource(self) -> str:
        """The GPU resource the main container asks for: nvidia.com/gpu unless a MIG slice is named."""
        main = self.container(MAIN_CONTAINER) or {}
        names = [k for part in ("limits", "requests") for k in ((main.get("resources") or {}).get(part) or {})
                 if _is_gpu(k)]
        return GPU_RESOURCE if GPU_RESOURCE in names or not names else names[0]

    @property
    def gpus_per_pod(self) -> int:
        """The pod's GPU request as the scheduler counts it (:func:`pod_request`)."""
        return int(pod_request(self.template.spec, self.gpu_resource, _container_count))

    @property
    def requests_per_pod(self) -> dict[str, float]:
        """Every resource but the GPU one, as the scheduler counts it for a pod (:func:`pod_request`),
        in the resource's base unit."""
        spec = self.template.spec
        names = {k for c in [*(spec.get("containers") or []), *(spec.get("initContainers") or [])]
                 for part in ("requests", "limits") for k in ((c.get("resources") or {}).get(part) or {})}
        requests = {name: pod_request(spec, name, _quantity) for name in sorted(names - {self.gpu_resource})}
        return {name: amount for name, amount in requests.items() if amount > 0}

    def tokens(self, container: str = MAIN_CONTAINER) -> tuple[str, ...]:
        """The container's command line (command + args), split and with its env expanded."""
        c = self.container(container) or {}
        env = {str(e.get("name")): str(e["value"]) for e in c.get("env") or [] if e.get("value") is not None}
        return split_args([str(t) for t in [*(c.get("command") or []), *(c.get("args") or [])]], env)

    @property
    def served_model(self) -> str | None:
        tokens = self.tokens()
        return next((v for flag in _MODEL_FLAGS if (v := flag_value(tokens, [flag]))), None)


@dataclass(frozen=True)
class Pvc:
    """A v1alpha1 ``spec.pvcs`` entry."""

    name: str
    create: bool
    storage_class: str | None
    size: str | None
    access_mode: str | None


@dataclass(frozen=True)
class Graph:
    name: str
    namespace: str
    alpha: bool
    backend_framework: str | None
    labels: Mapping[str, str]
    components: tuple[Part, ...]
    pvcs: tuple[Pvc, ...] = ()

    def component(self, name: str) -> Part:
        return next(c for c in self.components if c.name == name)


def is_alpha(obj: Obj) -> bool:
    """The shape is decided by content (``spec.services`` is v1alpha1, ``spec.components`` v1beta1):
    without the real conversion webhook, both API versions serve the same stored object."""
    spec = obj.get("spec") or {}
    if "services" in spec or "components" in spec:
        return "services" in spec and "components" not in spec
    return obj.get("apiVersion") == V1ALPHA1


def read(obj: Obj) -> Graph:
    """The graph an admitted DGD object describes, in the hub's terms."""
    meta = obj.get("metadata") or {}
    spec = _mapping(obj.get("spec"), "spec")
    alpha = is_alpha(obj)
    if alpha:
        graph_env = _list(spec.get("envs"), "spec.envs")
        raws = [(str(k), _mapping(v, f"spec.services.{k}")) for k, v in _mapping(spec.get("services"),
                                                                                    "spec.services").items()]
        parts = tuple(_alpha_part(name, svc, graph_env) for name, svc in raws)
    else:
        graph_env = _list(spec.get("env"), "spec.env")
        parts = tuple(_beta_part(_mapping(c, f"spec.components[{i}]"), graph_env)
                      for i, c in enumerate(_list(spec.get("components"), "spec.components")))
    labels = {str(k): str(v) for k, v in _mapping(spec.get("labels"), "spec.labels").items()}
    return Graph(str(meta.get("name") or ""), str(meta.get("namespace") or ""), alpha, spec.get("backendFramework"),
                 labels, parts, _pvcs(spec) if alpha else ())


def merge_env(*layers: list[Obj]) -> list[Obj]:
    """Later layers win by name, order of first appearance kept (the operator's MergeEnvs)."""
    merged: dict[str, Obj] = {}
    for layer in layers:
        for item in layer:
            if isinstance(item, dict) and item.get("name"):
                merged[str(item["name"])] = item
    return list(merged.values())


# ------------------------------------------------------------------------------------------- v1beta1
def _beta_part(comp: Obj, graph_env: list[Obj]) -> Part:
    name = str(comp.get("name") or "")
    raw_type = comp.get("type")
    template = copy.deepcopy(_mapping(comp.get("podTemplate"), f"component {name!r}: podTemplate"))
    meta = _mapping(template.get("metadata"), f"component {name!r}: podTemplate.metadata")
    spec = _mapping(template.get("spec"), f"component {name!r}: podTemplate.spec")
    containers = _list(spec.setdefault("containers", []), f"component {name!r}: podTemplate.spec.containers")
    main = next((c for c in containers if c.get("name") == MAIN_CONTAINER), None)
    if main is not None and graph_env:
        main["env"] = merge_env(graph_env, main.get("env") or [])
    shm = comp.get("sharedMemorySize")
    sidecar = comp.get("frontendSidecar")
    pod = PodShape({"labels": dict(meta.get("labels") or {}), "annotations": dict(meta.get("annotations") or {})},
                   spec, DEFAULT_SHM if shm is None else str(shm))
    return Part(name=name, raw_type=str(raw_type) if raw_type is not None else None, type=str(raw_type or ""),
                sub_component_type=None, node_count=_node_count(comp), replicas=_replicas(comp, name),
                frontend_sidecar=str(sidecar) if sidecar else None, template=pod)


# ------------------------------------------------------------------------------------------- v1alpha1
def _alpha_part(name: str, svc: Obj, graph_env: list[Obj]) -> Part:
    raw_type = svc.get("componentType")
    sub = svc.get("subComponentType")
    hub_type = str(sub) if raw_type == "worker" and sub in ("prefill", "decode") else str(raw_type or "")
    fs = svc.get("frontendSidecar")
    return Part(name=name, raw_type=str(raw_type) if raw_type is not None else None, type=hub_type,
                sub_component_type=str(sub) if sub else None, node_count=_node_count(svc),
                replicas=_replicas(svc, name), frontend_sidecar=SIDECAR_CONTAINER if isinstance(fs, dict) else None,
                template=_alpha_pod(svc, graph_env, name))


def alpha_resources(svc: Obj) -> Obj:
    """v1alpha1 ``resources`` as container requirements (resourcesToNative): cpu, memory, the GPU
    count under ``gpuType`` (default nvidia.com/gpu), every ``custom`` key; DRA ``claims`` kept."""
    resources = svc.get("resources") or {}
    out: Obj = {}
    for part in ("requests", "limits"):
        item = resources.get(part)
        if not isinstance(item, dict):
            continue
        values: Obj = {}
        for key in ("cpu", "memory"):
            if item.get(key) not in (None, ""):
                values[key] = str(item[key])
        if item.get("gpu") not in (None, ""):
            values[str(item.get("gpuType") or GPU_RESOURCE)] = str(item["gpu"])
        for key, value in (item.get("custom") or {}).items():
            values[str(key)] = str(value)
        out[part] = values
    if resources.get("claims"):
        out["claims"] = copy.deepcopy(resources["claims"])
    return out


def merge_resources(dedicated: Obj, own: Obj) -> Obj:
    """mergo.Merge(dedicated, mainContainer, WithOverride): key by key, the mainContainer's value wins."""
    out = copy.deepcopy(dedicated)
    for part, values in own.items():
        if isinstance(values, dict) and isinstance(out.get(part), dict):
            out[part] = {**out[part], **values}
        elif values:
            out[part] = copy.deepcopy(values)
    return out


def _alpha_pod(svc: Obj, graph_env: list[Obj], name: str) -> PodShape:
    """buildSharedPodTemplateFromAlpha: the v1alpha1 service as the hub's pod template."""
    extra = copy.deepcopy(_mapping(svc.get("extraPodSpec"), f"service {name!r}: extraPodSpec"))
    own = _mapping(extra.pop("mainContainer", None), f"service {name!r}: extraPodSpec.mainContainer")
    main: Obj = {**own, "name": MAIN_CONTAINER}
    main["env"] = merge_env(graph_env, svc.get("envs") or [], own.get("env") or [])
    if svc.get("envFromSecret"):
        main["envFrom"] = [{"secretRef": {"name": svc["envFromSecret"]}}, *(own.get("envFrom") or [])]
    resources = merge_resources(alpha_resources(svc), own.get("resources") or {})
    if resources:
        main["resources"] = resources
    for probe in ("livenessProbe", "readinessProbe"):
        if svc.get(probe) is not None and own.get(probe) is None:
            main[probe] = copy.deepcopy(svc[probe])
    _alpha_mounts(svc, extra, main)
    others = [c for c in extra.pop("containers", None) or [] if c.get("name") != MAIN_CONTAINER]
    fs = svc.get("frontendSidecar")
    if isinstance(fs, dict) and all(c.get("name") != SIDECAR_CONTAINER for c in others):
        others.append(_alpha_frontend_sidecar(fs))
    extra["containers"] = [main, *others]
    meta_src = svc.get("extraPodMetadata") or {}
    meta = {"labels": {**(svc.get("labels") or {}), **(meta_src.get("labels") or {})},
            "annotations": {**(svc.get("annotations") or {}), **(meta_src.get("annotations") or {})}}
    shm = svc.get("sharedMemory") or {}
    return PodShape(meta, extra, "0" if shm.get("disabled") else str(shm.get("size") or DEFAULT_SHM))


def _alpha_mounts(svc: Obj, pod_spec: Obj, main: Obj) -> None:
    """The service's ``volumeMounts`` (names of ``spec.pvcs``) as PVC volumes and mounts of ``main``,
    after the mainContainer's own mounts (mergeExtraPodSpecMainContainer keeps that order)."""
    volumes = list(pod_spec.get("volumes") or [])
    mounts = list(main.get("volumeMounts") or [])
    for vm in svc.get("volumeMounts") or []:
        vm_name = vm.get("name")
        if not vm_name:
            continue
        if all(v.get("name") != vm_name for v in volumes):
            volumes.append({"name": vm_name, "persistentVolumeClaim": {"claimName": vm_name}})
        if vm.get("mountPoint") and all(m.get("name") != vm_name for m in mounts):
            mounts.append({"name": vm_name, "mountPath": vm["mountPoint"]})
    pod_spec["volumes"] = volumes
    if mounts:
        main["volumeMounts"] = mounts


def _alpha_frontend_sidecar(fs: Obj) -> Obj:
    """appendFrontendSidecar: image, args (which replace the frontend's default ones), envs, envFromSecret."""
    container: Obj = {"name": SIDECAR_CONTAINER, "image": fs.get("image")}
    if fs.get("args"):
        container["args"] = [str(a) for a in fs["args"]]
    if fs.get("envs"):
        container["env"] = copy.deepcopy(fs["envs"])
    if fs.get("envFromSecret"):
        container["envFrom"] = [{"secretRef": {"name": fs["envFromSecret"]}}]
    return container


def _pvcs(spec: Obj) -> tuple[Pvc, ...]:
    out = []
    for p in _list(spec.get("pvcs"), "spec.pvcs"):
        if isinstance(p, dict) and p.get("name"):
            out.append(Pvc(str(p["name"]), bool(p.get("create", False)), p.get("storageClass"), p.get("size"),
                           p.get("volumeAccessMode")))
    return tuple(out)


# ------------------------------------------------------------------------------------------- fields
def _replicas(raw: Obj, name: str) -> int:
    value = raw.get("replicas")
    if value is None:
        return 1
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise ReconcileError(f"component {name!r}: replicas {value!r} is not a non-negative integer")
    return value


def _node_count(raw: Obj) -> int:
    multinode = raw.get("multinode")
    if multinode is None:
        return 1
    value = (multinode or {}).get("nodeCount", DEFAULT_NODE_COUNT)
    return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else DEFAULT_NODE_COUNT


def _mapping(raw: Any, where: str) -> Obj:
    if raw is None:
        return {}
    if not isinstance(raw, dict):
        raise ReconcileError(f"{where}: expected an object, got {type(raw).__name__}")
    return raw


def _list(raw: Any, where: str) -> list[Any]:
    if raw is None:
        return []
    if not isinstance(raw, list):
        raise ReconcileError(f"{where}: expected a list, got {type(raw).__name__}")
    return raw


def _is_gpu(resource: str) -> bool:
    """nvidia.com/gpu and the MIG slices (nvidia.com/mig-<profile>)."""
    return resource == GPU_RESOURCE or resource.startswith("nvidia.com/mig-")


def _count(value: Any) -> int:
    try:
        number = float(str(value))
    except ValueError:
        return 0
    return int(number) if number.is_integer() and number >= 0 else 0


_SUFFIXES = {"m": 1e-3, "k": 1e3, "M": 1e6, "G": 1e9, "T": 1e12, "P": 1e15, "E": 1e18,
             "Ki": 2.0**10, "Mi": 2.0**20, "Gi": 2.0**30, "Ti": 2.0**40, "Pi": 2.0**50, "Ei": 2.0**60}


def parse_quantity(value: Any) -> float:
    """A Kubernetes quantity ("500m", "16Gi", "2") in its base unit; 0 when it is not one."""
    text = str(value).strip()
    for suffix in sorted(_SUFFIXES, key=len, reverse=True):
        if text.endswith(suffix):
            text, scale = text[: -len(suffix)], _SUFFIXES[suffix]
            break
    else:
        scale = 1.0
    try:
        return float(text) * scale
    except ValueError:
        return 0.0


def _quantity(c: Obj, resource: str) -> float:
    res = c.get("resources") or {}
    requests, limits = res.get("requests") or {}, res.get("limits") or {}
    return parse_quantity(requests[resource] if resource in requests else limits.get(resource, 0))


def pod_request(spec: Obj, resource: str, one: Callable[[Obj, str], float]) -> float:
    """The pod's effective request (the scheduler's, k8s.io/kubernetes pkg/api/v1/resource
    PodRequests): the containers and the restartable init containers (sidecars, restartPolicy
    Always) together, or the largest other init container's when that is more; a container's
    request is its limit when it states none (the apiserver's defaulting)."""
    inits = spec.get("initContainers") or []
    running = sum(one(c, resource) for c in spec.get("containers") or []) + sum(
        one(c, resource) for c in inits if c.get("restartPolicy") == "Always")
    return max([running, *(one(c, resource) for c in inits if c.get("restartPolicy") != "Always")])


def _container_count(c: Obj, resource: str) -> int:
    res = c.get("resources") or {}
    requests, limits = res.get("requests") or {}, res.get("limits") or {}
    return _count(requests[resource]) if resource in requests else _count(limits.get(resource, 0))


# ------------------------------------------------------------------------------------------- command lines
_VAR = re.compile(r"\$(?:\{([A-Za-z_][A-Za-z0-9_]*)\}|\(([A-Za-z_][A-Za-z0-9_]*)\)|([A-Za-z_][A-Za-z0-9_]*))")


def split_args(items: Iterable[str], env: Mapping[str, str]) -> tuple[str, ...]:
    """Tokens of command + args as the container's shell would see them: an item with spaces
    (``sh -c "python3 -m ..."``) is split, ``$VAR``/``${VAR}``/``$(VAR)`` expanded from known values."""
    out: list[str] = []
    for item in items:
        try:
            parts = shlex.split(item) if any(ch.isspace() for ch in item) else [item]
        except ValueError:
            parts = item.split()
        out.extend(_VAR.sub(lambda m: env.get(m.group(1) or m.group(2) or m.group(3), m.group(0)), p) for p in parts)
    return tuple(out)


def flag_value(tokens: Sequence[str], names: Iterable[str]) -> str | None:
    """The value of a flag as argparse keeps it, the last occurrence: ``--flag value`` or ``--flag=value``."""
    wanted = set(names)
    for i in range(len(tokens) - 1, -1, -1):
        key, eq, value = tokens[i].partition("=")
        if eq and key in wanted:
            return value
        if tokens[i] in wanted and i + 1 < len(tokens):
            return tokens[i + 1]
    return None
