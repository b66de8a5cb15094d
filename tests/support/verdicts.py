"""The failure classes of docs/operator-generations.md as scenarios on the offline cluster: how to
provoke each, the verdict the procedure's rules ask for, and how long the harness took to give it.

Used by ``tests/e2e/test_verdicts_offline.py`` (every class on every operator profile where it
exists) and, through the figures it records, by ``bench/bench_time_to_verdict.py``.

Time to verdict is measured from the cluster's first evidence to the harness's verdict:

* the evidence: the API server's audit log (microseconds; when it received the request: a watch
  can tell the harness before the request's own response completes) of the request that first
  made the failure visible: the create of the first Warning event of the failing component (a scheduler's
  ``FailedScheduling``, a controller's ``FailedCreate``, the kubelet's pull or crash words), the
  operator's status write for classes the DGD's status reveals, or the kubelet's (kwok's) status
  write that reported a container's first termination, for a failure its own words decide
  (``lastState.terminated.finishedAt`` says the same to the whole second only: it is kept beside);
* the verdict: the ledger's ``readiness.verdict_at`` (microseconds; the harness's clock, the same
  machine's as the API server's here), or the end of step 2 for a verdict given before any apply.
"""

from __future__ import annotations

import copy
import datetime as dt
import json
import os
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from deploy_suite import clock
from deploy_suite.access.kube import Obj
from deploy_suite.access.watch import Watch
from deploy_suite.constants import LABEL_COMPONENT, LABEL_DGD_NAME
from deploy_suite.errors import SuiteError
from deploy_suite_offline import faults
from deploy_suite_offline.operator_sim.profiles import DEFAULT_PROFILE
from deploy_suite_offline.pools import PROVISIONER
from tests.support.runs import SuiteRun, outcomes, step
from tests.support.targets import SAMPLE_SUPPORT, Target, cache_of_class

