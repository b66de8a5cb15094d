"""Fault switches for the offline cluster: kwok Stages that tests apply at runtime and delete after.

The cluster runs kwok with Stages as API objects (``cluster up`` passes ``--enable-crds=Stage,...``
and applies the default lifecycle from ``manifests/stages.yaml``, all weight 0). A fault is one or
more extra Stages with weight 10000: where a fault stage and a default stage both match a pod, kwok
picks by weight, so the fault always wins, and only for the pods its selector names:

* :func:`by_dgd` - pods of one DynamoGraphDeployment (the operator's graph-name label);
* :func:`by_image` - pods with a container whose image contains a substring (a jq expression);
* :func:`by_job` - pods of one Job (``batch.kubernetes.io/job-name``, else ``job-name``).

A fault may also wait for the test's cue (:func:`crash_on_cue`, :func:`cue`: an annotation).

Example (a test)::

    fault = faults.crash_loop("crash-llm", faults.by_dgd("llm", namespace=ns))
    faults.apply(kube, fault)
    try:
        kube.apply(dgd_manifest, ns)   # its pods now go Running -> CrashLoopBackOff
        ...
    finally:
        faults.remove(kube, fault)

Stages only act on pod events, so apply a fault *before* the pods it should hit are created (a
pod already Running is left as it is until its next change). Removing a fault leaves pods that are
already faulted as they are (pod-ready skips waiting pods); delete them and their controller makes
healthy ones, as on a real cluster after the image or the crash is fixed.

``kubectl logs`` of a faulted pod can serve a local file through a kwok ``Logs`` object
(:func:`logs_object`): the crash output a person (or the harness's triage) would read.

Besides the kwok Stages, three more switches (see ``docs/offline-cluster.md``, "Fault switches"):

* :func:`pod_admission_refusal` - a validating webhook (served by the controllers process) that
  refuses the selected DGD's pods: its ReplicaSets emit ``FailedCreate``; applied and removed
  like the Stage faults;
* :func:`set_operator_fault` - the operator replica misbehaves for one DGD: ``transient-failed``
  (one reconcile written as state ``failed`` with a 409-conflict message, then it recovers) or
  ``invalid-template`` (a GPU request above its limit: ``FailedCreate``, DCD ``Available=False``);
* :func:`set_serving_fault` - the DGD's frontend misbehaves: ``chat-500``, ``never-list``,
  ``error-object`` or ``model-not-ready`` (listed, chat answers 503 ``Model not ready``).
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from deploy_suite import clock
from deploy_suite.access.kube import Kube, Obj, translate
from deploy_suite.constants import LABEL_DGD_NAME, LABEL_JOB_NAME
from deploy_suite.errors import Conflict

KWOK_API = "kwok.x-k8s.io/v1alpha1"
FAULT_WEIGHT = 10000
LABEL_FAULT = "deploy-suite.local/fault"
# How long a crashed container "backs off" before the next simulated restart (kubelet starts at 10s).
CRASH_BACKOFF_MS = 10000
CUE_ANNOTATION = "deploy-suite.local/crash"  # crash_on_cue: the pod crashes once it carries "true"
WAITING_FAULTS = ("CrashLoopBackOff", "ImagePullBackOff", "ErrImagePull", "CreateContainerConfigError")
# A pod none of these faults has caught yet (each such Stage acts once per pod).
_NOT_WAITING = {"key": ".status.containerStatuses.[].state.waiting.reason", "operator": "NotIn",
                "values": list(WAITING_FAULTS)}

# ConfigMaps the controllers process reads (data keys ``<namespace>.<dgd>``), and the one where
# `cluster up` records the webhook server's base URL and CA bundle.
SERVING_FAULTS_CONFIGMAP = ("kube-system", "deploy-suite-faults")
OPERATOR_FAULTS_CONFIGMAP = ("kube-system", "deploy-suite-operator-faults")
WEBHOOK_INFO_CONFIGMAP = ("kube-system", "deploy-suite-webhook")
REFUSE_PODS_PATH = "/refuse-pods"

Expression = dict[str, Any]


@dataclass(frozen=True)
class Fault:
    """The objects that make up one fault switch (apply all, delete all): kwok Stages, or a
    webhook configuration."""

    name: str
    stages: tuple[Obj, ...]


# ------------------------------------------------------------------ selectors


def _in(key: str, *values: str) -> Expression:
    return {"key": key, "operator": "In", "values": list(values)}


def _namespace(namespace: str | None) -> list[Expression]:
    return [_in(".metadata.namespace", namespace)] if namespace else []


def by_dgd(name: str, namespace: str | None = None) -> list[Expression]:
    """Pods the operator created for DGD ``name`` (every component)."""
    return [_in(f'.metadata.labels["{LABEL_DGD_NAME}"]', name), *_namespace(namespace)]


def by_image(substring: str, namespace: str | None = None) -> list[Expression]:
    """Pods with a container whose image contains ``substring`` (e.g. a bad tag)."""
    # json.dumps makes a valid jq string literal of any substring (quotes, backslashes).
    expr = f".spec.containers.[].image | contains({json.dumps(substring)})"
    return [_in(expr, "true"), *_namespace(namespace)]


def by_job(name: str, namespace: str | None = None) -> list[Expression]:
    """Pods of Job ``name``: the job controller labels them with both spellings since 1.27."""
    expr = f'.metadata.labels["batch.kubernetes.io/job-name"] // .metadata.labels["{LABEL_JOB_NAME}"]'
    return [_in(expr, name), *_namespace(namespace)]


def _alive(phases: Sequence[str]) -> list[Expression]:
    return [{"key": ".metadata.deletionTimestamp", "operator": "DoesNotExist"},
            _in(".status.phase", *phases)]


def _stage(name: str, selector: Iterable[Expression], status_template: str, *,
           delay_ms: int | None = None, event: Obj | None = None) -> Obj:
    spec: Obj = {
        "resourceRef": {"apiGroup": "v1", "kind": "Pod"},
        "selector": {"matchExpressions": list(selector)},
        "weight": FAULT_WEIGHT,
        "next": {"statusTemplate": status_template, **({"event": event} if event else {})},
    }
    if delay_ms is not None:
        spec["delay"] = {"durationMilliseconds": delay_ms, "jitterDurationMilliseconds": delay_ms + delay_ms // 10}
    return {"apiVersion": KWOK_API, "kind": "Stage",
            "metadata": {"name": name, "labels": {LABEL_FAULT: "true"}}, "spec": spec}


# ------------------------------------------------------------------ templates

# kwok renders these Go templates against the pod and merges the result into its status.
def _pod_conditions(ready: bool) -> str:
    """A started pod's conditions: scheduled, initialized, and Ready/ContainersReady as ``ready`` says."""
    head = "".join(f'- lastTransitionTime: {{{{ $now | Quote }}}}\n  status: "True"\n  type: {t}\n'
                   for t in ("PodScheduled", "Initialized"))
    if ready:
        tail = "".join(f'- lastTransitionTime: {{{{ $now | Quote }}}}\n  status: "True"\n  type: {t}\n'
                       for t in ("Ready", "ContainersReady"))
    else:
        tail = "".join('- lastTransitionTime: {{ $now | Quote }}\n  status: "False"\n  reason: ContainersNotReady\n'
                       '  message: {{ printf "containers with unready status: %s" $names | Quote }}\n'
                       f"  type: {t}\n" for t in ("Ready", "ContainersReady"))
    return "conditions:\n" + head + tail


