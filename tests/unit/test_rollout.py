"""Steps 3 to 6 (deploy_suite.procedure.rollout) against the in-memory apiserver, with a real StepContext and
ledger: what each step does on the cluster, the typed result, and what its record writes."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from deploy_suite.access.kube import DGD, KNOWN, Kube
from deploy_suite.errors import Forbidden, StepBlocked, StepFailure, WaitTimeout
from deploy_suite.plugins.lifecycle import Lifecycle
from deploy_suite.procedure import apply, readiness, retire, stops, support, waits
from deploy_suite.procedure.context import StepContext
from deploy_suite.procedure.settings import Settings, Timeouts
from deploy_suite.procedure.workspace import PreviousDeployment
from deploy_suite.record import ledger, resume
from tests import fakekube
from tests.fakekube import FakeApi, dropped, event, forbidden, job, pod

NS = "demo"
POD, PVC, JOB = KNOWN["Pod"], KNOWN["PersistentVolumeClaim"], KNOWN["Job"]
DGD_LABEL = {"nvidia.com/dynamo-graph-deployment-name": "demo"}
DEPLOY = """\
apiVersion: nvidia.com/v1alpha1
kind: DynamoGraphDeployment
metadata: {name: demo}
spec:
  services:
    Frontend:
      componentType: frontend
      replicas: 1
      extraPodSpec: {mainContainer: {image: registry.local/runtime:1}}
    VllmDecodeWorker:
      componentType: worker
      replicas: 1
      resources: {limits: {gpu: "1"}}
      extraPodSpec: {mainContainer: {image: registry.local/runtime:1, args: [--model, m]}}
"""
CACHE = """\
apiVersion: v1
kind: PersistentVolumeClaim
metadata: {name: model-cache}
spec: {storageClassName: standard, accessModes: [ReadWriteMany], resources: {requests: {storage: 10Gi}}}
"""
DOWNLOAD = """\
apiVersion: batch/v1
kind: Job
metadata: {name: model-download}
spec: {template: {spec: {containers: [{name: model-download, image: registry.local/hf:1}]}}}
"""


@pytest.fixture
def fake() -> Iterator[tuple[FakeApi, Kube, list]]:
    with fakekube.installed() as made:
        yield made


def make_run(tmp_path: Path, *, iteration: int = 0, previous: Any = None, support: dict[str, str] | None = None,
             keep_on_failure: bool = False, step: str = "step3_retire_previous",
             support_order: tuple[str, ...] = (), **timeouts: float) -> StepContext:
    """A real StepContext whose step 1 result is a stand-in with what steps 3-6 read."""
    return make_lifecycle(tmp_path, iteration=iteration, previous=previous, support=support,
                          keep_on_failure=keep_on_failure, step=step, support_order=support_order,
                          **timeouts).context


def make_lifecycle(tmp_path: Path, *, iteration: int = 0, previous: Any = None,
                   support: dict[str, str] | None = None, keep_on_failure: bool = False,
                   step: str = "step3_retire_previous", support_order: tuple[str, ...] = (),
                   **timeouts: float) -> Lifecycle:
    """make_run's lifecycle, for a test that ends the step as the ledger plugin does."""
    deploy_root = tmp_path / "artifacts" / f"deploy-iter-{iteration:03d}"
    copies = deploy_root / "applied_manifests"
    copies.mkdir(parents=True)
    manifests = {"deploy": copies / "deploy.yaml"}
    manifests["deploy"].write_text(DEPLOY)
    for kind, text in (support or {}).items():
        manifests[kind] = copies / f"{kind}.yaml"
        manifests[kind].write_text(text)
    settings = Settings(iteration=iteration, exp_root=tmp_path, workload=tmp_path / "user_workload.yaml",
                        workload_sha256="0" * 64, dgd=tmp_path / "dgd.yaml", dgd_sha256="0" * 64,
                        provenance="user-interviewer", keep_on_failure=keep_on_failure,
                        support_order=support_order, timeouts=Timeouts(**timeouts))
    lifecycle = Lifecycle.create(settings)
    workload = SimpleNamespace(namespace=NS, kube_context="fake-ctx", max_failed_deploys=None)
    lifecycle.context.prepared = SimpleNamespace(  # type: ignore[assignment]
        exp_root=tmp_path, deploy_root=deploy_root, workload=workload, dgd_name="demo",
        previous=previous, manifest_paths=lambda: manifests)
    lifecycle.begin_step(step)
    return lifecycle


def carry(run: StepContext, **sections: Any) -> None:
    """What an earlier run of this iteration left: in the ledger (as attach_directory carries it)
    and in the typed state step 1 reads of it (``run.carried``)."""
    for name, value in sections.items():
        run.recorder.ledger.set_section(name, value)
    run.carried = resume.Carried.of({**run.recorder.ledger.data, **sections})


def fail_with_result(call) -> tuple[BaseException, Any]:
    """Run a step function expected to fail; return the error and the partial result it carries."""
    with pytest.raises((StepFailure, StepBlocked)) as caught:
        call()
    return caught.value, caught.value.result


# ------------------------------------------------------------------ step 3


def test_retire_at_iteration_0_records_the_context_and_touches_no_cluster(fake, tmp_path: Path) -> None:
    api, kube, _ = fake
    run = make_run(tmp_path)
    retired = run.record(retire.retire(run, kube))
    assert retired.retired is None and api.requests == []
    change = retired.context_change
    assert change is not None and (change["from"], change["to"]) == (None, "fake-ctx")
    assert 'cluster_context: "fake-ctx"' in (tmp_path / "manifest.yaml").read_text()
    assert run.recorder.evidence == {"manifest_context_update": change}
    assert run.recorder.ledger.data["retired_previous"] is None


def previous_iteration(tmp_path: Path, context: str = "fake-ctx", uid: str | None = None,
                       torn_down_at: str | None = None) -> PreviousDeployment:
    """Iteration 0's ledger (``uid``: what its step 5 recorded; None: an older ledger without it)."""
    root = tmp_path / "artifacts" / "deploy-iter-000"
    root.mkdir(parents=True)
    path = root / ledger.LEDGER_NAME
    path.write_text(json.dumps({"status": "ready", "torn_down_at": torn_down_at, "dgd_name": "demo", "keep": [1, 2]}))
    return PreviousDeployment(root, path, 0, "demo", context, NS, "ready", uid, torn_down_at)


