"""`deploy-suite triage`: input handling, nodes, exit codes; and the classifier's combination rules
as step 6 meets them (the vectors themselves are in test_triage_vectors.py)."""

from __future__ import annotations

import io
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from deploy_suite import cli
from deploy_suite.access.kube import DGD, KNOWN
from deploy_suite.errors import StepBlocked, WaitTimeout
from deploy_suite.judges import objects as triage_objects
from deploy_suite.judges import triage
from deploy_suite.procedure import waits
from deploy_suite.vocab import Action, TriageCategory
from tests import fakekube
from tests.unit.test_triage import DGD_LABEL, NS, fake, ready_wait, scheduled  # noqa: F401 (fixture)

INSUFFICIENT_GPU = "0/3 nodes are available: 3 Insufficient nvidia.com/gpu. preemption: 0/3 nodes are available: 3 " \
                   "No preemption victims found for incoming pod."


def ev(name: str, reason: str, message: str, kind: str = "Pod", at: int = 0, **extra: Any) -> dict[str, Any]:
    return {"kind": "Event", "metadata": {"name": f"{name}.{at}", "namespace": "ns"}, "reason": reason,
            "message": message, "lastTimestamp": f"2026-01-01T00:00:{at:02d}Z",
            "involvedObject": {"kind": kind, "name": name, "namespace": "ns"}, **extra}


def node(name: str, gpus: int, labels: dict[str, str] | None = None) -> dict[str, Any]:
    return {"kind": "Node", "metadata": {"name": name, "labels": labels or {}}, "spec": {},
            "status": {"allocatable": {"nvidia.com/gpu": str(gpus), "cpu": "64"}}}


def gpu_pod(name: str, gpus: int) -> dict[str, Any]:
    return {"kind": "Pod", "metadata": {"name": name, "namespace": "ns"},
            "spec": {"containers": [{"name": "main", "resources": {"limits": {"nvidia.com/gpu": str(gpus)}}}]},
            "status": {"phase": "Pending", "conditions": [{"type": "PodScheduled", "status": "False",
                                                           "reason": "Unschedulable"}]}}