_NOT_READY_CONDITIONS = _pod_conditions(ready=False)

_HEAD = """\
{{ $now := Now }}
{{ $root := . }}
{{ $names := list }}{{ range .spec.containers }}{{ $names = append $names .name }}{{ end }}
{{ $names = printf "[%s]" (join " " $names) }}
"""

_IPS = """\
{{ with NodeIPWith .spec.nodeName }}
hostIP: {{ . | Quote }}
{{ end }}
{{ with PodIPWith .spec.nodeName ( or .spec.hostNetwork false ) ( or .metadata.uid "" ) \
( or .metadata.name "" ) ( or .metadata.namespace "" ) }}
podIP: {{ . | Quote }}
{{ end }}
"""

# A terminated container as the kubelet reports it (its state, or the last state of a restarted one).
_TERMINATED = """\
    terminated:
      exitCode: EXIT_CODE
      reason: Error
      startedAt: {{ $now | Quote }}
      finishedAt: {{ $now | Quote }}
"""


def _container_statuses(restart_count: str, states: str, before: str = "", *, started: bool = False,
                        ready: bool = False) -> str:
    """``containerStatuses``: one entry per container; ``states`` is its (last) state."""
    return ("containerStatuses:\n{{ range $c := .spec.containers }}\n" + before
            + '- image: {{ $c.image | Quote }}\n  imageID: ""\n  name: {{ $c.name | Quote }}\n'
            + f"  ready: {str(ready).lower()}\n  started: {str(started).lower()}\n  restartCount: {restart_count}\n"
            + states + "{{ end }}\n")


