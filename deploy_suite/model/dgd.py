"""The DynamoGraphDeployment (DGD) model: one typed, frozen view over v1alpha1 and v1beta1 manifests.

Recipes ship DGDs in two API shapes (v1alpha1 ``spec.services`` map, v1beta1 ``spec.components``
list) and often as multi-document files where ConfigMaps, ComputeDomains or PVCs come first. Every
later step (preflight, capacity, pinned-knob checks, smoke) wants the same facts, so they are read
once here and normalised into :class:`Dgd` / :class:`Component`. The Kubernetes scheduling
primitives the components carry (selectors, tolerations, affinity terms, GPU counts) live in
``deploy_suite.model.scheduling``; the knob table for ``resources.pinned`` in ``deploy_suite.model.knobs``.

Two kinds of trouble are kept apart on purpose:

* malformed input (not YAML, no DGD, wrong field types) raises :class:`InputError`: nothing later
  can work, the user must fix the file;
* a valid manifest the model cannot represent faithfully (templated replicas, unsupported affinity
  operators, an unknown apiVersion, several DGDs) is parsed as far as possible and the reason lands
  in :attr:`Dgd.unrepresentable`, so capacity answers ``unknown`` rather than a false ``sufficient``;
  DRA claims are kept as written, the cluster says what they ask (``deploy_suite.judges.dra``).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from deploy_suite import constants
from deploy_suite.constants import DGD_KIND, GPU_RESOURCE, SUPPORTED_API_VERSIONS, V1BETA1
from deploy_suite.errors import InputError
from deploy_suite.model import podspec, scheduling
from deploy_suite.model.frontend import (
    FRONTEND_TYPE,
    LEGACY_ENTRY_TYPE,
    FrontendSidecar,
    alpha_sidecar,
    beta_sidecar,
    runs_frontend,
    undeclared_sidecar,
)
from deploy_suite.model.podspec import EnvFrom, EnvVar, flag_value, split_args
from deploy_suite.model.scheduling import (
    DraClaim,
    FieldReader,
    PodAffinityTerm,
    Requirement,
    Scheduling,
    Toleration,
    container_gpus,
    gpu_resources,
    parse_count,
    parse_scheduling,
    pod_gpus,
)
from deploy_suite.yamlio import load_all, load_yaml_text

# CRD default for multinode.nodeCount ("≥2, default 2").
DEFAULT_MULTINODE_NODE_COUNT = 2
COMPONENT_TYPES = frozenset({"frontend", "worker", "prefill", "decode", "planner", "epp"})
WORKER_TYPES = frozenset({"worker", "prefill", "decode"})
MAIN_CONTAINER = "main"

# The words every invalid GPU count is reported with (step 1 refuses such a DGD naming the value).
BAD_GPU_COUNT = "is not a whole number of GPUs"

_FIX_YAML = "pass a DynamoGraphDeployment manifest (YAML, apiVersion nvidia.com/v1alpha1 or v1beta1)"


# --------------------------------------------------------------------------------------------
# The model
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Pvc:
    """A graph-level ``spec.pvcs`` entry (v1alpha1 only)."""

    name: str
    create: bool = False
    storage_class: str | None = None
    size: str | None = None
    access_mode: str | None = None


@dataclass(frozen=True)
class OtherDocument:
    """A non-DGD object in the same file (must be applied too; never inferred from the filename)."""

    kind: str
    api_version: str
    name: str | None


# Priority order for the served model name. ``--model-name`` is the mocker's spelling.
SERVED_MODEL_FLAGS = (("--served-model-name",), ("--model-name",), ("--model",), ("--model-path",))


@dataclass(frozen=True)
class Component:
    """One DGD component (v1alpha1 service / v1beta1 component), normalised."""

    name: str
    type: str  # frontend|worker|prefill|decode|planner|epp, or the raw value when unknown
    raw_type: str | None  # componentType / type as written
    sub_component_type: str | None
    replicas: int
    node_count: int
    multinode: bool
    gpus_per_pod: int
    gpu_resource: str
    scheduling: Scheduling
    image: str | None
    command: tuple[str, ...]
    args: tuple[str, ...]
    env: tuple[EnvVar, ...]
    env_from: tuple[EnvFrom, ...]
    image_pull_secrets: tuple[str, ...]
    pvc_claims: tuple[str, ...]
    volume_names: tuple[str, ...]
    shared_memory: str | None
    served_model: str | None
    tokens: tuple[str, ...]  # command + args split and env-expanded (what knobs read)
    pod_labels: Mapping[str, str] = field(default_factory=dict)  # user labels for the pod
    requests: Mapping[str, float] = field(default_factory=dict)  # per pod: every resource but the GPU one
    dra_claims: tuple[DraClaim, ...] = ()
    frontend_sidecar: FrontendSidecar | None = None  # the Dynamo frontend beside `main` (gaie workers)

    @property
    def node_selector(self) -> dict[str, str]:
        return dict(self.scheduling.node_selector)

    @property
    def node_affinity(self) -> list[list[Requirement]] | None:
        """Required node affinity: a list of ORed terms, each a list of ANDed expressions."""
        if self.scheduling.node_affinity is None:
            return None
        return [list(t.match_expressions) + list(t.match_fields) for t in self.scheduling.node_affinity]

    @property
    def tolerations(self) -> tuple[Toleration, ...]:
        return self.scheduling.tolerations

    @property
    def pod_affinity(self) -> tuple[PodAffinityTerm, ...]:
        return self.scheduling.pod_affinity

    @property
    def pod_anti_affinity(self) -> tuple[PodAffinityTerm, ...]:
        return self.scheduling.pod_anti_affinity

    @property
    def is_worker(self) -> bool:
        return self.type in WORKER_TYPES

    @property
    def gpus_per_replica(self) -> int:
        return self.gpus_per_pod * self.node_count

    @property
    def total_gpus(self) -> int:
        return self.replicas * self.gpus_per_replica

    def flag(self, *names: str) -> str | None:
        return flag_value(self.tokens, names)


@dataclass(frozen=True)
class PodDemand:
    """One pod the operator will create, with what the scheduler needs to place it."""

    name: str  # "<component>-<replica>" or "<component>-<replica>-<rank>" for multinode
    component: str
    component_type: str
    replica: int
    rank: int
    gpus: int
    gpu_resource: str
    scheduling: Scheduling
    labels: Mapping[str, str]
    namespace: str | None
    requests: tuple[tuple[str, float], ...] = ()  # every resource but ``gpu_resource``, sorted
    dra_claims: tuple[DraClaim, ...] = ()


@dataclass(frozen=True)
class Dgd:
    api_version: str
    name: str
    namespace: str | None
    backend_framework: str | None
    components: list[Component]
    pvcs: list[Pvc] = field(default_factory=list)
    other_documents: list[OtherDocument] = field(default_factory=list)
    env: tuple[EnvVar, ...] = ()
    annotations: Mapping[str, str] = field(default_factory=dict)
    labels: Mapping[str, str] = field(default_factory=dict)
    unrepresentable: list[str] = field(default_factory=list)
    source: str = "<dgd>"

    def component(self, name: str) -> Component:
        for c in self.components:
            if c.name == name:
                return c
        raise KeyError(name)

    def total_gpus(self) -> int:
        return sum(c.total_gpus for c in self.components)

    @property
    def frontend(self) -> Component | None:
        """The component serving the OpenAI API behind a Service: typed frontend (v1alpha1 ``main``
        included), else one whose main container runs the Dynamo frontend, whatever its type
        (docs/operator-generations.md, "Where the frontend runs")."""
        return next((c for c in self.components if c.type == FRONTEND_TYPE), None) or next(
            (c for c in self.components if runs_frontend(c.tokens)), None)

    @property
    def frontend_service(self) -> str | None:
        """The Service the operator creates for the frontend: ``<dgd>-<lowercased component name>``,
        dots as dashes (docs/operator-generations.md); None without a frontend component."""
        front = self.frontend
        return f"{self.name}-{front.name.lower()}".replace(".", "-") if front is not None else None

    def sidecar_components(self) -> list[Component]:
        """Components whose pods run a frontend sidecar, those that decode first (a request enters
        there; a prefill worker's sidecar is the last resort)."""
        return sorted((c for c in self.components if c.frontend_sidecar is not None),
                      key=lambda c: c.type == "prefill")

    def pod_count(self) -> int:
        """Pods the operator will create (component x replica x node), without expanding them."""
        return sum(c.replicas * c.node_count for c in self.components)

    def pod_demands(self, namespace: str | None = None, *, first_only: bool = False) -> list[PodDemand]:
        """Every pod: component x replica x node (multinode), in creation order. ``first_only``
        gives one pod per component (its constraints, without the expansion)."""
        ns = namespace or self.namespace
        out = []
        for c in self.components:
            labels = {**self.labels, **c.pod_labels}
            labels[constants.LABEL_DGD_NAME] = self.name
            labels[constants.LABEL_COMPONENT] = c.name
            labels[constants.LABEL_COMPONENT_TYPE] = c.raw_type or c.type
            if c.sub_component_type:
                labels[constants.LABEL_SUB_COMPONENT_TYPE] = c.sub_component_type
            if ns:
                labels[constants.LABEL_DYNAMO_NAMESPACE] = f"{ns}-{self.name}"
            for replica in range(min(c.replicas, 1) if first_only else c.replicas):
                for rank in range(min(c.node_count, 1) if first_only else c.node_count):
                    name = f"{c.name}-{replica}" + (f"-{rank}" if c.multinode else "")
                    out.append(PodDemand(name, c.name, c.type, replica, rank, c.gpus_per_pod, c.gpu_resource,
                                         c.scheduling, labels, ns, tuple(sorted(c.requests.items())), c.dra_claims))
        return out


# --------------------------------------------------------------------------------------------
# Parsing
# --------------------------------------------------------------------------------------------


def load_dgd(path: str | Path) -> Dgd:
    """The one DGD of a manifest file, read through the bounded YAML reader."""
    p = Path(path)
    return from_documents(load_all(p, str(p), _FIX_YAML), str(p))


def parse_dgd(text: str, source: str = "<dgd>") -> Dgd:
    """Parse a (multi-document) manifest and return its one DGD, normalised."""
    return from_documents([d for d in load_yaml_text(text, source, _FIX_YAML) if d is not None], source)


def from_documents(docs: Sequence[Any], source: str = "<dgd>") -> Dgd:
    """The one DGD among already-parsed documents (a file read once and patched in memory)."""
    rd = FieldReader(source)
    dgds: list[dict[str, Any]] = []
    others: list[OtherDocument] = []
    for i, doc in enumerate(docs):
        if not isinstance(doc, dict):
            raise rd.fail(f"document {i + 1}", f"expected a Kubernetes object, got {type(doc).__name__}", _FIX_YAML)
        kind = str(doc.get("kind", ""))
        api = str(doc.get("apiVersion", ""))
        name = rd.text(rd.mapping(doc.get("metadata"), f"document {i + 1}.metadata").get("name"), "metadata.name")
        if kind == DGD_KIND:
            dgds.append(doc)
        else:
            others.append(OtherDocument(kind, api, name))
    if not dgds:
        raise InputError(source, f"no {DGD_KIND} document among {len(docs)} document(s)", _FIX_YAML)
    problems: list[str] = []
    if len(dgds) > 1:
        names = [str((d.get("metadata") or {}).get("name")) for d in dgds]
        problems.append(
            f"{len(dgds)} DynamoGraphDeployments in one file ({', '.join(names)}); only the first is modelled"
        )
        others.extend(
            OtherDocument(DGD_KIND, str(d.get("apiVersion", "")), n) for d, n in zip(dgds[1:], names[1:], strict=True)
        )
    return _parse_one(rd, dgds[0], others, problems)


def _parse_one(rd: FieldReader, doc: dict[str, Any], others: list[OtherDocument], problems: list[str]) -> Dgd:
    api = str(doc.get("apiVersion", ""))
    meta = rd.mapping(doc.get("metadata"), "metadata")
    name = rd.text(meta.get("name"), "metadata.name")
    if not name:
        raise rd.fail("metadata.name", "missing", "give the DynamoGraphDeployment a metadata.name")
    spec = rd.mapping(doc.get("spec"), "spec")
    if api not in SUPPORTED_API_VERSIONS:
        problems.append(f"apiVersion {api!r} is not one of {', '.join(SUPPORTED_API_VERSIONS)}; read as best effort")
    graph_env = podspec.env_list(rd, spec.get("envs") if "envs" in spec else spec.get("env"), "spec.env")
    beta = "components" in spec if api not in SUPPORTED_API_VERSIONS else api == V1BETA1
    pvcs = [] if beta else _pvcs(rd, spec.get("pvcs"))
    components = (
        _beta_components(rd, spec, graph_env, problems)
        if beta
        else _alpha_components(rd, spec, graph_env, pvcs, problems)
    )
    if not components:
        problems.append("the DGD has no components")
    return Dgd(
        api_version=api,
        name=name,
        namespace=rd.text(meta.get("namespace"), "metadata.namespace"),
        backend_framework=rd.text(spec.get("backendFramework"), "spec.backendFramework"),
        components=components,
        pvcs=pvcs,
        other_documents=others,
        env=graph_env,
        annotations=rd.str_map(spec.get("annotations"), "spec.annotations"),
        labels=rd.str_map(spec.get("labels"), "spec.labels"),
        unrepresentable=problems,
        source=rd.source,
    )


def _pvcs(rd: FieldReader, raw: Any) -> list[Pvc]:
    out = []
    for i, item in enumerate(rd.seq(raw, "spec.pvcs")):
        p = rd.mapping(item, f"spec.pvcs[{i}]")
        name = rd.text(p.get("name"), f"spec.pvcs[{i}].name")
        if not name:
            raise rd.fail(f"spec.pvcs[{i}].name", "missing", "name every spec.pvcs entry")
        out.append(
            Pvc(
                name,
                bool(p.get("create", False)),
                rd.text(p.get("storageClass"), f"spec.pvcs[{i}].storageClass"),
                rd.text(p.get("size"), f"spec.pvcs[{i}].size"),
                rd.text(p.get("volumeAccessMode"), f"spec.pvcs[{i}].volumeAccessMode"),
            )
        )
    return out


def _replicas(rd: FieldReader, raw: Any, path: str, problems: list[str]) -> int:
    if raw is None:
        return 1
    if isinstance(raw, bool) or not isinstance(raw, int | str):
        raise rd.fail(path, f"expected an integer, got {type(raw).__name__}", f"set {path} to a whole number")
    if isinstance(raw, str):
        # Templated ("${REPLICAS}") or quoted: Kubernetes would reject it; capacity cannot count it.
        problems.append(f"{path} is the string {raw!r}, not an integer")
        return parse_count(raw) or 0
    if raw < 0:
        raise rd.fail(path, f"negative ({raw})", f"set {path} to 0 or more")
    return raw


def _node_count(rd: FieldReader, multinode: Any, path: str, problems: list[str]) -> tuple[int, bool]:
    if multinode is None:
        return 1, False
    mn = rd.mapping(multinode, path)
    raw = mn.get("nodeCount", DEFAULT_MULTINODE_NODE_COUNT)
    count = parse_count(raw)
    if count is None or isinstance(raw, str):
        problems.append(f"{path}.nodeCount {raw!r} is not an integer")
        return count or DEFAULT_MULTINODE_NODE_COUNT, True
    return max(count, 1), True


def _normalise_type(raw: str | None, sub: str | None) -> str:
    """A v1alpha1 type: only a ``worker`` with ``subComponentType`` prefill/decode is that (ai-dynamo/dynamo
    ``api/v1alpha1/shared_spec_conversion.go`` sharedComponentTypeToHub); ``main`` is the frontend of the
    operators before that type (docs/operator-generations.md)."""
    if raw == "worker" and sub in ("prefill", "decode"):
        return sub
    if raw == LEGACY_ENTRY_TYPE:
        return FRONTEND_TYPE
    return raw or "other"


def _served_model(tokens: Sequence[str]) -> str | None:
    for names in SERVED_MODEL_FLAGS:
        value = flag_value(tokens, names)
        if value:
            return value
    return None


def _alpha_components(
    rd: FieldReader,
    spec: Mapping[str, Any],
    graph_env: tuple[EnvVar, ...],
    pvcs: list[Pvc],
    problems: list[str],
) -> list[Component]:
    pvc_names = {p.name for p in pvcs}
    out = []
    services = rd.mapping(spec.get("services"), "spec.services")
    for svc_name, raw in services.items():
        path = f"spec.services.{svc_name}"
        svc = rd.mapping(raw, path)
        raw_type = rd.text(svc.get("componentType"), f"{path}.componentType")
        sub = rd.text(svc.get("subComponentType"), f"{path}.subComponentType")
        replicas = _replicas(rd, svc.get("replicas"), f"{path}.replicas", problems)
        node_count, multinode = _node_count(rd, svc.get("multinode"), f"{path}.multinode", problems)
        resources = rd.mapping(svc.get("resources"), f"{path}.resources")
        limits = rd.mapping(resources.get("limits"), f"{path}.resources.limits")
        requests = rd.mapping(resources.get("requests"), f"{path}.resources.requests")
        gpu_type = rd.text(limits.get("gpuType") or requests.get("gpuType"), f"{path}.resources.limits.gpuType")
        service_gpus = 0
        for part, values in (("limits", limits), ("requests", requests)):
            if values.get("gpu") is None:
                continue
            count = parse_count(values["gpu"])
            if count is None:
                problems.append(f"{path}.resources.{part}.gpu {values['gpu']!r} {BAD_GPU_COUNT}")
            else:
                service_gpus = max(service_gpus, count)  # request and limit counted once
        pod_spec = rd.mapping(svc.get("extraPodSpec"), f"{path}.extraPodSpec")
        main = rd.mapping(pod_spec.get("mainContainer"), f"{path}.extraPodSpec.mainContainer")
        sidecars = [
            rd.mapping(c, f"{path}.extraPodSpec.containers[{i}]")
            for i, c in enumerate(rd.seq(pod_spec.get("containers"), f"{path}.extraPodSpec.containers"))
        ]
        # resources.gpu goes on nvidia.com/gpu; else a MIG slice the main container asks counts too.
        gpu_resource = gpu_type or (GPU_RESOURCE if service_gpus else _main_gpu_resource(main))
        # Service GPUs go on main unless the mainContainer names its own (podspec.main_container); sidecars add.
        main_gpus = (container_gpus(main, gpu_resource) or 0) if podspec.names(main, gpu_resource) else service_gpus
        main_effective = {**main, "resources": {"limits": {gpu_resource: main_gpus}}}
        gpus = _pod_gpus(
            {**pod_spec, "containers": [main_effective, *sidecars]}, gpu_resource, path, problems
        )
        sched = parse_scheduling(rd, pod_spec, f"{path}.extraPodSpec", problems)
        pod = {**pod_spec, "containers": [podspec.main_container(rd, main, resources, gpu_resource, path), *sidecars]}
        device_claims = scheduling.dra_claims(rd, pod, f"{path}.extraPodSpec", problems)
        component_env = podspec.env_list(rd, svc.get("envs"), f"{path}.envs")
        container_env = podspec.env_list(rd, main.get("env"), f"{path}.extraPodSpec.mainContainer.env")
        env_from = podspec.env_from(rd, main.get("envFrom"), f"{path}.extraPodSpec.mainContainer.envFrom")
        secret = rd.text(svc.get("envFromSecret"), f"{path}.envFromSecret")
        if secret:
            env_from.insert(0, EnvFrom("secret", secret))
        volume_names, claims = podspec.volumes(rd, pod_spec, f"{path}.extraPodSpec")
        for i, item in enumerate(rd.seq(svc.get("volumeMounts"), f"{path}.volumeMounts")):
            vm = rd.mapping(item, f"{path}.volumeMounts[{i}]")
            vm_name = rd.text(vm.get("name"), f"{path}.volumeMounts[{i}].name")
            if vm_name:
                if vm_name not in pvc_names:
                    problems.append(f"{path}.volumeMounts[{i}] names {vm_name!r}, which is not in spec.pvcs")
                if vm_name not in claims:
                    claims.append(vm_name)
        shm = rd.mapping(svc.get("sharedMemory"), f"{path}.sharedMemory")
        shared_memory = "0" if shm.get("disabled") else rd.text(shm.get("size"), f"{path}.sharedMemory.size")
        command = rd.strs(main.get("command"), f"{path}.extraPodSpec.mainContainer.command")
        args = rd.strs(main.get("args"), f"{path}.extraPodSpec.mainContainer.args")
        env_values = podspec.env_values(graph_env, component_env, container_env)
        tokens = split_args([*command, *args], env_values)
        meta = rd.mapping(svc.get("extraPodMetadata"), f"{path}.extraPodMetadata")
        labels = {
            **rd.str_map(svc.get("labels"), f"{path}.labels"),
            **rd.str_map(meta.get("labels"), f"{path}.extraPodMetadata.labels"),
        }
        out.append(
            Component(
                name=str(svc_name),
                type=_normalise_type(raw_type, sub),
                raw_type=raw_type,
                sub_component_type=sub,
                replicas=replicas,
                node_count=node_count,
                multinode=multinode,
                gpus_per_pod=gpus,
                gpu_resource=gpu_resource,
                scheduling=sched,
                image=rd.text(main.get("image"), f"{path}.extraPodSpec.mainContainer.image"),
                command=command,
                args=args,
                env=(*component_env, *container_env),
                env_from=tuple(env_from),
                image_pull_secrets=podspec.pull_secrets(rd, pod_spec, f"{path}.extraPodSpec"),
                pvc_claims=tuple(claims),
                volume_names=tuple(volume_names),
                shared_memory=shared_memory,
                served_model=_served_model(tokens),
                tokens=tokens,
                pod_labels=labels,
                requests=scheduling.pod_requests(pod, but=gpu_resource), dra_claims=device_claims,
                frontend_sidecar=alpha_sidecar(rd, svc.get("frontendSidecar"), f"{path}.frontendSidecar")
                or undeclared_sidecar(rd, sidecars, f"{path}.extraPodSpec"),
            )
        )
    return out


def _beta_components(
    rd: FieldReader, spec: Mapping[str, Any], graph_env: tuple[EnvVar, ...], problems: list[str]
) -> list[Component]:
    out = []
    for idx, raw in enumerate(rd.seq(spec.get("components"), "spec.components")):
        path = f"spec.components[{idx}]"
        comp = rd.mapping(raw, path)
        name = rd.text(comp.get("name"), f"{path}.name")
        if not name:
            raise rd.fail(f"{path}.name", "missing", "name every component")
        path = f"spec.components[{name}]"
        raw_type = rd.text(comp.get("type"), f"{path}.type")
        if raw_type is not None and raw_type not in COMPONENT_TYPES:
            problems.append(f"{path}.type {raw_type!r} is not one of {sorted(COMPONENT_TYPES)}")
        replicas = _replicas(rd, comp.get("replicas"), f"{path}.replicas", problems)
        node_count, multinode = _node_count(rd, comp.get("multinode"), f"{path}.multinode", problems)
        template = rd.mapping(comp.get("podTemplate"), f"{path}.podTemplate")
        pod_spec = rd.mapping(template.get("spec"), f"{path}.podTemplate.spec")
        containers = [
            rd.mapping(c, f"{path}.podTemplate.spec.containers[{i}]")
            for i, c in enumerate(rd.seq(pod_spec.get("containers"), f"{path}.podTemplate.spec.containers"))
        ]
        mains = [c for c in containers if c.get("name") == MAIN_CONTAINER]
        if not mains:
            raise rd.fail(
                f"{path}.podTemplate.spec.containers",
                "no container named 'main'",
                "add the container named main with its image",
            )
        main = mains[0]
        device_claims = scheduling.dra_claims(rd, pod_spec, f"{path}.podTemplate.spec", problems)
        gpu_resource = _main_gpu_resource(main)
        gpus = _pod_gpus(pod_spec, gpu_resource, path, problems)
        cpath = f"{path}.podTemplate.spec.containers[main]"
        container_env = podspec.env_list(rd, main.get("env"), f"{cpath}.env")
        command = rd.strs(main.get("command"), f"{cpath}.command")
        args = rd.strs(main.get("args"), f"{cpath}.args")
        tokens = split_args([*command, *args], podspec.env_values(graph_env, container_env))
        volume_names, claims = podspec.volumes(rd, pod_spec, f"{path}.podTemplate.spec")
        cache = rd.mapping(comp.get("compilationCache"), f"{path}.compilationCache")
        cache_pvc = rd.text(cache.get("pvcName"), f"{path}.compilationCache.pvcName")
        if cache_pvc and cache_pvc not in claims:
            claims.append(cache_pvc)
        meta = rd.mapping(template.get("metadata"), f"{path}.podTemplate.metadata")
        out.append(
            Component(
                name=name,
                type=raw_type or "other",
                raw_type=raw_type,
                sub_component_type=None,
                replicas=replicas,
                node_count=node_count,
                multinode=multinode,
                gpus_per_pod=gpus,
                gpu_resource=gpu_resource,
                scheduling=parse_scheduling(rd, pod_spec, f"{path}.podTemplate.spec", problems),
                image=rd.text(main.get("image"), f"{cpath}.image"),
                command=command,
                args=args,
                env=container_env,
                env_from=tuple(podspec.env_from(rd, main.get("envFrom"), f"{cpath}.envFrom")),
                image_pull_secrets=podspec.pull_secrets(rd, pod_spec, f"{path}.podTemplate.spec"),
                pvc_claims=tuple(claims),
                volume_names=tuple(volume_names),
                shared_memory=rd.text(comp.get("sharedMemorySize"), f"{path}.sharedMemorySize"),
                served_model=_served_model(tokens),
                tokens=tokens,
                pod_labels=rd.str_map(meta.get("labels"), f"{path}.podTemplate.metadata.labels"),
                requests=scheduling.pod_requests(pod_spec, but=gpu_resource), dra_claims=device_claims,
                frontend_sidecar=beta_sidecar(rd, comp.get("frontendSidecar"), containers, path),
            )
        )
    return out


def _pod_gpus(pod_spec: Mapping[str, Any], resource: str, path: str, problems: list[str]) -> int:
    """The pod's effective GPU request; a count that is not a whole number (``"0.5"``, ``-2``) is
    recorded as a problem naming the container and the value as written, and counts 0."""
    count = pod_gpus(pod_spec, resource)
    if count is not None:
        return count
    for key in ("initContainers", "containers"):
        for c in pod_spec.get(key) or []:
            resources = c.get("resources") if isinstance(c, dict) else None
            for part in ("requests", "limits"):
                values = (resources or {}).get(part) if isinstance(resources, dict) else None
                if isinstance(values, dict) and resource in values and parse_count(values[resource]) is None:
                    problems.append(f"{path}: container {c.get('name')!r} resources.{part}.{resource} "
                                    f"{values[resource]!r} {BAD_GPU_COUNT}")
    return 0


def _main_gpu_resource(main: Mapping[str, Any]) -> str:
    """The GPU resource the main container asks for: nvidia.com/gpu unless another GPU resource
    (a MIG slice, ``is_gpu_resource``) is named."""
    named = gpu_resources({"containers": [main]})
    return GPU_RESOURCE if GPU_RESOURCE in named or not named else named[0]