def test_retire_deletes_only_the_previous_dgd_and_waits_for_it_and_its_pods(fake, tmp_path: Path) -> None:
    api, kube, records = fake
    (tmp_path / "manifest.yaml").write_text("cluster_context: fake-ctx\n")
    run = make_run(tmp_path, iteration=1, previous=previous_iteration(tmp_path))
    progress: list[str] = []
    run.recorder.sink = progress.append
    api.put(DGD, fakekube.dgd("demo", NS))
    for name in ("demo-worker-0", "demo-frontend-0"):
        api.put(POD, pod(name, NS, labels=DGD_LABEL))
    api.script_watch(POD, NS, [event("DELETED", pod("demo-worker-0", NS, labels=DGD_LABEL))],
                     [event("DELETED", pod("demo-frontend-0", NS, labels=DGD_LABEL))])
    retired = run.record(retire.retire(run, kube))
    result = retired.retired
    assert result is not None and result.existed and result.pods_gone_at
    assert [r.method for r in api.requests if r.method != "WATCH"] == ["GET", "GET", "DELETE", "GET", "GET"]
    assert api.of("DELETE")[0].path == f"/apis/nvidia.com/v1alpha1/namespaces/{NS}/dynamographdeployments/demo"
    assert [r.command.split(" --context fake-ctx ")[1] for r in records] == [
        f"get dynamographdeployments.nvidia.com demo -n {NS} -o json",  # whose it is, before the delete
        f"get persistentvolumeclaims -n {NS} -o json",  # the claims it owns, kept before the delete
        f"delete dynamographdeployments.nvidia.com demo -n {NS} --wait=false --cascade=background",
        f"get dynamographdeployments.nvidia.com demo -n {NS} --watch",
        f"get pods -n {NS} -l nvidia.com/dynamo-graph-deployment-name=demo --watch"]
    assert progress == ["[step3_retire_previous] deleted", "[step3_retire_previous] 2 pods left: demo-frontend-0, "
                        "demo-worker-0", "[step3_retire_previous] 1 pods left: demo-frontend-0",
                        "[step3_retire_previous] no pods left"]
    # The retired iteration's ledger: torn_down_at set, nothing else changed.
    old = json.loads((tmp_path / "artifacts" / "deploy-iter-000" / ledger.LEDGER_NAME).read_text())
    # torn_down_at is when the GPUs were freed: the pods gone, not the delete request.
    assert old == {"status": "ready", "torn_down_at": result.pods_gone_at, "dgd_name": "demo", "keep": [1, 2]}
    section = run.recorder.ledger.data["retired_previous"]
    assert section == {**result.as_dict(), "ledger": "artifacts/deploy-iter-000/deployment_ledger.json",
                       "passed_over": []}
    assert set(section) == {"dgd", "namespace", "kube_context", "deleted_at", "existed", "pods_gone_at", "ledger",
                            "action", "torn_down_at", "note", "kept_claims", "passed_over", "claims_unlisted",
                            "ownership", "torn_down_basis"}
    assert section["ownership"] == "ours" and section["torn_down_basis"] is None
    assert result.kept_claims == []
    assert result.action == "deleted" and result.torn_down_at == result.pods_gone_at
    assert run.recorder.evidence == result.as_dict()


def test_retire_uses_the_previous_iterations_own_context(fake, tmp_path: Path, monkeypatch) -> None:
    _, kube, records = fake
    other = FakeApi(fake[0].fake_clock)
    other.put(DGD, fakekube.dgd("demo", NS))
    made: list[Kube] = []

    def previous_kube(context: str, kubeconfig: Any, on_command: Any, field_manager: str) -> Kube:
        made.append(Kube(context, kubeconfig, on_command=on_command, transport=other, field_manager=field_manager))
        return made[-1]

    monkeypatch.setattr(retire, "Kube", previous_kube)
    run = make_run(tmp_path, iteration=1, previous=previous_iteration(tmp_path, context="old-ctx"))
    run.record(retire.retire(run, kube))
    assert [k.context for k in made] == ["old-ctx"] and other.closed
    assert other.of("DELETE") and run.recorder.ledger.data["retired_previous"]["kube_context"] == "old-ctx"
    deletes = [c["command"] for c in run.recorder.ledger.data["commands"] if c["kind"] == "mutate"]
    assert deletes == [f"kubectl --context old-ctx delete dynamographdeployments.nvidia.com demo -n {NS} "
                       "--wait=false --cascade=background"]
    assert records == []  # nothing went through the current context's client


def test_a_retire_that_times_out_keeps_the_context_evidence(fake, tmp_path: Path) -> None:
    api, kube, _ = fake
    previous = previous_iteration(tmp_path)
    run = make_run(tmp_path, iteration=1, previous=previous, retire_s=30)
    api.put(DGD, fakekube.dgd("demo", NS))
    api.put(POD, pod("stuck", NS, labels=DGD_LABEL))
    with pytest.raises(WaitTimeout, match=r"pods labelled nvidia\.com/dynamo-graph-deployment-name=demo"):
        retire.retire(run, kube)
    assert "manifest_context_update" in run.recorder.evidence
    assert json.loads(previous.ledger_path.read_text())["torn_down_at"] is None


# ------------------------------------------------------------------ step 4


def test_no_support_manifests_is_an_empty_result_with_no_evidence(fake, tmp_path: Path) -> None:
    api, kube, _ = fake
    run = make_run(tmp_path, step="step4_support_manifests")
    result = run.record(support.support(run, kube))
    assert result.applied == [] and api.requests == [] and run.recorder.evidence == {}


def cache_and_download(api: FakeApi, binding: str = "Immediate") -> None:
    api.put(KNOWN["StorageClass"], {"metadata": {"name": "standard"}, "volumeBindingMode": binding})
    pvc_path = {"metadata": {"name": "model-cache", "namespace": NS}, "status": {"phase": "Bound"}}
    api.script_watch(PVC, NS, [event("MODIFIED", pvc_path)])


