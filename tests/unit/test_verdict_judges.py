"""The judges of issue 29, one by one: claims, support Jobs with their pods' logs, probes and
evictions, node conditions, and the troubleshooting shape (docs/triage.md). Pure: objects in,
verdicts out; the vectors of tests/unit/data/triage/storage-jobs-probes.yaml cover the words."""

from __future__ import annotations

from typing import Any

import pytest

from deploy_suite.judges import claims, jobs, nodes, objects, probes, shape, triage, words
from deploy_suite.judges.triage import Verdict
from deploy_suite.vocab import Action, TriageCategory

MISSING = 'storageclass.storage.k8s.io "fast" not found'
RWX = ('failed to provision volume with StorageClass "iscsi": rpc error: code = InvalidArgument desc = invalid '
       'access_mode, MULTI_NODE_MULTI_WRITER')
UNBOUND = "0/4 nodes are available: pod has unbound immediate PersistentVolumeClaims. preemption: 0/4 nodes"


def ev(reason: str, message: str, at: int = 0, kind: str = "PersistentVolumeClaim", name: str = "c") -> dict[str, Any]:
    return {"reason": reason, "message": message, "lastTimestamp": f"2026-01-01T00:00:{at:02d}Z",
            "involvedObject": {"kind": kind, "name": name, "namespace": "ns"}}


def pvc(phase: str = "Pending") -> dict[str, Any]:
    return {"kind": "PersistentVolumeClaim", "metadata": {"name": "c", "namespace": "ns"}, "status": {"phase": phase}}


# ------------------------------------------------------------------ claims
def test_a_claims_provisioning_failure_is_read_by_its_cause_clause_under_either_wrapper() -> None:
    assert claims.judge_event("ProvisioningFailed", MISSING).category == TriageCategory.DEPENDENCY
    wrapped = f'failed to provision volume with StorageClass "fast": {MISSING}'
    assert claims.judge_event("ProvisioningFailed", wrapped).category == TriageCategory.DEPENDENCY
    assert claims.judge_event("ProvisioningFailed", RWX).category == TriageCategory.FAILED_DEPLOY
    retried = 'failed to provision volume with StorageClass "x": rpc error: code = DeadlineExceeded desc = timeout'
    assert claims.judge_event("ProvisioningFailed", retried).category == TriageCategory.UNKNOWN
    assert claims.judge_event("Resizing", "External resizer is resizing volume") is None


def test_a_claims_newest_success_clears_its_old_failure_and_a_final_word_outlasts_retries() -> None:
    healed = [ev("ProvisioningFailed", MISSING, 0), ev("ProvisioningSucceeded", "Successfully provisioned", 1)]
    assert claims.triage_claim("c", pvc(), healed) is None
    verdict = claims.triage_claim("c", pvc(), [ev("ProvisioningFailed", RWX, 0), ev("Provisioning", "External "
                                               "provisioner is provisioning volume for claim \"ns/c\"", 1)])
    assert verdict is not None and verdict.category == TriageCategory.FAILED_DEPLOY and not verdict.can_wait
    assert claims.triage_claim("c", pvc("Bound"), [ev("ProvisioningFailed", MISSING)]) is None
    lost = claims.triage_claim("c", pvc("Lost"), [])
    assert lost is not None and lost.category == TriageCategory.PLATFORM
    assert claims.missing_class([ev("ProvisioningFailed", MISSING)]) == "fast"
    assert claims.missing_class([ev("ProvisioningFailed", RWX)]) is None


def pod_verdict() -> Verdict:
    return Verdict(TriageCategory.DEPENDENCY, "pod p waits on a dependency", [f"pod p: FailedScheduling: {UNBOUND}"])


def test_a_pod_on_a_claim_still_being_provisioned_waits_and_on_a_refused_one_stops() -> None:
    said = pod_verdict()
    assert claims.waits_on_claims(said)
    made = [ev("ExternalProvisioning", "waiting for a volume to be created")]
    waiting = claims.claim_wait(said, {"c": (pvc(), made)})
    assert waiting.category == TriageCategory.PROVISIONING and waiting.can_wait
    assert "PersistentVolumeClaim/c: phase Pending" in waiting.evidence
    quiet = claims.claim_wait(said, {"c": (pvc(), [])})  # no word yet: still a wait (bounded by the caller)
    assert quiet.can_wait
    refused = claims.claim_wait(said, {"c": (pvc(), [ev("ProvisioningFailed", RWX)])})
    assert refused.category == TriageCategory.FAILED_DEPLOY and not refused.can_wait
    assert said.evidence[0] in refused.evidence
    assert claims.claim_wait(said, {"c": (None, [])}) is said  # a claim that does not exist stays a dependency
    assert claims.claim_wait(said, {}) is said


