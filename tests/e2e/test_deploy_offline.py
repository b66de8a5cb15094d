"""The real suite on the offline cluster, as a user runs it; each branch of the procedure a test.

Every test plays the cluster admin (a fresh namespace and ``hf-token-secret``), writes an
experiment whose workload names the offline cluster's context ``offline-<name>`` and that
namespace (hashes recomputed), then runs ``python -m pytest --iter=N --handoff=... --kubeconfig=...``
from the checkout root in a subprocess. Faults come from the cluster's own switches: kwok Stages
(:mod:`deploy_suite_offline.faults`) and the operator simulator's serving-fault ConfigMap. Every
ledger a test produces is validated against the schema (``SuiteRun.ledger`` and the teardown of
the ``target`` fixture).

Two branches cannot be reached through a whole run and are driven one level down, on the same
cluster, through the library function the step calls:

* GPU contention that clears: step 2 sees held GPUs and blocks (asserted through the suite); the
  wait that records contention and then succeeds is ``readiness.wait_ready`` (step 6's function)
  on a DGD applied directly;
* a missing direct-routing header: once the harness finds the instance id (it always does on
  this cluster), only ``smoke.run_smoke`` with an endpoint lacking the id reaches that branch.
"""

from __future__ import annotations

import contextlib
import json
import re
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from deploy_suite import yamlio
from deploy_suite.access.kube import DGD, Obj
from deploy_suite.access.watch import Watch
from deploy_suite.errors import WaitTimeout
from deploy_suite.fixtures.experiments.make_experiment import Experiment, stage_candidate
from deploy_suite.model.dgd import load_dgd
from deploy_suite.procedure import readiness, smoke
from deploy_suite.procedure.settings import Timeouts
from deploy_suite.record import ledger
from deploy_suite_offline import faults
from deploy_suite_offline.cluster import OfflineCluster
from deploy_suite_offline.operator_sim.serving import FAULTS_CONFIGMAP
from tests import support
from tests.support import SuiteRun, outcomes, step
from tests.support.pages import assert_experiment, keep, open_experiment

pytestmark = [pytest.mark.cluster]

KUBECTL = str(Path(sys.executable).with_name("kubectl"))
DGD_LABEL = "nvidia.com/dynamo-graph-deployment-name"
SAMPLE_DGD = "demo-agg"
RESERVED_TAINT = "example.com/reserved-for"
# Short smoke gates where a failure is expected: gate 2 gives up after 3 x 1 s.
FAST_SMOKE = {"smoke_reach_attempts": 10, "smoke_reach_interval_s": 1.0, "smoke_models_attempts": 3,
              "smoke_models_interval_s": 1.0, "smoke_request_timeout_s": 30.0}
READINESS_S = 120.0
DATA = Path(__file__).with_name("data")


# ------------------------------------------------------------------ fixtures


class Target(support.Target):
    """One test's namespace on an offline cluster (see tests/support/targets.py); DGD files by name in data/."""

    def experiment(self, dgd: str | Path | None = None, **kwargs: Any) -> Experiment:
        return super().experiment(DATA / dgd if dgd else None, **kwargs)

    def dgd(self, name: str) -> Obj | None:
        return self.kube.get_or_none(DGD, name, self.namespace)

    def pods(self, dgd_name: str) -> list[Obj]:
        return self.kube.list_items("Pod", self.namespace, label_selector=f"{DGD_LABEL}={dgd_name}")[0]

    def wait_dgd_gone(self, name: str, timeout: float = 30.0) -> None:
        def gone(objs: dict[str, Obj]) -> tuple[bool, str]:
            return f"{self.namespace}/{name}" not in objs, f"dgd/{name} present: {sorted(objs)}"

        self.kube.wait_for(Watch(DGD, self.namespace, name=name), gone, awaited=f"dgd/{name} deleted", timeout=timeout)


def _target(cluster: OfflineCluster, tmp_path: Path) -> Iterator[Target]:
    with support.admin_target(cluster, tmp_path, "e2e", Target) as target:
        yield target
        for path in tmp_path.rglob(ledger.LEDGER_NAME):  # every ledger the test produced
            support.read_ledger(path)


@pytest.fixture
def target(offline_cluster: OfflineCluster, tmp_path: Path) -> Iterator[Target]:
    yield from _target(offline_cluster, tmp_path)


@pytest.fixture
def multinode_target(offline_clusters: Any, tmp_path: Path) -> Iterator[Target]:
    """Four 8-GPU nodes and no multinode orchestrator: the operator fails a multinode DGD there."""
    yield from _target(offline_clusters.get("multinode"), tmp_path)


@pytest.fixture
def grove_target(offline_clusters: Any, tmp_path: Path) -> Iterator[Target]:
    """The same nodes with Grove and KAI installed (the operator replica's Grove path)."""
    yield from _target(offline_clusters.get("multinode", orchestrators=("grove",)), tmp_path)


@pytest.fixture
def lws_target(offline_clusters: Any, tmp_path: Path) -> Iterator[Target]:
    """Four 8-GPU nodes with the LeaderWorkerSet and Volcano APIs: the operator's LWS path."""
    yield from _target(offline_clusters.get("multinode", orchestrators=("lws",)), tmp_path)


@pytest.fixture
def serving_fault(target: Target) -> Iterator[Callable[[str, str], None]]:
    """Set the operator simulator's serving fault for a DGD of the test's namespace (before it is applied)."""
    applied: list[bool] = []

    def set_fault(dgd_name: str, fault: str) -> None:
        target.kube.apply({"apiVersion": "v1", "kind": "ConfigMap",
                           "metadata": {"name": FAULTS_CONFIGMAP[1], "namespace": FAULTS_CONFIGMAP[0]},
                           "data": {f"{target.namespace}.{dgd_name}": fault}})
        applied.append(True)

    yield set_fault
    if applied:
        target.kube.delete("ConfigMap", FAULTS_CONFIGMAP[1], FAULTS_CONFIGMAP[0])


@pytest.fixture
def kwok_fault(target: Target) -> Iterator[Callable[[faults.Fault], None]]:
    """Apply kwok fault Stages for the test; the target removes them afterwards (they are cluster-scoped)."""
    yield target.apply_fault


# ------------------------------------------------------------------ assertions


def assert_pinned(led: dict[str, Any], target: Target) -> None:
    """Every request was pinned to the workload's context, never the kubeconfig's current-context."""
    assert led["kube_context"] == target.context and led["namespace"] == target.namespace
    assert led["commands"], "no command recorded"
    assert all(f"--context {target.context}" in c["command"] for c in led["commands"])