def test_support_applies_in_order_waits_for_the_claim_and_the_job(fake, tmp_path: Path) -> None:
    api, kube, _ = fake
    api.watchers = 2  # a wait over two collections
    cache_and_download(api)
    api.script_watch(JOB, NS, [event("MODIFIED", job("model-download", NS, "SuccessCriteriaMet", "Complete"))])
    run = make_run(tmp_path, step="step4_support_manifests", support={"model-download": DOWNLOAD, "model-cache": CACHE})
    result = run.record(support.support(run, kube))
    assert [p.path.rsplit("/", 2)[1] for p in api.of("PATCH")] == ["persistentvolumeclaims", "jobs"]
    assert api.watches_left() == 0
    assert [j.job for j in result.jobs] == ["model-download"] and result.jobs[0].outcome == "Complete"
    assert run.recorder.evidence == {
        "order": {"types": ["model-cache", "model-download"], "by": "procedure"},
        "applied": ["artifacts/deploy-iter-000/applied_manifests/model-cache.yaml",
                    "artifacts/deploy-iter-000/applied_manifests/model-download.yaml"],
        "jobs": [result.jobs[0].as_dict()], "pvcs": {"model-cache": "Bound"}}
    assert set(result.jobs[0].as_dict()) == {"type", "job", "outcome", "conditions", "seconds", "log_file",
                                              "log_excerpt", "completed_at"}


VALIDATE = DOWNLOAD.replace("model-download", "model-validate")


def test_the_handoffs_support_order_is_followed_each_manifest_done_before_the_next(fake, tmp_path: Path) -> None:
    # The user's instructions: check the cache before downloading into it (the procedure's own order
    # would download first).
    api, kube, _ = fake
    api.watchers = 2
    cache_and_download(api)
    api.script_watch(JOB, NS, [event("MODIFIED", job("model-validate", NS, "SuccessCriteriaMet", "Complete"))],
                     [event("MODIFIED", job("model-download", NS, "SuccessCriteriaMet", "Complete"))])
    run = make_run(tmp_path, step="step4_support_manifests",
                   support={"model-download": DOWNLOAD, "model-cache": CACHE, "model-validate": VALIDATE},
                   support_order=("model-cache", "model-validate", "model-download"))
    result = run.record(support.support(run, kube))
    applied = [(r.path.rsplit("/", 2)[1], r.body["metadata"]["name"]) for r in api.of("PATCH")]
    assert applied == [("persistentvolumeclaims", "model-cache"), ("jobs", "model-validate"),
                       ("jobs", "model-download")]
    # Each Job was awaited (its wait lists it, then watches it) before the next manifest was applied.
    steps = [(r.method, r.path.rsplit("/", 1)[1] if r.method == "PATCH" else r.query["fieldSelector"])
             for r in api.requests if "/jobs" in r.path and r.method in ("PATCH", "GET")]
    assert steps == [("PATCH", "model-validate"), ("GET", "metadata.name=model-validate"),
                     ("PATCH", "model-download"), ("GET", "metadata.name=model-download")]
    assert [j.job for j in result.jobs] == ["model-validate", "model-download"]
    assert run.recorder.evidence["order"] == {"types": ["model-cache", "model-validate", "model-download"],
                                     "by": "handoff support_order"}
    assert [p.rsplit("/", 1)[1] for p in run.recorder.evidence["applied"]] == [
        "model-cache.yaml", "model-validate.yaml", "model-download.yaml"]


def test_a_wait_for_first_consumer_claim_is_not_awaited(fake, tmp_path: Path) -> None:
    api, kube, _ = fake
    api.put(KNOWN["StorageClass"], {"metadata": {"name": "standard"}, "volumeBindingMode": "WaitForFirstConsumer"})
    run = make_run(tmp_path, step="step4_support_manifests", support={"model-cache": CACHE})
    result = support.support(run, kube)
    assert not api.of("WATCH") and result.pvcs == {"model-cache": None}


def test_a_claim_whose_class_cannot_be_read_is_not_awaited_and_the_ledger_says_so(fake, tmp_path: Path) -> None:
    api, kube, _ = fake
    api.fail("GET", "/apis/storage.k8s.io/v1/storageclasses/standard", forbidden("get", "storageclasses"), times=9)
    assert support.immediate_claims(kube, NS, []) == []
    run = make_run(tmp_path, step="step4_support_manifests", support={"model-cache": CACHE})
    result = run.record(support.support(run, kube))
    assert not api.of("WATCH") and result.pvcs == {"model-cache": None}
    (said,) = run.recorder.ledger.data["limitations"]
    assert said.startswith("PVC model-cache: its storage class may not be read by this identity (forbidden)")
    assert "not awaited as Immediate in step 4" in said


def test_binding_modes_read_each_claims_class(fake) -> None:
    api, kube, _ = fake
    api.put(KNOWN["StorageClass"], {"metadata": {"name": "wffc"}, "volumeBindingMode": "WaitForFirstConsumer"})
    api.put(KNOWN["StorageClass"], {"metadata": {"name": "standard"}})
    api.put(KNOWN["StorageClass"], {"metadata": {"name": "secret-class"}})
    api.fail("GET", "/apis/storage.k8s.io/v1/storageclasses/secret-class", forbidden("get", "storageclasses"), times=2)
    for name, cls in (("a", "wffc"), ("b", "standard"), ("c", None), ("d", "gone"), ("e", "secret-class")):
        api.put(PVC, {"metadata": {"name": name, "namespace": NS}, "spec": {"storageClassName": cls}})
    assert support.binding_modes(kube, NS, ["a", "b", "c", "d", "e"]) == {
        "a": "WaitForFirstConsumer", "b": "Immediate", "c": "Immediate", "d": "Immediate", "e": None}
    unread: list[str] = []
    assert support.immediate_claims(kube, NS, ["a", "b", "e"], unread) == ["b"]
    assert [line.split(":")[0] for line in unread] == ["PVC e"]


def test_a_claim_that_never_binds_is_a_dependency(fake, tmp_path: Path) -> None:
    api, kube, _ = fake
    api.put(KNOWN["StorageClass"], {"metadata": {"name": "standard"}})
    run = make_run(tmp_path, step="step4_support_manifests", support={"model-cache": CACHE}, pvc_bound_s=20)
    error, partial = fail_with_result(lambda: support.support(run, kube))
    assert error.category == "dependency" and partial is None
    assert str(error).startswith("model-cache PVC never bound: timed out after 20s waiting for pvc/model-cache Bound")