VERDICT_LOG_ENV = "DEPLOY_SUITE_VERDICT_LOG"
READINESS_S = 180.0
NO_PROGRESS_S = 120.0  # the runs' --timeout-readiness-no-progress, unless a scenario waits longer than it
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
    says: str = ""  # a word the verdict's diagnosis (failed attempt or blocker) must name
    also: tuple[str, ...] = ()  # blocker classes the run must also record beside the first


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
    # What the cluster does while the suite runs (on a thread): it notes what it did for the outcome.
    during: Callable[[Target, dict[str, Any]], None] | None = None
    no_progress_s: float = NO_PROGRESS_S
    goal_s: float | None = None  # the time to verdict the test holds the harness to (else the bench's)
    in_slice: bool = True  # False: the full matrix only, also on the representative profile
    # Documents written before the DGD into the handed-off deploy.yaml (a ComputeDomain, ...).
    documents: Callable[[], list[dict[str, Any]]] | None = None
    # The support manifests handed over (type -> file), made once the setup ran; None: none.
    support: Callable[[Target], dict[str, Path]] | None = None
    args: tuple[str, ...] = ()  # more options of the run (`pytest --iter=0 ...`)
    subject: str = f"{DGD_NAME}-"  # the name prefix of the objects whose words are the evidence
    waited: tuple[str, float] | None = None  # a step that must have waited this long (a legitimate wait)
    timeouts: dict[str, float] = field(default_factory=dict)  # the handoff's timeouts (pvc_bound_s, ...)


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
    docs = [*(scenario.documents() if scenario.documents is not None else []), scenario.dgd()]
    path.write_text(yaml.safe_dump_all(docs, sort_keys=False))
    if scenario.setup is not None:
        scenario.setup(target)
    exp = target.experiment(path, support=scenario.support(target) if scenario.support is not None else {},
                            gpu_ceiling=scenario.gpu_ceiling,
                            timeouts=scenario.timeouts or None)
    notes: dict[str, Any] = {}
    helper = None
    if scenario.during is not None:
        helper = threading.Thread(target=_noted, args=(scenario.during, target, notes), daemon=True,
                                  name=f"verdict-{scenario.name}")
        helper.start()
    try:
        suite = target.run(exp, f"--timeout-readiness={READINESS_S:.0f}",
                           f"--timeout-readiness-no-progress={scenario.no_progress_s:.0f}", *scenario.args)
    finally:  # the operator's and the serving's switches are keyed by namespace/DGD: never left behind
        faults.set_operator_fault(target.kube, target.namespace, DGD_NAME, None)
        faults.set_serving_fault(target.kube, target.namespace, DGD_NAME, None)
        if helper is not None:
            helper.join(timeout=30)
    led = suite.ledger()
    got = outcomes(led)
    failed_step = next((s for s, o in got.items() if o in {"failed", "blocked"}), "step7_smoke")
    readiness = led.get("readiness") or {}
    blockers = led.get("blockers") or []
    category = (blockers[0]["class"] if led["status"] == "blocked" and blockers else
                readiness.get("state") if failed_step == "step6_readiness" or led["status"] == "ready" else
                (led.get("smoke") or {}).get("gate") if failed_step == "step7_smoke" else
                (led.get("failed_attempts") or [{}])[-1].get("category"))
    stopped = step(led, failed_step)
    verdict_at = readiness.get("verdict_at") if failed_step == "step6_readiness" or led["status"] == "ready" else \
        (stopped.get("evidence") or {}).get("stopped_at") or stopped.get("ended_at")
    evidence_at = first_evidence(target, scenario, verdict_at, notes)
    seconds = None
    if evidence_at and verdict_at:
        seconds = round((parse(verdict_at) - parse(evidence_at)).total_seconds(), 3)
    diagnosis = ((led.get("failed_attempts") or [{}])[-1].get("diagnosis") if led["status"] == "failed" else
                 blockers[0].get("message") if blockers else None)
    return suite, Outcome(scenario.name, profile, led["status"], failed_step, category,
                          len(led.get("failed_attempts") or []), evidence_at, verdict_at, seconds,
                          {"reconcile_errors": readiness.get("reconcile_errors") or [],
                           "generation_rule": readiness.get("generation_rule"), "diagnosis": diagnosis,
                           "contention": len(readiness.get("contention") or []),
                           "blockers": [b["class"] for b in blockers],
                           "step_s": {s["name"]: s.get("duration_s") for s in led.get("steps") or []}, **notes})


def _noted(during: Callable[[Target, dict[str, Any]], None], target: Target, notes: dict[str, Any]) -> None:
    try:
        during(target, notes)
    except (SuiteError, OSError) as exc:  # the test names it; the run still ends on its own bounds
        notes["during_error"] = f"{type(exc).__name__}: {exc}"


def parse(stamp: str) -> dt.datetime:
    return dt.datetime.fromisoformat(stamp.replace("Z", "+00:00"))


def _audit(target: Target) -> list[Obj]:
    lines = Path(target.cluster.info().audit_log).read_text(encoding="utf-8").splitlines()
    return [json.loads(line) for line in lines if target.namespace in line]


def _done(entry: Obj, resource: str, subresource: str | None = None) -> bool:
    ref = entry.get("objectRef") or {}
    return (ref.get("resource") == resource and ref.get("subresource") == subresource
            and entry.get("verb") in {"create", "update", "patch"} and entry.get("stage") == "ResponseComplete")


