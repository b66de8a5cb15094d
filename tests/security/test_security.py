"""Secrets, a decoy context and what the harness mutates (docs/security.md): full runs on the offline cluster.

One module fixture plays a whole experiment: the cluster admin creates a namespace and
``hf-token-secret`` holding a random canary, then iteration 0 and iteration 1 (which retires 0)
run as a user runs them, each with a user agent of its own, through a kubeconfig whose
current-context is a **decoy** (a 127.0.0.1 listener that counts connections) while the workload
names the real context. Three tests judge that experiment:

(a) the canary never leaves the API server. It is searched (as is and base64-encoded) in every
    file under EXP_ROOT (ledgers, smoke files, job logs under ``logs/``, run-scoped copies), in
    the reports directory (HTML, JUnit) and in the captured terminal output. Because the audit
    log is Metadata-level (no bodies), "no request could return the value" is proven from three
    sides instead of by intercepting TLS: the audit log shows the harness's only requests on
    ``secrets`` are ``get`` of ``hf-token-secret`` by exact name (no list/watch, which would return
    values); the ledger records each of them as ``kubectl get secrets NAME -o jsonpath={.metadata}``
    (``Kube.secret_exists``, a metadata-only Accept); and replaying that exact request through
    ``Kube`` shows the apiserver answers a ``PartialObjectMetadata`` without ``data``. A process
    that never receives the value cannot write it or send it in a request body.
(b) zero connections to the decoy over both runs (every request, and kubectl port-forward, is
    pinned to the workload's context);
(d) the audit log of both runs (the harness's user agent, plus its ``kubectl port-forward`` child
    inside the run's time window) shows no create/update/patch/delete (dry-runs aside) of
    Secrets, Namespaces, CRDs or Nodes; the only DGD deleted is the previous iteration's, by exact
    name and namespace, during iteration 1; mutations only touch the kinds the handed-off
    manifests hold (DGDs, Jobs, PVCs) and only after step 2 validated.

(c) the runs as a namespace-scoped ServiceAccount with exactly the shipped Role are in
    ``test_least_privilege.py``.
"""

from __future__ import annotations

import base64
import datetime as dt
import json
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from deploy_suite.access.kube import Kube, Obj
from deploy_suite.fixtures.experiments.make_experiment import Experiment, stage_candidate
from deploy_suite_offline.cluster import OfflineCluster
from deploy_suite_offline.fixtures.identities import Identity
from tests import support

pytestmark = [pytest.mark.cluster]

NEVER_MUTATED = {"secrets", "namespaces", "customresourcedefinitions", "nodes"}
HANDED_OVER_KINDS = {"dynamographdeployments", "jobs", "persistentvolumeclaims"}
DGD_NAME = "demo-agg"  # the sample experiment's DGD, in both iterations


@dataclass
class Experiment2:
    """Iterations 0 and 1 of one experiment, with what the tests need to judge them."""

    cluster: OfflineCluster
    namespace: str
    canary: str
    exp: Experiment
    reports: Path
    decoy: support.Listener
    runs: list[support.SuiteRun]
    events: list[list[Obj]]  # per run: the harness's audited requests
    kubectl_events: list[list[Obj]]  # per run: kubectl (port-forward) requests in the run's window


def _when(event: Obj) -> float:
    stamp = str(event["requestReceivedTimestamp"]).replace("Z", "+00:00")
    return dt.datetime.fromisoformat(stamp).timestamp()


def _kubectl_events(audit_log: str, run: support.SuiteRun) -> list[Obj]:
    """The run's ``kubectl port-forward`` child: kubectl's own user agent, inside the run's window
    (this session's cluster serves one test at a time, so nothing else runs kubectl then)."""
    found = []
    with open(audit_log, encoding="utf-8") as handle:
        for line in handle:
            if '"kubectl/' not in line:
                continue
            event = json.loads(line)
            agent = str(event.get("userAgent", ""))
            if agent.startswith("kubectl/") and run.started_at <= _when(event) <= run.ended_at:
                found.append(event)
    return found


