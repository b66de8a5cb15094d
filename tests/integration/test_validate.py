"""Step 2 (validate) on the offline cluster: every gate's pass and fail path with real API answers.

Each test stages an experiment directory (the handed-off DGD under ``runs/.../inputs`` and its
run-scoped copies under ``applied_manifests/``), sets up the cluster prerequisites the way a user
would (namespace, Secret, PVC, other tenants' pods), then runs :func:`validate` with a ``Kube`` of
its own user agent, so that its requests can be picked out of the apiserver's audit log.
Fixture manifests live in ``data/validate/`` (written for this project).
"""

from __future__ import annotations

import base64
import contextlib
import dataclasses
import json
import os
import threading
import time
import uuid
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import yaml

from deploy_suite.access.kube import CommandRecord, Kube, Obj
from deploy_suite.access.watch import Watch
from deploy_suite.constants import GPU_TAINT_KEY
from deploy_suite.errors import Forbidden
from deploy_suite.judges import ownership
from deploy_suite.model.files import sha256_file
from deploy_suite.model.references import walk
from deploy_suite.procedure import support
from deploy_suite.procedure.validate import DGD_CRD, ValidationInputs, ValidationReport, validate
from deploy_suite_offline import faults
from deploy_suite_offline.cluster import OfflineCluster
from deploy_suite_offline.fixtures.cluster import ClusterPool
from deploy_suite_offline.fixtures.identities import Identity
from tests.integration import replica
from tests.integration.replica import namespace as temp_namespace

# Every capacity outcome below is exact, so each test starts with the default cluster's H200 GPUs free.
pytestmark = [pytest.mark.cluster, pytest.mark.usefixtures("free_h200")]

DATA = Path(__file__).parent / "data" / "validate"
SECRET = "hf-token-secret"
# The Secret's value: it must never leave the API server (report, records, audit, files).
CANARY = f"canary-{uuid.uuid4().hex}"
WORKER = "VllmDecodeWorker"
H200_NODES = ("h200-0", "h200-1")
RESERVED_TAINT = "example.com/reserved-for"
# Exact: key, value and effect of the taint the GPU nodes carry (never Exists: judges/compat.py).
GPU_TOLERATION = {"key": GPU_TAINT_KEY, "operator": "Equal", "value": "present", "effect": "NoSchedule"}
MUTATING_VERBS = {"create", "update", "patch", "delete", "deletecollection"}


# ------------------------------------------------------------------ manifests and run directories


def dgd_doc(name: str = "agg-alpha.yaml") -> Obj:
    doc: Obj = yaml.safe_load((DATA / name).read_text())
    return doc


def model_cache_doc() -> Obj:
    doc: Obj = yaml.safe_load((DATA / "model-cache.yaml").read_text())
    return doc


def worker(doc: Obj) -> Obj:
    svc: Obj = doc["spec"]["services"][WORKER]
    return svc


def set_quantization(doc: Obj, value: str) -> Obj:
    main = worker(doc)["extraPodSpec"]["mainContainer"]
    main["args"] = [main["args"][0].replace("--quantization fp8", f"--quantization {value}")]
    return doc


@dataclass(frozen=True)
class Staged:
    """An experiment root with the handed-off inputs and their run-scoped copies."""

    root: Path
    source: Path  # the handed-off DGD: never modified
    deploy: Path  # applied_manifests/deploy.yaml: the copy step 2 may patch
    support: dict[str, Path]
    support_sources: dict[str, Path]
    baseline: Path | None

    def rel(self, path: Path) -> str:
        return str(path.relative_to(self.root))


def stage(tmp_path: Path, dgd: Obj, support: Mapping[str, Obj] | None = None, baseline: Obj | None = None) -> Staged:
    root = tmp_path / "exp"
    inputs = root / "runs" / "20260601T120000Z-val" / "inputs"
    applied = root / "artifacts" / "deploy-iter-001" / "applied_manifests"
    inputs.mkdir(parents=True)
    applied.mkdir(parents=True)
    text = yaml.safe_dump(dgd, sort_keys=False)
    source = inputs / "user_provided_dgd.yaml"
    source.write_text(text)
    deploy = applied / "deploy.yaml"
    deploy.write_text(text)
    paths: dict[str, Path] = {}
    sources: dict[str, Path] = {}
    for kind, doc in (support or {}).items():
        body = yaml.safe_dump(doc, sort_keys=False)
        sources[kind] = inputs / f"{kind}.yaml"
        sources[kind].write_text(body)
        paths[kind] = applied / f"{kind}.yaml"
        paths[kind].write_text(body)
    baseline_path = None
    if baseline is not None:
        baseline_path = inputs / "baseline_dgd.yaml"
        baseline_path.write_text(yaml.safe_dump(baseline, sort_keys=False))
    return Staged(root, source, deploy, paths, sources, baseline_path)


def workload(namespace: str, context: str, **resources: Any) -> Obj:
    return {"kubernetes": {"kube_context": context, "namespace": namespace, "storage_class": "standard"},
            "resources": {"gpu_ceiling": 8, "pinned": [], **resources}}


def with_baseline(wl: Obj, staged: Staged) -> Obj:
    """The workload's deployment section naming the staged baseline and its SHA-256 (what step 2 verifies)."""
    assert staged.baseline is not None
    return {**wl, "deployment": {"dgd_path": staged.rel(staged.baseline), "dgd_sha256": sha256_file(staged.baseline)}}