def first_evidence(target: Target, scenario: Scenario, verdict_at: str | None,
                   notes: dict[str, Any] | None = None) -> str | None:
    """The audit time of the request that made the failure visible (None: no such request):

    * event reasons: the create of the first such Warning event of the DGD's children; for
      ``FailedScheduling`` also the scheduler's status write of the pod (``PodScheduled=False``),
      which it makes before it records the event;
    * ``pod-status``: the last status write of a failing pod before the verdict (the kubelet's
      report of the second restart of a crash loop, which is what decides it);
    * ``job-status``: the job controller's last status write of a support Job before the verdict
      (the one that wrote its ``Failed`` condition; it batches its pods' updates for about 1 s, so
      the failed pod's own status write comes about 1 s earlier);
    * ``status``: the operator's first status write of the DGD (beside the event reasons: the
      earliest of both, for a class the DGD's status shows on some profiles and events on others);
    * ``ready-status``: the operator's last status write of the DGD before the verdict (the one
      that made it Ready: the time to a ready verdict);
    * ``termination``: the first status write of a cued pod (``notes["pods"]``) after the cue
      (``notes["cued_at"]``): kwok's report of the container's first termination.
    """
    if not scenario.evidence:
        return None
    audit = _audit(target)
    prefix = scenario.subject  # any of the DGD's children (the frontend's may speak first), or a support object
    dgd_writes = [str(e["requestReceivedTimestamp"]) for e in audit if _done(e, "dynamographdeployments", "status")]
    if scenario.evidence == ("ready-status",):
        before = [w for w in dgd_writes if verdict_at and parse(w) <= parse(verdict_at)]
        return max(before, key=parse) if before else None
    pod_writes = [e for e in audit if _done(e, "pods", "status")
                  and str((e.get("objectRef") or {}).get("name", "")).startswith(prefix)
                  and "deploy-suite" not in str(e.get("userAgent"))]
    if scenario.evidence == ("termination",):
        cued = (notes or {}).get("cued_at")
        after = [str(e["requestReceivedTimestamp"]) for e in pod_writes
                 if (e.get("objectRef") or {}).get("name") in (notes or {}).get("pods", ())
                 and cued and parse(str(e["requestReceivedTimestamp"])) >= parse(cued)]
        return min(after, key=parse) if after else None
    if scenario.evidence in {("pod-status",), ("job-status",)}:
        writes = pod_writes if scenario.evidence == ("pod-status",) else [
            e for e in audit if _done(e, "jobs", "status")
            and str((e.get("objectRef") or {}).get("name", "")).startswith(prefix)]
        before = [str(e["requestReceivedTimestamp"]) for e in writes if verdict_at and
                  parse(str(e["requestReceivedTimestamp"])) <= parse(verdict_at)]
        return max(before, key=parse) if before else None
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
    return min(stamps, key=parse) if stamps else None


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


def _startup_probe_kills(target: Target) -> None:
    # The worker's startup probe never passes: the kubelet kills it every 2 s (exit 143).
    target.apply_fault(faults.startup_probe_kill(
        f"verdict-probe-{target.namespace}", [*faults.by_dgd(DGD_NAME, namespace=target.namespace),
                                              {"key": f'.metadata.labels["{LABEL_COMPONENT}"]', "operator": "In",
                                               "values": [WORKER]}]))


# The operator holds the worker at zero replicas for a checkpoint longer than the no-progress bound.
CHECKPOINT_GATE_S = 25.0


def _gate_reason(objs: dict[str, Obj]) -> str:
    conds = [c for o in objs.values() for c in (o.get("status") or {}).get("conditions") or []
             if c.get("type") == "Ready"]
    return str(conds[0].get("reason") or "") if conds else ""


def _gate_held(target: Target, notes: dict[str, Any]) -> None:
    """How long the DGD said ``waiting_for_checkpoint`` (the gate held its worker at zero replicas)."""
    dgds = Watch(target.kube.resource("nvidia.com/v1alpha1", "DynamoGraphDeployment"), target.namespace, DGD_NAME)
    target.kube.wait_for(dgds, lambda o: (_gate_reason(o) == "waiting_for_checkpoint", _gate_reason(o)),
                         awaited="the checkpoint gate", timeout=READINESS_S / 2)
    held = time.monotonic()
    target.kube.wait_for(dgds, lambda o: (_gate_reason(o) not in {"", "waiting_for_checkpoint"}, _gate_reason(o)),
                         awaited="the checkpoint gate to open", timeout=READINESS_S)
    notes["held_s"] = round(time.monotonic() - held, 1)


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