def assert_ready(run: SuiteRun, target: Target, *, dgd_name: str, served: str, gpus: int,
                 endpoint_kind: str = "service") -> dict[str, Any]:
    assert run.returncode == 0, run.output[-4000:]
    led = run.ledger()
    assert led["status"] == "ready", led["blockers"]
    got = outcomes(led)
    assert all(got[s] == "passed" for s in ("step1_inputs", "step2_validate", "step5_apply", "step6_readiness",
                                            "step7_smoke")), got
    assert got["step3_retire_previous"] == ("passed" if run.iteration else "skipped")
    assert_pinned(led, target)
    assert led["dgd_name"] == dgd_name and led["served_model"] == served
    assert led["gpus_requested"] == gpus and led["allocated_at"] and led["torn_down_at"] is None
    assert led["failed_attempts"] == [] and led["blockers"] == []
    assert led["readiness"]["state"] == "ready"
    assert led["endpoint"]["kind"] == endpoint_kind and led["endpoint"]["port"] == 8000
    assert led["smoke"]["success"] == 1 and led["smoke"]["gate"] == ""
    artifact = run.smoke_artifact()
    assert artifact["success"] == 1 and artifact["models_http_code"] == 200 and artifact["api_http_code"] == 200
    assert artifact["api_request"]["model"] == served and artifact["api_request"]["max_tokens"] == 100
    response = artifact["api_response"]
    assert response["object"] == "chat.completion" and response["choices"] and not response.get("error")
    live = target.dgd(dgd_name)
    assert live is not None and live["status"]["state"] == "successful"
    assert run.report("html").is_file() and run.report("xml").is_file()
    return led


def assert_failed_at(run: SuiteRun, failed_step: str, status: str = "failed") -> dict[str, Any]:
    assert run.returncode != 0, run.output[-4000:]
    led = run.ledger()
    assert led["status"] == status, (led["status"], outcomes(led))
    got = outcomes(led)
    assert got[failed_step] == ("blocked" if status == "blocked" else "failed"), got
    names = list(got)
    assert all(got[n] == "skipped" for n in names[names.index(failed_step) + 1:]), got
    assert led["current_step"] == failed_step
    return led


# ------------------------------------------------------------------ happy paths


def test_sample_v1alpha1_aggregated_becomes_ready_and_answers(target: Target) -> None:
    exp = target.experiment()  # the sample as handed over: model-cache PVC + model-download Job
    run = target.run(exp)
    led = assert_ready(run, target, dgd_name=SAMPLE_DGD, served="Qwen/Qwen3-0.6B", gpus=1)
    assert led["endpoint"]["target"] == f"svc/{SAMPLE_DGD}-frontend"
    assert led["frontend_service"] == f"{SAMPLE_DGD}-frontend"
    support = step(led, "step4_support_manifests")["evidence"]
    assert [j["job"] for j in support["jobs"]] == ["model-download"]
    assert support["jobs"][0]["outcome"] == "Complete" and support["pvcs"] == {"model-cache": "Bound"}
    # The recipe's placeholder storage class was patched in the run-scoped copy only, with its reason.
    assert any("your-storage-class-name" in p["change"] and "'standard'" in p["change"] for p in led["patches"])
    assert "your-storage-class-name" in (exp.exp_root / "inputs" / "model-cache.yaml").read_text()
    assert not (run.deploy_root / "logs").exists()  # logs/ only when a failure log is kept


def test_the_handoffs_support_order_is_followed_and_recorded(target: Target) -> None:
    # The user's instructions: validate the cache, then download into it (the procedure's order
    # would download first). The validate file ends with `---`, as concatenated manifests do.
    exp = target.experiment(support={"model-cache": support.SAMPLE_SUPPORT / "model-cache.yaml",
                                     "model-download": support.SAMPLE_SUPPORT / "model-download.yaml",
                                     "model-validate": DATA / "model-validate.yaml"})
    order = ["model-cache", "model-validate", "model-download"]
    handoff = yamlio.load_one(exp.handoff0)
    exp.handoff0.write_text(yamlio.dump({**handoff, "support_order": order}), encoding="utf-8")
    run = target.run(exp)
    led = assert_ready(run, target, dgd_name=SAMPLE_DGD, served="Qwen/Qwen3-0.6B", gpus=1)
    evidence = step(led, "step4_support_manifests")["evidence"]
    assert evidence["order"] == {"types": order, "by": "handoff support_order"}
    assert [j["job"] for j in evidence["jobs"]] == ["model-validate", "model-download"]
    assert led["settings"]["support_order"] == order
    applies = [c["command"] for c in led["commands"] if c["kind"] == "mutate" and " apply " in c["command"]]
    assert [next(t for t in order if f"applied_manifests/{t}.yaml" in c) for c in applies[:3]] == order
    # The apiserver's own times: the download Job was created once the validate Job had completed.
    jobs = {j: target.kube.get("Job", j, target.namespace) for j in ("model-validate", "model-download")}
    assert jobs["model-validate"]["status"]["completionTime"] <= jobs["model-download"]["metadata"]["creationTimestamp"]


def test_v1beta1_aggregated_becomes_ready_and_answers(target: Target) -> None:
    run = target.run(target.experiment("dgd-beta-agg.yaml", support={}))
    led = assert_ready(run, target, dgd_name="e2e-beta-agg", served="qwen3-beta", gpus=1)
    assert step(led, "step4_support_manifests")["outcome"] == "skipped"
    assert {e["component"] for e in led["config_engagement"]} == {"Frontend", "VllmDecodeWorker"}


def test_disaggregated_prefill_and_decode_become_ready_and_answer(target: Target) -> None:
    run = target.run(target.experiment("dgd-disagg.yaml", support={}))
    led = assert_ready(run, target, dgd_name="e2e-disagg", served="qwen3-disagg", gpus=2)
    components = led["readiness"]["components"]
    for worker in ("VllmPrefillWorker", "VllmDecodeWorker"):
        assert components[worker]["expected"] == 1 and components[worker]["ready"] == 1, components
        assert all(n.startswith("h200-") for n in components[worker]["nodes"])
    gpus = {e["component"]: e["gpus"] for e in led["config_engagement"]}
    assert gpus == {"Frontend": 0, "VllmPrefillWorker": 1, "VllmDecodeWorker": 1}


def test_multinode_without_an_orchestrator_is_blocked_by_step2_as_a_platform_fault(
        multinode_target: Target) -> None:
    target = multinode_target
    run = target.run(target.experiment("dgd-multinode.yaml", support={}, gpu_ceiling=16))
    led = assert_failed_at(run, "step2_validate", status="blocked")
    (blocker,) = led["blockers"]
    assert blocker["class"] == "platform" and "no multinode orchestrator available" in blocker["message"]
    assert led["preflight"]["platform"]["needs"]["multinode"] == {"TrtllmWorker": 2}
    # A platform fault is not the candidate's: nothing applied, no failed attempt for the budget.
    assert target.dgd("e2e-multinode") is None and led["failed_attempts"] == []