@dataclass
class Probe:
    """The Kube that validate uses: a unique user agent (its requests in the audit log) and its records."""

    user_agent: str = field(default_factory=lambda: f"validate-test/{uuid.uuid4().hex[:12]}")
    commands: list[CommandRecord] = field(default_factory=list)

    def on(self, cluster: OfflineCluster) -> Kube:
        return Kube(cluster.context, cluster.info().kubeconfig, on_command=self.commands.append,
                    user_agent=self.user_agent)

    def as_identity(self, identity: Identity) -> Kube:
        return identity.kube(user_agent=self.user_agent, on_command=self.commands.append)


def run_validate(kube: Kube, namespace: str, staged: Staged, wl: Obj) -> ValidationReport:
    try:
        return validate(kube, ValidationInputs(
            namespace=namespace, deploy_path=staged.deploy, support_paths=staged.support,
            baseline_dgd_path=staged.baseline, workload=wl, display_root=staged.root))
    finally:
        kube.close()


def classes(report: ValidationReport) -> list[str]:
    return sorted(b.category for b in report.blockers)


def blocker(report: ValidationReport, cls: str) -> str:
    found = [b.message for b in report.blockers if b.category == cls]
    assert len(found) == 1, f"expected one {cls} blocker, got {report.blockers}"
    return found[0]


def outcome(report: ValidationReport) -> str | None:
    return (report.capacity or {}).get("capacity")


def rows(report: ValidationReport) -> dict[str, Obj]:
    return {r["node"]: r for r in (report.capacity or {}).get("table", [])}


def create_secret(kube: Kube, namespace: str) -> None:
    """The user's prerequisite: the HF token Secret, carrying the canary value."""
    kube.create({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": SECRET}, "type": "Opaque",
                 "stringData": {"HF_TOKEN": CANARY}}, namespace)


def assert_no_canary(report: ValidationReport, probe: Probe, staged: Staged, audit: list[Obj]) -> None:
    encoded = base64.b64encode(CANARY.encode()).decode()
    texts = {
        "report repr": repr(report),
        "report JSON": json.dumps(dataclasses.asdict(report), default=str),
        "kubectl records": "\n".join(c.command for c in probe.commands),
        "run files": "\n".join(p.read_text() for p in staged.root.rglob("*.yaml")),
        "audit events": json.dumps(audit),
    }
    for where, text in texts.items():
        assert CANARY not in text and encoded not in text, f"the secret value leaked into the {where}"




# ------------------------------------------------------------------ the audit log


def audit_requests(cluster: OfflineCluster, kube: Kube, user_agent: str, timeout: float = 10.0) -> list[Obj]:
    """Every audited request made with ``user_agent`` (Metadata level: verb, objectRef, requestURI).

    A sentinel request with the same user agent is made last; once it is in the log, every earlier
    request is too (the log backend writes in blocking mode, in request order for one client).
    """
    sentinel = f"audit-sentinel-{uuid.uuid4().hex[:8]}"
    try:
        with contextlib.suppress(Forbidden):  # a namespaced identity may not read namespaces: still audited
            kube.get_or_none("Namespace", sentinel)
    finally:
        kube.close()
    log = Path(cluster.info().audit_log)
    deadline = time.monotonic() + timeout
    while True:
        events = [e for e in (json.loads(line) for line in log.read_text().splitlines() if user_agent in line)
                  if e.get("userAgent") == user_agent]
        if any((e.get("objectRef") or {}).get("name") == sentinel for e in events):
            return [e for e in events if (e.get("objectRef") or {}).get("name") != sentinel]
        if time.monotonic() > deadline:
            pytest.fail(f"the audit log {log} never showed the sentinel request of {user_agent}")
        # A file, not an API object: there is nothing to watch. Bounded, short re-reads only.
        threading.Event().wait(0.05)


def assert_read_only(events: list[Obj]) -> None:
    """validate created, updated and deleted nothing: its only writes are server dry-runs."""
    assert events, "no audited request of validate found"
    for e in events:
        if e["verb"] in MUTATING_VERBS:
            assert e["verb"] == "patch" and "dryRun=All" in e["requestURI"], f"a real mutation: {e['requestURI']}"


def secret_requests(events: list[Obj]) -> list[Obj]:
    return [e for e in events if (e.get("objectRef") or {}).get("resource") == "secrets"]


def assert_secrets_by_name_only(events: list[Obj]) -> None:
    found = secret_requests(events)
    assert found, "no request on secrets at all"
    for e in found:
        assert e["verb"] == "get", f"{e['verb']} on secrets: {e['requestURI']}"
        assert e["objectRef"].get("name") == SECRET, e["requestURI"]


# ------------------------------------------------------------------ pass path


