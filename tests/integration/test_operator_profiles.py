"""The operator replica's profiles on real offline clusters: what each operator generation writes.

One session cluster per profile (``offline_clusters.get(..., operator=...)``); each test works in
its own namespace.
"""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from deploy_suite.access.kube import Kube
from deploy_suite.access.watch import Watch
from deploy_suite.errors import InputError, KubeError
from deploy_suite_offline import procs
from deploy_suite_offline.cluster import CONTROLLERS, OfflineCluster
from deploy_suite_offline.errors import ClusterError
from deploy_suite_offline.operator_sim.components import worker_hash
from tests.integration.replica import (
    ALPHA,
    BETA,
    DCD,
    manifest,
    namespace,
    ready_condition,
    session_cluster,
    wait_state,
)

pytestmark = [pytest.mark.cluster, pytest.mark.slow]


@pytest.fixture(scope="module")
def pre_one(offline_clusters: Any) -> Iterator[tuple[OfflineCluster, Kube]]:
    with session_cluster(offline_clusters, "default", operator="0.9") as pair:
        yield pair


def test_pre_one_serves_v1alpha1_only_and_never_writes_observed_generation(
        pre_one: tuple[OfflineCluster, Kube]) -> None:
    cluster, kube = pre_one
    # The profile is the marker's: a handle without one, `up` again and the controllers keep it.
    again = OfflineCluster(cluster.name, log=lambda _m: None)
    assert again.info().operator == again.operator == "0.9"
    assert again.up().operator == "0.9"
    assert "--operator 0.9" in procs.cmdline(cluster.status().pids[CONTROLLERS])
    with pytest.raises(ClusterError, match=r"already up with operator 0\.9"):
        OfflineCluster(cluster.name, log=lambda _m: None, operator="latest").up()
    with pytest.raises(InputError, match="unknown operator profile"):
        OfflineCluster("x", operator="2.0")
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
    gone = kube.wait_for(Watch(BETA, ns, name="alpha-disagg"), lambda objs: (not objs, f"{len(objs)} left"),
                         awaited="DGD deleted", timeout=30)
    assert not gone.objects


@pytest.mark.parametrize(("args", "message"), [
    (["--operator", "2.0"], "--operator: unknown operator profile '2.0'; fix: use one of 0.9, 1.x, latest"),
    (["--with", "volcano"], "--with: unknown orchestrator volcano; fix: use lws or grove"),
])
def test_cluster_up_refuses_an_unknown_profile_or_orchestrator_in_one_line(args: list[str], message: str) -> None:
    done = subprocess.run([str(Path(sys.executable).with_name("deploy-suite")), "cluster", "up", "--name",
                           "never-started", *args], capture_output=True, text=True, timeout=60, check=False)
    assert done.returncode != 0 and message in done.stderr and len(done.stderr.strip().splitlines()) == 1
    assert not OfflineCluster("never-started", log=lambda _m: None).dir.exists()
