"""GPU node pools for the offline cluster, declared in YAML (``pools/*.yaml``).

A pool file lists storage classes and pools of identical kwok Nodes. Each GPU node carries
``nvidia.com/gpu`` in capacity and allocatable and the labels GPU Feature Discovery would set,
so the real kube-scheduler filters on them exactly as on a GPU cluster.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from deploy_suite import yamlio
from deploy_suite.constants import GPU_PRODUCT_LABEL, GPU_RESOURCE
from deploy_suite.errors import InputError
from deploy_suite_offline.errors import ClusterError

POOLS_DIR = Path(__file__).with_name("pools")
PROVISIONER = "deploy-suite.local/hostpath"
_NAME = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
_QUANTITY = re.compile(r"^[0-9]+(\.[0-9]+)?(m|k|Ki|Mi|Gi|Ti|Pi|M|G|T|P)?$")
_EFFECTS = {"NoSchedule", "PreferNoSchedule", "NoExecute"}


@dataclass(frozen=True)
class Gpu:
    product: str
    count: int
    memory_mib: int


@dataclass(frozen=True)
class Taint:
    key: str
    effect: str
    value: str = ""


@dataclass(frozen=True)
class Pool:
    name: str
    count: int
    instance_type: str
    zone: str
    cpu: str
    memory: str
    pods: int = 110
    gpu: Gpu | None = None
    labels: dict[str, str] = field(default_factory=dict)
    taints: tuple[Taint, ...] = ()


@dataclass(frozen=True)
class StorageClass:
    name: str
    default: bool = False
    binding_mode: str = "Immediate"


@dataclass(frozen=True)
class Layout:
    source: str
    pools: tuple[Pool, ...]
    storage_classes: tuple[StorageClass, ...]

    def node_names(self) -> list[str]:
        return [f"{p.name}-{i}" for p in self.pools for i in range(p.count)]

    def nodes(self) -> list[dict[str, Any]]:
        return [node_manifest(p, i) for p in self.pools for i in range(p.count)]

    def storage_class_manifests(self) -> list[dict[str, Any]]:
        return [storage_class_manifest(sc) for sc in self.storage_classes]


def known_layouts() -> list[str]:
    return sorted(p.stem for p in POOLS_DIR.glob("*.yaml"))


def resolve(spec: str | Path) -> Path:
    """A bundled layout name (``default``) or a path to a pool file."""
    as_path = Path(spec)
    if as_path.suffix in {".yaml", ".yml"} or as_path.exists():
        if not as_path.is_file():
            raise ClusterError(f"pools file {spec}: not found; fix: pass an existing file or one of "
                               f"{', '.join(known_layouts())}")
        return as_path
    bundled = POOLS_DIR / f"{spec}.yaml"
    if not bundled.is_file():
        raise ClusterError(f"unknown pool layout {spec!r}; fix: use one of {', '.join(known_layouts())} "
                           "or a path to a pools YAML file")
    return bundled


def load(spec: str | Path) -> Layout:
    path = resolve(spec)
    try:
        doc = yamlio.load_one(path, f"pools file {path}",
                              f"correct the syntax (see {POOLS_DIR / 'default.yaml'} for the format)")
    except InputError as exc:  # one error type for every bad pools file, as `cluster up` reports it
        raise ClusterError(str(exc)) from exc
    return parse(doc, str(path))


def _fail(source: str, problem: str) -> ClusterError:
    return ClusterError(f"pools file {source}: {problem}; fix: correct it (see {POOLS_DIR / 'default.yaml'})")


def _str(source: str, obj: dict[str, Any], key: str, where: str, default: str | None = None) -> str:
    value = obj.get(key, default)
    if not isinstance(value, str) or not value:
        raise _fail(source, f"{where}.{key} must be a non-empty string")
    return value


def _int(source: str, obj: dict[str, Any], key: str, where: str, default: int | None = None,
         minimum: int = 0) -> int:
    value = obj.get(key, default)
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise _fail(source, f"{where}.{key} must be an integer >= {minimum}")
    return value


def parse(doc: Any, source: str) -> Layout:
    if not isinstance(doc, dict) or doc.get("kind") != "NodePools":
        raise _fail(source, "expected a mapping with kind: NodePools")
    raw_pools = doc.get("pools")
    if not isinstance(raw_pools, list) or not raw_pools:
        raise _fail(source, "pools must be a non-empty list")
    pools: list[Pool] = []
    seen: set[str] = set()
    for i, raw in enumerate(raw_pools):
        where = f"pools[{i}]"
        if not isinstance(raw, dict):
            raise _fail(source, f"{where} must be a mapping")
        name = _str(source, raw, "name", where)
        if not _NAME.match(name) or name in seen:
            raise _fail(source, f"{where}.name {name!r} must be a unique DNS label")
        seen.add(name)
        for key in ("cpu", "memory"):
            if not _QUANTITY.match(str(raw.get(key, ""))):
                raise _fail(source, f"{where}.{key} must be a Kubernetes quantity such as 32 or 128Gi")
        gpu = None
        if raw.get("gpu") is not None:
            g = raw["gpu"]
            if not isinstance(g, dict):
                raise _fail(source, f"{where}.gpu must be a mapping with product, count, memoryMiB")
            gpu = Gpu(_str(source, g, "product", f"{where}.gpu"), _int(source, g, "count", f"{where}.gpu",
                                                                         minimum=1),
                      _int(source, g, "memoryMiB", f"{where}.gpu", minimum=1))
        labels = raw.get("labels") or {}
        if not isinstance(labels, dict) or not all(isinstance(k, str) and isinstance(v, str)
                                                   for k, v in labels.items()):
            raise _fail(source, f"{where}.labels must map strings to strings")
        taints: list[Taint] = []
        for j, t in enumerate(raw.get("taints") or []):
            if not isinstance(t, dict) or t.get("effect") not in _EFFECTS:
                raise _fail(source, f"{where}.taints[{j}] needs key and effect in {sorted(_EFFECTS)}")
            taints.append(Taint(_str(source, t, "key", f"{where}.taints[{j}]"), str(t["effect"]),
                                str(t.get("value", ""))))
        pools.append(Pool(
            name=name, count=_int(source, raw, "count", where, minimum=1),
            instance_type=_str(source, raw, "instanceType", where), zone=_str(source, raw, "zone", where),
            cpu=str(raw["cpu"]), memory=str(raw["memory"]), pods=_int(source, raw, "pods", where, 110, 1),
            gpu=gpu, labels=dict(labels), taints=tuple(taints)))
    classes: list[StorageClass] = []
    for i, raw in enumerate(doc.get("storageClasses") or []):
        where = f"storageClasses[{i}]"
        if not isinstance(raw, dict):
            raise _fail(source, f"{where} must be a mapping")
        mode = raw.get("volumeBindingMode", "Immediate")
        if mode not in {"Immediate", "WaitForFirstConsumer"}:
            raise _fail(source, f"{where}.volumeBindingMode must be Immediate or WaitForFirstConsumer")
        classes.append(StorageClass(_str(source, raw, "name", where), bool(raw.get("default", False)), mode))
    if sum(sc.default for sc in classes) > 1:
        raise _fail(source, "at most one storage class may be the default")
    return Layout(source, tuple(pools), tuple(classes))


def node_manifest(pool: Pool, index: int) -> dict[str, Any]:
    name = f"{pool.name}-{index}"
    labels = {
        "type": "kwok",
        "kubernetes.io/hostname": name,
        "kubernetes.io/os": "linux",
        "kubernetes.io/arch": "amd64",
        "node.kubernetes.io/instance-type": pool.instance_type,
        "topology.kubernetes.io/zone": pool.zone,
        "deploy-suite.local/pool": pool.name,
        **pool.labels,
    }
    capacity = {"cpu": pool.cpu, "memory": pool.memory, "pods": str(pool.pods), "ephemeral-storage": "10Ti"}
    if pool.gpu is not None:
        labels.update({
            "nvidia.com/gpu.present": "true",
            GPU_PRODUCT_LABEL: pool.gpu.product,
            "nvidia.com/gpu.count": str(pool.gpu.count),
            "nvidia.com/gpu.memory": str(pool.gpu.memory_mib),
        })
        capacity[GPU_RESOURCE] = str(pool.gpu.count)
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {
            "name": name,
            "labels": labels,
            # kwok manages nodes carrying this annotation (it plays their kubelet).
            "annotations": {"kwok.x-k8s.io/node": "fake", "node.alpha.kubernetes.io/ttl": "0"},
        },
        "spec": {"taints": [{"key": t.key, "value": t.value, "effect": t.effect} if t.value
                            else {"key": t.key, "effect": t.effect} for t in pool.taints]},
        "status": {"capacity": capacity, "allocatable": dict(capacity),
                   "nodeInfo": {"architecture": "amd64", "operatingSystem": "linux",
                                "kubeletVersion": "fake", "kubeProxyVersion": "fake"}},
    }


def storage_class_manifest(sc: StorageClass) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": sc.name}
    if sc.default:
        meta["annotations"] = {"storageclass.kubernetes.io/is-default-class": "true"}
    return {"apiVersion": "storage.k8s.io/v1", "kind": "StorageClass", "metadata": meta,
            "provisioner": PROVISIONER, "reclaimPolicy": "Delete", "volumeBindingMode": sc.binding_mode,
            "allowVolumeExpansion": True}