def test_a_failed_job_fails_fast_keeps_its_log_and_carries_the_diagnostic(fake, tmp_path: Path) -> None:
    api, kube, _ = fake
    api.watchers = 2  # a wait over two collections
    api.put(POD, pod("model-download-x1", NS, labels={"job-name": "model-download"}))
    api.logs[(NS, "model-download-x1")] = "Fetching 10 files\nKeyError: MODEL_REVISION\n"
    api.script_watch(JOB, NS, [event("MODIFIED", job("model-download", NS, "FailureTarget", "Failed"))])
    run = make_run(tmp_path, step="step4_support_manifests", support={"model-download": DOWNLOAD})
    error, partial = fail_with_result(lambda: support.support(run, kube))
    assert error.category == "job-failed" and error.evidence == ["job/model-download: FailureTarget Failed"]
    assert str(error) == ("model-download job model-download failed (conditions: FailureTarget Failed); "
                          "last log lines: Fetching 10 files\nKeyError: MODEL_REVISION")
    log = run.deploy_root / "logs" / "job-model-download.log"
    assert log.read_text() == "Fetching 10 files\nKeyError: MODEL_REVISION\n"
    assert run.record(partial) is partial and run.recorder.evidence == {}
    (diagnostic,) = run.recorder.ledger.data["diagnostics"]
    assert diagnostic == {"step": "step4_support_manifests", "job": "model-download", "message": str(error),
                          "log_excerpt": "Fetching 10 files\nKeyError: MODEL_REVISION",
                          "log_file": "artifacts/deploy-iter-000/logs/job-model-download.log"}



@pytest.mark.parametrize(("said", "category", "blocked", "named"), [
    ("OSError: [Errno 28] No space left on device", "platform", "platform", "disk-full"),
    ("huggingface_hub.errors.GatedRepoError: 401 Client Error.", "dependency", "dependency", "gated-model"),
    ("PermissionError: [Errno 13] Permission denied: '/model-store/hub'", "dependency", "dependency",
     "cache-permission"),
])
def test_a_failed_jobs_cause_is_named_from_its_pods_log(fake, tmp_path: Path, said: str, category: str,
                                                       blocked: str, named: str) -> None:
    # Issue 29: the pod's own words decide whose fix it is (a full disk the platform's, a token or a
    # cache the pod may not write a dependency); the step blocks with that class, never a failed attempt.
    api, kube, _ = fake
    api.watchers = 2
    api.put(POD, pod("model-download-x1", NS, labels={"job-name": "model-download"}))
    api.logs[(NS, "model-download-x1")] = f"Fetching 10 files\n{said}\n"
    api.script_watch(JOB, NS, [event("MODIFIED", job("model-download", NS, "FailureTarget", "Failed"))])
    run = make_run(tmp_path, step="step4_support_manifests", support={"model-download": DOWNLOAD})
    error, partial = fail_with_result(lambda: support.support(run, kube))
    assert error.category == category and not error.failed_attempt
    assert str(error).startswith("model-download job model-download failed: Job/model-download failed (")
    assert named in str(error) and said in str(error)
    assert error.evidence[0] == "job/model-download: FailureTarget Failed" and f"signature {named}:" in \
        " ".join(error.evidence)
    found = stops.judge("step4_support_manifests", error)
    assert (found.outcome, found.category) == ("blocked", blocked)
    assert partial.failure["job"] == "model-download"


def test_a_failed_jobs_log_is_redacted_in_the_file_and_the_ledger(fake, tmp_path: Path) -> None:
    api, kube, _ = fake
    api.watchers = 2
    token = "hf_" + "Ab3dE6gH9jK2mN5pQ8sT1vW4yZ7bC0eF"
    api.put(POD, pod("model-download-x1", NS, labels={"job-name": "model-download"}))
    api.logs[(NS, "model-download-x1")] = f"HF_TOKEN={token}\nGatedRepoError: 401\n"
    api.script_watch(JOB, NS, [event("MODIFIED", job("model-download", NS, "Failed"))])
    run = make_run(tmp_path, step="step4_support_manifests", support={"model-download": DOWNLOAD})
    error, partial = fail_with_result(lambda: support.support(run, kube))
    log = (run.deploy_root / "logs" / "job-model-download.log").read_text()
    assert token not in log and "GatedRepoError: 401" in log
    assert token not in str(error)
    run.record(partial)
    assert token not in json.dumps(run.recorder.ledger.data)


def test_a_job_that_never_completes_times_out(fake, tmp_path: Path) -> None:
    api, kube, _ = fake
    api.watchers = 2  # the Job and its pods
    run = make_run(tmp_path, step="step4_support_manifests", support={"model-download": DOWNLOAD}, job_download_s=50)
    error, partial = fail_with_result(lambda: support.support(run, kube))
    assert error.category == "job-timeout"
    assert "timed out after 50s waiting for job/model-download Complete" in str(error)
    assert partial.failure["job"] == "model-download" and partial.failure["log_excerpt"] == ""
    assert not (run.deploy_root / "logs").exists()


# ------------------------------------------------------------------ step 5


def test_apply_applies_deploy_yaml_and_records_gpus_and_cleanup(fake, tmp_path: Path) -> None:
    api, kube, records = fake
    run = make_run(tmp_path, step="step5_apply")
    applied = run.record(apply.apply(run, kube))
    assert applied.applied == ["DynamoGraphDeployment/demo"] and applied.gpus_requested == 1
    assert api.of("PATCH")[0].path == f"/apis/nvidia.com/v1alpha1/namespaces/{NS}/dynamographdeployments/demo"
    assert records[0].command.endswith(f"get dynamographdeployments.nvidia.com demo -n {NS} -o json")
    assert records[1].command.endswith("-n demo -f artifacts/deploy-iter-000/applied_manifests/deploy.yaml")
    data = run.recorder.ledger.data
    assert data["gpus_requested"] == 1
    assert data["cleanup_commands"] == [f"kubectl --context fake-ctx delete dynamographdeployment demo -n {NS}"]
    assert run.recorder.evidence == {"applied": ["DynamoGraphDeployment/demo"], "gpus_requested": 1,
                                     "dgd_before": "absent"}
    # Applied with the experiment's field manager: what ownership reads back (managedFields).
    assert api.of("PATCH")[0].query["fieldManager"] == kube.field_manager


