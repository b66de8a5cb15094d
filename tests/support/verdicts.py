"""The failure classes of docs/operator-generations.md as scenarios on the offline cluster: how to
provoke each, the verdict the procedure's rules ask for, and how long the harness took to give it.

Used by ``tests/e2e/test_verdicts_offline.py`` (every class on every operator profile where it
exists) and, through the figures it records, by ``bench/bench_time_to_verdict.py``.

Time to verdict is measured from the cluster's first evidence to the harness's verdict:

* the evidence: the API server's audit log (microseconds; when it received the request: a watch
  can tell the harness before the request's own response completes) of the request that first
  made the failure visible: the create of the first Warning event of the failing component (a scheduler's
  ``FailedScheduling``, a controller's ``FailedCreate``, the kubelet's pull or crash words), or the
  operator's status write for classes the DGD's status reveals;
* the verdict: the ledger's ``readiness.verdict_at`` (microseconds; the harness's clock, the same
  machine's as the API server's here), or the end of step 2 for a verdict given before any apply.
"""

from __future__ import annotations

import copy
import datetime as dt
import json
import os
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from deploy_suite.access.kube import Obj
from deploy_suite.offline import faults
from tests.support.runs import SuiteRun, outcomes, step
from tests.support.targets import Target

VERDICT_LOG_ENV = "DEPLOY_SUITE_VERDICT_LOG"
READINESS_S = 180.0
DGD_NAME = "e2e-verdict"
WORKER = "VllmDecodeWorker"
IMAGE = "nvcr.io/nvidia/ai-dynamo/vllm-runtime:1.6.1"
# A required anti-affinity term whose namespaceSelector selects no namespace: the scheduler ignores
# it, the capacity engine does not model namespace labels and answers `unknown`, so step 2 lets
# the run through and the placement failure reaches step 6's triage (as a shared cluster whose
# nodes the deployer may not read would).
UNMODELLED = {"podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [{
    "topologyKey": "kubernetes.io/hostname",
    "namespaceSelector": {"matchLabels": {"e2e.deploy-suite.local/never": "true"}},
    "labelSelector": {"matchLabels": {"app": "e2e-nothing"}}}]}}


def base_dgd(name: str = DGD_NAME, gpus: int = 1) -> dict[str, Any]:
    """An aggregated DGD, a frontend and one worker with ``gpus`` GPUs, in v1alpha1: the version
    every operator profile serves (pre-1.0 serves nothing else)."""
    return {"apiVersion": "nvidia.com/v1alpha1", "kind": "DynamoGraphDeployment", "metadata": {"name": name},
            "spec": {"backendFramework": "vllm", "services": {
                "Frontend": {"componentType": "frontend", "replicas": 1, "extraPodSpec": {"mainContainer": {
                    "image": IMAGE, "command": ["python3", "-m", "dynamo.frontend"], "args": ["--http-port", "8000"]}}},
                WORKER: {"componentType": "worker", "replicas": 1, "resources": {"limits": {"gpu": str(gpus)}},
                         "extraPodSpec": {"mainContainer": {
                             "image": IMAGE, "command": ["python3", "-m", "dynamo.vllm"],
                             "args": ["--model", "Qwen/Qwen3-0.6B", "--served-model-name", "qwen3-verdict"]}}}}}}


def worker(dgd: dict[str, Any]) -> dict[str, Any]:
    found: dict[str, Any] = dgd["spec"]["services"][WORKER]
    return found


def worker_spec(dgd: dict[str, Any]) -> dict[str, Any]:
    """The worker's pod spec fields (v1alpha1 ``extraPodSpec``)."""
    spec: dict[str, Any] = worker(dgd)["extraPodSpec"]
    return spec


def worker_main(dgd: dict[str, Any]) -> dict[str, Any]:
    main: dict[str, Any] = worker_spec(dgd)["mainContainer"]
    return main


@dataclass(frozen=True)
class Expected:
    """The verdict the procedure's rules ask for."""

    status: str  # the ledger's status: failed (a failed attempt), blocked or ready
    step: str  # the step that gave it
    category: str | None  # readiness state / blocker class
    failed_attempt: bool  # charged to the failed-deploy budget