# One restart per backoff: restartCount grows from what the pod showed, like the kubelet's.
_CRASH_TEMPLATE = _HEAD + _NOT_READY_CONDITIONS + _container_statuses(
    "{{ add1 $prev }}",
    "  lastState:\n" + _TERMINATED + """\
  state:
    waiting:
      reason: CrashLoopBackOff
      message: {{ printf "back-off 10s restarting failed container=%s pod=%s_%s(%s)" $c.name \
$root.metadata.name $root.metadata.namespace $root.metadata.uid | Quote }}
""",
    before="""\
{{ $prev := 0 }}
{{ range $root.status.containerStatuses }}{{ if eq .name $c.name }}{{ $prev = .restartCount }}{{ end }}{{ end }}
""") + """\
phase: Running
{{ with $root.status.startTime }}{{ else }}startTime: {{ $now | Quote }}{{ end }}
""" + _IPS

_IMAGE_TEMPLATE = _HEAD + _NOT_READY_CONDITIONS + _container_statuses("0", """\
  state:
    waiting:
      reason: REASON
      message: {{ printf "MESSAGE" $c.image | Quote }}
""") + """\
phase: Pending
startTime: {{ $now | Quote }}
""" + _IPS

_RUNNING = "  state:\n    running:\n      startedAt: {{ $now | Quote }}\n"
# Containers started, not ready yet: a model still loading (its startup probe has not passed).
_STARTED_TEMPLATE = _HEAD + _NOT_READY_CONDITIONS + _container_statuses("0", _RUNNING, started=True) + """\
phase: Running
startTime: {{ $now | Quote }}
""" + _IPS
_READY_TEMPLATE = _HEAD + _pod_conditions(ready=True) + _container_statuses(
    "0", _RUNNING, started=True, ready=True) + """\
phase: Running
{{ with $root.status.startTime }}{{ else }}startTime: {{ $now | Quote }}{{ end }}
""" + _IPS

_JOB_FAIL_TEMPLATE = _HEAD + _NOT_READY_CONDITIONS + _container_statuses("0", "  state:\n" + _TERMINATED) + """\
phase: Failed
startTime: {{ $now | Quote }}
""" + _IPS

# The kubelet's words for a tag that does not exist; its back-off message carries the last pull
# error after the image (the event-only form is judged from events, see deploy_suite.judges.conditions).
_IMAGE_MESSAGES = {
    "ImagePullBackOff": 'Back-off pulling image \\"%[1]s\\": ErrImagePull: rpc error: code = NotFound desc = failed '
                        'to pull and unpack image \\"%[1]s\\": not found',
    "ErrImagePull": 'failed to pull and unpack image \\"%s\\": not found',
}


# ------------------------------------------------------------------ faults


def crash_loop(name: str, selector: Sequence[Expression], exit_code: int = 1) -> Fault:
    """Selected pods run, crash with ``exit_code`` and sit in CrashLoopBackOff (phase Running,
    Ready False, lastState terminated), restarting once per backoff while the fault is applied."""
    template = _CRASH_TEMPLATE.replace("EXIT_CODE", str(int(exit_code)))
    not_crashed = {"key": ".status.containerStatuses.[].state.waiting.reason", "operator": "NotIn",
                   "values": ["CrashLoopBackOff"]}
    crashed = _in(".status.containerStatuses.[].state.waiting.reason", "CrashLoopBackOff")
    return Fault(name, (
        _stage(name, [*selector, *_alive(["Pending", "Running"]), not_crashed], template),
        # The restart loop: a crashed pod "restarts" and crashes again after each backoff.
        _stage(f"{name}-backoff", [*selector, *_alive(["Running"]), crashed], template, delay_ms=CRASH_BACKOFF_MS),
    ))