def test_the_apply_never_changes_a_same_named_dgd_of_someone_else(fake, tmp_path: Path) -> None:
    api, kube, _ = fake
    api.put(DGD, fakekube.dgd("demo", NS, manager="someone-else"))
    run = make_run(tmp_path, step="step5_apply")
    error, _ = fail_with_result(lambda: apply.apply(run, kube))
    assert error.category == "ownership"
    assert error.message == (f"DynamoGraphDeployment {NS}/demo exists and was not created by this experiment "
                             "(field managers: someone-else); step 5 refuses to apply over it")
    assert [r.method for r in api.requests] == ["GET"]  # read, never written


def test_the_apply_goes_over_this_experiments_own_dgd(fake, tmp_path: Path) -> None:
    api, kube, _ = fake
    api.put(DGD, fakekube.dgd("demo", NS, manager=kube.field_manager))
    run = make_run(tmp_path, step="step5_apply")
    applied = apply.apply(run, kube)
    assert applied.owner_before == "ours" and len(api.of("PATCH")) == 1
    # The ledger names the manager that marks the DGD as the experiment's (the report shows it).
    assert run.recorder.ledger.data["applied_dgd"]["field_manager"] == kube.field_manager
    ledger.validate(run.recorder.ledger.data)


def test_retire_deletes_a_dgd_another_tool_applied_when_its_ledger_names_it(fake, tmp_path: Path) -> None:
    """The previous iteration deployed with plain ``kubectl apply`` (no field manager of ours): its
    ledger names it (no uid recorded, as another tool writes it), so step 3 retires it."""
    api, kube, _ = fake
    previous = previous_iteration(tmp_path)
    api.put(DGD, fakekube.dgd("demo", NS, manager="kubectl-client-side-apply"))
    run = make_run(tmp_path, iteration=1, previous=previous)
    result = run.record(retire.retire(run, kube)).retired
    assert result is not None and result.action == "deleted" and result.ownership == "recorded"
    assert api.of("DELETE") and json.loads(previous.ledger_path.read_text())["torn_down_at"] == result.pods_gone_at


# ------------------------------------------------------------------ step 6


def serving(api: FakeApi, frontend_service: bool = True) -> None:
    """A DGD on its way to Ready: pods come up, the operator reports successful."""
    api.watchers = 2  # the DGD and its pods
    api.put(KNOWN["Node"], {"metadata": {"name": "h200-0"}, "status": {"allocatable": {"nvidia.com/gpu": "8"}}})
    api.put(DGD, fakekube.dgd("demo", NS))
    if frontend_service:
        api.put(KNOWN["Service"], {"metadata": {"name": "demo-frontend", "namespace": NS}})
    worker = {**DGD_LABEL, "nvidia.com/dynamo-component": "VllmDecodeWorker"}
    frontend = {**DGD_LABEL, "nvidia.com/selector": "demo-frontend"}
    api.script_watch(POD, NS, [
        event("ADDED", pod("demo-worker-0", NS, labels=worker, gpus=1)),
        event("MODIFIED", pod("demo-worker-0", NS, labels=worker, gpus=1, node="h200-0")),
        event("ADDED", pod("demo-frontend-0", NS, labels=frontend, phase="Running", ready=True, node="cpu-0")),
        event("MODIFIED", pod("demo-worker-0", NS, labels=worker, gpus=1, node="h200-0", phase="Running",
                              ready=True))])
    api.script_watch(DGD, NS, [event("MODIFIED", fakekube.dgd("demo", NS, "successful", ready=True))])


def test_readiness_waits_for_the_dgd_and_every_pod_and_records_the_engagement(fake, tmp_path: Path) -> None:
    api, kube, _ = fake
    serving(api)
    run = make_run(tmp_path, step="step6_readiness")
    run.recorder.ledger.path = tmp_path / "ledger.json"
    ready = run.record(readiness.readiness(run, kube))
    assert api.watches_left() == 0
    assert (ready.state, ready.dgd_state, ready.ready_condition, ready.ready_reason) == (
        "ready", "successful", "True", "AllReady")
    assert ready.components == {
        "Frontend": {"expected": 1, "ready": 1, "pods": ["demo-frontend-0"], "nodes": ["cpu-0"]},
        "VllmDecodeWorker": {"expected": 1, "ready": 1, "pods": ["demo-worker-0"], "nodes": ["h200-0"]}}
    data = run.recorder.ledger.data
    assert data["readiness"] == ready.as_dict() and list(data["readiness"]) == [
        "state", "dgd_state", "ready_condition", "ready_reason", "components", "allocated_at", "contention",
        "diagnosis", "evidence", "seconds", "last_progress", "generation_rule", "reconcile_errors",
        "verdict_at"]
    assert data["allocated_at"] == ready.allocated_at
    assert json.loads(run.recorder.ledger.path.read_text())["allocated_at"] == ready.allocated_at  # saved at once
    assert [(e["pod"], e["component"], e["gpus"]) for e in data["config_engagement"]] == [
        ("demo-frontend-0", None, 0), ("demo-worker-0", "VllmDecodeWorker", 1)]
    assert run.recorder.evidence == {"state": "ready", "seconds": ready.seconds, "contention": 0}
    assert data["torn_down_at"] is None and data["failed_attempts"] == []


def test_a_resumed_run_keeps_its_first_allocation_time(fake, tmp_path: Path) -> None:
    api, kube, _ = fake
    serving(api)
    run = make_run(tmp_path, step="step6_readiness")
    carry(run, allocated_at="2025-12-31T00:00:00Z")
    run.record(readiness.readiness(run, kube))
    assert run.recorder.ledger.data["allocated_at"] == "2025-12-31T00:00:00Z"


PLANTED = "hf_" + "Q7x" * 12  # a secret-looking value planted in the crashed container's output