def test_multinode_worker_spans_two_nodes_and_answers(grove_target: Target) -> None:
    target = grove_target
    run = target.run(target.experiment("dgd-multinode.yaml", support={}, gpu_ceiling=16))
    assert run.ledger()["preflight"]["platform"]["needs"]["orchestrator"] == "grove"
    led = assert_ready(run, target, dgd_name="e2e-multinode", served="qwen3-multinode", gpus=16)
    worker = led["readiness"]["components"]["TrtllmWorker"]
    assert worker["expected"] == 2 and worker["ready"] == 2, worker
    assert len(worker["nodes"]) == 2, "1 replica x nodeCount 2 x 8 GPUs needs two whole nodes"
    assert led["capacity"]["capacity"] == "sufficient" == led["preflight"]["capacity"]
    assert_leader_and_worker(run, worker)


def assert_leader_and_worker(run: SuiteRun, worker: dict[str, Any]) -> None:
    """One leader and one worker pod, on different nodes, in the ledger and on the iteration page."""
    layout = worker["layout"]
    assert [e["role"] for e in layout] == ["leader", "worker"], layout
    assert {e["node"] for e in layout} == set(worker["nodes"]) and {e["pod"] for e in layout} == set(worker["pods"])
    page = (run.deploy_root / f"{run.deploy_root.name}.html").read_text(encoding="utf-8")
    assert "<th>leader/workers</th>" in page
    assert all(f"{e['role']}: {e['pod']} on {e['node']}" in page for e in layout), layout


def test_multinode_worker_on_lws_has_a_leader_and_a_worker(lws_target: Target) -> None:
    target = lws_target
    run = target.run(target.experiment("dgd-multinode.yaml", support={}, gpu_ceiling=16))
    assert run.ledger()["preflight"]["platform"]["needs"]["orchestrator"] == "lws"
    led = assert_ready(run, target, dgd_name="e2e-multinode", served="qwen3-multinode", gpus=16)
    assert_leader_and_worker(run, led["readiness"]["components"]["TrtllmWorker"])


def test_gaie_direct_routing_is_reached_on_a_worker_pod_with_the_instance_id(target: Target) -> None:
    run = target.run(target.experiment("dgd-gaie-direct.yaml", support={}))
    led = assert_ready(run, target, dgd_name="e2e-gaie", served="qwen3-gaie", gpus=1, endpoint_kind="worker-pod")
    # No frontend Service: the frontend is a sidecar in the worker pod.
    assert led["frontend_service"] is None
    # (The `latest` operator profile gives every other component a Service of its own, as the operator does.)
    services = [s["metadata"]["name"] for s in target.kube.list_items("Service", target.namespace)[0]]
    assert not [name for name in services if name.endswith("-frontend")], services
    pod = led["endpoint"]["target"].removeprefix("pod/")
    assert pod.startswith("e2e-gaie-vllmworker-")
    instance = led["endpoint"]["worker_instance_id"]
    assert isinstance(instance, int) and instance > 0
    # The sidecar logs the id in hex; the ledger keeps the decimal the header takes.
    sidecar_log = target.kube.pod_log(pod, target.namespace, "frontend-sidecar", tail=200)
    hex_ids = [int(h, 16) for h in re.findall(r"instance_id=(0x[0-9a-f]+)", sidecar_log)]
    assert instance in hex_ids, sidecar_log


def test_a_v1alpha1_frontend_sidecar_spec_is_reached_with_the_direct_routing_header(target: Target) -> None:
    # `frontendSidecar: {image, args, envFromSecret}`: the operator builds the container; its
    # `--router-mode direct` is read from the spec, so step 7 sends the worker instance id.
    run = target.run(target.experiment("dgd-gaie-alpha-sidecar.yaml", support={}))
    led = assert_ready(run, target, dgd_name="e2e-gaie-alpha", served="qwen3-gaie-alpha", gpus=1,
                       endpoint_kind="worker-pod")
    assert led["frontend_service"] is None and led["readiness"]["components"]["VllmWorker"]["ready"] == 1
    pod_name = led["endpoint"]["target"].removeprefix("pod/")
    assert pod_name.startswith("e2e-gaie-alpha-vllmworker-") and led["endpoint"]["worker_instance_id"] > 0
    pod = target.kube.get_or_none("Pod", pod_name, target.namespace)
    assert pod is not None
    sidecar = next(c for c in pod["spec"]["containers"] if c["name"] == "sidecar-frontend")
    assert sidecar["command"] == ["python3"] and sidecar["args"][-2:] == ["--router-mode", "direct"]


# ------------------------------------------------------------------ iteration 1 retires iteration 0


def test_iteration_1_retires_iteration_0_with_the_same_dgd_name(target: Target) -> None:
    exp = target.experiment()
    first = target.run(exp)
    assert_ready(first, target, dgd_name=SAMPLE_DGD, served="Qwen/Qwen3-0.6B", gpus=1)
    root0 = first.deploy_root
    ledger0 = first.ledger()
    files0 = {p.relative_to(root0): p.read_bytes() for p in root0.rglob("*")
              if p.is_file() and p.name != ledger.LEDGER_NAME}
    assert any(p.parts[0] == "applied_manifests" for p in files0)
    live0 = target.dgd(SAMPLE_DGD)
    assert live0 is not None
    pods0 = {p["metadata"]["name"] for p in target.pods(SAMPLE_DGD)}

    handoff = stage_candidate(exp.exp_root, 1)  # same DGD name, one unpinned knob changed
    second = target.run(exp, iteration=1, handoff=handoff)
    led1 = assert_ready(second, target, dgd_name=SAMPLE_DGD, served="Qwen/Qwen3-0.6B", gpus=1)

    # The retired iteration: torn_down_at written, nothing else of its ledger changed.
    led0 = support.read_ledger(root0 / ledger.LEDGER_NAME)
    assert led0["torn_down_at"] and ledger0["torn_down_at"] is None
    assert {k: v for k, v in led0.items() if k != "torn_down_at"} == \
        {k: v for k, v in ledger0.items() if k != "torn_down_at"}
    # Its directory is untouched (next-candidate/ is the generator's hand-over, written before the run).
    files0_after = {p.relative_to(root0): p.read_bytes() for p in root0.rglob("*")
                    if p.is_file() and p.name != ledger.LEDGER_NAME
                    and p.relative_to(root0).parts[0] != "next-candidate"}
    assert files0_after == files0

    retired = led1["retired_previous"]
    assert retired["dgd"] == SAMPLE_DGD and retired["namespace"] == target.namespace
    assert retired["kube_context"] == target.context and retired["existed"] is True
    # torn_down_at is when the GPUs were freed (its pods gone), written once.
    assert retired["pods_gone_at"] == led0["torn_down_at"] == retired["torn_down_at"] and retired["deleted_at"]
    assert retired["action"] == "deleted"
    assert retired["ledger"] == f"artifacts/{root0.name}/{ledger.LEDGER_NAME}"

    # The experiment page the run rebuilt, in a real browser: both iterations, what iteration 1
    # changed (the candidate's --max-num-seqs) and the retire of iteration 0 on the timeline.
    page = open_experiment(exp.exp_root / "artifacts" / "experiment.html", [0, 1], [1])
    keep(page, "experiment-offline")
    assert_experiment(page, [0, 1], [1])
    assert "--max-num-seqs" in page.dom and "retired by deploy-iter-001" in page.dom
    assert led1["previous_deployment"]["dgd_name"] == SAMPLE_DGD
    deletes = [c["command"] for c in led1["commands"] if c["kind"] == "mutate" and " delete " in c["command"]]
    assert len(deletes) == 1, deletes  # only the previous DGD, by exact name and namespace
    assert f" delete dynamographdeployments.nvidia.com {SAMPLE_DGD} -n {target.namespace} " in deletes[0]

    live1 = target.dgd(SAMPLE_DGD)
    assert live1 is not None and live1["metadata"]["uid"] != live0["metadata"]["uid"]
    assert pods0.isdisjoint(p["metadata"]["name"] for p in target.pods(SAMPLE_DGD))
    assert any("--max-num-seqs 64" in " ".join(e["args"] or []) for e in led1["config_engagement"])
    # Shared things are kept: PVC, download Job, secret, namespace.
    pvc = target.kube.get("PersistentVolumeClaim", "model-cache", target.namespace)
    assert pvc["status"]["phase"] == "Bound" and "deletionTimestamp" not in pvc["metadata"]
    assert target.kube.get_or_none("Job", "model-download", target.namespace) is not None
    assert target.kube.secret_exists(support.SECRET, target.namespace)
    assert target.kube.get("Namespace", target.namespace)["status"]["phase"] == "Active"