def test_happy_path_passes_every_gate_and_patches_only_the_run_scoped_copy(
        offline_cluster: OfflineCluster, cluster_kube: Kube, scratch_namespace: str, tmp_path: Path) -> None:
    create_secret(cluster_kube, scratch_namespace)
    staged = stage(tmp_path, dgd_doc(), {"model-cache": model_cache_doc()})
    probe = Probe()
    report = run_validate(probe.on(offline_cluster), scratch_namespace, staged,
                          workload(scratch_namespace, offline_cluster.context))

    assert report.blockers == []
    assert report.ok
    assert (report.dgd_name, report.frontend_service, report.gpus_requested) == ("val-agg", "val-agg-frontend", 1)
    assert report.served_model == "Qwen/Qwen3-0.6B"
    ev = report.evidence
    assert ev["namespace"] == "present" and ev["crd"] == "present"
    assert "standard" in ev["storage_classes"] and ev["nodes"] == 4
    assert ev["secrets"] == {SECRET: "present"}
    assert ev["pvcs"] == {"model-cache": "created by a handed-over manifest"}
    assert [(r["object"], r["result"]) for r in ev["dry_run"]] == [
        ("DynamoGraphDeployment/val-agg", "accepted"), ("PersistentVolumeClaim/model-cache", "accepted")]

    # The storage-class placeholder is resolved in the run-scoped copy only, and recorded.
    [patch] = report.patches
    assert patch.file == staged.rel(staged.support["model-cache"])
    assert patch.changes == [{"op": "add", "pointer": "/spec/storageClassName", "before": "your-storage-class-name",
                              "after": "standard"}]
    assert "model-cache" in patch.reason and patch.source == "automatic"
    assert "placeholder" in patch.reason and "kubernetes.storage_class" in patch.reason
    assert yaml.safe_load(staged.support["model-cache"].read_text())["spec"]["storageClassName"] == "standard"
    assert yaml.safe_load(staged.support_sources["model-cache"].read_text()) == model_cache_doc()
    assert yaml.safe_load(staged.deploy.read_text()) == dgd_doc() == yaml.safe_load(staged.source.read_text())

    cap = report.capacity or {}
    assert cap["capacity"] == "sufficient"
    assert cap["placement"]["VllmDecodeWorker-0"] in H200_NODES
    assert report.warnings == []

    audit = audit_requests(offline_cluster, probe.on(offline_cluster), probe.user_agent)
    assert_read_only(audit)
    assert_secrets_by_name_only(audit)
    assert_no_canary(report, probe, staged, audit)


@pytest.mark.parametrize(("gpu_type", "outcome"), [("H200 141GB", "matches"), ("H100 80GB", "mismatch")])
def test_a_gpu_type_as_people_write_it_is_judged_against_the_h200_nodes_labels(
        offline_cluster: OfflineCluster, cluster_kube: Kube, scratch_namespace: str, tmp_path: Path,
        gpu_type: str, outcome: str) -> None:
    # The default pool's H200 nodes carry GFD's NVIDIA-H200 and gpu.memory 143771 (pools/default.yaml);
    # the worker cannot reach the reserved H100 nodes.
    create_secret(cluster_kube, scratch_namespace)
    staged = stage(tmp_path, dgd_doc(), {"model-cache": model_cache_doc()})
    wl = {**workload(scratch_namespace, offline_cluster.context), "hardware": [{"gpu_type": gpu_type, "gpu_count": 1}]}
    report = run_validate(Probe().on(offline_cluster), scratch_namespace, staged, wl)
    sku_ev = report.evidence["gpu_sku"]
    assert sku_ev["outcome"] == outcome
    if outcome == "matches":
        assert report.ok and report.blockers == [] and report.warnings == []
        assert sorted(sku_ev["components"][WORKER]["matching"]) == list(H200_NODES)
    else:
        assert classes(report) == ["gpu-sku"] and "h200-0 (NVIDIA-H200)" in blocker(report, "gpu-sku")


# ------------------------------------------------------------------ namespace and CRD gates


def test_missing_namespace_blocks_before_any_read_inside_it(offline_cluster: OfflineCluster, tmp_path: Path) -> None:
    namespace = f"absent-{uuid.uuid4().hex[:8]}"
    staged = stage(tmp_path, dgd_doc(), {"model-cache": model_cache_doc()})
    probe = Probe()
    report = run_validate(probe.on(offline_cluster), namespace, staged, workload(namespace, offline_cluster.context))

    assert classes(report) == ["namespace"]
    assert namespace in blocker(report, "namespace") and offline_cluster.context in blocker(report, "namespace")
    assert report.evidence == {"namespace": "missing"}
    assert report.capacity is None and report.patches == []
    # The 404 was the one and only request: nothing else was read, in the namespace or elsewhere.
    assert [(c.kind, c.outcome) for c in probe.commands] == [("read", "error 404 NotFound")]
    assert f"get namespaces {namespace}" in probe.commands[0].command
    assert f"--context {offline_cluster.context}" in probe.commands[0].command
    assert yaml.safe_load(staged.support["model-cache"].read_text()) == model_cache_doc()


def test_server_dry_run_rejects_an_unknown_component_type(
        offline_cluster: OfflineCluster, cluster_kube: Kube, scratch_namespace: str, tmp_path: Path) -> None:
    staged = stage(tmp_path, dgd_doc("beta-bogus-type.yaml"))
    report = run_validate(Probe().on(offline_cluster), scratch_namespace, staged,
                          workload(scratch_namespace, offline_cluster.context))

    assert report.evidence["crd"] == "present"
    message = blocker(report, "dry-run")
    assert "DynamoGraphDeployment/val-bogus" in message
    # The API server's own words: the CRD schema's enum, not a client-side check.
    assert 'Unsupported value: "bogus"' in message
    assert [r["result"].split(":")[0] for r in report.evidence["dry_run"]] == ["rejected"]
    assert classes(report) == ["dry-run"]
    # Nothing was created by the dry-run.
    assert cluster_kube.list_items("DynamoGraphDeployment", scratch_namespace)[0] == []