def crash_on_cue(name: str, selector: Sequence[Expression], exit_code: int = 1) -> Fault:
    """Selected pods start and load (Running, containers started, not Ready) until :func:`cue`
    marks one, which then crashes with ``exit_code`` and crash-loops as :func:`crash_loop`: an
    engine that dies once its model is loaded, at the moment a test picks (after it has made
    ``kubectl logs`` serve the crashed run's words)."""
    key = f'.metadata.annotations["{CUE_ANNOTATION}"]'
    loading = slow_start(f"{name}-loading", [*selector, {"key": key, "operator": "DoesNotExist"}], 1.0, None)
    return Fault(name, (*loading.stages, *crash_loop(name, [*selector, _in(key, "true")], exit_code).stages))


def cue(kube: Kube, pod: str, namespace: str) -> None:
    """The pod of :func:`crash_on_cue` crashes now (kwok acts on the pod's update)."""
    path = kube.resource("v1", "Pod").path(namespace, pod)
    try:
        kube.transport.request("PATCH", path, {}, {"metadata": {"annotations": {CUE_ANNOTATION: "true"}}},
                               "application/merge-patch+json")
    except Exception as exc:
        raise translate(exc, f"patch pod {namespace}/{pod}") from exc


def image_pull(name: str, selector: Sequence[Expression], reason: str = "ImagePullBackOff") -> Fault:
    """Selected pods are scheduled (``spec.nodeName`` set, so they hold their GPUs) but stay
    Pending with every container waiting on ``reason`` (ImagePullBackOff or ErrImagePull)."""
    if reason not in _IMAGE_MESSAGES:
        raise ValueError(f"reason {reason!r} is not one of {sorted(_IMAGE_MESSAGES)}")
    template = _IMAGE_TEMPLATE.replace("REASON", reason).replace("MESSAGE", _IMAGE_MESSAGES[reason])
    return Fault(name, (_stage(name, [*selector, *_alive(["Pending"]), _NOT_WAITING], template),))


def missing_secret_key(name: str, selector: Sequence[Expression], secret: str, key: str) -> Fault:
    """Selected pods are scheduled but their containers never start: the kubelet cannot build
    their environment from ``secret`` (it lacks ``key``): ``CreateContainerConfigError`` with the
    kubelet's words."""
    words = f"couldn't find key {key} in Secret %s/{secret}"
    template = _IMAGE_TEMPLATE.replace("REASON", "CreateContainerConfigError").replace(
        '{{ printf "MESSAGE" $c.image | Quote }}', f'{{{{ printf "{words}" $root.metadata.namespace | Quote }}}}')
    return Fault(name, (_stage(name, [*selector, *_alive(["Pending"]), _NOT_WAITING], template),))


def slow_start(name: str, selector: Sequence[Expression], start_s: float, ready_s: float | None) -> Fault:
    """Selected pods start slowly, as a large model loads: Running with their containers started
    but not Ready after ``start_s``, then Ready ``ready_s`` later; never Ready when ``ready_s`` is None
    (an engine that died while its API server lives on: Running, not Ready, no crash)."""
    not_ready = {"key": '.status.conditions.[] | select( .type == "Ready" ) | .status', "operator": "NotIn",
                 "values": ["True"]}
    stages = [_stage(name, [*selector, *_alive(["Pending"]), not_ready, _NOT_WAITING], _STARTED_TEMPLATE,
                     delay_ms=int(start_s * 1000))]
    if ready_s is not None:
        started = _in(".status.containerStatuses.[].started", "true")
        stages.append(_stage(f"{name}-ready", [*selector, *_alive(["Running"]), not_ready, started], _READY_TEMPLATE,
                             delay_ms=int(ready_s * 1000)))
    return Fault(name, tuple(stages))