@pytest.fixture(scope="module")
def experiment2(offline_cluster: OfflineCluster, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Experiment2]:
    info = offline_cluster.info()
    admin = offline_cluster.kube()
    canary = support.new_canary()
    namespace = support.admin_namespace(admin, "secrun", canary)
    tmp = tmp_path_factory.mktemp("experiment2")
    decoy = support.Listener()
    try:
        kubeconfig = support.decoy_kubeconfig(tmp / "decoy-kubeconfig.yaml", info.kubeconfig,
                                              offline_cluster.context, decoy.port)
        exp = support.write_experiment(tmp / "scratch", context=offline_cluster.context, namespace=namespace)
        reports = tmp / "reports"
        runs: list[support.SuiteRun] = []
        events: list[list[Obj]] = []
        kubectl: list[list[Obj]] = []
        for iteration in (0, 1):
            if iteration == 1:
                stage_candidate(exp.exp_root, 1)
            agent = support.new_user_agent(f"security-run/iter-{iteration}")
            run = support.run_suite(exp.exp_root, iteration, kubeconfig, reports, user_agent=agent)
            assert run.returncode == 0, run.output
            runs.append(run)
            sentinel = support.sentinel_kube(offline_cluster.context, info.kubeconfig, agent)
            try:
                events.append(support.audit_events(info.audit_log, sentinel, agent))
            finally:
                sentinel.close()
            kubectl.append(_kubectl_events(info.audit_log, run))
        yield Experiment2(offline_cluster, namespace, canary, exp, reports, decoy, runs, events, kubectl)
    finally:
        decoy.close()
        admin.delete("Namespace", namespace)
        admin.close()


def test_both_iterations_are_ready(experiment2: Experiment2) -> None:
    first, second = (run.ledger() for run in experiment2.runs)
    assert (first["status"], second["status"]) == ("ready", "ready")
    assert first["torn_down_at"] is not None  # iteration 1 retired iteration 0
    assert second["retired_previous"] is not None


# ------------------------------------------------------------------ (a) the canary


def _texts(experiment2: Experiment2) -> Iterator[tuple[str, str]]:
    for root in (experiment2.exp.exp_root, experiment2.reports):
        for path in sorted(root.rglob("*")):
            if path.is_file() and not path.is_symlink():
                yield str(path), path.read_bytes().decode("utf-8", "replace")
    for run in experiment2.runs:
        yield f"terminal output of iteration {run.iteration}", run.output


def test_the_secret_value_never_appears_in_any_artifact_or_output(experiment2: Experiment2) -> None:
    canary = experiment2.canary
    forms = {canary, base64.b64encode(canary.encode()).decode()}
    searched = 0
    leaks = []
    for where, text in _texts(experiment2):
        searched += 1
        leaks += [where for form in forms if form in text]
    support.record_figure("secret-leaks", leaks=len(leaks), searched=searched)
    assert leaks == []
    # The search covered every kind of output: ledgers, smoke files, HTML, JUnit, terminal output.
    names = {Path(w).name for w, _ in _texts(experiment2)}
    assert {"deployment_ledger.json", "smoke_test_artifact.json", "deploy-iter-000.html",
            "deploy-iter-001.xml", "experiment.html"} <= names
    assert any("/smoke/" in w for w, _ in _texts(experiment2))


def test_secrets_are_only_read_by_name_with_metadata_only_requests(experiment2: Experiment2) -> None:
    for run, events in zip(experiment2.runs, experiment2.events, strict=True):
        on_secrets = [e for e in events if (e.get("objectRef") or {}).get("resource") == "secrets"]
        assert on_secrets, "the run never checked its secret"
        for e in on_secrets:
            assert (e["verb"], e["objectRef"].get("name"), e["objectRef"].get("namespace")) == (
                "get", support.SECRET, experiment2.namespace), support.describe(e)
        recorded = [c["command"] for c in run.ledger()["commands"] if " secrets" in c["command"]]
        assert len(recorded) == len(on_secrets), (recorded, [support.describe(e) for e in on_secrets])
        for command in recorded:
            assert f"get secrets {support.SECRET} -n {experiment2.namespace} -o 'jsonpath={{.metadata}}'" in command

    # Replay the harness's own request (Kube.secret_exists -> metadata-only GET): no value comes back.
    info = experiment2.cluster.info()
    kube = Kube(experiment2.cluster.context, info.kubeconfig, user_agent=support.new_user_agent("security-replay"))
    try:
        answer = kube.get("Secret", support.SECRET, experiment2.namespace, metadata_only=True)
    finally:
        kube.close()
    assert answer["kind"] == "PartialObjectMetadata" and "data" not in answer and "stringData" not in answer
    assert experiment2.canary not in json.dumps(answer)
    assert base64.b64encode(experiment2.canary.encode()).decode() not in json.dumps(answer)


