"""The operator replica's validating admission webhook, called by the real kube-apiserver over TLS.

Profile ``1.x`` (plain error text) and ``latest`` (Kubernetes field errors): an agg -> disagg
change of a live DGD is refused as an update (also as a server-side dry-run, which is how step 2 of
the harness meets it), while the same object is admitted as a create; create rules hold on both;
with the controllers process stopped the webhook is unreachable and the apiserver refuses DGD writes.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from deploy_suite.access.kube import Kube, Obj
from deploy_suite.errors import KubeError
from deploy_suite_offline import procs
from deploy_suite_offline.cluster import CONTROLLERS, OfflineCluster
from tests.integration.replica import ALPHA, manifest, namespace, session_cluster, wait_state

pytestmark = [pytest.mark.cluster, pytest.mark.slow]
DENIED = 'admission webhook "vdynamographdeployment.kb.io" denied the request: '


@pytest.fixture(scope="module")
def one_x(offline_clusters: Any) -> Iterator[tuple[OfflineCluster, Kube]]:
    with session_cluster(offline_clusters, "default", operator="1.x") as pair:
        yield pair


def refusal(call: Any) -> str:
    with pytest.raises(KubeError) as info:
        call()
    return str(info.value)


def disagg_named(name: str) -> Obj:
    return manifest("dgd-alpha-disagg.yaml", rename=name)


def test_one_x_refuses_an_agg_to_disagg_update_and_admits_the_same_object_as_a_create(
        one_x: tuple[OfflineCluster, Kube]) -> None:
    _cluster, kube = one_x
    with namespace(kube) as ns:
        kube.apply(manifest("dgd-alpha-agg.yaml", rename="llm"), ns)
        dgd = wait_state(kube, ALPHA, ns, "llm", "successful")
        assert dgd["status"]["observedGeneration"] == dgd["metadata"]["generation"]  # written from 1.0 on
        expected = (DENIED + "component topology is immutable and cannot be modified after creation: "
                    "components added: [decode prefill], components removed: [VllmDecodeWorker]; "
                    "spec.backendFramework is immutable and cannot be changed after creation")
        assert expected in refusal(lambda: kube.apply(disagg_named("llm"), ns, dry_run=True))
        assert expected in refusal(lambda: kube.apply(disagg_named("llm"), ns))
        with namespace(kube) as fresh:  # the same object as a create: admitted, dry-run and for real
            kube.apply(disagg_named("llm"), fresh, dry_run=True)
            kube.apply(disagg_named("llm"), fresh)
        no_image = manifest("dgd-alpha-agg.yaml", rename="no-image")
        del no_image["spec"]["services"]["Frontend"]["extraPodSpec"]["mainContainer"]["image"]
        assert (DENIED + "spec.services[Frontend].extraPodSpec.mainContainer.image image is required") in \
            refusal(lambda: kube.apply(no_image, ns, dry_run=True))


def test_latest_refuses_the_update_with_field_errors(cluster_kube: Kube, scratch_namespace: str) -> None:
    kube, ns = cluster_kube, scratch_namespace  # the session's default cluster plays `latest`
    kube.apply(manifest("dgd-alpha-agg.yaml", rename="llm"), ns)
    text = refusal(lambda: kube.apply(disagg_named("llm"), ns, dry_run=True))
    assert (DENIED + 'DynamoGraphDeployment.nvidia.com "llm" is invalid: [spec.services: Forbidden: component '
            "topology is immutable and cannot be modified after creation: components added: [decode prefill], "
            'components removed: [VllmDecodeWorker], spec.backendFramework: Invalid value: "sglang": is immutable '
            "and cannot be changed after creation]") in text
    kube.apply(disagg_named("other"), ns, dry_run=True)  # a create of the same object is admitted


def test_a_stopped_operator_makes_the_webhook_unreachable_and_dgd_writes_refused(
        one_x: tuple[OfflineCluster, Kube]) -> None:
    cluster, kube = one_x
    pid = cluster.status().pids[CONTROLLERS]
    procs.terminate([pid])
    try:
        with namespace(kube) as ns:
            text = refusal(lambda: kube.apply(manifest("dgd-alpha-agg.yaml"), ns, dry_run=True))
            assert 'failed calling webhook "vdynamographdeployment.kb.io"' in text
            assert f"127.0.0.1:{cluster.webhook_port}" in text and "connection refused" in text
    finally:
        cluster.up()  # starts the controllers again and waits for the webhook
    with namespace(kube) as ns:
        kube.apply(manifest("dgd-alpha-agg.yaml"), ns, dry_run=True)