# A container its startup probe kills: restarted (exit 143, SIGTERM), running again, never ready.
_PROBE_KILL_TEMPLATE = _HEAD + _NOT_READY_CONDITIONS + _container_statuses(
    "{{ add1 $prev }}", "  lastState:\n" + _TERMINATED.replace("EXIT_CODE", "143") + _RUNNING,
    before="""\
{{ $prev := 0 }}
{{ range $root.status.containerStatuses }}{{ if eq .name $c.name }}{{ $prev = .restartCount }}{{ end }}{{ end }}
""") + """\
phase: Running
{{ with $root.status.startTime }}{{ else }}startTime: {{ $now | Quote }}{{ end }}
""" + _IPS


def startup_probe_kill(name: str, selector: Sequence[Expression], container: str = "main",
                       every_s: float = 2.0) -> Fault:
    """Selected pods start (Running, not ready) and their startup probe never passes: every
    ``every_s`` the kubelet kills ``container`` with its words, the Normal event ``Killing``
    ``Container <c> failed startup probe, will be restarted`` (kubernetes pkg/kubelet/kuberuntime,
    ``killContainer``), and restarts it (restartCount one up, last state terminated with exit 143)."""
    not_ready = {"key": '.status.conditions.[] | select( .type == "Ready" ) | .status', "operator": "NotIn",
                 "values": ["True"]}
    start = slow_start(f"{name}-start", selector, 1.0, None).stages
    killing = {"type": "Normal", "reason": "Killing",
               "message": f"Container {container} failed startup probe, will be restarted"}
    kill = _stage(name, [*selector, *_alive(["Running"]), not_ready], _PROBE_KILL_TEMPLATE,
                  delay_ms=int(every_s * 1000), event=killing)
    return Fault(name, (*start, kill))


def job_pod_failure(name: str, selector: Sequence[Expression], exit_code: int = 1) -> Fault:
    """Selected pods fail (phase Failed, exit ``exit_code``): the job controller retries until
    ``backoffLimit`` is exhausted, then marks the Job Failed (reason BackoffLimitExceeded)."""
    template = _JOB_FAIL_TEMPLATE.replace("EXIT_CODE", str(int(exit_code)))
    return Fault(name, (_stage(name, [*selector, *_alive(["Pending", "Running"])], template),))


def apply(kube: Kube, fault: Fault) -> None:
    for stage in fault.stages:
        kube.apply(stage)


def remove(kube: Kube, fault: Fault) -> None:
    for stage in fault.stages:
        kube.delete(kube.resource(stage["apiVersion"], stage["kind"]), stage["metadata"]["name"])


def pod_admission_refusal(kube: Kube, name: str, dgd: str, namespace: str) -> Fault:
    """A validating webhook refusing every pod of DGD ``dgd`` in ``namespace`` (create), served by
    the controllers process; the ReplicaSets' ``FailedCreate`` events carry its denial."""
    info = kube.get("ConfigMap", WEBHOOK_INFO_CONFIGMAP[1], WEBHOOK_INFO_CONFIGMAP[0])["data"]
    config = {
        "apiVersion": "admissionregistration.k8s.io/v1", "kind": "ValidatingWebhookConfiguration",
        "metadata": {"name": name, "labels": {LABEL_FAULT: "true"}},
        "webhooks": [{
            "name": f"{name}.deploy-suite.local", "admissionReviewVersions": ["v1"], "sideEffects": "None",
            "failurePolicy": "Fail", "timeoutSeconds": 5,
            "clientConfig": {"url": f"{info['url']}{REFUSE_PODS_PATH}/{name}", "caBundle": info["caBundle"]},
            "rules": [{"apiGroups": [""], "apiVersions": ["v1"], "operations": ["CREATE"], "resources": ["pods"],
                       "scope": "Namespaced"}],
            "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": namespace}},
            "objectSelector": {"matchLabels": {LABEL_DGD_NAME: dgd}},
        }],
    }
    return Fault(name, (config,))


def _set_key(kube: Kube, where: tuple[str, str], key: str, value: str | None) -> None:
    """Set (or with None remove) one data key of a ConfigMap, leaving the other keys alone."""
    namespace, name = where
    if value is not None:
        try:
            kube.create({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name, "namespace": namespace},
                         "data": {key: value}}, namespace)
            return
        except Conflict:
            pass
    path = kube.resource("v1", "ConfigMap").path(namespace, name)
    try:  # a merge patch: a server-side apply by one manager would drop the keys it set before
        kube.transport.request("PATCH", path, {}, {"data": {key: value}}, "application/merge-patch+json")
    except Exception as exc:
        err = translate(exc, f"patch configmap {namespace}/{name}")
        if value is not None or err.status != 404:
            raise err from exc