# ---- the container's own words (judges/data/signatures.yaml): decisive at the first termination
# The crashed run's last lines, in the structure of the sources the signatures cite (vLLM's
# loading lines; torch's OOM error, https://github.com/vllm-project/vllm/issues/18163;
# huggingface_hub's GatedRepoError, https://github.com/ariG23498/gemma3-object-detection/issues/5).
_LOADING = ("INFO worker: loading Qwen/Qwen3-0.6B\n"
            "INFO model_runner: Loading weights took 1.12 GiB and 2.31 seconds\n")
OOM_WORDS = ("torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 20.00 GiB. GPU 0 has a total "
             "capacity of 139.72 GiB of which 11.06 GiB is free.")
GATED_WORDS = ("huggingface_hub.errors.GatedRepoError: 403 Client Error. (Request ID: Root=1-verdict)\n"
               "Cannot access gated repo for url https://huggingface.co/Qwen/Qwen3-0.6B/resolve/main/config.json.\n"
               "Access to model Qwen/Qwen3-0.6B is restricted and you are not in the authorized list.")
_WORKER_PODS = f"{LABEL_DGD_NAME}={DGD_NAME},{LABEL_COMPONENT}={WORKER}"


def _loads_then_crashes(target: Target) -> None:
    target.apply_fault(faults.crash_on_cue(
        f"verdict-cue-{target.namespace}", [*faults.by_dgd(DGD_NAME, namespace=target.namespace),
                                            {"key": f'.metadata.labels["{LABEL_COMPONENT}"]', "operator": "In",
                                             "values": [WORKER]}]))


def _started(objs: dict[str, Obj]) -> tuple[bool, str]:
    started = [o for o in objs.values() if (o.get("spec") or {}).get("nodeName") and all(
        c.get("started") for c in (o.get("status") or {}).get("containerStatuses") or [{}])]
    return bool(objs) and len(started) == len(objs), f"{len(started)}/{len(objs)} worker pods loading"


def _crashes_saying(said: str) -> Callable[[Target, dict[str, Any]], None]:
    """The worker loads, then dies saying ``said``: once ``kubectl logs --previous`` serves those
    words (a kwok Logs object per pod, over the one the operator replica wires when its serving is
    up, as test_deploy_offline.py's crash loop does), the pods are cued to crash."""
    def during(target: Target, notes: dict[str, Any]) -> None:
        previous = faults.write_cri_log(target.tmp / "previous.log", _LOADING + said + "\n")
        current = faults.write_cri_log(target.tmp / "current.log", "INFO worker: restarting\n")
        pods = target.kube.wait_for(Watch("Pod", target.namespace, label_selector=_WORKER_PODS), _started,
                                    awaited="the worker loading", timeout=READINESS_S / 2).objects
        names = sorted(str(p["metadata"]["name"]) for p in pods.values())

        def wired(objs: dict[str, Obj]) -> tuple[bool, str]:
            return set(names) <= {str(o["metadata"]["name"]) for o in objs.values()}, f"{len(objs)} Logs"

        logs = Watch(target.kube.resource(faults.KWOK_API, "Logs"), target.namespace)
        try:  # the replica wires each pod's Logs once, when its serving is up: never over ours
            target.kube.wait_for(logs, wired, awaited="the replica's Logs", timeout=60)
        except SuiteError as exc:
            notes["replica_logs"] = str(exc)
        for pod in pods.values():
            target.kube.apply(faults.logs_object({**pod, "apiVersion": "v1", "kind": "Pod"}, current,
                                                 previous=previous), target.namespace)
        notes["pods"], notes["cued_at"] = names, clock.iso_now_precise()
        for name in names:
            faults.cue(target.kube, name, target.namespace)

        def ended(objs: dict[str, Obj]) -> tuple[bool, str]:
            stamps = [str(((c.get("lastState") or {}).get("terminated") or {}).get("finishedAt") or "")
                      for o in objs.values() for c in (o.get("status") or {}).get("containerStatuses") or []]
            notes["finished_at"] = min((s for s in stamps if s), default=None)
            return bool(notes["finished_at"]), "terminated" if notes["finished_at"] else "not terminated yet"

        target.kube.wait_for(Watch("Pod", target.namespace, label_selector=_WORKER_PODS), ended,
                             awaited="the worker's first termination", timeout=30)
    return during