# ------------------------------------------------------------------ (b) the decoy current-context


def test_a_decoy_current_context_gets_no_connection(experiment2: Experiment2) -> None:
    support.record_figure("decoy", connections=experiment2.decoy.connections, runs=len(experiment2.runs))
    assert experiment2.decoy.connections == 0
    for run in experiment2.runs:
        commands = [c["command"] for c in run.ledger()["commands"]]
        assert commands and all(f"--context {experiment2.cluster.context}" in c for c in commands)


# ------------------------------------------------------------------ (d) what the harness mutates


def test_the_harness_mutates_only_what_it_owns_and_only_after_validation(experiment2: Experiment2) -> None:
    before_validation = 0
    for index, (run, events, kubectl) in enumerate(zip(experiment2.runs, experiment2.events,
                                                       experiment2.kubectl_events, strict=True)):
        changed = support.mutations(events)
        assert changed, "a ready run applies something"
        for e in changed:
            ref = e["objectRef"]
            assert ref["resource"] not in NEVER_MUTATED, support.describe(e)
            assert ref["resource"] in HANDED_OVER_KINDS, support.describe(e)
            assert ref.get("namespace") == experiment2.namespace, support.describe(e)
            if ref["resource"] == "dynamographdeployments":
                assert ref.get("name") == DGD_NAME, support.describe(e)
        deletes = [e for e in changed if e["verb"] in {"delete", "deletecollection"}]
        if index == 0:
            assert deletes == [], [support.describe(e) for e in deletes]
        else:
            assert [(e["objectRef"]["resource"], e["objectRef"]["name"]) for e in deletes] == [
                ("dynamographdeployments", DGD_NAME)]
        # Nothing changes before step 2 has validated (its end is in the ledger).
        step2 = next(s for s in run.ledger()["steps"] if s["name"] == "step2_validate")
        validated = dt.datetime.fromisoformat(str(step2["ended_at"]).replace("Z", "+00:00")).timestamp()
        early = [e for e in changed if _when(e) < validated]
        before_validation += len(early)
        assert early == [], [support.describe(e) for e in early]
        # The kubectl child: port-forward only (a "create" on pods/portforward) and reads.
        for e in support.mutations(kubectl):
            assert (e["objectRef"].get("resource"), e["objectRef"].get("subresource")) == ("pods", "portforward"), \
                support.describe(e)
    support.record_figure("full-run-mutations-before-validation", mutations=before_validation)


# ------------------------------------------------------------------ a namespace-scoped identity (the runs
# to ready with exactly the shipped Role: test_least_privilege.py)


def _run_with_cache_of_class(cluster_kube: Kube, identity: Identity, tmp_path: Path,
                             storage_class: str, *, download: bool = True) -> support.SuiteRun:
    """Iteration 0 of the sample as ``identity``, its model cache under ``storage_class`` (without
    the download Job unless ``download``)."""
    cluster_kube.create({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": support.SECRET},
                         "type": "Opaque", "stringData": {"HF_TOKEN": support.new_canary()}}, identity.namespace)
    handed = support.cache_of_class(tmp_path, storage_class)
    exp = support.write_experiment(tmp_path / "scratch", context=identity.context, namespace=identity.namespace,
                                   support=handed if download else {"model-cache": handed["model-cache"]})
    return support.run_suite(exp.exp_root, 0, identity.kubeconfig, tmp_path / "reports")


def _slow_class(cluster_kube: Kube, name: str) -> None:
    """An Immediate class whose offline provisioner takes 30 s per volume (provisioningDelaySeconds)."""
    cluster_kube.create({"apiVersion": "storage.k8s.io/v1", "kind": "StorageClass", "metadata": {"name": name},
                         "provisioner": "deploy-suite.local/hostpath", "volumeBindingMode": "Immediate",
                         "parameters": {"provisioningDelaySeconds": "30"}})