def set_operator_fault(kube: Kube, namespace: str, dgd: str, fault: str | None) -> None:
    """``transient-failed[:SECONDS]`` or ``invalid-template`` for DGD ``namespace/dgd``; None clears it."""
    _set_key(kube, OPERATOR_FAULTS_CONFIGMAP, f"{namespace}.{dgd}", fault)


def set_serving_fault(kube: Kube, namespace: str, dgd: str, fault: str | None) -> None:
    """``chat-500``, ``never-list``, ``error-object`` or ``model-not-ready`` for the DGD's frontend,
    read when its serving starts (set it before the DGD); None clears it."""
    _set_key(kube, SERVING_FAULTS_CONFIGMAP, f"{namespace}.{dgd}", fault)


# ------------------------------------------------------------------ kubectl logs


_ANSI = re.compile(r"\x1b\[[0-9;]*[A-Za-z]")


def cri_log(text: str, stream: str = "stdout") -> str:
    """``text`` in the CRI container log format, the only one kwok's ``Logs`` serves.

    ``kubectl logs`` goes through kwok to the kubelet's CRI log reader, which refuses plain text
    ("unsupported log format"): every line needs ``<RFC3339Nano time> <stream> F <line>``.
    Colour codes are stripped, as a container runtime with no TTY would never see them.
    """
    now = clock.now()
    stamp = now.strftime("%Y-%m-%dT%H:%M:%S.") + f"{now.microsecond:06d}000Z"
    return "".join(f"{stamp} {stream} F {_ANSI.sub('', line)}\n" for line in text.splitlines())


def write_cri_log(path: Path, text: str, stream: str = "stdout") -> Path:
    """Write ``text`` to ``path`` in CRI log format (for :func:`logs_object`); returns ``path``."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(cri_log(text, stream))
    return path


def logs_object(pod: Obj, files: dict[str, Path] | Path, *, previous: Path | None = None,
                follow: bool = False) -> Obj:
    """A kwok ``Logs`` object making ``kubectl logs <pod> [-c container]`` serve local files.

    The files must be in CRI log format (:func:`write_cri_log`). ``files`` is one file for every
    container, or container name -> file. ``previous`` serves
    ``kubectl logs --previous`` (the crashed container's output). Owned by the pod, so the
    garbage collector removes it with the pod.
    """
    meta = pod["metadata"]
    by_container = files if isinstance(files, dict) else {"": files}
    entries: list[Obj] = []
    for container, path in by_container.items():
        entry: Obj = {"logsFile": str(path), "follow": follow}
        if container:
            entry["containers"] = [container]
        else:
            entry["containers"] = [c["name"] for c in pod["spec"]["containers"]]
        if previous is not None:
            entry["previousLogsFile"] = str(previous)
        entries.append(entry)
    return {
        "apiVersion": KWOK_API, "kind": "Logs",
        "metadata": {"name": meta["name"], "namespace": meta["namespace"],
                     "ownerReferences": [owner_reference(pod)]},
        "spec": {"logs": entries},
    }


def port_forward_object(pod: Obj, port: int, target_port: int, address: str = "127.0.0.1") -> Obj:
    """A kwok ``PortForward``: ``kubectl port-forward <pod> x:<port>`` reaches ``address:target_port``."""
    meta = pod["metadata"]
    return {
        "apiVersion": KWOK_API, "kind": "PortForward",
        "metadata": {"name": meta["name"], "namespace": meta["namespace"],
                     "ownerReferences": [owner_reference(pod)]},
        "spec": {"forwards": [{"ports": [port], "target": {"address": address, "port": target_port}}]},
    }


def owner_reference(obj: Obj, controller: bool = False) -> Obj:
    meta = obj["metadata"]
    ref: Obj = {"apiVersion": obj.get("apiVersion", "v1"), "kind": obj.get("kind", "Pod"),
                "name": meta["name"], "uid": meta["uid"]}
    if controller:
        ref.update(controller=True, blockOwnerDeletion=True)
    return ref