# ---- contention longer than the no-progress bound, then the GPUs free
CONTENTION_NO_PROGRESS_S = 15.0
H200_NODES = ("h200-0", "h200-1")


def _every_h200_gpu_held(target: Target) -> None:
    target.hold_gpus(H200_NODES, 8)


def _unschedulable(objs: dict[str, Obj]) -> tuple[bool, str]:
    pending = [o for o in objs.values() if any(
        c.get("type") == "PodScheduled" and c.get("status") == "False"
        for c in (o.get("status") or {}).get("conditions") or [])]
    return bool(pending), f"{len(pending)} worker pod(s) unschedulable"


def _free_gpus_after_the_bound(target: Target, notes: dict[str, Any]) -> None:
    """Another tenant releases its GPUs once the worker has waited for them longer than the bound."""
    target.kube.wait_for(Watch("Pod", target.namespace, label_selector=_WORKER_PODS), _unschedulable,
                         awaited="the worker pending on GPUs", timeout=READINESS_S / 2)
    held = time.monotonic()
    time.sleep(CONTENTION_NO_PROGRESS_S + 5)
    for node in H200_NODES:
        target.kube.delete("Pod", f"gpu-holder-{node}", target.namespace)
    notes["held_s"] = round(time.monotonic() - held, 1)


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


# ---- what a pod's claims need (issue 29): DRA claims at step 2, the model cache's claim and its
# download at step 4, with the offline provisioner's stand-ins (deploy_suite_offline/controllers.py)
CHANNEL = f"{DGD_NAME}-channel"
COMPUTE_DOMAIN = {"apiVersion": "resource.nvidia.com/v1beta1", "kind": "ComputeDomain",
                  "metadata": {"name": f"{DGD_NAME}-domain"},
                  "spec": {"numNodes": 1, "channel": {"resourceClaimTemplate": {"name": CHANNEL}}}}
SUPPORT_DATA = Path(__file__).resolve().parents[1] / "e2e" / "data"
NO_SUCH_CLASS = "verdict-no-such-class"  # never created
CACHE = "model-cache"  # the sample's claim


def _claims_channel(dgd: dict[str, Any]) -> None:
    """The worker claims a ComputeDomain's IMEX channel, as NVIDIA's GB200 recipes do."""
    worker_spec(dgd)["resourceClaims"] = [{"name": "compute-domain-channel", "resourceClaimTemplateName": CHANNEL}]


def _cache_of_class(storage_class: str) -> Callable[[Target], dict[str, Path]]:
    """The sample's model cache (ReadWriteMany) under ``storage_class`` and its download Job."""
    def support(target: Target) -> dict[str, Path]:
        return cache_of_class(target.tmp, storage_class.format(ns=target.namespace))
    return support


def _offline_class(name: str, **parameters: str) -> Callable[[Target], None]:
    """A StorageClass of the offline provisioner whose ``parameters`` make it refuse or take its time."""
    def setup(target: Target) -> None:
        storage_class = name.format(ns=target.namespace)
        target.apply_fault(faults.Fault(storage_class, ({  # cluster-scoped: removed with the target's faults
            "apiVersion": "storage.k8s.io/v1", "kind": "StorageClass", "metadata": {"name": storage_class},
            "provisioner": PROVISIONER, "volumeBindingMode": "Immediate", "parameters": parameters},)))
    return setup