@contextmanager
def own_cluster(suffix: str, pools: str | Path) -> Iterator[OfflineCluster]:
    """A cluster of this module's own (never shared with other modules), taken down afterwards."""
    cluster = OfflineCluster(f"v{os.getpid()}-{suffix}", pools, log=lambda _m: None)
    try:
        cluster.up()
        yield cluster
    finally:
        cluster.down()


@pytest.fixture(scope="module")
def crdless_cluster() -> Iterator[OfflineCluster]:
    """The default layout whose DGD CRD was deleted after `up`."""
    with own_cluster("nocrd", "default") as cluster:
        kube = cluster.kube()
        kube.delete("CustomResourceDefinition", DGD_CRD)
        kube.wait_for(Watch("CustomResourceDefinition", name=DGD_CRD), lambda objs: (not objs, f"{len(objs)} left"),
                      awaited=f"CRD {DGD_CRD} deleted", timeout=60)
        kube.close()
        yield cluster


def test_absent_crd_is_a_blocker(crdless_cluster: OfflineCluster, tmp_path: Path) -> None:
    admin = crdless_cluster.kube()
    with temp_namespace(admin) as namespace:
        create_secret(admin, namespace)
        staged = stage(tmp_path, dgd_doc(), {"model-cache": model_cache_doc()})
        report = run_validate(Probe().on(crdless_cluster), namespace, staged,
                              workload(namespace, crdless_cluster.context))
    admin.close()
    assert report.evidence["crd"] == "missing"
    message = blocker(report, "crd")
    assert DGD_CRD in message and crdless_cluster.context in message
    assert not report.ok


# ------------------------------------------------------------------ a namespace-scoped identity


def test_namespaced_identity_gets_real_forbidden_answers_that_become_limitations(
        offline_cluster: OfflineCluster, cluster_kube: Kube, deployer_identity: Identity, tmp_path: Path) -> None:
    namespace = deployer_identity.namespace
    create_secret(cluster_kube, namespace)
    staged = stage(tmp_path, dgd_doc(), {"model-cache": model_cache_doc()})
    probe = Probe()
    report = run_validate(probe.as_identity(deployer_identity), namespace, staged,
                          workload(namespace, deployer_identity.context))

    # Cluster-scope reads are forbidden, yet the namespace allows the run: no blocker at all.
    assert report.blockers == []
    assert any("CRD" in w and "forbidden" in w and "dry-run" in w for w in report.warnings)
    limits = "\n".join(report.limitations)
    assert "CRD read forbidden" in limits
    assert "storageclass list forbidden" in limits
    assert "node list forbidden" in limits
    assert f"get namespace {namespace} forbidden" in limits
    assert "capacity" in limits.lower()
    ev = report.evidence
    assert ev["crd"] == "forbidden (deferred to dry-run)"
    assert ev["namespace"] == "present (inferred)"
    assert ev["storage_classes"] == "forbidden" and ev["nodes"] == "forbidden"
    assert ev["secrets"] == {SECRET: "present"}
    assert {r["result"] for r in ev["dry_run"]} == {"accepted"}
    assert outcome(report) == "unknown"
    # Storage classes could not be listed: the workload's class is used for the placeholder.
    assert [p.file for p in report.patches] == [staged.rel(staged.support["model-cache"])]

    # The Forbidden answers are the apiserver's RBAC decisions for this very identity.
    audit = audit_requests(offline_cluster, probe.as_identity(deployer_identity), probe.user_agent)
    assert {e["user"]["username"] for e in audit} == {deployer_identity.username}
    forbidden = {(e["verb"], e["objectRef"]["resource"]) for e in audit if e["responseStatus"]["code"] == 403}
    # The platform checks' cluster-scope reads too (webhook configurations, the operator's Deployment).
    assert forbidden == {("get", "namespaces"), ("get", "customresourcedefinitions"), ("list", "storageclasses"),
                         ("list", "nodes"), ("list", "validatingwebhookconfigurations"),
                         ("list", "mutatingwebhookconfigurations"), ("list", "deployments")}
    assert ev["platform"]["operator"]["state"] == "forbidden" and ev["platform"]["webhooks"]["validating"] == \
        "forbidden"
    assert_read_only(audit)
    assert_secrets_by_name_only(audit)
    assert_no_canary(report, probe, staged, audit)


def test_capacity_unknown_answer_has_the_same_shape_as_a_computed_one(
        offline_cluster: OfflineCluster, cluster_kube: Kube, deployer_identity: Identity, tmp_path: Path) -> None:
    """A reader of ``report.capacity`` (ledger, HTML report) finds the outcome under one key.

    Regression: ``Validator.check_capacity`` used to write ``{"outcome": "unknown"}`` when nodes or
    pods could not be listed, while computed answers (``CapacityResult.to_dict``) use ``"capacity"``.
    """
    create_secret(cluster_kube, deployer_identity.namespace)
    staged = stage(tmp_path, dgd_doc(), {"model-cache": model_cache_doc()})
    report = run_validate(Probe().as_identity(deployer_identity), deployer_identity.namespace, staged,
                          workload(deployer_identity.namespace, deployer_identity.context))
    assert report.capacity is not None
    assert report.capacity.get("capacity") == "unknown", report.capacity
    assert report.capacity.get("reasons") == ["node list forbidden"]


