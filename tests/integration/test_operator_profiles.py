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
from tests.integration.replica import ALPHA, manifest, namespace, ready_condition, wait_state

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