DISK_FULL = "OSError: [Errno 28] No space left on device: '/model-store/hub/models--Qwen--Qwen3-0.6B'"


def _download_fills_its_disk(target: Target) -> None:
    """The download's pod fails, its log the disk-full error (a kwok ClusterLogs for the namespace)."""
    log_file = faults.write_cri_log(target.tmp / "download.log", f"Fetching 10 files\n{DISK_FULL}\n")
    name = f"verdict-disk-{target.namespace}"
    target.apply_fault(faults.job_pod_failure(name, faults.by_job("model-download", namespace=target.namespace)))
    target.apply_fault(faults.Fault(name, ({
        "apiVersion": faults.KWOK_API, "kind": "ClusterLogs", "metadata": {"name": name},
        "spec": {"selector": {"matchNamespaces": [target.namespace]},
                 "logs": [{"containers": ["model-download"], "logsFile": str(log_file)}]}},)))


def _failing_download(target: Target) -> dict[str, Path]:
    return {"model-cache": SAMPLE_SUPPORT / "model-cache.yaml", "model-download": SUPPORT_DATA /
            "model-download-fails.yaml"}


FAILED_ATTEMPT = {"status": "failed", "step": "step6_readiness", "failed_attempt": True}
# Not the candidate's failure: blocked with its class, no failed attempt (docs/procedure.md, "Outcomes").
DEPENDENCY = Expected("blocked", "step6_readiness", "dependency", False)