# ------------------------------------------------------------------ placement: taint mismatch


def test_taint_mismatch_is_blocked_by_step2_capacity_naming_the_taint(target: Target) -> None:
    run = target.run(target.experiment("dgd-taint-h100.yaml", support={}))
    led = assert_failed_at(run, "step2_validate", status="blocked")
    assert led["capacity"]["capacity"] == "insufficient"
    (blocker,) = led["blockers"]
    assert blocker["class"] == "gpu-capacity" and blocker["step"] == "step2_validate"
    assert f"taint {RESERVED_TAINT}=tenant-b:NoSchedule not tolerated" in blocker["message"]
    assert "h100-reserved-0" in blocker["message"]
    # Read-only: nothing was created, the DGD was never applied.
    assert not [c for c in led["commands"] if c["kind"] == "mutate"]
    assert target.dgd("e2e-taint") is None and led["failed_attempts"] == []


def test_taint_mismatch_past_an_unknown_capacity_fails_step6_at_once(target: Target) -> None:
    exp = target.experiment("dgd-taint-h100-unmodelled.yaml", support={})
    run = target.run(exp, f"--timeout-readiness={READINESS_S:.0f}")
    led = assert_failed_at(run, "step6_readiness")
    # Step 2 could not decide (unmodelled namespaceSelector), so it let the run through.
    assert led["capacity"]["capacity"] == "unknown"
    assert any("namespaceSelector" in r for r in led["capacity"]["reasons"])
    # The scheduler's verdict stops the wait at once: never a wait to the readiness timeout.
    assert step(led, "step6_readiness")["duration_s"] < READINESS_S / 6
    assert run.seconds < READINESS_S / 2
    (attempt,) = led["failed_attempts"]
    assert attempt["step"] == "step6_readiness" and attempt["category"] == "failed-deploy"
    assert any("FailedScheduling" in e and "untolerated taint" in e for e in attempt["evidence"]), attempt
    assert RESERVED_TAINT in attempt["diagnosis"] and "h100-reserved-0" in attempt["diagnosis"]
    assert led["readiness"]["state"] == "failed-deploy" and RESERVED_TAINT in led["readiness"]["diagnosis"]
    # A failed attempt frees its (requested) GPUs: the DGD is deleted.
    assert led["torn_down_at"]
    target.wait_dgd_gone("e2e-taint")


# ------------------------------------------------------------------ insufficient GPUs: contention


CONTENTION_NO_PROGRESS_S = 20.0  # shorter than the contention, longer than the replica's serving start


def test_gpu_contention_is_seen_by_step2_and_waited_out_by_step6(target: Target) -> None:
    holders = target.hold_gpus(["h200-0", "h200-1"], 1)  # 7 free GPUs left per H200 node
    # Step 2 counts the held GPUs: the 8-GPU worker fits nowhere right now.
    exp = target.experiment("dgd-contention.yaml", support={})
    run = target.run(exp)
    led = assert_failed_at(run, "step2_validate", status="blocked")
    assert led["capacity"]["capacity"] == "insufficient"
    assert "gpu-holder-h200-0" in json.dumps(led["capacity"])
    assert target.dgd("e2e-contention") is None

    # Step 6 (readiness.wait_ready) on the DGD applied anyway: Pending on Insufficient nvidia.com/gpu
    # is contention, recorded and waited out, longer than the no-progress bound (a hold decision is
    # a sign of a legitimate wait); another thread frees the GPUs once it has lasted that long.
    dgd = load_dgd(DATA / "dgd-contention.yaml")
    target.kube.apply_file(DATA / "dgd-contention.yaml", target.namespace)
    progress: list[str] = []
    held: list[float] = []
    freed: list[float] = []

    def free_gpus() -> None:
        time.sleep(CONTENTION_NO_PROGRESS_S + 5)
        for name in holders:
            target.kube.delete("Pod", name, target.namespace)
        freed.append(time.monotonic())

    def on_progress(line: str) -> None:
        progress.append(line)
        if "contention:" in line and not held:
            held.append(time.monotonic())
            threading.Thread(target=free_gpus, name="free-gpus", daemon=True).start()

    ready = readiness.wait_ready(target.kube, target.namespace, dgd,
                                 Timeouts(readiness_s=90.0, readiness_no_progress_s=CONTENTION_NO_PROGRESS_S),
                                 frontend_expected=True, reporting=readiness.Reporting(on_progress=on_progress))
    assert ready.state == "ready" and freed, progress
    assert freed[0] - held[0] > CONTENTION_NO_PROGRESS_S  # held longer than the bound, and no "no progress"
    assert ready.contention, "the contention was not recorded"
    first = ready.contention[0]
    assert first["category"] == "contention" and first["can_wait"] is True
    assert any("Insufficient nvidia.com/gpu" in e for e in first["evidence"]), first
    assert "e2e-contention-vllmdecodeworker-" in first["diagnosis"]
    assert ready.components["VllmDecodeWorker"]["ready"] == 1
    assert time.monotonic() - freed[0] < 45  # ready soon after the GPUs are free