@dataclass(frozen=True)
class Scenario:
    """One failure class: the DGD, what the cluster is made to do, the verdict expected."""

    name: str
    expected: Expected
    dgd: Callable[[], dict[str, Any]] = base_dgd
    setup: Callable[[Target], None] | None = None
    # Operator profiles where the class exists (None: every profile).
    profiles: tuple[str, ...] | None = None
    # What the cluster first shows: the Warning event reasons of the failing component's objects, or
    # "status" (the operator's status write), or "" (no cluster evidence: a verdict before any apply).
    evidence: tuple[str, ...] = ()
    orchestrators: tuple[str, ...] = ()
    # The test of tests/e2e/test_deploy_offline.py that already proves this class in `make test`
    # on the default profile: here it runs in the full matrix only (`make test-all`, the bench).
    covered_by: str = ""
    gpu_ceiling: int | None = None  # the workload's resources.gpu_ceiling, when the sample's 8 is too few


@dataclass
class Outcome:
    scenario: str
    profile: str
    status: str
    step: str
    category: str | None
    failed_attempts: int
    evidence_at: str | None
    verdict_at: str | None
    seconds: float | None
    extra: dict[str, Any] = field(default_factory=dict)

    def as_dict(self) -> dict[str, Any]:
        return {"scenario": self.scenario, "profile": self.profile, "status": self.status, "step": self.step,
                "category": self.category, "failed_attempts": self.failed_attempts,
                "evidence_at": self.evidence_at, "verdict_at": self.verdict_at, "seconds": self.seconds,
                **self.extra}


def record(outcome: Outcome, passed: bool) -> None:
    """Hand the measurement to bench/bench_time_to_verdict.py (nothing without its variable)."""
    target = os.environ.get(VERDICT_LOG_ENV)
    if target:
        with Path(target).open("a", encoding="utf-8") as handle:
            handle.write(json.dumps({**outcome.as_dict(), "passed": passed}) + "\n")


# ------------------------------------------------------------------ running one
def run(target: Target, scenario: Scenario, profile: str) -> tuple[SuiteRun, Outcome]:
    """Provoke the class, run iteration 0 of the suite, and measure."""
    path = target.tmp / f"{scenario.name}.yaml"
    path.write_text(yaml.safe_dump(scenario.dgd(), sort_keys=False))
    if scenario.setup is not None:
        scenario.setup(target)
    exp = target.experiment(path, support={}, gpu_ceiling=scenario.gpu_ceiling)
    try:
        suite = target.run(exp, f"--timeout-readiness={READINESS_S:.0f}", "--timeout-readiness-no-progress=120")
    finally:  # the operator's and the serving's switches are keyed by namespace/DGD: never left behind
        faults.set_operator_fault(target.kube, target.namespace, DGD_NAME, None)
        faults.set_serving_fault(target.kube, target.namespace, DGD_NAME, None)
    led = suite.ledger()
    got = outcomes(led)
    failed_step = next((s for s, o in got.items() if o in {"failed", "blocked"}), "step7_smoke")
    readiness = led.get("readiness") or {}
    blockers = led.get("blockers") or []
    category = (blockers[0]["class"] if led["status"] == "blocked" and blockers else
                readiness.get("state") if failed_step == "step6_readiness" or led["status"] == "ready" else
                (led.get("smoke") or {}).get("gate") if failed_step == "step7_smoke" else
                (led.get("failed_attempts") or [{}])[-1].get("category"))
    verdict_at = readiness.get("verdict_at") if failed_step == "step6_readiness" or led["status"] == "ready" else \
        step(led, failed_step).get("ended_at")
    evidence_at = first_evidence(target, scenario, verdict_at)
    seconds = None
    if evidence_at and verdict_at:
        seconds = round((_parse(verdict_at) - _parse(evidence_at)).total_seconds(), 3)
    return suite, Outcome(scenario.name, profile, led["status"], failed_step, category,
                          len(led.get("failed_attempts") or []), evidence_at, verdict_at, seconds,
                          {"reconcile_errors": readiness.get("reconcile_errors") or [],
                           "generation_rule": readiness.get("generation_rule")})