def crash_looping(api: FakeApi, restarts: int = 2) -> None:
    api.watchers = 2  # a wait over two collections
    api.put(DGD, fakekube.dgd("demo", NS))
    crashed = pod("demo-worker-0", NS, labels=DGD_LABEL, waiting="CrashLoopBackOff", node="h200-0")
    crashed["status"]["containerStatuses"][0].update(restartCount=restarts, lastState={
        "terminated": {"reason": "OOMKilled", "exitCode": 137}})
    api.put(POD, crashed)
    api.put(KNOWN["Event"], {"metadata": {"name": "demo-worker-0.b", "namespace": NS}, "type": "Warning",
                             "reason": "BackOff", "message": "Back-off restarting failed container main",
                             "involvedObject": {"kind": "Pod", "name": "demo-worker-0"}})
    api.logs[(NS, "demo-worker-0")] = f"loading model\nHF_TOKEN={PLANTED}\nCUDA out of memory\n"


@pytest.mark.parametrize("keep", [False, True])
def test_a_crash_keeps_its_evidence_then_is_torn_down_unless_kept(fake, tmp_path: Path, keep: bool) -> None:
    api, kube, records = fake
    api.garbage_collect = True
    crash_looping(api)
    lifecycle = make_lifecycle(tmp_path, step="step6_readiness", keep_on_failure=keep)
    run = lifecycle.context
    error, partial = fail_with_result(lambda: readiness.readiness(run, kube))
    assert error.category == "crash" and error.failed_attempt
    assert "OOMKilled (exit code 137)" in str(error)
    # Evidence first: the previous run's log, bounded and redacted; then (unless kept) the delete.
    log_read = next(i for i, r in enumerate(api.requests) if r.path.endswith("/log"))
    assert api.requests[log_read].query == {"container": "main", "tailLines": 40, "previous": "true"}
    deletes = [i for i, r in enumerate(api.requests) if r.method == "DELETE"]
    assert deletes == [] if keep else deletes[0] > log_read
    assert any("logs demo-worker-0 -n demo --tail=40 -c main --previous" in r.command for r in records)
    assert isinstance(partial, readiness.Readiness) and partial.failed_attempt
    lifecycle.stop_step("step6_readiness", error)  # as the ledger plugin does: the partial result, then the verdict
    data = run.recorder.ledger.data
    assert data["status"] == "failed" and data["blockers"] == []  # the candidate's own failure
    found = data["readiness"]["failure_evidence"]
    (container,) = found["containers"]
    assert container["previous"] and container["last_terminated"] == "last terminated: OOMKilled (exit code 137)"
    assert "CUDA out of memory" in container["log_excerpt"] and "HF_TOKEN=[REDACTED]" in container["log_excerpt"]
    assert any("BackOff" in e for e in found["events"]) and found["dgd_status"]["state"] == "pending"
    file = tmp_path / found["log_file"]
    assert found["log_file"] == "artifacts/deploy-iter-000/logs/readiness-demo.log"
    assert "CUDA out of memory" in file.read_text() and PLANTED not in file.read_text()
    assert PLANTED not in json.dumps(data)
    ledger.validate(data)
    teardown = data["teardown"]
    assert teardown["policy"] == ("keep-on-failure" if keep else "teardown-final-failures")
    assert teardown["action"] == ("kept" if keep else "deleted") and teardown["evidence_file"] == found["log_file"]
    # torn_down_at is when the pods were gone (the GPUs free), after the delete.
    assert data["torn_down_at"] == (None if keep else teardown["pods_gone_at"])
    (attempt,) = data["failed_attempts"]  # once: recorded by the readiness result, not again by the verdict
    assert (attempt["step"], attempt["category"], attempt["diagnosis"]) == ("step6_readiness", "crash", str(error))


def test_a_delete_that_fails_after_the_evidence_is_recorded_not_raised(fake, tmp_path: Path) -> None:
    api, kube, _ = fake
    crash_looping(api)
    api.fail("DELETE", f"/apis/nvidia.com/v1alpha1/namespaces/{NS}/dynamographdeployments/demo",
             forbidden("delete", "dynamographdeployments"))
    run = make_run(tmp_path, step="step6_readiness")
    error, partial = fail_with_result(lambda: readiness.readiness(run, kube))
    run.record(partial)
    assert error.category == "crash" and run.recorder.ledger.data["teardown"]["action"] == "delete-failed"
    data = run.recorder.ledger.data
    assert data["torn_down_at"] is None and "cannot delete" in data["teardown"]["reason"]
    ledger.validate(run.recorder.ledger.data)


def test_a_dependency_keeps_its_evidence_and_the_dgd_and_is_not_a_failed_attempt(fake, tmp_path: Path) -> None:
    api, kube, _ = fake
    api.watchers = 2  # a wait over two collections
    api.put(DGD, fakekube.dgd("demo", NS))
    message = "0/4 nodes are available: pod has unbound immediate PersistentVolumeClaims. preemption: 0/4"
    api.put(POD, pod("demo-worker-0", NS, labels=DGD_LABEL, unschedulable=message))
    api.put(KNOWN["Event"], fakekube.scheduling_event("demo-worker-0", NS, message))
    lifecycle = make_lifecycle(tmp_path, step="step6_readiness")
    run = lifecycle.context
    error, _ = fail_with_result(lambda: readiness.readiness(run, kube))
    lifecycle.stop_step("step6_readiness", error)
    assert error.category == "dependency" and not error.failed_attempt and api.of("DELETE") == []
    assert run.recorder.ledger.data["failed_attempts"] == [] and run.recorder.ledger.data["torn_down_at"] is None
    # Not the candidate's failure: blocked, class dependency (docs/procedure.md, "Outcomes").
    assert run.recorder.ledger.data["status"] == "blocked"
    (blocker,) = run.recorder.ledger.data["blockers"]
    assert (blocker["step"], blocker["class"], blocker["message"]) == ("step6_readiness", "dependency", str(error))
    assert run.recorder.ledger.data["readiness"]["state"] == "dependency"
    assert run.recorder.ledger.data["teardown"]["action"] == "kept" and "not known to be final" in \
        run.recorder.ledger.data["teardown"]["reason"]