# ------------------------------------------------------------------ dependencies and support jobs


def test_unbound_pvc_stops_step6_with_a_dependency_diagnosis(target: Target) -> None:
    # A claim whose provisioner never acts says nothing final (the PV controller's ExternalProvisioning
    # only): its pod waits for it within timeouts.pvc_bound_s (issue 29), then blocks as a dependency.
    storage_class = f"e2e-none-{target.namespace}"
    target.kube.create({"apiVersion": "storage.k8s.io/v1", "kind": "StorageClass",
                        "metadata": {"name": storage_class}, "provisioner": "example.com/none",
                        "volumeBindingMode": "Immediate"})
    try:
        target.kube.create({"apiVersion": "v1", "kind": "PersistentVolumeClaim",
                            "metadata": {"name": "model-cache-unbound"},
                            "spec": {"accessModes": ["ReadWriteMany"], "storageClassName": storage_class,
                                     "resources": {"requests": {"storage": "100Gi"}}}}, target.namespace)
        run = target.run(target.experiment("dgd-unbound-pvc.yaml", support={}, timeouts={"pvc_bound_s": 10}),
                         f"--timeout-readiness={READINESS_S:.0f}")
        # A dependency is not the candidate's failure: blocked, class dependency (docs/procedure.md, "Outcomes").
        led = assert_failed_at(run, "step6_readiness", status="blocked")
        assert [b["class"] for b in led["blockers"]] == ["dependency"]
        assert led["preflight"]["pvcs"] == {"model-cache-unbound": "exists (Pending)"}
        readiness = led["readiness"]
        assert readiness["state"] == "dependency", readiness
        assert "dependency" in readiness["diagnosis"] and "PersistentVolumeClaim" in readiness["diagnosis"]
        assert any("unbound immediate PersistentVolumeClaims" in e for e in readiness["evidence"]), readiness
        assert "not bound within 10s" in readiness["diagnosis"], readiness
        assert 10 <= step(led, "step6_readiness")["duration_s"] < READINESS_S / 4
        assert readiness["troubleshooting"]["object"].startswith("Pod/"), readiness
        # A dependency is not the candidate's fault: no failed attempt against the budget.
        assert led["failed_attempts"] == []
    finally:
        target.kube.delete("StorageClass", storage_class)


# A failed download Job's cause named from its pod's log (issue 29): the hub's gated repository is a
# dependency (the token), a full disk the platform's, words no rule reads the Job's own (class job).
JOB_CAUSES = {
    "gated": ("huggingface_hub.errors.GatedRepoError: 401 Client Error for https://huggingface.co/Qwen/Qwen3-0.6B",
              "dependency", "gated-model"),
    "disk-full": ("OSError: [Errno 28] No space left on device: '/model-store/hub/models--Qwen--Qwen3-0.6B'",
                  "platform", "disk-full"),
    "unread": ("KeyError: 'MODEL_REVISION'", "job", ""),
}


@pytest.mark.parametrize("cause", list(JOB_CAUSES))
def test_failed_download_job_fails_step4_fast_names_its_cause_and_keeps_its_last_log_lines(
        target: Target, kwok_fault: Callable[[faults.Fault], None], cause: str) -> None:
    said, blocker, signature = JOB_CAUSES[cause]
    crash_text = f"Fetching 10 files\n{said}\nE2E-MARKER: download aborted\n"
    log_file = faults.write_cri_log(target.tmp / "download.log", crash_text)
    name = f"e2e-job-{target.namespace}"
    kwok_fault(faults.job_pod_failure(name, faults.by_job("model-download", namespace=target.namespace)))
    # `kubectl logs` of any pod of the namespace serves the download's output (kwok ClusterLogs).
    target.kube.apply({"apiVersion": faults.KWOK_API, "kind": "ClusterLogs", "metadata": {"name": name},
                       "spec": {"selector": {"matchNamespaces": [target.namespace]},
                                "logs": [{"containers": ["model-download"], "logsFile": str(log_file)}]}})
    try:
        exp = target.experiment(support={
            "model-cache": support.SAMPLE_SUPPORT / "model-cache.yaml",
            "model-download": DATA / "model-download-fails.yaml"})
        run = target.run(exp)
    finally:
        target.kube.delete(target.kube.resource(faults.KWOK_API, "ClusterLogs"), name)
    # A support Job is not the candidate (never applied): blocked with the class its pod's words name
    # (a dependency, the platform; else the Job's own), never a failed attempt.
    led = assert_failed_at(run, "step4_support_manifests", status="blocked")
    assert [b["class"] for b in led["blockers"]] == [blocker] and led["failed_attempts"] == []
    # Stops at the Failed condition, not at the 6000 s download bound.
    assert step(led, "step4_support_manifests")["duration_s"] < 60
    log = run.deploy_root / "logs" / "job-model-download.log"
    assert log.is_file()
    assert "E2E-MARKER: download aborted" in log.read_text() and said in log.read_text()
    (diag,) = [d for d in led["diagnostics"] if isinstance(d, dict) and d.get("job")]
    assert diag["job"] == "model-download" and diag["step"] == "step4_support_manifests"
    assert diag["log_file"] == "artifacts/deploy-iter-000/logs/job-model-download.log"
    assert "E2E-MARKER: download aborted" in diag["log_excerpt"] and "E2E-MARKER" in diag["message"]
    assert "Failed" in diag["message"] or "failed (" in diag["message"]
    if signature:  # the cause is named, with the pod's own line
        assert signature in diag["message"] and said.split(":")[0] in diag["message"]
        assert signature in led["blockers"][0]["message"]
    assert target.dgd(SAMPLE_DGD) is None  # never applied


# ------------------------------------------------------------------ container failures