def _parse(stamp: str) -> dt.datetime:
    return dt.datetime.fromisoformat(stamp.replace("Z", "+00:00"))


def _audit(target: Target) -> list[Obj]:
    lines = Path(target.cluster.info().audit_log).read_text(encoding="utf-8").splitlines()
    return [json.loads(line) for line in lines if target.namespace in line]


def _done(entry: Obj, resource: str, subresource: str | None = None) -> bool:
    ref = entry.get("objectRef") or {}
    return (ref.get("resource") == resource and ref.get("subresource") == subresource
            and entry.get("verb") in {"create", "update", "patch"} and entry.get("stage") == "ResponseComplete")


def first_evidence(target: Target, scenario: Scenario, verdict_at: str | None) -> str | None:
    """The audit time of the request that made the failure visible (None: no such request):

    * event reasons: the create of the first such Warning event of the DGD's children; for
      ``FailedScheduling`` also the scheduler's status write of the pod (``PodScheduled=False``),
      which it makes before it records the event;
    * ``pod-status``: the last status write of a failing pod before the verdict (the kubelet's
      report of the second restart of a crash loop, which is what decides it);
    * ``status``: the operator's first status write of the DGD (beside the event reasons: the
      earliest of both, for a class the DGD's status shows on some profiles and events on others);
    * ``ready-status``: the operator's last status write of the DGD before the verdict (the one
      that made it Ready: the time to a ready verdict).
    """
    if not scenario.evidence:
        return None
    audit = _audit(target)
    prefix = f"{DGD_NAME}-"  # any of the DGD's children (the frontend's may speak first)
    dgd_writes = [str(e["requestReceivedTimestamp"]) for e in audit if _done(e, "dynamographdeployments", "status")]
    if scenario.evidence == ("ready-status",):
        before = [w for w in dgd_writes if verdict_at and _parse(w) <= _parse(verdict_at)]
        return max(before, key=_parse) if before else None
    pod_writes = [e for e in audit if _done(e, "pods", "status")
                  and str((e.get("objectRef") or {}).get("name", "")).startswith(prefix)
                  and "deploy-suite" not in str(e.get("userAgent"))]
    if scenario.evidence == ("pod-status",):
        before = [str(e["requestReceivedTimestamp"]) for e in pod_writes if verdict_at and
                  _parse(str(e["requestReceivedTimestamp"])) <= _parse(verdict_at)]
        return max(before, key=_parse) if before else None
    events, _ = target.kube.list_items("Event", target.namespace)
    names = {str(e["metadata"]["name"]) for e in events
             if e.get("reason") in scenario.evidence and e.get("type") == "Warning"
             and str((e.get("involvedObject") or {}).get("name", "")).startswith(prefix)}
    # An event created with generateName (the operator replica's, KAI's) has no name in the audit
    # log: any such create in the test's namespace counts (conservative: it may be an earlier one).
    stamps = [str(e["requestReceivedTimestamp"]) for e in audit if _done(e, "events") and (
        (e.get("objectRef") or {}).get("name") in names or
        (e.get("verb") == "create" and not (e.get("objectRef") or {}).get("name")))]
    if "status" in scenario.evidence:
        stamps += dgd_writes[:1]
    if "FailedScheduling" in scenario.evidence:
        stamps += [str(e["requestReceivedTimestamp"]) for e in pod_writes if "scheduler" in str(e.get("userAgent"))]
    return min(stamps, key=_parse) if stamps else None


# ------------------------------------------------------------------ the classes
def _unmodelled(mutate: Callable[[dict[str, Any]], None]) -> Callable[[], dict[str, Any]]:
    def make() -> dict[str, Any]:
        dgd = base_dgd()
        worker_spec(dgd)["affinity"] = copy.deepcopy(UNMODELLED)
        mutate(dgd)
        return dgd
    return make