def test_a_multi_attach_waits_only_while_its_holders_are_being_deleted() -> None:
    message = 'Multi-Attach error for volume "pvc-1" Volume is already used by pod(s) old-0, old-1'
    said = words.judge("FailedAttachVolume", message)
    assert said is not None and said.category == TriageCategory.FAILED_DEPLOY
    verdict = triage.from_words("pod new", "FailedAttachVolume", message, said)
    going = [{"metadata": {"name": n, "deletionTimestamp": "2026-01-01T00:00:00Z"}} for n in ("old-0", "old-1")]
    assert claims.attach_wait(verdict, going).category == TriageCategory.CONTENTION
    assert claims.attach_wait(verdict, going[:1]).category == TriageCategory.FAILED_DEPLOY


# ------------------------------------------------------------------ probes, evictions
def test_probe_words_by_their_structure() -> None:
    missing = ('Readiness probe errored: rpc error: code = Unknown desc = failed to exec in container: exec: "curl": '
               'executable file not found in $PATH: unknown')
    said = probes.judge_probe("Unhealthy", missing)
    assert said is not None and said.category == TriageCategory.FAILED_DEPLOY and "readiness probe" in said.why
    assert probes.judge_probe("Unhealthy", "Liveness probe failed: sh: 1: curl: not found").category == \
        TriageCategory.FAILED_DEPLOY
    # The probe ran and answered "not yet": no verdict (its own output naming a missing file is not this).
    assert probes.judge_probe("Unhealthy", "Readiness probe failed: cat: /tmp/ready: No such file or directory") is None
    kill = "Container main failed startup probe, will be restarted"
    assert probes.judge_probe("Killing", kill, count=1) is None
    assert probes.judge_probe("Killing", kill, count=2).category == TriageCategory.CRASH
    assert probes.judge_probe("Killing", "Stopping container main") is None


def test_node_pressure_evictions_are_the_platforms_and_name_the_pods_own_use() -> None:
    said = probes.judge_eviction("The node was low on resource: memory. Threshold quantity: 100Mi, available: 20Mi. "
                                 "Container main was using 30Gi, request is 8Gi, has larger consumption of memory. ")
    assert said is not None and said.category == TriageCategory.PLATFORM
    assert "MemoryPressure" in said.why and "used 30Gi over its request of 8Gi" in said.why
    cond = probes.judge_eviction("The node had condition: [DiskPressure]. ")
    assert cond is not None and "DiskPressure" in cond.why
    assert probes.judge_eviction("Pod ephemeral local storage usage exceeds the total limit of containers 2Gi.") is None


def test_a_pull_onto_a_full_disk_is_the_platforms_not_a_retry() -> None:
    verdict = triage.triage_pull_events("pod p", ['Failed to pull image "x": failed to pull and unpack image "x": '
                                                  'write /var/lib/containerd/x: no space left on device: unknown'])
    assert verdict is not None and verdict.category == TriageCategory.PLATFORM and not verdict.can_wait


# ------------------------------------------------------------------ nodes
def node(**conds: str) -> dict[str, Any]:
    return {"kind": "Node", "metadata": {"name": "n-1"},
            "status": {"conditions": [{"type": t, "status": s, "reason": f"Kubelet{t}"} for t, s in conds.items()]}}


def test_a_node_under_pressure_or_not_ready_is_a_platform_finding() -> None:
    assert nodes.triage_node(node(Ready="True", MemoryPressure="False")) is None
    pressed = nodes.triage_node(node(Ready="True", DiskPressure="True"))
    assert pressed is not None and pressed.category == TriageCategory.PLATFORM and "DiskPressure=True" in \
        pressed.diagnosis
    down = nodes.triage_node(node(Ready="Unknown"))
    assert down is not None and "Ready=Unknown" in down.evidence[0]
    found = objects.triage_all([], [], nodes=[node(Ready="True", PIDPressure="True"), node(Ready="True")])
    assert [(f.object, f.verdict.category) for f in found] == [("Node/n-1", TriageCategory.PLATFORM)]


# ------------------------------------------------------------------ support Jobs
FAILED_JOB = {"kind": "Job", "metadata": {"name": "dl", "namespace": "ns"},
              "status": {"conditions": [{"type": "Failed", "status": "True", "reason": "BackoffLimitExceeded",
                                         "message": "Job has reached the specified backoff limit"}]}}


