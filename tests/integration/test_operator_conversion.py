"""The opt-in DGD conversion webhook (``cluster up --conversion-webhook``, profile ``latest``).

The real kube-apiserver stores v1beta1 and calls the controllers' TLS webhook to convert: a DGD
written as v1alpha1 is stored (and reconciled) in the v1beta1 shape, reads back unchanged as
v1alpha1, and with the controllers stopped every read through the other version fails.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from deploy_suite.access.kube import Kube
from deploy_suite.errors import KubeError
from deploy_suite_offline import procs
from deploy_suite_offline.cluster import CONTROLLERS, OfflineCluster
from tests.integration.replica import ALPHA, BETA, manifest, namespace, session_cluster, wait_state

pytestmark = [pytest.mark.cluster, pytest.mark.slow]


@pytest.fixture(scope="module")
def converting(offline_clusters: Any) -> Iterator[tuple[OfflineCluster, Kube]]:
    with session_cluster(offline_clusters, "default", conversion_webhook=True) as pair:
        yield pair


def test_a_v1alpha1_dgd_is_stored_as_v1beta1_and_reads_back_as_written(
        converting: tuple[OfflineCluster, Kube]) -> None:
    cluster, kube = converting
    crd = kube.get("CustomResourceDefinition", "dynamographdeployments.nvidia.com")
    assert crd["spec"]["conversion"]["strategy"] == "Webhook"
    doc = manifest("dgd-alpha-disagg.yaml")
    with namespace(kube) as ns:
        kube.apply(doc, ns)
        beta = wait_state(kube, BETA, ns, "alpha-disagg", "successful")
        assert sorted(c["name"] for c in beta["spec"]["components"]) == ["Frontend", "decode", "prefill"]
        assert {c["name"]: c["type"] for c in beta["spec"]["components"]}["prefill"] == "prefill"
        assert set(beta["status"]["components"]) == {"Frontend", "decode", "prefill"}
        alpha = kube.get(ALPHA, "alpha-disagg", ns)
        assert alpha["spec"] == doc["spec"]
        assert alpha["status"]["state"] == "successful"
        assert set(alpha["status"]["services"]) == set(beta["status"]["components"])
        pid = cluster.status().pids[CONTROLLERS]
        procs.terminate([pid])
        try:
            failed = r"conversion webhook for nvidia\.com/v1beta1, Kind=DynamoGraphDeployment failed"
            with pytest.raises(KubeError, match=failed):
                kube.get(ALPHA, "alpha-disagg", ns)
            assert kube.get(BETA, "alpha-disagg", ns)["metadata"]["name"] == "alpha-disagg"  # no conversion needed
        finally:
            cluster.up()
        assert kube.get(ALPHA, "alpha-disagg", ns)["spec"] == doc["spec"]