@pytest.mark.parametrize("keep", [False, True])
def test_an_image_tag_that_does_not_exist_is_a_failed_attempt_and_the_dgd_is_deleted_unless_kept(
        target: Target, kwok_fault: Callable[[faults.Fault], None], keep: bool) -> None:
    dgd_name = "e2e-bad-image"
    kwok_fault(faults.image_pull(f"e2e-image-pull-{target.namespace}",
                                 faults.by_image("e2e-no-such-tag", namespace=target.namespace)))
    extra = ["--keep-on-failure"] if keep else []
    run = target.run(target.experiment("dgd-bad-image.yaml", support={}), f"--timeout-readiness={READINESS_S:.0f}",
                     *extra)
    led = assert_failed_at(run, "step6_readiness")
    assert step(led, "step6_readiness")["duration_s"] < READINESS_S / 6
    (attempt,) = led["failed_attempts"]
    assert attempt["step"] == "step6_readiness" and attempt["category"] == "crash"
    assert any("waiting: ImagePullBackOff" in e for e in attempt["evidence"]), attempt
    assert "does not exist" in attempt["diagnosis"] and "e2e-no-such-tag" in attempt["diagnosis"]
    assert led["readiness"]["state"] == "crash"
    assert led["settings"]["keep_on_failure"] is keep
    teardown = led["teardown"]
    assert teardown["policy"] == ("keep-on-failure" if keep else "teardown-final-failures")
    if keep:
        assert led["torn_down_at"] is None and teardown["action"] == "kept"
        live = target.dgd(dgd_name)
        assert live is not None and "deletionTimestamp" not in live["metadata"]
        assert not [c for c in led["commands"] if " delete " in c["command"]]
    else:
        # torn_down_at is when the deleted DGD's pods were gone (its GPUs free), not the delete itself.
        assert teardown["action"] == "deleted" and led["torn_down_at"] == teardown["pods_gone_at"]
        assert led["torn_down_at"] >= teardown["at"]
        assert [c for c in led["commands"] if c["kind"] == "mutate" and f" delete dynamographdeployments.nvidia.com "
                f"{dgd_name} " in c["command"]]
        target.wait_dgd_gone(dgd_name)


PLANTED_TOKEN = "hf_" + "e2eQ7xPlanted" * 3  # secret-looking: must never reach an artifact


@pytest.mark.parametrize("said", [
    # No failure signature in the container's words: the crash loop is final from its second restart.
    "RuntimeError: Engine core initialization failed. See root cause above",
    # A decisive signature (judges/data/signatures.yaml): judged at the first termination, named.
    "torch.OutOfMemoryError: CUDA out of memory",
], ids=["crash-loop", "signature"])
def test_a_crash_loop_keeps_the_containers_last_lines_redacted_then_is_torn_down(
        target: Target, kwok_fault: Callable[[faults.Fault], None], said: str) -> None:
    dgd_name = "e2e-beta-agg"
    name = f"e2e-crash-loop-{target.namespace}"
    kwok_fault(faults.crash_loop(name, faults.by_dgd(dgd_name, namespace=target.namespace), exit_code=137))
    crashed = ("INFO loading Qwen/Qwen3-0.6B\nDEBUG env HF_TOKEN=" + PLANTED_TOKEN + "\n"
               f"{said}\nE2E-MARKER: worker exited\n")
    previous = faults.write_cri_log(target.tmp / "previous.log", crashed)
    current = faults.write_cri_log(target.tmp / "current.log", "INFO restarting\n")
    served: list[str] = []

    def serve_logs() -> None:
        """`kubectl logs [--previous]` of each pod of the DGD serves these files: a kwok Logs object per
        pod (ClusterLogs does not carry previousLogsFile), applied over the one the operator replica
        wires for its serving processes, long before the second restart."""
        def both(objs: dict[str, Obj]) -> tuple[bool, str]:
            return len(objs) >= 2, f"{len(objs)} objects"

        pods = target.kube.wait_for(Watch("Pod", target.namespace, label_selector=f"{DGD_LABEL}={dgd_name}"), both,
                                    awaited="the DGD's pods", timeout=60).objects
        with contextlib.suppress(WaitTimeout):  # the replica wires its Logs once, when its serving is up
            target.kube.wait_for(Watch(target.kube.resource(faults.KWOK_API, "Logs"), target.namespace), both,
                                 awaited="the replica's Logs", timeout=8)
        for pod in pods.values():
            target.kube.apply(faults.logs_object({**pod, "apiVersion": "v1", "kind": "Pod"}, current,
                                                 previous=previous), target.namespace)
            served.append(pod["metadata"]["name"])

    server = threading.Thread(target=serve_logs, name="serve-logs", daemon=True)
    server.start()
    run = target.run(target.experiment("dgd-beta-agg.yaml", support={}), f"--timeout-readiness={READINESS_S:.0f}")
    server.join(timeout=5)
    assert served, "the Logs objects were never applied"
    led = assert_failed_at(run, "step6_readiness")
    # Failed long before the readiness bound: at the first termination that says why, else from the
    # second restart (one backoff later).
    assert step(led, "step6_readiness")["duration_s"] < READINESS_S / 2
    (attempt,) = led["failed_attempts"]
    assert attempt["category"] == "crash"
    if "CUDA" in said:
        assert "gpu-out-of-memory" in attempt["diagnosis"] and said in attempt["diagnosis"], attempt
    else:
        assert "CrashLoopBackOff" in attempt["diagnosis"] and "exit code 137" in attempt["diagnosis"]
        assert re.search(r"\(restarts [2-9]", attempt["diagnosis"])
    found = led["readiness"]["failure_evidence"]
    assert found["dgd_status"]["conditions"], found["dgd_status"]
    assert any(c["previous"] for c in found["containers"]), found
    excerpts = [c["log_excerpt"] for c in found["containers"]]
    assert any("E2E-MARKER: worker exited" in e and "HF_TOKEN=[REDACTED]" in e for e in excerpts), excerpts
    log_file = run.deploy_root / "logs" / f"readiness-{dgd_name}.log"
    assert found["log_file"] == f"artifacts/deploy-iter-000/logs/{log_file.name}"
    text = log_file.read_text()
    assert "E2E-MARKER: worker exited" in text and said in text and "HF_TOKEN=[REDACTED]" in text
    assert "== dgd/e2e-beta-agg status" in text and "== events" in text
    for artifact in [*run.deploy_root.rglob("*"), *target.reports.rglob("*")]:
        if artifact.is_file():
            assert PLANTED_TOKEN not in artifact.read_text(errors="replace"), artifact
    # Then the policy: a crash loop that persists can never succeed; the DGD is deleted after the evidence.
    teardown = led["teardown"]
    assert (teardown["policy"], teardown["action"]) == ("teardown-final-failures", "deleted")
    # torn_down_at is when the pods were gone (the GPUs free), at or after the delete.
    assert teardown["evidence_file"] == found["log_file"] and led["torn_down_at"] == teardown["pods_gone_at"]
    assert led["torn_down_at"] >= teardown["at"]
    commands = [c["command"] for c in led["commands"]]
    logs_at = next(i for i, c in enumerate(commands) if " logs " in c and "--previous" in c)
    delete_at = next(i for i, c in enumerate(commands) if f" delete dynamographdeployments.nvidia.com {dgd_name} " in c)
    assert logs_at < delete_at
    target.wait_dgd_gone(dgd_name)


# ------------------------------------------------------------------ slow starts: the progress-aware wait

NO_PROGRESS_S = 9.0  # a short no-progress bound (default 15 min)
LOADING_S = 60.0  # the worker runs, not ready, this long (acceptance: 60 s against a bound of 20)