def test_a_claim_under_a_class_this_identity_may_not_read_is_not_awaited_as_immediate(
        offline_cluster: OfflineCluster, deployer_identity: Identity) -> None:
    """Step 4 with a namespaced deployer: the StorageClass get is refused by RBAC (a real 403), so
    the claim's binding mode is unknown; a WaitForFirstConsumer claim stays Pending until a pod using
    it is scheduled, so step 4 must not wait for it: it says so and lets the pods bind it."""
    namespace = deployer_identity.namespace
    probe = Probe()
    kube = probe.as_identity(deployer_identity)
    claim = model_cache_doc()
    claim["spec"]["storageClassName"] = "local-wffc"  # the default layout's WaitForFirstConsumer class
    kube.apply(claim, namespace)
    unread: list[str] = []
    assert support.immediate_claims(kube, namespace, [claim["metadata"]["name"]], unread) == []
    assert unread == [f"PVC {claim['metadata']['name']}: its storage class may not be read by this identity "
                      "(forbidden), so its binding mode is unknown: not awaited as Immediate in step 4; the pods "
                      "that use it bind it"]
    audit = audit_requests(offline_cluster, probe.as_identity(deployer_identity), probe.user_agent)
    assert ("get", "storageclasses", 403) in {(e["verb"], e["objectRef"]["resource"], e["responseStatus"]["code"])
                                              for e in audit}
    assert not any(e["verb"] == "watch" for e in audit)  # nothing awaited


# ------------------------------------------------------------------ secrets, PVCs, images


def test_missing_secret_is_a_blocker_checked_by_name_only(
        offline_cluster: OfflineCluster, scratch_namespace: str, tmp_path: Path) -> None:
    staged = stage(tmp_path, dgd_doc(), {"model-cache": model_cache_doc()})
    probe = Probe()
    report = run_validate(probe.on(offline_cluster), scratch_namespace, staged,
                          workload(scratch_namespace, offline_cluster.context))

    assert classes(report) == ["secret"]
    assert SECRET in blocker(report, "secret") and scratch_namespace in blocker(report, "secret")
    assert report.evidence["secrets"] == {SECRET: "missing"}
    # Metadata only (`-o jsonpath={.metadata}` is the kubectl equivalent of the PartialObjectMetadata GET).
    [record] = [c for c in probe.commands if " secrets " in c.command]
    assert f"get secrets {SECRET} -n {scratch_namespace} -o 'jsonpath={{.metadata}}'" in record.command

    audit = audit_requests(offline_cluster, probe.on(offline_cluster), probe.user_agent)
    on_secrets = secret_requests(audit)
    assert [(e["verb"], e["objectRef"]["name"], e["responseStatus"]["code"]) for e in on_secrets] == [
        ("get", SECRET, 404)]
    assert not [e for e in audit if e["verb"] in {"list", "watch"} and e["objectRef"]["resource"] == "secrets"]
    assert_read_only(audit)
    dry_runs = [e for e in audit if e["verb"] == "patch"]
    assert {e["objectRef"]["resource"] for e in dry_runs} == {"dynamographdeployments", "persistentvolumeclaims"}


@pytest.mark.parametrize("pvc_exists", [False, True], ids=["missing", "present-in-namespace"])
def test_a_pvc_neither_handed_over_nor_present_is_a_blocker(
        offline_cluster: OfflineCluster, cluster_kube: Kube, scratch_namespace: str, tmp_path: Path,
        pvc_exists: bool) -> None:
    create_secret(cluster_kube, scratch_namespace)
    if pvc_exists:
        pvc = model_cache_doc()
        pvc["spec"]["storageClassName"] = "standard"
        cluster_kube.create(pvc, scratch_namespace)
    staged = stage(tmp_path, dgd_doc())  # no model-cache support manifest
    report = run_validate(Probe().on(offline_cluster), scratch_namespace, staged,
                          workload(scratch_namespace, offline_cluster.context))

    if pvc_exists:
        assert report.blockers == []
        assert report.evidence["pvcs"]["model-cache"].startswith("exists (")
    else:
        assert classes(report) == ["pvc"]
        assert "model-cache" in blocker(report, "pvc")
        assert report.evidence["pvcs"] == {"model-cache": "missing"}


@pytest.mark.parametrize("tag", ["${VERSION}", "my-tag"])
def test_a_placeholder_image_tag_is_a_blocker(
        offline_cluster: OfflineCluster, cluster_kube: Kube, scratch_namespace: str, tmp_path: Path,
        tag: str) -> None:
    create_secret(cluster_kube, scratch_namespace)
    doc = dgd_doc()
    image = f"nvcr.io/nvidia/ai-dynamo/vllm-runtime:{tag}"
    worker(doc)["extraPodSpec"]["mainContainer"]["image"] = image
    staged = stage(tmp_path, doc, {"model-cache": model_cache_doc()})
    report = run_validate(Probe().on(offline_cluster), scratch_namespace, staged,
                          workload(scratch_namespace, offline_cluster.context))

    assert classes(report) == ["image"]
    assert image in blocker(report, "image")


# ------------------------------------------------------------------ the workload's policy