def _taint(dgd: dict[str, Any]) -> None:
    worker_spec(dgd)["nodeSelector"] = {"nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3"}


def _selector(dgd: dict[str, Any]) -> None:
    worker_spec(dgd)["nodeSelector"] = {"e2e.deploy-suite.local/pool": "does-not-exist"}


def _oversized(dgd: dict[str, Any]) -> None:
    # More memory than any node has (GPUs stay within the experiment's ceiling of 8).
    worker(dgd)["resources"]["limits"]["memory"] = "64Ti"


def _crash_loop(target: Target) -> None:
    target.apply_fault(faults.crash_loop(f"verdict-crash-{target.namespace}",
                                         faults.by_dgd(DGD_NAME, namespace=target.namespace)))


def _quota(target: Target) -> None:
    target.kube.create({"apiVersion": "v1", "kind": "ResourceQuota", "metadata": {"name": "gpu-quota"},
                        "spec": {"hard": {"requests.nvidia.com/gpu": "0"}}}, target.namespace)


def _never_pullable(target: Target) -> None:
    target.apply_fault(faults.image_pull(f"verdict-pull-{target.namespace}",
                                         faults.by_dgd(DGD_NAME, namespace=target.namespace)))


def _missing_key(target: Target) -> None:
    target.apply_fault(faults.missing_secret_key(f"verdict-key-{target.namespace}",
                                                 faults.by_dgd(DGD_NAME, namespace=target.namespace),
                                                 "hf-token-secret", "HF_TOKEN_MISSING"))


def _pod_webhook(target: Target) -> None:
    target.apply_fault(faults.pod_admission_refusal(target.kube, f"verdict-refuse-{target.namespace}", DGD_NAME,
                                                    target.namespace))


def _operator_fault(fault: str) -> Callable[[Target], None]:
    def setup(target: Target) -> None:
        faults.set_operator_fault(target.kube, target.namespace, DGD_NAME, fault)
    return setup


def _serving_fault(fault: str) -> Callable[[Target], None]:
    def setup(target: Target) -> None:
        faults.set_serving_fault(target.kube, target.namespace, DGD_NAME, fault)
    return setup


def _slow_start(target: Target) -> None:
    # Running, not Ready, for 20 s: a large model loading within the startup probe's budget.
    target.apply_fault(faults.slow_start(f"verdict-slow-{target.namespace}",
                                         faults.by_dgd(DGD_NAME, namespace=target.namespace), 1.0, 20.0))


def _unbound_claim(dgd: dict[str, Any]) -> None:
    worker_spec(dgd)["volumes"] = [{"name": "cache", "persistentVolumeClaim": {"claimName": "verdict-unbound"}}]
    worker_main(dgd)["volumeMounts"] = [{"name": "cache", "mountPath": "/opt/models"}]


def _unbound(target: Target) -> None:
    """A claim whose storage class has a provisioner that never acts (Immediate binding)."""
    storage_class = f"verdict-none-{target.namespace}"
    target.apply_fault(faults.Fault(storage_class, ({  # cluster-scoped: removed with the target's faults
        "apiVersion": "storage.k8s.io/v1", "kind": "StorageClass", "metadata": {"name": storage_class},
        "provisioner": "example.com/none", "volumeBindingMode": "Immediate"},)))
    target.kube.create({"apiVersion": "v1", "kind": "PersistentVolumeClaim", "metadata": {"name": "verdict-unbound"},
                        "spec": {"accessModes": ["ReadWriteMany"], "storageClassName": storage_class,
                                 "resources": {"requests": {"storage": "100Gi"}}}}, target.namespace)


def _with(mutate: Callable[[dict[str, Any]], None]) -> Callable[[], dict[str, Any]]:
    def make() -> dict[str, Any]:
        dgd = base_dgd()
        mutate(dgd)
        return dgd
    return make


def _nine_gpus(dgd: dict[str, Any]) -> None:
    worker(dgd)["resources"]["limits"]["gpu"] = "9"  # the nodes have 8


def _multinode() -> dict[str, Any]:
    dgd = base_dgd(gpus=1)
    worker(dgd)["multinode"] = {"nodeCount": 2}
    return dgd


