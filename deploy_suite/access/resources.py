"""Where each kind the suite touches lives in the REST API, and how objects are keyed.

Shared by the access layer (:mod:`deploy_suite.access.kube`) and its wait loop
(:mod:`deploy_suite.access.watch`); objects are plain JSON dicts, exactly what ``kubectl get -o json``
shows. Imports nothing of the project but the constants.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from urllib.parse import quote

from deploy_suite.constants import DGD_GROUP, DGD_KIND, DGD_PLURAL
from deploy_suite.constants import Obj as Obj  # re-exported: the access layer's callers name it from here


@dataclass(frozen=True)
class Resource:
    """Where a kind lives in the REST API."""

    group: str
    version: str
    plural: str
    namespaced: bool
    kind: str = ""

    @property
    def api_version(self) -> str:
        return f"{self.group}/{self.version}" if self.group else self.version

    @property
    def kubectl_name(self) -> str:
        """The name kubectl accepts unambiguously (plural.group for non-core kinds)."""
        return f"{self.plural}.{self.group}" if self.group and self.group not in {"apps", "batch"} else self.plural

    def path(self, namespace: str | None = None, name: str | None = None, sub: str | None = None) -> str:
        base = f"/apis/{self.group}/{self.version}" if self.group else f"/api/{self.version}"
        if self.namespaced and namespace:
            base += f"/namespaces/{quote(namespace)}"
        base += f"/{self.plural}"
        if name:
            base += f"/{quote(name)}"
        if sub:
            base += f"/{sub}"
        return base


# Kinds the suite touches, so that the common path needs no discovery round trip.
KNOWN: dict[str, Resource] = {
    r.kind: r
    for r in (
        Resource("", "v1", "namespaces", False, "Namespace"),
        Resource("", "v1", "nodes", False, "Node"),
        Resource("", "v1", "pods", True, "Pod"),
        Resource("", "v1", "services", True, "Service"),
        Resource("", "v1", "secrets", True, "Secret"),
        Resource("", "v1", "configmaps", True, "ConfigMap"),
        Resource("", "v1", "events", True, "Event"),
        Resource("", "v1", "persistentvolumeclaims", True, "PersistentVolumeClaim"),
        Resource("", "v1", "persistentvolumes", False, "PersistentVolume"),
        Resource("", "v1", "serviceaccounts", True, "ServiceAccount"),
        Resource("", "v1", "resourcequotas", True, "ResourceQuota"),
        Resource("apps", "v1", "deployments", True, "Deployment"),
        Resource("apps", "v1", "replicasets", True, "ReplicaSet"),
        Resource("batch", "v1", "jobs", True, "Job"),
        Resource("storage.k8s.io", "v1", "storageclasses", False, "StorageClass"),
        Resource("apiextensions.k8s.io", "v1", "customresourcedefinitions", False, "CustomResourceDefinition"),
        Resource("rbac.authorization.k8s.io", "v1", "roles", True, "Role"),
        Resource("rbac.authorization.k8s.io", "v1", "rolebindings", True, "RoleBinding"),
        Resource("rbac.authorization.k8s.io", "v1", "clusterroles", False, "ClusterRole"),
        Resource("rbac.authorization.k8s.io", "v1", "clusterrolebindings", False, "ClusterRoleBinding"),
        Resource(DGD_GROUP, "v1alpha1", DGD_PLURAL, True, DGD_KIND),
        Resource(DGD_GROUP, "v1alpha1", "dynamocomponentdeployments", True, "DynamoComponentDeployment"),
        # What each runtime publishes with Kubernetes discovery (deploy_suite/model/discovery.py).
        Resource(DGD_GROUP, "v1alpha1", "dynamoworkermetadatas", True, "DynamoWorkerMetadata"),
    )
}
DGD = KNOWN[DGD_KIND]
DCD = KNOWN["DynamoComponentDeployment"]
# The operator's kinds whose version the server decides: newer operators store v1beta1 and may stop
# serving v1alpha1 (docs/operator-generations.md, "Step 2 before anything is mutated"). The table's
# v1alpha1 is the fast path until `Kube.resolve_versions` has asked the server.
VERSIONED_KINDS = (DGD_KIND, DCD.kind)


def pick_version(served: Sequence[str], wanted: str | None, preferred: str | None) -> str | None:
    """The version to read and watch a kind in: ``wanted`` (the manifest's) when served, so objects
    come back in the shape the manifest has; else the group's preferred version when it serves the
    kind; else the first served (discovery lists versions by priority). None when none is served."""
    if wanted in served:
        return wanted
    if preferred in served:
        return preferred
    return served[0] if served else None


def resolve(kind: str | Resource) -> Resource:
    """A kind of :data:`KNOWN` by name, or a :class:`Resource` as it is."""
    return kind if isinstance(kind, Resource) else KNOWN[kind]


def key(obj: Obj) -> str:
    """``namespace/name``: how a wait keys the objects it has seen."""
    meta = obj.get("metadata") or {}
    return f"{meta.get('namespace', '')}/{meta.get('name', '')}"