@pytest.mark.parametrize(("candidate", "blocked"), [("fp8", False), ("bf16", True)])
def test_a_changed_pinned_knob_is_a_blocker(
        offline_cluster: OfflineCluster, cluster_kube: Kube, scratch_namespace: str, tmp_path: Path,
        candidate: str, blocked: bool) -> None:
    create_secret(cluster_kube, scratch_namespace)
    staged = stage(tmp_path, set_quantization(dgd_doc(), candidate), {"model-cache": model_cache_doc()},
                   baseline=dgd_doc())  # the baseline runs --quantization fp8
    report = run_validate(Probe().on(offline_cluster), scratch_namespace, staged,
                          with_baseline(workload(scratch_namespace, offline_cluster.context, pinned=["precision"]),
                                        staged))

    assert report.evidence["pinned"]["knobs"]["precision"] == {"baseline": "fp8", "candidate": candidate,
                                                               "same": not blocked}
    assert report.evidence["pinned"]["baseline"]["verified"] is True
    if blocked:
        assert classes(report) == ["pinned"]
        message = blocker(report, "pinned")
        assert "precision" in message and "'fp8'" in message and "'bf16'" in message
    else:
        assert report.blockers == []


def test_an_unknown_pinned_knob_is_a_limitation_and_the_known_ones_are_still_compared(
        offline_cluster: OfflineCluster, cluster_kube: Kube, scratch_namespace: str, tmp_path: Path) -> None:
    # A pinned name the knob table does not know never blocks (it would block every iteration, the
    # baseline included): it is a limitation naming the table, and the known names are still compared.
    create_secret(cluster_kube, scratch_namespace)
    staged = stage(tmp_path, dgd_doc(), {"model-cache": model_cache_doc()}, baseline=dgd_doc())
    report = run_validate(Probe().on(offline_cluster), scratch_namespace, staged,
                          with_baseline(workload(scratch_namespace, offline_cluster.context,
                                                 pinned=["precision", "kv_cache_dtype"]), staged))

    assert "pinned" not in classes(report)
    [limitation] = [text for text in report.limitations if "'kv_cache_dtype'" in text]
    assert "no mapping" in limitation and "known:" in limitation
    assert report.evidence["pinned"]["knobs"]["precision"]["same"] is True


@pytest.mark.parametrize(("ceiling", "blocked"), [(1, True), (2, False)])
def test_a_gpu_ceiling_breach_is_a_blocker(
        offline_cluster: OfflineCluster, cluster_kube: Kube, scratch_namespace: str, tmp_path: Path,
        ceiling: int, blocked: bool) -> None:
    create_secret(cluster_kube, scratch_namespace)
    doc = dgd_doc()
    worker(doc)["resources"]["limits"]["gpu"] = "2"
    staged = stage(tmp_path, doc, {"model-cache": model_cache_doc()})
    report = run_validate(Probe().on(offline_cluster), scratch_namespace, staged,
                          workload(scratch_namespace, offline_cluster.context, gpu_ceiling=ceiling))

    assert report.gpus_requested == 2
    assert report.evidence["gpu_ceiling"] == {"ceiling": ceiling, "candidate": 2, "other_live": 0, "total": 2}
    if blocked:
        assert classes(report) == ["gpu-ceiling"]
        assert "2 > resources.gpu_ceiling 1" in blocker(report, "gpu-ceiling")
    else:
        assert report.blockers == []


# ------------------------------------------------------------------ GPU capacity


def gpu_holders_on_h200(objs: dict[str, Obj]) -> list[str]:
    return [key for key, p in objs.items() if p["spec"].get("nodeName") in H200_NODES
            and (p.get("status") or {}).get("phase") not in {"Succeeded", "Failed"}
            and any((c.get("resources") or {}).get(part, {}).get("nvidia.com/gpu") not in (None, "0", 0)
                    for c in p["spec"].get("containers", []) for part in ("requests", "limits"))]


@pytest.fixture
def free_h200(cluster_kube: Kube) -> None:
    """Both H200 nodes free of GPU holders: other tests' namespaces (and their pods) are deleted
    asynchronously, and the capacity outcomes below are exact."""
    def free(objs: dict[str, Obj]) -> tuple[bool, str]:
        held = gpu_holders_on_h200(objs)
        return not held, f"GPU holders on H200 nodes: {held}"

    cluster_kube.wait_for(Watch("Pod"), free, awaited="H200 nodes free of GPU holders", timeout=90)


def wait_pods(kube: Kube, namespace: str, done: Any, awaited: str, timeout: float = 60) -> dict[str, Obj]:
    return kube.wait_for(Watch("Pod", namespace), done, awaited=awaited, timeout=timeout).objects