def test_a_slow_start_that_keeps_progressing_ends_ready(target: Target,
                                                        kwok_fault: Callable[[faults.Fault], None]) -> None:
    # Running, containers started, not Ready for LOADING_S (a model loading), then Ready: three times
    # the no-progress bound without a milestone, and no "no progress": a loading container is a sign.
    kwok_fault(faults.slow_start(f"e2e-slow-{target.namespace}", faults.by_dgd("e2e-beta-agg", target.namespace),
                                 1.0, LOADING_S))
    run = target.run(target.experiment("dgd-beta-agg.yaml", support={}), "--timeout-readiness-no-progress=20",
                     f"--timeout-readiness={READINESS_S:.0f}")
    led = assert_ready(run, target, dgd_name="e2e-beta-agg", served="qwen3-beta", gpus=1)
    readiness = led["readiness"]
    assert readiness["seconds"] > LOADING_S, readiness
    assert led["settings"]["timeouts"]["readiness_no_progress_s"] == 20
    assert "ready" in readiness["last_progress"]["what"], readiness["last_progress"]
    # The live line said what it waited on, minute by minute.
    said = [line for line in run.output.splitlines() if "[step6_readiness]" in line and "loading for" in line]
    assert any(re.search(r"loading for (<1|1) min \(pod e2e-beta-agg-\S+ container main", line) for line in said), said
    assert led.get("teardown") is None


@pytest.mark.parametrize("stall", ["loading", "stuck"])
def test_a_start_that_stalls_ends_at_its_bound_naming_what_it_waited_on(
        target: Target, kwok_fault: Callable[[faults.Fault], None], stall: str) -> None:
    selector = faults.by_dgd("e2e-beta-agg", target.namespace)
    if stall == "loading":  # Running, containers started, never Ready (an engine that died behind a live API server)
        kwok_fault(faults.slow_start(f"e2e-stuck-{target.namespace}", selector, 1.0, None))
    else:  # scheduled, never started, nothing pulled: stuck with no sign of a legitimate wait
        target.slow("pod-ready", selector, READINESS_S)
    timeouts = {"readiness_no_progress_s": NO_PROGRESS_S, "readiness_loading_s": 2 * NO_PROGRESS_S,
                "readiness_s": READINESS_S}
    run = target.run(target.experiment("dgd-beta-agg.yaml", support={}, timeouts=timeouts))
    led = assert_failed_at(run, "step6_readiness", status="blocked")  # not the candidate's failure
    assert [b["class"] for b in led["blockers"]] == ["timeout" if stall == "loading" else "no-progress"]
    readiness = led["readiness"]
    if stall == "loading":
        assert readiness["state"] == "timeout", readiness
        assert re.match(r"pod e2e-beta-agg-\S+ container main has been running without restarts and not ready for "
                        r"\d+s \(timeouts.readiness_loading_s 18s\)", readiness["diagnosis"]), readiness["diagnosis"]
        assert {w["sign"] for w in readiness["last_progress"]["waiting"]} == {"loading"}
        assert 2 * NO_PROGRESS_S <= step(led, "step6_readiness")["duration_s"] < READINESS_S / 2
    else:
        assert readiness["state"] == "no-progress", readiness
        assert readiness["diagnosis"].startswith("no progress for "), readiness["diagnosis"]
        assert "last progress: pod e2e-beta-agg-" in readiness["diagnosis"]
        assert re.search(r"stuck with no sign of a legitimate wait: pod e2e-beta-agg-\S+ container \S+ not created, "
                         r"no image pull under way", readiness["diagnosis"]), readiness["diagnosis"]
        assert NO_PROGRESS_S <= step(led, "step6_readiness")["duration_s"] < READINESS_S / 2
    assert readiness["last_progress"]["what"].startswith("pod e2e-beta-agg-")
    # Not known to be final: no failed attempt, kept for inspection with its evidence.
    assert led["failed_attempts"] == [] and led["torn_down_at"] is None
    assert led["teardown"]["action"] == "kept" and (run.deploy_root / "logs" / "readiness-e2e-beta-agg.log").is_file()
    assert target.dgd("e2e-beta-agg") is not None


# ------------------------------------------------------------------ smoke failures


@pytest.mark.parametrize("fault", ["never-list", "chat-500", "error-object"])
def test_serving_fault_blocks_the_smoke_test(target: Target, serving_fault: Callable[[str, str], None],
                                             fault: str) -> None:
    serving_fault("e2e-beta-agg", fault)
    run = target.run(target.experiment("dgd-beta-agg.yaml", support={}, timeouts=FAST_SMOKE))
    # A smoke gate is a blocker (class smoke), not a failed attempt (docs/procedure.md, "Outcomes").
    led = assert_failed_at(run, "step7_smoke", status="blocked")
    assert [b["class"] for b in led["blockers"]] == ["smoke"] and led["failed_attempts"] == []
    assert led["readiness"]["state"] == "ready"  # the deployment is fine; only serving is not
    smoke_section = led["smoke"]
    artifact = run.smoke_artifact()
    assert artifact["success"] == 0 and smoke_section["success"] == 0
    assert artifact["models_http_code"] == 200 == smoke_section["models_http_code"]
    assert artifact["api_request"]["model"] == "qwen3-beta"
    if fault == "never-list":
        assert smoke_section["gate"] == "model-listed" and "never listed" in smoke_section["diagnosis"]
        assert "3 x 1s" in smoke_section["diagnosis"] and step(led, "step7_smoke")["duration_s"] < 15
        assert artifact["api_http_code"] is None and artifact["api_response"] is None  # no chat was sent
        models = json.loads((run.deploy_root / "smoke" / "models_body.json").read_text())
        assert models["data"] == []
    elif fault == "chat-500":
        assert smoke_section["gate"] == "chat" and "HTTP 500" in smoke_section["diagnosis"]
        assert artifact["api_http_code"] == 500 == smoke_section["api_http_code"]
        assert artifact["api_response"]["error"]["message"] == "injected fault chat-500"
    else:
        assert smoke_section["gate"] == "chat" and "structural check" in smoke_section["diagnosis"]
        assert artifact["api_http_code"] == 200
        assert artifact["api_response"]["error"]["message"] == "injected fault error-object"
        assert "choices" not in artifact["api_response"]
    if fault != "never-list":
        body = json.loads((run.deploy_root / "smoke" / "api_body.json").read_text())
        assert body == artifact["api_response"]