FAILED_ATTEMPT = {"status": "failed", "step": "step6_readiness", "failed_attempt": True}
# Not the candidate's failure: blocked with its class, no failed attempt (docs/procedure.md, "Outcomes").
DEPENDENCY = Expected("blocked", "step6_readiness", "dependency", False)

SCENARIOS: dict[str, Scenario] = {s.name: s for s in (
    Scenario("untolerated-taint", Expected(category="failed-deploy", **FAILED_ATTEMPT),  # type: ignore[arg-type]
             _unmodelled(_taint), evidence=("FailedScheduling",),
             covered_by="test_taint_mismatch_past_an_unknown_capacity_fails_step6_at_once"),
    Scenario("selector-mismatch", Expected(category="failed-deploy", **FAILED_ATTEMPT),  # type: ignore[arg-type]
             _unmodelled(_selector), evidence=("FailedScheduling",)),
    Scenario("oversized-request", Expected(category="failed-deploy", **FAILED_ATTEMPT),  # type: ignore[arg-type]
             _unmodelled(_oversized), evidence=("FailedScheduling",)),
    Scenario("crash-loop", Expected(category="crash", **FAILED_ATTEMPT),  # type: ignore[arg-type]
             setup=_crash_loop, evidence=("pod-status",),
             covered_by="test_a_crash_loop_keeps_the_containers_last_lines_redacted_then_is_torn_down"),
    Scenario("quota-refusal", DEPENDENCY, setup=_quota, evidence=("FailedCreate",)),
    Scenario("unbound-pvc", DEPENDENCY, _with(_unbound_claim), setup=_unbound, evidence=("FailedScheduling",),
             covered_by="test_unbound_pvc_stops_step6_with_a_dependency_diagnosis"),
    Scenario("image-never-pullable", Expected(category="crash", **FAILED_ATTEMPT),  # type: ignore[arg-type]
             setup=_never_pullable, evidence=("pod-status",),
             covered_by="test_an_image_tag_that_does_not_exist_is_a_failed_attempt_and_the_dgd_is_deleted_unless_kept"),
    Scenario("webhook-refusal", DEPENDENCY, setup=_pod_webhook, evidence=("FailedCreate",)),
    Scenario("missing-secret-key", DEPENDENCY, setup=_missing_key, evidence=("pod-status",)),
    # The apiserver refuses the operator's Deployment: the newest operator holds it at the DCD (an
    # event), older ones write the DGD failed with the apiserver's text.
    Scenario("invalid-template-at-dcd", Expected(category="failed-deploy", **FAILED_ATTEMPT),  # type: ignore[arg-type]
             setup=_operator_fault("invalid-template"), evidence=("FailedCreate", "status")),
    # On Grove + KAI: KAI's own words (`Unschedulable`, "No nodes with enough resources were found").
    Scenario("oversized-under-kai", Expected(category="failed-deploy", **FAILED_ATTEMPT),  # type: ignore[arg-type]
             _unmodelled(_nine_gpus), profiles=("latest",), orchestrators=("grove",), gpu_ceiling=16,
             evidence=("Unschedulable", "FailedScheduling")),
    Scenario("no-multinode-orchestrator", Expected("blocked", "step2_validate", "platform", False), _multinode),
    # Recovering classes: no false verdict.
    Scenario("transient-failed-recovers", Expected("ready", "step7_smoke", "ready", False),
             setup=_operator_fault("transient-failed:3"), evidence=("ready-status",)),
    Scenario("slow-loading-worker", Expected("ready", "step7_smoke", "ready", False), setup=_slow_start,
             evidence=("ready-status",), covered_by="test_a_slow_start_that_keeps_progressing_ends_ready"),
    Scenario("pre-1.0-success", Expected("ready", "step7_smoke", "ready", False), profiles=("0.9",),
             evidence=("ready-status",)),
    Scenario("listed-model-not-ready", Expected("blocked", "step7_smoke", "smoke", False),
             setup=_serving_fault("model-not-ready")),
)}