def test_a_namespaced_identitys_claim_a_worker_meets_in_step6_ends_ready_once_made(
        offline_cluster: OfflineCluster, cluster_kube: Kube, deployer_identity: Identity, tmp_path: Path) -> None:
    # Issue 29: this identity may not read StorageClasses, so step 4 does not await the model-cache
    # claim and, with no download Job, the worker is the first pod to meet it: the scheduler's
    # "unbound immediate PersistentVolumeClaims" while the provisioner takes 30 s is a bounded wait in
    # step 6 (the claims judged), not a dependency; the run ends ready.
    slow = f"e2e-slow6-{deployer_identity.namespace}"
    _slow_class(cluster_kube, slow)
    try:
        run = _run_with_cache_of_class(cluster_kube, deployer_identity, tmp_path, slow, download=False)
        data = run.ledger()
        assert data["status"] == "ready", (data["blockers"], run.output[-3000:])
        assert any("binding mode is unknown" in str(x) for x in data["limitations"]), data["limitations"]
        waited = [c for c in data["readiness"]["contention"] if c["category"] == "provisioning"]
        assert waited and "still being bound or provisioned" in waited[0]["diagnosis"], data["readiness"]
        (step6,) = [s for s in data["steps"] if s["name"] == "step6_readiness"]
        assert step6["duration_s"] >= 20, step6  # it waited for the volume, it did not stop
        assert data["failed_attempts"] == []
    finally:
        cluster_kube.delete("StorageClass", slow)


def test_a_namespaced_identitys_claim_naming_a_missing_class_blocks_step4_at_once(
        offline_cluster: OfflineCluster, cluster_kube: Kube, deployer_identity: Identity, tmp_path: Path) -> None:
    # Issue 29: this identity may not read StorageClasses, so step 2 cannot refuse the class and step 4
    # does not await the claim; the download's pod meets the scheduler's "unbound immediate
    # PersistentVolumeClaims" (a class that does not exist binds Immediate) and the PV controller's
    # ProvisioningFailed names the class: blocked storage-class at once, never the claim's 10 min bound.
    missing = f"e2e-no-such-class-{deployer_identity.namespace}"
    data = _run_with_cache_of_class(cluster_kube, deployer_identity, tmp_path, missing).ledger()
    assert data["status"] == "blocked" and data["current_step"] == "step4_support_manifests", data["blockers"]
    (blocker,) = data["blockers"]
    assert blocker["class"] == "storage-class" and missing in blocker["fix"], blocker
    assert "does not exist" in blocker["message"] and "unbound immediate" in blocker["message"], blocker
    assert data["failed_attempts"] == []
    (step4,) = [s for s in data["steps"] if s["name"] == "step4_support_manifests"]
    assert step4["duration_s"] < 60, step4


def test_a_namespaced_identitys_claim_whose_provisioner_takes_30_s_ends_ready(
        offline_cluster: OfflineCluster, cluster_kube: Kube, deployer_identity: Identity, tmp_path: Path) -> None:
    # Issue 29: the claim is not awaited (StorageClasses unreadable); the download's pod meets "unbound
    # immediate PersistentVolumeClaims" while the volume is made (the offline provisioner's
    # provisioningDelaySeconds): a bounded legitimate wait, never a dependency verdict.
    slow = f"e2e-slow-{deployer_identity.namespace}"
    _slow_class(cluster_kube, slow)
    try:
        run = _run_with_cache_of_class(cluster_kube, deployer_identity, tmp_path, slow)
        data = run.ledger()
        assert data["status"] == "ready" and run.returncode == 0, (data["blockers"], run.output[-3000:])
        (step4,) = [s for s in data["steps"] if s["name"] == "step4_support_manifests"]
        assert step4["duration_s"] >= 25, step4  # it waited for the volume (the claim was made before the wait)
        assert data["failed_attempts"] == [] and data["blockers"] == []
    finally:
        cluster_kube.delete("StorageClass", slow)