def test_missing_direct_routing_header_fails_the_chat_gate(target: Target) -> None:
    run = target.run(target.experiment("dgd-gaie-direct.yaml", support={}))
    led = assert_ready(run, target, dgd_name="e2e-gaie", served="qwen3-gaie", gpus=1, endpoint_kind="worker-pod")
    # The same worker pod, reached without the instance id the harness found (see module docstring).
    endpoint = smoke.Endpoint("worker-pod", led["endpoint"]["target"])
    out = target.tmp / "no-header"
    bounds = Timeouts(smoke_reach_attempts=10, smoke_reach_interval_s=1.0, smoke_models_attempts=3,
                      smoke_models_interval_s=1.0, smoke_request_timeout_s=30.0)
    plan = smoke.SmokePlan(target.namespace, "e2e-gaie", "qwen3-gaie", True, endpoint, out, timeouts=bounds,
                           kubectl=KUBECTL)
    result = smoke.run_smoke(target.kube, plan)
    assert result.success == 0 and result.gate == "chat", result.diagnosis
    assert result.models_http_code == 200 and result.api_http_code == 400
    assert smoke.DIRECT_HEADER in result.diagnosis and "the deployment itself may be fine" in result.diagnosis
    artifact = json.loads((out / "smoke_test_artifact.json").read_text())
    assert artifact["success"] == 0 and artifact["api_http_code"] == 400 and artifact["models_http_code"] == 200
    assert artifact["api_response"]["code"] == 400 and artifact["api_response"]["message"]


# ------------------------------------------------------------------ inputs: GPU-less DGDs, precision, SKU


def test_the_gpu_less_mocker_dgd_becomes_ready_with_capacity_not_needed(target: Target) -> None:
    run = target.run(target.experiment("dgd-mocker.yaml", support={}))
    assert run.returncode == 0, run.output[-4000:]
    led = run.ledger()
    assert led["status"] == "ready", led["blockers"]
    assert_pinned(led, target)
    assert led["dgd_name"] == "mocker-agg" and led["served_model"] == "nvidia/Llama-3.1-8B-Instruct-FP8"
    # No GPU requested: nothing to place, no GPU allocation interval.
    assert led["gpus_requested"] == 0 and led["allocated_at"] is None
    assert led["capacity"]["capacity"] == "not needed" == led["preflight"]["capacity"]
    assert led["capacity"]["reasons"] == ["no GPU requested"]
    assert led["preflight"]["gpu_sku"]["outcome"] == "not needed"
    assert led["readiness"]["state"] == "ready" and led["smoke"]["success"] == 1
    assert run.smoke_artifact()["api_http_code"] == 200
    html = run.report().read_text()
    assert "not needed" in html and "no GPU requested" in html


def test_an_fp4_dgd_with_an_fp8_kv_cache_downloads_the_nvfp4_variant(target: Target) -> None:
    exp = target.experiment("dgd-fp4-kv-fp8.yaml", support={})
    inputs_dir = exp.exp_root / "inputs"
    download = (support.SAMPLE_SUPPORT / "model-download.yaml").read_text()
    for variant in ("fp8", "nvfp4"):
        (inputs_dir / f"model-download-{variant}.yaml").write_text(f"{download}# the {variant} weights\n")
    (inputs_dir / "model-cache.yaml").write_text((support.SAMPLE_SUPPORT / "model-cache.yaml").read_text())
    options = [f"--support=model-cache={inputs_dir / 'model-cache.yaml'}",
               *(f"--support=model-download={inputs_dir / f'model-download-{v}.yaml'}" for v in ("fp8", "nvfp4"))]
    run = target.run(exp, *options)
    led = assert_ready(run, target, dgd_name="e2e-fp4", served="qwen3-fp4", gpus=1)
    evidence = step(led, "step1_inputs")["evidence"]
    assert evidence["dgd_precision_tokens"] == ["fp4"]  # the KV cache's fp8 is not the model's precision
    assert evidence["download_variant"] == {"chosen": "model-download-nvfp4.yaml",
                                            "not_chosen": ["model-download-fp8.yaml"]}
    applied = (run.deploy_root / "applied_manifests" / "model-download.yaml").read_text()
    assert applied.endswith("# the nvfp4 weights\n")
    jobs = step(led, "step4_support_manifests")["evidence"]["jobs"]
    assert [(j["job"], j["outcome"]) for j in jobs] == [("model-download", "Complete")]


def test_a_dgd_on_h100_nodes_while_the_workload_says_h200_is_blocked_by_step2(target: Target) -> None:
    run = target.run(target.experiment("dgd-h100.yaml", support={}))
    led = assert_failed_at(run, "step2_validate", status="blocked")
    assert led["capacity"]["capacity"] == "sufficient"  # it would fit: on the wrong hardware
    (blocker,) = led["blockers"]
    assert blocker["class"] == "gpu-sku" and blocker["step"] == "step2_validate"
    assert "hardware[].gpu_type H200" in blocker["message"]
    assert "h100-reserved-0 (NVIDIA-H100-80GB-HBM3)" in blocker["message"]
    assert led["preflight"]["gpu_sku"]["outcome"] == "mismatch"
    assert not [c for c in led["commands"] if c["kind"] == "mutate"]
    assert target.dgd("e2e-h100") is None and led["failed_attempts"] == []


def test_workers_asking_rdma_no_node_advertises_are_blocked_by_step2_before_any_mutation(target: Target) -> None:
    run = target.run(target.experiment("dgd-rdma.yaml", support={}))
    led = assert_failed_at(run, "step2_validate", status="blocked")
    assert led["capacity"]["capacity"] == "insufficient"
    (blocker,) = led["blockers"]
    assert blocker["class"] == "resource-capacity" and blocker["step"] == "step2_validate"
    # Each amount named with the workers that ask it and the nodes they may use (the H200 nodes).
    for asked, worker in (("1", "PrefillWorker"), ("8", "DecodeWorker")):
        assert f"rdma/ib: component(s) {worker} ask {asked} per pod; none of the 2 node(s) they may use" in \
            blocker["message"]
    assert "allocatable rdma/ib: 0 on 2 node(s) (h200-0, h200-1)" in blocker["message"]
    # Read-only, and the candidate is not charged: nothing applied, no failed attempt.
    assert not [c for c in led["commands"] if c["kind"] == "mutate"]
    assert target.dgd("e2e-rdma") is None and led["failed_attempts"] == []


def test_a_billion_replicas_are_insufficient_at_once_with_a_short_explanation(target: Target) -> None:
    huge = target.tmp / "dgd-huge.yaml"
    text = (DATA / "dgd-beta-agg.yaml").read_text()
    huge.write_text(text.replace("  - name: VllmDecodeWorker\n    type: worker\n    replicas: 1\n",
                                 "  - name: VllmDecodeWorker\n    type: worker\n    replicas: 1000000000\n"))
    run = target.run(target.experiment(huge, support={}, gpu_ceiling=2_000_000_000))
    led = assert_failed_at(run, "step2_validate", status="blocked")
    assert step(led, "step2_validate")["duration_s"] < 10
    assert led["gpus_requested"] == 1_000_000_000 and led["capacity"]["capacity"] == "insufficient"
    (blocker,) = led["blockers"]
    assert blocker["class"] == "gpu-capacity" and len(blocker["message"]) < 600, blocker
    assert "need 1000000000 nvidia.com/gpu in total" in blocker["message"]