def job_pod(name: str, at: str, **state: Any) -> dict[str, Any]:
    return {"kind": "Pod", "metadata": {"name": name, "namespace": "ns", "labels": {"job-name": "dl"},
                                        "creationTimestamp": at},
            "status": {"phase": "Failed", "containerStatuses": [{"name": "dl", "state": state}]}}


@pytest.mark.parametrize(("line", "category", "signature"), [
    ("OSError: [Errno 28] No space left on device", TriageCategory.PLATFORM, "disk-full"),
    ("PermissionError: [Errno 13] Permission denied: '/model-store/hub'", TriageCategory.DEPENDENCY,
     "cache-permission"),
    ("huggingface_hub.errors.GatedRepoError: 401 Client Error.", TriageCategory.DEPENDENCY, "gated-model"),
])
def test_a_failed_job_is_named_by_its_newest_pods_words(line: str, category: TriageCategory, signature: str) -> None:
    pods = [job_pod("dl-old", "2026-01-01T00:00:00Z", terminated={"exitCode": 1}),
            job_pod("dl-new", "2026-01-01T00:01:00Z", terminated={"exitCode": 1}),
            {"kind": "Pod", "metadata": {"name": "other", "labels": {"job-name": "other"}}}]
    assert [p["metadata"]["name"] for p in jobs.pods_of("dl", pods)] == ["dl-new", "dl-old"]
    verdict = jobs.triage_job("dl", FAILED_JOB, pods, {"dl-new": {"dl": ["Fetching", line]}})
    assert verdict is not None and verdict.category == category and verdict.decisive
    assert verdict.diagnosis.startswith("Job/dl failed (BackoffLimitExceeded): pod dl-new container dl: " + signature)
    assert verdict.evidence[0] == \
        "Job/dl: Failed=True BackoffLimitExceeded: Job has reached the specified backoff limit"
    assert verdict.fix  # the signature's fix is the next patch


def test_a_failed_job_whose_words_no_rule_reads_stays_unknown_with_its_last_line() -> None:
    verdict = jobs.triage_job("dl", FAILED_JOB, [], {"dl-x1": {"": ["Traceback", "KeyError: 'REVISION'"]}})
    assert verdict is not None and verdict.category == TriageCategory.UNKNOWN
    assert verdict.evidence[-1] == "pod dl-x1 container ? last line: KeyError: 'REVISION'"
    assert jobs.triage_job("dl", {"status": {"conditions": [{"type": "Complete", "status": "True"}]}}) is None
    evicted = job_pod("dl-e", "2026-01-01T00:00:00Z")
    evicted["status"] = {"phase": "Failed", "reason": "Evicted",
                         "message": "The node was low on resource: ephemeral-storage. "}
    by_node = jobs.triage_job("dl", FAILED_JOB, [evicted])
    assert by_node is not None and by_node.category == TriageCategory.PLATFORM


# ------------------------------------------------------------------ the troubleshooting shape
def test_the_troubleshooting_shape_of_each_action() -> None:
    final = Verdict(TriageCategory.PLATFORM, "disk full", ["pod p said: no space"], fix="a larger claim",
                    ruled_out=["dependency: a token"])
    got = shape.troubleshooting("Job", "dl", "ns", final, ["the status of Job/dl"])
    assert got == {"problem_class": TriageCategory.PLATFORM, "evidence_checked": ["the status of Job/dl"],
                   "strongest_signal": "pod p said: no space", "likely_cause": "disk full",
                   "next_step": {"command": "kubectl -n ns logs job/dl --all-containers --tail=40",
                                 "patch": "a larger claim"},
                   "ruled_out": ["dependency: a token", "a failed attempt: the cluster is at fault, not the candidate"],
                   "safe_to_continue": False}
    waiting = Verdict(TriageCategory.PROVISIONING, "being made", [], can_wait=True)
    got = shape.troubleshooting("PersistentVolumeClaim", "c", "", waiting)
    assert got["next_step"]["command"] == "kubectl get persistentvolumeclaim c -w" and got["safe_to_continue"]
    assert got["strongest_signal"] == "being made" and got["ruled_out"] == ["a failed attempt: waiting can help"]
    crash = Verdict(TriageCategory.CRASH, "crash loop", ["x"])
    assert shape.troubleshooting("Pod", "p", "ns", crash)["next_step"]["command"] == \
        "kubectl -n ns logs p --all-containers --previous --tail=40"
    assert Action.FAILED_ATTEMPT in shape.SAFE and Action.UNKNOWN not in shape.SAFE