def test_a_start_that_keeps_progressing_waits_past_the_no_progress_bound(fake, tmp_path: Path) -> None:
    api, kube, _ = fake
    api.watchers = 2
    api.put(DGD, fakekube.dgd("demo", NS))
    api.put(KNOWN["Service"], {"metadata": {"name": "demo-frontend", "namespace": NS}})
    worker = {**DGD_LABEL, "nvidia.com/dynamo-component": "VllmDecodeWorker"}
    frontend = {**DGD_LABEL, "nvidia.com/selector": "demo-frontend"}
    api.put(POD, pod("demo-frontend-0", NS, labels=frontend, phase="Running", ready=True, node="cpu-0"))
    steps = [pod("demo-worker-0", NS, labels=worker, gpus=1),
             pod("demo-worker-0", NS, labels=worker, gpus=1, node="h200-0"),
             pod("demo-worker-0", NS, labels=worker, gpus=1, node="h200-0", phase="Running"),
             pod("demo-worker-0", NS, labels=worker, gpus=1, node="h200-0", phase="Running", ready=True)]
    steps[2]["status"]["containerStatuses"] = [{"name": "main", "started": True, "state": {"running": {}}}]
    dgd_ready = fakekube.dgd("demo", NS, "successful", ready=True)
    windows: list[float] = []

    def slow_wait(condition: Any, timeout: float, on_progress: Any = None) -> Any:
        """Each state comes 80 s after the last (less than the 100 s bound, 320 s in all)."""
        windows.append(timeout)
        if not steps:
            raise AssertionError("waited after the last state")
        fake[0].fake_clock.advance(80)
        state = steps.pop(0)
        seen = {"dgd": {f"{NS}/demo": dgd_ready if not steps else fakekube.dgd("demo", NS)},
                "pods": {f"{NS}/demo-frontend-0": api.objects[("/api/v1", "pods")][(NS, "demo-frontend-0")],
                         f"{NS}/demo-worker-0": state}}
        done, description = condition(seen)
        if not done:
            fake[0].fake_clock.advance(max(0.0, timeout - 80))
            raise WaitTimeout(condition.awaited, timeout, description)
        return SimpleNamespace(collections=seen)

    kube.wait = slow_wait  # type: ignore[method-assign]
    run = make_run(tmp_path, step="step6_readiness", readiness_no_progress_s=100, readiness_s=3600)
    ready = readiness.readiness(run, kube)
    assert ready.state == "ready" and ready.seconds > 100, ready
    # Each wait runs to the bound counted from the last progress (a wait ends 100 s after it).
    assert windows == [100.0, 80.0, 100.0, 80.0]
    assert ready.last_progress is not None and ready.last_progress["what"] == "pod demo-worker-0 ready"


def test_a_start_without_progress_fails_after_the_bound_naming_the_last_progress(fake, tmp_path: Path) -> None:
    api, kube, _ = fake
    api.watchers = 2
    api.put(DGD, fakekube.dgd("demo", NS))
    stuck = pod("demo-worker-0", NS, labels=DGD_LABEL, gpus=1, node="h200-0", phase="Running")
    stuck["status"]["containerStatuses"] = [{"name": "main", "started": True, "state": {"running": {}}}]
    api.put(POD, stuck)
    run = make_run(tmp_path, step="step6_readiness", readiness_no_progress_s=300, readiness_s=3600)
    error, partial = fail_with_result(lambda: readiness.readiness(run, kube))
    assert error.category == "no-progress" and not error.failed_attempt
    assert str(error).startswith("no progress for 300s (timeouts.readiness_no_progress_s 300s); last progress: ")
    assert "pod demo-worker-0" in str(error) and "pods ready 0/2" in str(error)
    # The worker loads (running, no restarts): a sign; the frontend that never came is what is stuck.
    assert "stuck with no sign of a legitimate wait: 1 of 2 pods not created;" in str(error)
    assert partial.last_progress["what"].startswith("pod demo-worker-0") and partial.teardown["action"] == "kept"
    assert api.of("DELETE") == []


def test_the_hard_cap_ends_a_wait_that_keeps_progressing(fake, tmp_path: Path) -> None:
    api, kube, _ = fake
    api.watchers = 2
    api.put(DGD, fakekube.dgd("demo", NS))
    api.script_watch(POD, NS, *[[event("ADDED", pod(f"demo-worker-{i}", NS, labels=DGD_LABEL))] for i in range(6)])
    run = make_run(tmp_path, step="step6_readiness", readiness_no_progress_s=100, readiness_s=150)
    error, _ = fail_with_result(lambda: readiness.readiness(run, kube))
    assert error.category == "timeout" and "hard cap timeouts.readiness_s" in str(error)


def test_a_reconciliation_error_that_persists_stops_readiness(fake, tmp_path: Path) -> None:
    api, kube, _ = fake
    api.watchers = 2  # a wait over two collections
    api.put(DGD, fakekube.dgd("demo", NS, "failed", message="spec.services: invalid"))
    run = make_run(tmp_path, step="step6_readiness", reconcile_error_grace_s=0)
    error, partial = fail_with_result(lambda: readiness.readiness(run, kube))
    assert error.category == "reconcile-error" and str(error) == (
        "DGD reconciliation error: spec.services: invalid (the reconcile error persisted for 0s (grace 0s))")
    assert [e["outcome"] for e in partial.reconcile_errors] == ["persisted"]
    assert error.evidence == ["dgd/demo status: failed NotReady: spec.services: invalid"]


def test_a_missing_frontend_service_fails_readiness(fake, tmp_path: Path) -> None:
    api, kube, _ = fake
    serving(api, frontend_service=False)
    run = make_run(tmp_path, step="step6_readiness")
    error, partial = fail_with_result(lambda: readiness.readiness(run, kube))
    assert error.category == "missing-frontend-service" and str(error) == "frontend Service demo-frontend is missing"
    assert partial.torn_down_at is None and partial.teardown["action"] == "kept"