def test_pods_stuck_in_image_pull_backoff_hold_their_gpus(
        offline_cluster: OfflineCluster, cluster_kube: Kube, scratch_namespace: str, tmp_path: Path) -> None:
    ns = scratch_namespace
    tag = f"never-pulled-{uuid.uuid4().hex[:6]}"
    fault = faults.image_pull(f"pull-{ns}", faults.by_image(tag, namespace=ns))
    faults.apply(cluster_kube, fault)  # before the pods exist: stages act on pod events
    holders = [f"holder-{node}" for node in H200_NODES]
    try:
        for node, name in zip(H200_NODES, holders, strict=True):
            cluster_kube.create({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name}, "spec": {
                "nodeSelector": {"kubernetes.io/hostname": node},
                "containers": [{"name": "main", "image": f"registry.example.com/other-tenant/llm:{tag}",
                                "resources": {"limits": {"nvidia.com/gpu": "8"}}}]}}, ns)

        def stuck(objs: dict[str, Obj]) -> tuple[bool, str]:
            states = {o["metadata"]["name"]: (o["spec"].get("nodeName"), (o.get("status") or {}).get("phase"), [
                ((c.get("state") or {}).get("waiting") or {}).get("reason")
                for c in (o.get("status") or {}).get("containerStatuses") or []]) for o in objs.values()}
            done = len(states) == 2 and all(n and w == ["ImagePullBackOff"] for n, _, w in states.values())
            return done, str(states)

        pods = wait_pods(cluster_kube, ns, stuck, "both holder pods bound and in ImagePullBackOff")
        assert {p["status"]["phase"] for p in pods.values()} == {"Pending"}  # not Running, still holding

        create_secret(cluster_kube, ns)
        staged = stage(tmp_path, dgd_doc(), {"model-cache": model_cache_doc()})
        report = run_validate(Probe().on(offline_cluster), ns, staged, workload(ns, offline_cluster.context))
    finally:
        faults.remove(cluster_kube, fault)
        for name in holders:
            cluster_kube.delete("Pod", name, ns)
        wait_pods(cluster_kube, ns, lambda objs: (not objs, f"{len(objs)} pod(s) left"), "holder pods gone")

    assert outcome(report) == "insufficient"
    assert classes(report) == ["gpu-capacity"]
    table = rows(report)
    for node, name in zip(H200_NODES, holders, strict=True):
        assert (table[node]["total"], table[node]["held"], table[node]["free"]) == (8, 8, 0)
        assert {"pod": f"{ns}/{name}", "gpus": 8, "kind": "other"} in table[node]["holders"]
    assert "VllmDecodeWorker" in blocker(report, "gpu-capacity")


def test_a_node_reserved_by_an_untolerated_taint_is_excluded(
        offline_cluster: OfflineCluster, cluster_kube: Kube, scratch_namespace: str, tmp_path: Path) -> None:
    create_secret(cluster_kube, scratch_namespace)
    doc = dgd_doc()
    worker(doc)["extraPodSpec"]["nodeSelector"] = {"nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3"}
    staged = stage(tmp_path, doc, {"model-cache": model_cache_doc()})
    report = run_validate(Probe().on(offline_cluster), scratch_namespace, staged,
                          workload(scratch_namespace, offline_cluster.context))

    assert outcome(report) == "insufficient"
    assert classes(report) == ["gpu-capacity"]
    why = "\n".join((report.capacity or {})["reasons"])
    assert RESERVED_TAINT in why and "not tolerated" in why and "h100-reserved-0" in why
    assert RESERVED_TAINT in blocker(report, "gpu-capacity")
    # Another tenant's reservation is never tolerated on the user's behalf.
    assert yaml.safe_load(staged.deploy.read_text()) == doc
    assert report.patches[0].file.endswith("model-cache.yaml") and len(report.patches) == 1


@pytest.mark.parametrize(("replicas", "expected"), [(2, "sufficient"), (3, "insufficient")])
def test_required_anti_affinity_among_workers_is_honoured(
        offline_cluster: OfflineCluster, cluster_kube: Kube, scratch_namespace: str, tmp_path: Path,
        replicas: int, expected: str) -> None:
    create_secret(cluster_kube, scratch_namespace)
    doc = dgd_doc()
    svc = worker(doc)
    svc["replicas"] = replicas
    svc["extraPodSpec"]["affinity"] = {"podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [{
        "topologyKey": "kubernetes.io/hostname",
        "labelSelector": {"matchLabels": {"nvidia.com/dynamo-graph-deployment-name": "val-agg",
                                          "nvidia.com/dynamo-component": WORKER}}}]}}
    staged = stage(tmp_path, doc, {"model-cache": model_cache_doc()})
    report = run_validate(Probe().on(offline_cluster), scratch_namespace, staged,
                          workload(scratch_namespace, offline_cluster.context))

    assert outcome(report) == expected
    if expected == "sufficient":
        assert report.blockers == []
        placed = (report.capacity or {})["placement"]
        assert sorted(placed[f"{WORKER}-{i}"] for i in range(replicas)) == list(H200_NODES)
    else:
        assert classes(report) == ["gpu-capacity"]
        assert "anti-affinity" in "\n".join((report.capacity or {})["reasons"])
        assert "anti-affinity" in blocker(report, "gpu-capacity")


# ------------------------------------------------------------------ the GPU-taint compatibility patch


def test_gpu_taint_toleration_is_added_to_gpu_components_only(
        offline_clusters: ClusterPool, tmp_path: Path) -> None:
    cluster = offline_clusters.get("gpu-taint")
    admin = cluster.kube()
    doc = dgd_doc()
    with temp_namespace(admin) as namespace:
        create_secret(admin, namespace)
        staged = stage(tmp_path, doc, {"model-cache": model_cache_doc()})
        report = run_validate(Probe().on(cluster), namespace, staged, workload(namespace, cluster.context))
    admin.close()

    assert report.blockers == []
    patched = yaml.safe_load(staged.deploy.read_text())
    services = patched["spec"]["services"]
    assert services[WORKER]["extraPodSpec"]["tolerations"] == [GPU_TOLERATION]
    assert "tolerations" not in services["Frontend"]["extraPodSpec"]  # CPU-only: no toleration
    assert not [v for k, v in walk(patched) if k == "key" and v == RESERVED_TAINT]
    # Nothing else changed, and the handed-off source is untouched.
    del services[WORKER]["extraPodSpec"]["tolerations"]
    assert patched == doc == yaml.safe_load(staged.source.read_text())

    [toleration_patch] = [p for p in report.patches if p.file == staged.rel(staged.deploy)]
    assert WORKER in toleration_patch.change and f"{GPU_TAINT_KEY}=present:NoSchedule" in toleration_patch.reason
    assert [c["after"] for c in toleration_patch.changes if c["pointer"].endswith("/tolerations/0")] == [GPU_TOLERATION]
    assert set(H200_NODES) <= set(toleration_patch.evidence["nodes"])  # every GPU node carries it
    assert {r["result"] for r in report.evidence["dry_run"]} == {"accepted"}  # the patched copy is accepted
    assert outcome(report) == "sufficient"
    assert (report.capacity or {})["placement"][f"{WORKER}-0"] in H200_NODES


