"""Helpers of the operator replica's integration tests (profiles, webhook, fault switches)."""

from __future__ import annotations

import copy
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import yaml

from deploy_suite.access.kube import Kube, Obj, Resource
from deploy_suite.access.watch import Watch
from deploy_suite.constants import LABEL_DGD_NAME
from deploy_suite_offline.cluster import OfflineCluster

DATA = Path(__file__).with_name("data")
ALPHA = Resource("nvidia.com", "v1alpha1", "dynamographdeployments", True, "DynamoGraphDeployment")
BETA = Resource("nvidia.com", "v1beta1", "dynamographdeployments", True, "DynamoGraphDeployment")
DCD = Resource("nvidia.com", "v1beta1", "dynamocomponentdeployments", True, "DynamoComponentDeployment")
TIMEOUT = 60.0


def manifest(name: str, rename: str | None = None) -> Obj:
    doc: Obj = yaml.safe_load((DATA / name).read_text())
    if rename:
        doc = copy.deepcopy(doc)
        doc["metadata"]["name"] = rename
    return doc


def ready_condition(dgd: Obj) -> Obj:
    return next((c for c in (dgd.get("status") or {}).get("conditions") or [] if c.get("type") == "Ready"), {})


def wait_state(kube: Kube, res: Resource, ns: str, name: str, want: str, timeout: float = TIMEOUT) -> Obj:
    """Watch the DGD until ``status.state == want``; returns the object as last seen."""

    def done(objs: dict[str, Obj]) -> tuple[bool, str]:
        st = (objs.get(f"{ns}/{name}") or {}).get("status") or {}
        cond = ready_condition(objs.get(f"{ns}/{name}") or {})
        return st.get("state") == want, f"state={st.get('state')} {cond.get('reason')}: {cond.get('message')}"

    state = kube.wait_for(Watch(res, ns, name=name), done, awaited=f"DGD {name} state {want}", timeout=timeout)
    return state.objects[f"{ns}/{name}"]


def pods_of(kube: Kube, ns: str, dgd: str) -> list[Obj]:
    return kube.list_items("Pod", ns, label_selector=f"{LABEL_DGD_NAME}={dgd}")[0]


@contextmanager
def namespace(kube: Kube) -> Iterator[str]:
    name = f"t-{uuid.uuid4().hex[:8]}"
    kube.create({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}})
    try:
        yield name
    finally:
        kube.delete("Namespace", name)


@contextmanager
def session_cluster(pool: Any, layout: str = "default", **choice: Any) -> Iterator[tuple[OfflineCluster, Kube]]:
    """The session's cluster for ``layout`` and the profile/orchestrators in ``choice``, with a client."""
    cluster: OfflineCluster = pool.get(layout, **choice)
    kube = cluster.kube()
    try:
        yield cluster, kube
    finally:
        kube.close()