SCENARIOS: dict[str, Scenario] = {s.name: s for s in (
    Scenario("untolerated-taint", Expected(category="failed-deploy", **FAILED_ATTEMPT),  # type: ignore[arg-type]
             _unmodelled(_taint), evidence=("FailedScheduling",),
             covered_by="test_taint_mismatch_past_an_unknown_capacity_fails_step6_at_once"),
    Scenario("selector-mismatch", Expected(category="failed-deploy", **FAILED_ATTEMPT),  # type: ignore[arg-type]
             _unmodelled(_selector), evidence=("FailedScheduling",)),
    # A memory request no node can ever offer: step 2's capacity over every resource blocks it before
    # any mutation (docs/procedure.md, step 2), no failed attempt.
    Scenario("oversized-request", Expected("blocked", "step2_validate", "resource-capacity", False),
             _unmodelled(_oversized)),
    Scenario("crash-loop", Expected(category="crash", **FAILED_ATTEMPT),  # type: ignore[arg-type]
             setup=_crash_loop, evidence=("pod-status",),
             covered_by="test_a_crash_loop_keeps_the_containers_last_lines_redacted_then_is_torn_down"),
    Scenario("quota-refusal", DEPENDENCY, setup=_quota, evidence=("FailedCreate",)),
    # A claim whose provisioner never acts is waited for within timeouts.pvc_bound_s (issue 29).
    Scenario("unbound-pvc", DEPENDENCY, _with(_unbound_claim), setup=_unbound, evidence=("FailedScheduling",),
             covered_by="test_unbound_pvc_stops_step6_with_a_dependency_diagnosis", timeouts={"pvc_bound_s": 10}),
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
    # The container's own words decide at its first termination (no second restart awaited), within
    # 2 s of the kubelet's report of it.
    Scenario("log-signature-gpu-oom", Expected(category="crash", says="gpu-out-of-memory",  # type: ignore[arg-type]
                                               **FAILED_ATTEMPT),
             setup=_loads_then_crashes, during=_crashes_saying(OOM_WORDS), evidence=("termination",), goal_s=2.0),
    Scenario("log-signature-gated-model", Expected("blocked", "step6_readiness", "dependency", False, "gated-model"),
             setup=_loads_then_crashes, during=_crashes_saying(GATED_WORDS), evidence=("termination",), goal_s=2.0,
             in_slice=False),
    # A worker its startup probe kills: the kubelet's Killing words name the class (a failed attempt).
    Scenario("startup-probe-kill", Expected(category="crash", says="startup probe",  # type: ignore[arg-type]
                                            **FAILED_ATTEMPT),
             setup=_startup_probe_kills, evidence=("pod-status",)),
    # The current operator's checkpoint gate (Ready reason waiting_for_checkpoint, replicas held at
    # zero) outlasts the no-progress bound, then opens: a legitimate wait that ends ready.
    Scenario("checkpoint-gate-opens", Expected("ready", "step7_smoke", "ready", False), profiles=("latest",),
             setup=_operator_fault(f"checkpoint-gate:{CHECKPOINT_GATE_S:.0f}"), during=_gate_held,
             no_progress_s=CONTENTION_NO_PROGRESS_S, evidence=("ready-status",)),
    # A wait for GPUs another tenant holds, longer than the no-progress bound (step 2 cannot prove it
    # short: the unmodelled term), ends ready once they free: a hold is a sign of a legitimate wait.
    Scenario("contention-outlasts-no-progress", Expected("ready", "step7_smoke", "ready", False),
             _unmodelled(lambda dgd: None), setup=_every_h200_gpu_held, during=_free_gpus_after_the_bound,
             no_progress_s=CONTENTION_NO_PROGRESS_S, evidence=("ready-status",), in_slice=False),
    # A claim template neither the namespace nor the manifest holds: the worker's pods can never be
    # scheduled, so step 2's capacity says insufficient (resource-capacity), before any apply.
    Scenario("dra-claim-template-missing", Expected("blocked", "step2_validate", "resource-capacity", False,
                                                    f"ResourceClaimTemplate {CHANNEL} not found"),
             _with(_claims_channel), profiles=(DEFAULT_PROFILE,)),
    # The GB200 shape on a cluster without NVIDIA's DRA driver: the ComputeDomain's dry-run is refused
    # and the capacity gate names the channel its template would give.
    Scenario("dra-computedomain-without-driver", Expected("blocked", "step2_validate", "dry-run", False,
                                                          "ComputeDomain", also=("resource-capacity",)),
             _with(_claims_channel), documents=lambda: [copy.deepcopy(COMPUTE_DOMAIN)], profiles=(DEFAULT_PROFILE,),
             in_slice=False),
    # As an admin: the class the model cache names and the workload's storage_class both missing.
    Scenario("claim-class-missing", Expected("blocked", "step2_validate", "storage-class", False, NO_SUCH_CLASS),
             support=_cache_of_class(NO_SUCH_CLASS), args=(f"--storage-class={NO_SUCH_CLASS}",),
             profiles=(DEFAULT_PROFILE,)),
    # The provisioner refuses ReadWriteMany (its ProvisioningFailed): the claim's wait ends at once.
    Scenario("claim-rwx-refused", Expected("blocked", "step4_support_manifests", "pvc", False, "access mode"),
             setup=_offline_class("verdict-rwo-{ns}", accessModes="ReadWriteOnce"),
             support=_cache_of_class("verdict-rwo-{ns}"), evidence=("ProvisioningFailed",), subject=CACHE,
             profiles=(DEFAULT_PROFILE,)),
    Scenario("download-disk-full", Expected("blocked", "step4_support_manifests", "platform", False, "disk-full"),
             setup=_download_fills_its_disk, support=_failing_download, evidence=("job-status",),
             subject="model-download", profiles=(DEFAULT_PROFILE,),
             covered_by="test_failed_download_job_fails_step4_fast_names_its_cause_and_keeps_its_last_log_lines"),
    # A provisioner that takes 30 s: a bounded legitimate wait, then ready (no false verdict).
    Scenario("claim-slow-provisioner", Expected("ready", "step7_smoke", "ready", False),
             setup=_offline_class("verdict-slow-{ns}", provisioningDelaySeconds="30"),
             support=_cache_of_class("verdict-slow-{ns}"), evidence=("ready-status",), profiles=(DEFAULT_PROFILE,),
             waited=("step4_support_manifests", 30.0), in_slice=False),
)}
