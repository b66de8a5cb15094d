"""The operator replica's profiles on real offline clusters: what each operator generation writes.

One session cluster per profile (``offline_clusters.get(..., operator=...)``); each test works in
its own namespace.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from deploy_suite.errors import KubeError
from deploy_suite.kube import Kube
from deploy_suite.offline.cluster import OfflineCluster
from deploy_suite.offline.operator_sim.components import worker_hash
from tests.integration.replica import ALPHA, BETA, DCD, manifest, namespace, ready_condition, wait_state

pytestmark = [pytest.mark.cluster, pytest.mark.slow]


@pytest.fixture(scope="module")
def pre_one(offline_clusters: Any) -> Iterator[tuple[OfflineCluster, Kube]]:
    cluster: OfflineCluster = offline_clusters.get("default", operator="0.9")
    kube = cluster.kube()
    yield cluster, kube
    kube.close()


def test_pre_one_serves_v1alpha1_only_and_never_writes_observed_generation(
        pre_one: tuple[OfflineCluster, Kube]) -> None:
    cluster, kube = pre_one
    assert cluster.info().operator == "0.9"
    crd = kube.get("CustomResourceDefinition", "dynamographdeployments.nvidia.com")
    assert [(v["name"], v["storage"]) for v in crd["spec"]["versions"]] == [("v1alpha1", True)]
    with namespace(kube) as ns:
        with pytest.raises(KubeError):
            kube.apply(manifest("dgd-beta-agg.yaml"), ns)  # v1beta1 is not served
        doc = manifest("dgd-alpha-agg.yaml")
        kube.apply(doc, ns)
        dgd = wait_state(kube, ALPHA, ns, "alpha-agg", "successful")
        assert ready_condition(dgd)["status"] == "True"
        assert "observedGeneration" not in dgd["status"]
        # A spec change (generation 2) reconciles again, still without observedGeneration.
        doc["spec"]["services"]["Frontend"]["replicas"] = 2
        kube.apply(doc, ns)
        dgd = wait_state(kube, ALPHA, ns, "alpha-agg", "successful")
        assert dgd["metadata"]["generation"] == 2 and "observedGeneration" not in dgd["status"]


def test_latest_owns_dgd_dcd_deployment_with_the_operator_names_services_and_finalizer(
        cluster_kube: Kube, scratch_namespace: str) -> None:
    kube, ns = cluster_kube, scratch_namespace  # the session's default cluster plays `latest`
    kube.apply(manifest("dgd-alpha-disagg.yaml"), ns)
    dgd = wait_state(kube, BETA, ns, "alpha-disagg", "successful")
    assert dgd["metadata"]["finalizers"] == ["nvidia.com/finalizer"]
    assert dgd["status"]["observedGeneration"] == dgd["metadata"]["generation"]
    hash_ = worker_hash(dgd)
    dcds = {d["metadata"]["name"]: d for d in kube.list_items(DCD, ns)[0]}
    assert set(dcds) == {"alpha-disagg-frontend", f"alpha-disagg-prefill-{hash_}", f"alpha-disagg-decode-{hash_}"}
    for name, dcd in dcds.items():
        assert dcd["metadata"]["ownerReferences"][0]["uid"] == dgd["metadata"]["uid"]
        assert next(c for c in dcd["status"]["conditions"] if c["type"] == "Available")["status"] == "True"
        dep = kube.get("Deployment", name, ns)
        assert dep["metadata"]["ownerReferences"][0]["kind"] == "DynamoComponentDeployment"
        assert dep["metadata"]["ownerReferences"][0]["uid"] == dcd["metadata"]["uid"]
        assert dep["spec"]["selector"] == {"matchLabels": {"nvidia.com/selector": name}}
    ports = {s["metadata"]["name"]: [(p["name"], p["port"]) for p in s["spec"]["ports"]]
             for s in kube.list_items("Service", ns)[0]}
    assert ports == {"alpha-disagg-frontend": [("http", 8000)], "alpha-disagg-prefill": [("system", 9090)],
                     "alpha-disagg-decode": [("system", 9090)]}
    kube.delete(BETA, "alpha-disagg", ns)
    gone = kube.wait_for(BETA, lambda objs: (not objs, f"{len(objs)} left"), awaited="DGD deleted",
                         timeout=30, namespace=ns, name="alpha-disagg")
    assert not gone.objects