NO_EXECUTE_POOLS = """\
# Every GPU node carries the GPU taint with effect NoExecute (some managed clusters use it).
kind: NodePools
storageClasses:
  - {name: standard, default: true, volumeBindingMode: Immediate}
pools:
  - name: h200
    count: 2
    instanceType: p5en.48xlarge
    zone: offline-a
    cpu: "192"
    memory: 2048Gi
    gpu: {product: NVIDIA-H200, count: 8, memoryMiB: 143771}
    taints:
      - {key: nvidia.com/gpu, value: present, effect: NoExecute}
  - name: cpu
    count: 1
    instanceType: m7i.8xlarge
    zone: offline-a
    cpu: "32"
    memory: 128Gi
"""


@pytest.fixture(scope="module")
def no_execute_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[OfflineCluster]:
    pools = tmp_path_factory.mktemp("pools") / "gpu-taint-noexecute.yaml"
    pools.write_text(NO_EXECUTE_POOLS)
    with own_cluster("noexec", pools) as cluster:
        yield cluster


def test_gpu_taint_toleration_matches_the_effect_of_the_gpu_taint(
        no_execute_cluster: OfflineCluster, tmp_path: Path) -> None:
    """The toleration step 2 adds must tolerate the GPU taint the nodes actually carry (here
    NoExecute): one toleration per effect, never a NoSchedule one that would leave the pods out."""
    admin = no_execute_cluster.kube()
    with temp_namespace(admin) as namespace:
        create_secret(admin, namespace)
        staged = stage(tmp_path, dgd_doc(), {"model-cache": model_cache_doc()})
        report = run_validate(Probe().on(no_execute_cluster), namespace, staged,
                              workload(namespace, no_execute_cluster.context))
    admin.close()

    added = yaml.safe_load(staged.deploy.read_text())["spec"]["services"][WORKER]["extraPodSpec"]["tolerations"]
    assert [t["key"] for t in added] == [GPU_TAINT_KEY]
    assert added[0].get("effect") in (None, "", "NoExecute"), added
    assert report.blockers == []
    assert outcome(report) == "sufficient"


# ------------------------------------------------------------------ the dry-run as the create it will be


def test_a_same_named_agg_to_disagg_candidate_is_judged_as_the_create_by_the_real_webhook(
        offline_cluster: OfflineCluster, scratch_namespace: str, tmp_path: Path) -> None:
    """The session's cluster plays profile `latest`, whose validating webhook refuses adding or
    removing components on update: the previous iteration's agg DGD is live under the candidate's
    name, step 3 will delete it, so step 2 dry-runs the disagg candidate as a create (`create-as`)."""
    manager = ownership.field_manager("20260601T120000Z-val")
    ns = scratch_namespace
    owner = Kube(offline_cluster.context, offline_cluster.info().kubeconfig, field_manager=manager)
    try:
        previous = owner.apply(replica.manifest("dgd-alpha-agg.yaml", rename="llm"), ns)
    finally:
        owner.close()
    staged = stage(tmp_path, replica.manifest("dgd-alpha-disagg.yaml", rename="llm"))

    def judged(retiring: tuple[str, str] | None) -> ValidationReport:
        kube = Kube(offline_cluster.context, offline_cluster.info().kubeconfig, field_manager=manager)
        try:
            return validate(kube, ValidationInputs(
                namespace=ns, deploy_path=staged.deploy, support_paths={}, baseline_dgd_path=None,
                workload=workload(ns, offline_cluster.context), display_root=staged.root, retiring=retiring,
                retiring_uid=previous["metadata"]["uid"]))
        finally:
            kube.close()

    report = judged((ns, "llm"))
    assert "dry-run" not in classes(report) and "platform" not in classes(report), report.blockers
    record = report.evidence["dgd_dry_run"]
    assert record["mode"] == "create-as" and len(record["name"]) == len("llm") and record["result"] == "accepted"
    assert "component topology is immutable" in record["update_verdict"]  # the update, for information
    # When step 3 would not delete it (no retiring DGD), the candidate is what step 5 would update.
    report = judged(None)
    assert "component topology is immutable" in blocker(report, "dry-run")
    assert report.evidence["dgd_dry_run"]["mode"] == "update"
    # Only dry-runs: the live DGD is the one applied, and nothing exists under the derived name.
    live = cluster_get(offline_cluster, ns, "llm")
    assert live is not None and live["metadata"]["uid"] == previous["metadata"]["uid"]
    assert live["metadata"]["generation"] == previous["metadata"]["generation"]
    assert cluster_get(offline_cluster, ns, record["name"]) is None


def cluster_get(cluster: OfflineCluster, ns: str, name: str) -> Obj | None:
    kube = cluster.kube()
    try:
        return kube.get_or_none(replica.ALPHA, name, ns)
    finally:
        kube.close()
