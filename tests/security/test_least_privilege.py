"""The shipped least-privilege identity (deploy_suite/rbac/, docs/security.md) on the offline cluster.

(c) Iterations 0 and 1 of the sample experiment (iteration 1 retires iteration 0) run as a user
    runs them, as a ServiceAccount bound to exactly the shipped Role (``deployer_identity``,
    ``fixtures/identities.py``). Both end ``ready``. The apiserver's audit log, read for everything
    that identity asked (the harness and its ``kubectl port-forward`` child alike, picked out by the
    ServiceAccount's user name), shows 403 only on requests the optional ClusterRole grants (the
    cluster-scope reads), each recorded in the ledger as a limitation: nothing the harness needs
    was refused.
(c') Iteration 0 as the shipped Role plus the optional read-only ClusterRole (``reader_identity``):
    no request at all is refused, and no limitation says forbidden.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from deploy_suite import rbac
from deploy_suite.access.kube import Kube, Obj
from deploy_suite.fixtures.experiments.make_experiment import stage_candidate
from deploy_suite_offline.cluster import OfflineCluster
from deploy_suite_offline.fixtures.identities import Identity
from tests import support

pytestmark = [pytest.mark.cluster]

ROLE, CLUSTER = rbac.rules(rbac.ROLE_FILE), rbac.rules(rbac.CLUSTER_ROLE_FILE)
HANDED_OVER_KINDS = {"dynamographdeployments", "jobs", "persistentvolumeclaims"}
# How the ledger's limitation names a refused cluster-scope read (docs/procedure.md, step 2).
LIMITATION_WORDS = {
    "namespaces": "get namespace", "customresourcedefinitions": "CRD read forbidden",
    "storageclasses": "storage", "nodes": "node list forbidden", "pods": "capacity",
    "validatingwebhookconfigurations": "validatingwebhookconfigurations list forbidden",
    "mutatingwebhookconfigurations": "mutatingwebhookconfigurations list forbidden",
    "deployments": "Deployment cannot be read", "services": "operator", "queues": "queue",
    "deviceclasses": "DeviceClasses", "resourceslices": "ResourceSlices", "persistentvolumes": "persistentvolume",
}


def _resource(event: Obj) -> str:
    ref = event.get("objectRef") or {}
    return f"{ref.get('resource')}/{ref['subresource']}" if ref.get("subresource") else str(ref.get("resource"))


def identity_events(audit_log: str, identity: Identity, agent: str) -> list[Obj]:
    """Every audited request of ``identity`` (its ServiceAccount's user name is unique to the test's
    namespace): the harness's and its kubectl child's. The sentinel request of ``agent`` flushes the log."""
    kube = identity.kube(user_agent=agent)
    try:
        support.audit_events(audit_log, kube, agent)
    finally:
        kube.close()
    found = []
    with open(audit_log, encoding="utf-8") as handle:
        for line in handle:
            if identity.username in line:
                event = json.loads(line)
                if (event.get("user") or {}).get("username") == identity.username and "audit-sentinel" not in str(
                        (event.get("objectRef") or {}).get("name")):
                    found.append(event)
    return found


def run_iterations(identity: Identity, cluster_kube: Kube, tmp_path: Path,
                   iterations: tuple[int, ...]) -> tuple[list[support.SuiteRun], str]:
    namespace = identity.namespace
    cluster_kube.create({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": support.SECRET},
                         "type": "Opaque", "stringData": {"HF_TOKEN": support.new_canary()}}, namespace)
    exp = support.write_experiment(tmp_path / "scratch", context=identity.context, namespace=namespace)
    agent = support.new_user_agent("security-run/least-privilege")
    runs = []
    for iteration in iterations:
        if iteration == 1:
            stage_candidate(exp.exp_root, 1)
        run = support.run_suite(exp.exp_root, iteration, identity.kubeconfig, tmp_path / "reports", user_agent=agent)
        assert run.returncode == 0, run.output
        runs.append(run)
    return runs, agent


def test_the_shipped_role_runs_iterations_0_and_1_to_ready_refused_only_optional_reads(
        offline_cluster: OfflineCluster, cluster_kube: Kube, deployer_identity: Identity, tmp_path: Path) -> None:
    namespace = deployer_identity.namespace
    runs, agent = run_iterations(deployer_identity, cluster_kube, tmp_path, (0, 1))
    ledgers = [run.ledger() for run in runs]
    assert [d["status"] for d in ledgers] == ["ready", "ready"], [d["blockers"] for d in ledgers]
    assert ledgers[0]["torn_down_at"] is not None and ledgers[1]["retired_previous"] is not None
    limits = "\n".join(str(x) for d in ledgers for x in d["limitations"])
    assert (ledgers[0]["capacity"] or {}).get("capacity") == "unknown"

    events = identity_events(offline_cluster.info().audit_log, deployer_identity, agent)
    assert events and {(e["verb"], _resource(e)) for e in events} >= {
        ("patch", "dynamographdeployments"), ("delete", "dynamographdeployments"), ("watch", "pods"),
        ("get", "secrets")}
    refused = [e for e in events if e["responseStatus"]["code"] == 403]
    # Every refusal is a cluster-scope read the optional ClusterRole would grant, never one the Role
    # grants in the workload's namespace, and the ledger records it as a limitation.
    for e in refused:
        ref = e["objectRef"]
        what = (e["verb"], str(ref.get("apiGroup") or ""), _resource(e), ref.get("name"))
        assert rbac.allows(CLUSTER, *what), support.describe(e)
        assert not (ref.get("namespace") == namespace and rbac.allows(ROLE, *what)), support.describe(e)
        assert LIMITATION_WORDS[ref["resource"]] in limits, (support.describe(e), limits)
    assert {(e["verb"], e["objectRef"]["resource"]) for e in refused} >= {
        ("get", "namespaces"), ("get", "customresourcedefinitions"), ("list", "storageclasses"), ("list", "nodes")}
    # Every request the Role grants was allowed: nothing the harness needs was refused.
    allowed: set[Any] = {(e["verb"], _resource(e)) for e in events if e["responseStatus"]["code"] < 400}
    # kubectl port-forward: a create over SPDY, a get over WebSockets (deploy_suite/rbac/role.yaml).
    assert {("create", "pods/portforward"), ("get", "pods/portforward")} & allowed, sorted(allowed)
    assert ("delete", "dynamographdeployments") in allowed
    assert {e["objectRef"]["resource"] for e in support.mutations(events)
            if e["objectRef"].get("subresource") != "portforward"} <= HANDED_OVER_KINDS
    support.record_figure("least-privilege", requests=len(events), refused=len(refused),
                          refused_kinds=sorted({_resource(e) for e in refused}))


def test_the_role_with_the_optional_reads_is_refused_nothing(
        offline_cluster: OfflineCluster, cluster_kube: Kube, reader_identity: Identity, tmp_path: Path) -> None:
    runs, agent = run_iterations(reader_identity, cluster_kube, tmp_path, (0,))
    data = runs[0].ledger()
    assert data["status"] == "ready", data["blockers"]
    assert not [x for x in data["limitations"] if "forbidden" in str(x) or "cannot be read" in str(x)], \
        data["limitations"]
    assert (data["capacity"] or {}).get("capacity") != "unknown", data["capacity"]
    events = identity_events(offline_cluster.info().audit_log, reader_identity, agent)
    assert [support.describe(e) for e in events if e["responseStatus"]["code"] == 403] == []