def test_readiness_times_out_at_its_bound(fake, tmp_path: Path) -> None:
    api, kube, _ = fake
    api.watchers = 2  # a wait over two collections
    api.put(DGD, fakekube.dgd("demo", NS))
    run = make_run(tmp_path, step="step6_readiness", readiness_s=120)
    error, partial = fail_with_result(lambda: readiness.readiness(run, kube))
    assert error.category == "timeout" and not partial.failed_attempt
    assert str(error).startswith("timed out after 120s waiting for dgd/demo Ready with all pods ready; last seen: "
                                 "dgd/demo state=pending Ready=False (NotReady), pods ready 0/2 (short: Frontend "
                                 "0/1, VllmDecodeWorker 0/1) (the hard cap ")
    assert "last progress: readiness wait started" in str(error)  # no pod ever appeared


def test_a_refused_watch_stops_readiness_at_once_instead_of_timing_out(fake, tmp_path: Path) -> None:
    api, kube, _ = fake
    api.watchers = 2  # a wait over two collections
    api.put(DGD, fakekube.dgd("demo", NS))
    api.fail("WATCH", f"/api/v1/namespaces/{NS}/pods", forbidden())
    run = make_run(tmp_path, step="step6_readiness")
    error, partial = fail_with_result(lambda: readiness.readiness(run, kube))
    assert error.category == "api-error" and 'cannot watch resource "pods"' in str(error)  # never "timeout"
    assert isinstance(error.__cause__, Forbidden) and partial.torn_down_at is None


def test_readiness_rides_out_an_apiserver_restart(fake, tmp_path: Path) -> None:
    api, kube, _ = fake
    serving(api)
    api.fail("WATCH", f"/apis/nvidia.com/v1alpha1/namespaces/{NS}/dynamographdeployments", dropped(), times=3)
    run = make_run(tmp_path, step="step6_readiness")
    assert readiness.readiness(run, kube).state == "ready"


def test_named_conditions_say_what_they_await() -> None:
    assert waits.dgd_gone(NS, "d").awaited == "dgd/d to disappear"
    assert waits.pvc_bound(NS, "c").awaited == "pvc/c Bound"
    assert waits.dgd_pods_gone(NS, "d").awaited == "pods labelled nvidia.com/dynamo-graph-deployment-name=d " \
                                                        "to be deleted"
    assert waits.pods_gone(NS, "a=b")({"pods": {}}) == (True, "no pods left")
    assert waits.pvc_bound(NS, "c")({"pvc": {}}) == (False, "pvc/c phase=None")


def test_every_contention_wait_is_recorded_as_a_hold_decision(tmp_path: Path) -> None:
    # The procedure: contention is a legitimate wait, with its evidence line and next check recorded.
    seen = {"category": "contention", "diagnosis": "pod d-w-0 is waiting for capacity (nvidia.com/gpu)",
            "evidence": ["pod d-w-0: FailedScheduling: 0/4 nodes are available: 4 Insufficient nvidia.com/gpu."],
            "can_wait": True, "next_check_s": 30.0, "at": "2026-01-01T00:00:00Z", "next_check_at_s": 30.0}
    book = ledger.Ledger(ledger.new_document(deploy_id="deploy-iter-000", iteration=0, provenance="user-interviewer",
                                             review_id=None, step_names=("step6_readiness",), settings={}))
    ready = readiness.Readiness("ready", contention=[seen])
    ready.record(book)
    ready.record(book)  # a resumed run records the same wait once
    assert book.data["hold_decisions"] == [{
        "at": "2026-01-01T00:00:00Z", "step": "step6_readiness", "decision": "wait", "category": "contention",
        "reason": seen["diagnosis"], "evidence": seen["evidence"], "next_check_s": 30.0}]
    failed = readiness.Readiness("dependency", contention=[seen], failed=True, diagnosis="x")
    failed.record(book)
    assert len(book.data["hold_decisions"]) == 1


def test_a_teardown_whose_pods_outlast_the_wait_claims_no_torn_down_at(fake, tmp_path: Path) -> None:
    # torn_down_at means the GPUs are free: not claimed while the deleted DGD's pods are still there.
    api, kube, _ = fake
    crash_looping(api)  # the fake's garbage collector is off: the pods stay
    run = make_run(tmp_path, step="step6_readiness", retire_s=1)
    _error, partial = fail_with_result(lambda: readiness.readiness(run, kube))
    run.record(partial)
    teardown = run.recorder.ledger.data["teardown"]
    assert teardown["action"] == "deleted" and teardown["pods_gone_at"] is None
    assert "its pods were not seen gone" in teardown["reason"]
    assert run.recorder.ledger.data["torn_down_at"] is None
    ledger.validate(run.recorder.ledger.data)


def test_a_teardown_interrupted_in_its_pods_gone_wait_leaves_the_failed_attempt_saved(fake, tmp_path: Path) -> None:
    """Ctrl-C (or an agent's tool timeout) in the pods-gone wait: the attempt, its evidence and
    diagnosis were saved before the delete; the ledger on disk is valid and says the delete began."""
    api, kube, _ = fake
    crash_looping(api)  # the fake's garbage collector is off: the pods stay, the wait is on
    run = make_run(tmp_path, step="step6_readiness")
    run.recorder.ledger.path = run.deploy_root / ledger.LEDGER_NAME
    saved_at_delete: list[dict[str, Any]] = []
    original = kube.delete

    def spy(*args: Any, **kwargs: Any) -> bool:
        saved_at_delete.append(json.loads(run.recorder.ledger.path.read_text()))  # type: ignore[union-attr]
        deleted = original(*args, **kwargs)
        api.fail("WATCH", f"/api/v1/namespaces/{NS}/pods", KeyboardInterrupt())  # Ctrl-C in the pods-gone wait
        return deleted

    kube.delete = spy  # type: ignore[method-assign]
    with pytest.raises(KeyboardInterrupt):
        readiness.readiness(run, kube)
    assert api.of("DELETE"), "the teardown's delete was asked for"
    (before,) = saved_at_delete
    (attempt,) = before["failed_attempts"]  # on disk before the delete
    assert attempt["step"] == "step6_readiness" and attempt["category"] == "crash" and attempt["evidence"]
    assert before["teardown"]["action"] == "deleting" and before["readiness"]["failure_evidence"]
    data = json.loads(run.recorder.ledger.path.read_text())  # type: ignore[union-attr]
    ledger.validate(data)
    assert data["failed_attempts"] == before["failed_attempts"] and data["teardown"]["action"] == "deleting"
    assert data["torn_down_at"] is None