def run(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    code = cli.main(["triage", *args])
    out, err = capsys.readouterr()
    return code, out, err


def write(tmp_path: Path, name: str, data: Any) -> str:
    path = tmp_path / name
    path.write_text(data if isinstance(data, str) else json.dumps(data))
    return str(path)


# ------------------------------------------------------------------ bad input: one line, exit 2
NOT_A_LIST = "not a Kubernetes List (with items) or a single Event"


@pytest.mark.parametrize(("content", "words"), [
    ("", "is empty"),
    ("{not json", "is not JSON (Expecting property name enclosed in double quotes at line 1 column 2)"),
    (json.dumps({"kind": "Pod", "metadata": {"name": "x"}}), f"is a JSON object of kind 'Pod', {NOT_A_LIST}"),
    (json.dumps("text"), f"is a JSON str, {NOT_A_LIST}"),
    (json.dumps({"kind": "List", "items": [3]}), "item 0 is a JSON int, not an object"),
    (json.dumps({"kind": "List", "items": [{"kind": "Pod", "metadata": {}}]}),
     "item 0 (Pod) is not an Event (no involvedObject/regarding)"),
])
def test_bad_events_input_is_one_line_naming_it_and_the_fix(tmp_path, capsys, content, words):
    path = write(tmp_path, "events.json", content)
    code, out, err = run(capsys, path)
    assert code == 2 and out == ""
    assert err == f"deploy-suite triage: error: events {path}: {words}; fix: pass what `kubectl get events -o json` " \
                  "prints (a file path, or - for stdin)\n"


def test_an_unreadable_file_and_a_doubled_stdin_are_refused(tmp_path, capsys):
    code, _, err = run(capsys, str(tmp_path / "missing.json"))
    assert code == 2 and err.startswith(f"deploy-suite triage: error: events {tmp_path / 'missing.json'}: cannot be "
                                        "read (FileNotFoundError") and err.count("\n") == 1
    code, _, err = run(capsys, "-", "--pods", "-")
    assert code == 2 and "stdin: is named by more than one input; fix: pass at most one input as -" in err
    good = write(tmp_path, "events.json", {"kind": "List", "items": []})
    code, _, err = run(capsys, good, "--nodes", write(tmp_path, "nodes.json", {"kind": "Pod"}))
    assert code == 2 and f"--nodes {tmp_path / 'nodes.json'}: is a JSON object of kind 'Pod'" in err


def test_an_object_of_the_wrong_shape_is_one_line_too(tmp_path, capsys):
    events = write(tmp_path, "e.json", [ev("w", "FailedScheduling", INSUFFICIENT_GPU)])
    code, out, err = run(capsys, events, "--pods", write(tmp_path, "p.json", [{"kind": "Pod", "metadata": ["w"]}]))
    assert (code, out) == (2, "") and err.startswith("deploy-suite triage: error: the inputs: an object has a field "
                                                     "of an unexpected type (") and err.count("\n") == 1


def test_a_single_event_and_the_events_api_shape_are_read(tmp_path, capsys):
    single = ev("w", "FailedScheduling", "0/1 nodes are available: 1 node(s) had untolerated taint(s).")
    code, out, _ = run(capsys, write(tmp_path, "one.json", single), "--json")
    assert code == 1 and [r["object"] for r in json.loads(out)] == ["Pod/w"]
    new_api = {"apiVersion": "events.k8s.io/v1", "kind": "Event", "metadata": {"name": "w.1", "namespace": "ns"},
               "reason": "FailedScheduling", "note": INSUFFICIENT_GPU, "eventTime": "2026-01-01T00:00:00.000000Z",
               "regarding": {"kind": "Pod", "name": "w", "namespace": "ns"}}
    code, out, _ = run(capsys, write(tmp_path, "new.json", {"kind": "EventList", "items": [new_api]}))
    assert code == 0 and out.startswith("Pod/w\twait\tcontention\tpod w is waiting for capacity (nvidia.com/gpu)")


def test_grove_lws_and_kueue_objects_come_in_as_many_files_as_kubectl_printed(tmp_path, capsys, monkeypatch):
    events = write(tmp_path, "e.json", {"kind": "List", "items": []})
    lost = {"name": "main", "state": {"terminated": {"exitCode": 137, "reason": "ContainerStatusUnknown",
                                                       "message": "The container could not be located"}}}
    pods = write(tmp_path, "pods.json", {"kind": "List", "items": [
        {"metadata": {"name": "w-0", "namespace": "ns"}, "spec": {"nodeName": "n"},
         "status": {"phase": "Failed", "containerStatuses": [lost]}}]})
    relayed = "[Operation: Sync, Code: ERR_CREATE_POD] message: failed to create Pod, cause: pods \"x\" is " \
              "forbidden: exceeded quota: q"
    grove = {"kind": "List", "items": [
        {"kind": "PodClique", "metadata": {"name": "llm-0-worker", "namespace": "ns"},
         "status": {"lastErrors": [{"code": "ERR_CREATE_POD", "description": relayed}]}},
        {"kind": "Workload", "metadata": {"name": "llm-wl", "namespace": "ns"},
         "status": {"conditions": [{"type": "QuotaReserved", "status": "False", "reason": "WaitingForQuota",
                                    "message": "couldn't assign flavors to pod set main: insufficient quota"}]}}]}
    code, out, err = run(capsys, events, "--pods", pods, "--objects", write(tmp_path, "grove.json", grove), "--json")
    found = {r["object"]: r["category"] for r in json.loads(out)}
    assert (code, err) == (1, "") and found == {"Pod/w-0": "platform", "PodClique/llm-0-worker": "dependency",
                                                "Workload/llm-wl": "contention"}
    monkeypatch.setattr("sys.stdin", io.StringIO(json.dumps(grove)))
    code, out, _ = run(capsys, events, "--objects", "-", "--json")
    assert code == 1 and {r["object"] for r in json.loads(out)} == {"PodClique/llm-0-worker", "Workload/llm-wl"}
    code, _, err = run(capsys, "-", "--objects", "-")
    assert code == 2 and "stdin: is named by more than one input" in err


def test_nothing_to_triage_is_said_and_exits_zero(tmp_path, capsys):
    normal = [ev("w", "Scheduled", "Successfully assigned ns/w to h200-0"), ev("w", "Pulled", "image pulled", at=1)]
    code, out, _ = run(capsys, write(tmp_path, "e.json", {"kind": "List", "items": normal}))
    assert (code, out) == (0, "no object needs triage: no event or status says why anything is not ready\n")
    code, out, _ = run(capsys, write(tmp_path, "e.json", {"kind": "List", "items": normal}), "--json")
    assert (code, json.loads(out)) == (0, [])


def test_the_console_script_reads_stdin():
    quota = 'Error creating: pods "x" is forbidden: exceeded quota: gpu, requested: nvidia.com/gpu=8'
    events = {"kind": "List", "items": [ev("rs", "FailedCreate", quota, "ReplicaSet")]}
    done = subprocess.run([sys.executable, "-m", "deploy_suite.cli", "triage", "-", "--json"],
                          input=json.dumps(events), capture_output=True, text=True, timeout=60, check=False)
    assert done.returncode == 1, done.stderr
    row = json.loads(done.stdout)[0]
    assert {k: row[k] for k in ("object", "namespace", "action", "category", "can_wait", "next_check_s")} == {
        "object": "ReplicaSet/rs", "namespace": "ns", "action": "fix-dependency", "category": "dependency",
        "can_wait": False, "next_check_s": None}
    # The troubleshooting shape beside the verdict (docs/triage.md).
    assert row["problem_class"] == "dependency" and row["safe_to_continue"] is False
    assert row["next_step"] == {"command": "kubectl -n ns describe replicaset rs", "patch": None}
    assert row["strongest_signal"] == row["evidence"][0] and "exceeded quota" in row["likely_cause"]
    assert row["evidence_checked"] == ["1 event(s) of ReplicaSet/rs"]
    assert row["ruled_out"] == ["a failed attempt: the candidate's manifest is not at fault"]


# ------------------------------------------------------------------ nodes: device plugin, oversize, taints
def test_no_node_advertising_a_gpu_is_a_platform_fault_not_contention(tmp_path, capsys):
    events = write(tmp_path, "e.json", [ev("w", "FailedScheduling", INSUFFICIENT_GPU)])
    pods = write(tmp_path, "p.json", {"kind": "PodList", "items": [gpu_pod("w", 1)]})
    nodes = [node("h200-0", 0, {"nvidia.com/gpu.product": "NVIDIA-H200"}), node("cpu-0", 0)]
    code, out, _ = run(capsys, events, "--pods", pods, "--nodes", write(tmp_path, "n.json", nodes), "--json")
    row = json.loads(out)[0]
    assert (code, row["action"], row["category"]) == (1, "fix-dependency", "platform")
    assert "no node advertises nvidia.com/gpu (allocatable 0 on all 2 nodes; GPU nodes by their labels: h200-0)" \
        in row["diagnosis"]
    # Without the nodes the same words are contention: waiting can help.
    code, out, _ = run(capsys, events, "--pods", pods, "--json")
    assert (code, json.loads(out)[0]["category"]) == (0, "contention")


def test_a_broken_device_plugin_on_the_eligible_nodes_only_is_a_platform_fault():
    pod = {**gpu_pod("w", 4), "spec": {**gpu_pod("w", 4)["spec"], "nodeSelector": {"pool": "h200"}}}
    nodes = [node("h200-0", 0, {"pool": "h200", "nvidia.com/gpu.present": "true"}), node("h100-0", 8, {"pool": "h100"})]
    v = triage.triage_pending(pod, [ev("w", "FailedScheduling", INSUFFICIENT_GPU)], nodes)
    assert v is not None and v.category == TriageCategory.PLATFORM and "h200-0 advertise no allocatable" in v.diagnosis
    nodes[0]["status"]["allocatable"]["nvidia.com/gpu"] = "8"
    v = triage.triage_pending(pod, [ev("w", "FailedScheduling", INSUFFICIENT_GPU)], nodes)
    assert v is not None and v.category == TriageCategory.CONTENTION  # some GPUs there: capacity, not the plugin


def test_a_kai_shortage_of_an_oversized_pod_is_a_failed_attempt_with_nodes():
    kai = "No nodes with enough resources were found: 2 node(s) didn't have enough resources: GPUs."
    v = triage.triage_pending(gpu_pod("w", 16), [ev("w", "Unschedulable", kai)], [node("a", 8), node("b", 8)])
    assert v is not None and v.action == Action.FAILED_ATTEMPT and "asks 16 GPUs" in v.diagnosis
    v = triage.triage_pending(gpu_pod("w", 8), [ev("w", "Unschedulable", kai)], [node("a", 8), node("b", 8)])
    assert v is not None and v.action == Action.WAIT and v.category == TriageCategory.CONTENTION


# ------------------------------------------------------------------ how speakers combine
def test_later_words_clear_earlier_ones_and_a_bound_pod_ignores_old_scheduler_words():
    refused = ev("w", "FailedScheduling", "0/1 nodes are available: 1 node(s) had untolerated taint(s).")
    assert triage_objects.triage_all([refused, ev("w", "Scheduled", "Successfully assigned ns/w", at=1)]) == []
    bound = {**gpu_pod("w", 1), "spec": {**gpu_pod("w", 1)["spec"], "nodeName": "h200-0"},
             "status": {"phase": "Pending"}}
    assert triage_objects.triage_all([refused], [bound]) == []
    quota = ev("rs", "FailedCreate", 'Error creating: pods "x" is forbidden: exceeded quota: q', "ReplicaSet")
    created = ev("rs", "SuccessfulCreate", "Created pod: x", "ReplicaSet", at=1)
    assert triage_objects.triage_all([quota, created]) == []
    assert [f.verdict.category for f in triage_objects.triage_all([created, {**quota, "lastTimestamp":
                                                                            "2026-01-01T00:00:09Z"}])] == ["dependency"]


def test_a_crash_loop_from_events_alone_is_final_only_once_it_repeats():
    back_off = ev("w", "BackOff", "Back-off restarting failed container main in pod w_ns(uid)")
    assert triage_objects.triage_all([back_off]) == []
    [found] = triage_objects.triage_all([{**back_off, "count": 3}])
    assert (found.verdict.action, found.verdict.category) == ("failed-attempt", "crash")


def test_a_dcd_holding_an_invalid_template_and_a_quota_refusal_on_a_deployment():
    dcd = {"kind": "DynamoComponentDeployment", "metadata": {"name": "d-worker-1a2b", "namespace": "ns"},
           "status": {"conditions": [{"type": "Available", "status": "False", "reason": "FailedCreate",
                                      "message": 'pods "d-worker-1a2b-0" is forbidden: Pod "d-worker-1a2b-0" is '
                                                 'invalid: spec.containers[0].resources.requests: Invalid value: '
                                                 '"2": must be equal to nvidia.com/gpu limit of 1'}]}}
    deploy = {"kind": "Deployment", "metadata": {"name": "d-frontend", "namespace": "ns"},
              "status": {"conditions": [{"type": "ReplicaFailure", "status": "True", "reason": "FailedCreate",
                                         "message": 'pods "d-frontend-x" is forbidden: exceeded quota: ns-quota'}]}}
    found = {f.object: f.verdict for f in triage_objects.triage_all([], [dcd, deploy])}
    assert found["DynamoComponentDeployment/d-worker-1a2b"].action == "failed-attempt"
    assert found["Deployment/d-frontend"].action == "fix-dependency"


# ------------------------------------------------------------------ step 6: a platform fault blocks
def test_readiness_is_blocked_not_failed_when_no_node_advertises_a_gpu(fake):  # noqa: F811
    api, kube = fake
    api.put(DGD, fakekube.dgd("d", NS))
    scheduled(api, "d-worker-0", INSUFFICIENT_GPU, DGD_LABEL, gpus=1)
    with pytest.raises(StepBlocked) as caught:
        kube.wait(ready_wait(kube, nodes=[node("h200-0", 0), node("cpu-0", 0)]), timeout=1200)
    assert caught.value.category == "platform" and "GPU device plugin is absent" in caught.value.message
    assert "evidence: pod d-worker-0: FailedScheduling: 0/3 nodes are available" in caught.value.message


def test_step_6_and_the_cli_give_one_verdict_on_the_same_pod(fake):  # noqa: F811
    api, kube = fake
    kai = "No nodes with enough resources were found: 2 node(s) didn't have enough resources: GPUs."
    scheduled(api, "d-worker-0", kai, DGD_LABEL, gpus=16)
    pod = kube.get_or_none("Pod", "d-worker-0", NS)
    assert pod is not None
    nodes = [node("a", 8), node("b", 8)]
    step6 = waits.PendingTriage(kube, NS, nodes).verdict(pod)
    events = [{**e, "kind": "Event"} for e in kube.events_for("d-worker-0", NS)]
    [cli_view] = triage_objects.triage_all(events, [{**pod, "kind": "Pod"}], nodes)
    assert step6 is not None and step6.as_dict() == cli_view.verdict.as_dict()
    assert step6.category == TriageCategory.FAILED_DEPLOY and "asks 16 GPUs" in step6.diagnosis


# ------------------------------------------------------------------ wordings beyond the vectors
@pytest.mark.parametrize(("reason", "message", "category", "decisive"), [
    ("FailedScheduling", "0/3 nodes are available: 3 node(s) had untolerated taint {node.kubernetes.io/not-ready: }.",
     "platform", False),
    ("FailedScheduling", "0/2 nodes are available: 2 node(s) were unschedulable.", "platform", False),
    ("FailedScheduling", "0/2 nodes are available: 2 Too many pods.", "contention", False),
    ("FailedScheduling", "pod group is not ready, 2 Pending, 4 minAvailable", "gang", False),
    ("NotTriggerScaleUp", "pod didn't trigger scale-up: 2 node(s) didn't match Pod's node affinity/selector",
     "failed-deploy", False),
    ("FailedScheduling", 'Failed to schedule pod, all available instance types exceed limits for nodepool: "gpu"',
     "contention", False),
    ("FailedCreate", 'admission webhook "vdynamographdeployment.kb.io" denied the request: component topology is '
                     "immutable", "dependency", False),
    ("FailedCreate", 'Error creating: pods "x" is forbidden: violates PodSecurity "restricted:latest": privileged',
     "dependency", False),
    ("FailedCreate", 'Error creating: pods "x" is forbidden: error looking up service account ns/sa: serviceaccount '
                     '"sa" not found', "dependency", False),
    ("FailedCreate", 'Error creating: pods "x" is forbidden: User "system:serviceaccount:ns:op" cannot create '
                     'resource "pods" in API group "" in the namespace "ns"', "platform", False),
    ("FailedCreate", 'Error creating: pods "x" is forbidden: failed quota: q: must specify limits.cpu', "dependency",
     False),
    ("Pending", "couldn't assign flavors to pod set main: insufficient quota for nvidia.com/gpu in flavor f, request "
                "> maximum capacity (16 > 8)", "dependency", False),
    ("Pending", "couldn't assign flavors to pod set main: Pending the preemption of 1 workload(s)", "contention",
     False),
])
def test_more_wordings_are_judged(reason, message, category, decisive):
    said = triage.words.judge(reason, message)
    assert said is not None and (said.category, said.decisive) == (category, decisive)


@pytest.mark.parametrize(("message", "category"), [
    ("kai-scheduler queue validation failed: queue dynamo not found", "dependency"),
    ('failed to reconcile top-level PVCs: persistentvolumeclaims "model-cache" not found', "dependency"),
    ("no multinode orchestrator available", "platform"),
    # The operator retries a conflict by itself (written as failed until the next reconcile): no verdict.
    ('Operation cannot be fulfilled on dynamographdeployments.nvidia.com "qwen3": the object has been modified; '
     "please apply your changes to the latest version and try again", None),
])
def test_the_operators_reconcile_errors_read_as_step_6_reads_them(message, category):
    said = triage.words.judge("ReconcileError", message)
    assert (said.category if said else None) == category
    status = {"state": "failed", "conditions": [{"type": "Ready", "status": "False", "message": message}]}
    dgd = {"kind": "DynamoGraphDeployment", "metadata": {"name": "d", "namespace": "ns"},
           "spec": {"services": {"Frontend": {}}}, "status": status}
    [*found] = triage_objects.triage_all([], [dgd])
    assert [f.verdict.category for f in found] == ([category] if category else [])


def test_a_nominated_node_turns_a_selector_refusal_into_a_wait_in_step_6(fake):  # noqa: F811
    api, kube = fake
    api.put(DGD, fakekube.dgd("d", NS))
    selector = "0/4 nodes are available: 4 node(s) didn't match Pod's node affinity/selector."
    scheduled(api, "d-worker-0", selector, DGD_LABEL)
    api.put(KNOWN["Event"], {**ev("d-worker-0", "Nominated", "Pod should schedule on: nodeclaim/default-x", at=5),
                             "metadata": {"name": "d-worker-0.nominated", "namespace": NS}})
    wait = ready_wait(kube)
    with pytest.raises(WaitTimeout):
        kube.wait(wait, timeout=30)
    assert [c["category"] for c in wait.contention] == [TriageCategory.PROVISIONING]


# ------------------------------------------------------------------ claims, Jobs with their pods' logs, nodes
def test_the_command_reads_claims_jobs_with_their_pods_logs_and_node_conditions(tmp_path, capsys):
    # Issue 29: handed the claims, the Jobs (with their pods and a pod's saved log) and the nodes,
    # the command judges each; the pod held on its claim waits as long as the claim is being made.
    unbound = "0/2 nodes are available: pod has unbound immediate PersistentVolumeClaims. preemption: 0/2 nodes"
    events = [ev("cache", "ExternalProvisioning", "Waiting for a volume to be created either by the external "
                 "provisioner 'ebs.csi.aws.com' or manually by the system administrator.", "PersistentVolumeClaim"),
              ev("gone", "ProvisioningFailed", 'storageclass.storage.k8s.io "fast" not found', "PersistentVolumeClaim"),
              ev("reader-0", "FailedScheduling", unbound)]
    claim = {"kind": "PersistentVolumeClaim", "metadata": {"name": "cache", "namespace": "ns"},
             "status": {"phase": "Pending"}}
    reader = {"kind": "Pod", "metadata": {"name": "reader-0", "namespace": "ns"},
              "spec": {"volumes": [{"name": "c", "persistentVolumeClaim": {"claimName": "cache"}}]},
              "status": {"phase": "Pending", "conditions": [{"type": "PodScheduled", "status": "False",
                                                              "reason": "Unschedulable", "message": unbound}]}}
    failed_job = {"kind": "Job", "metadata": {"name": "dl", "namespace": "ns"},
                  "status": {"conditions": [{"type": "Failed", "status": "True", "reason": "BackoffLimitExceeded"}]}}
    dl_pod = {"kind": "Pod", "metadata": {"name": "dl-x1", "namespace": "ns", "labels": {"job-name": "dl"}},
              "status": {"phase": "Failed", "containerStatuses": [
                  {"name": "dl", "state": {"terminated": {"exitCode": 1, "reason": "Error"}}}]}}
    disk = {"type": "DiskPressure", "status": "True", "reason": "KubeletHasDiskPressure",
            "message": "kubelet has disk pressure"}
    pressed = {"kind": "Node", "metadata": {"name": "n-1"},
               "status": {"conditions": [{"type": "Ready", "status": "True"}, disk]}}
    (tmp_path / "dl-x1_dl.log").write_text("Fetching 14 files\nOSError: [Errno 28] No space left on device\n")
    code, out, _ = run(capsys, write(tmp_path, "e.json", events), "--objects",
                       write(tmp_path, "o.json", [claim, reader, failed_job, dl_pod]), "--nodes",
                       write(tmp_path, "n.json", [pressed]), "--logs", str(tmp_path / "dl-x1_dl.log"), "--json")
    rows = {r["object"]: r for r in json.loads(out)}
    assert code == 1
    assert {k: (r["action"], r["category"]) for k, r in rows.items()} == {
        "PersistentVolumeClaim/cache": ("wait", "provisioning"),
        "Pod/reader-0": ("wait", "provisioning"),
        "Job/dl": ("fix-dependency", "platform"),
        "Pod/dl-x1": ("fix-dependency", "platform"),
        "PersistentVolumeClaim/gone": ("fix-dependency", "dependency"),
        "Node/n-1": ("fix-dependency", "platform")}
    job = rows["Job/dl"]
    assert "disk-full" in job["likely_cause"] and job["next_step"]["command"] == \
        "kubectl -n ns logs job/dl --all-containers --tail=40"
    assert job["next_step"]["patch"] and "the saved logs of its pod dl-x1" in job["evidence_checked"]
    assert rows["PersistentVolumeClaim/gone"]["next_step"]["command"] == "kubectl get storageclass"
    assert rows["Pod/reader-0"]["safe_to_continue"] and "PersistentVolumeClaim/cache: phase Pending" in \
        rows["Pod/reader-0"]["evidence"]
