"""Claims: why a PersistentVolumeClaim is not Bound, from the words of who binds it.

The PV controller (kube-controller-manager) and the external provisioner (a CSI driver's
``csi-provisioner``, built on sig-storage-lib-external-provisioner) write the claim's events:

* ``ProvisioningFailed`` with a cause clause after ``failed to provision volume with StorageClass
  "<class>": `` (the external provisioner's wrapper) or alone (the PV controller's): a class that
  does not exist, an access mode the provisioner refuses (``invalid AccessModes``, CSI's
  ``MULTI_NODE_MULTI_WRITER``/``capability ... not supported``) or a selector it cannot honour are
  final; any other cause is retried by the provisioner (no verdict of its own);
* ``ExternalProvisioning``, ``Provisioning``: a volume is being made (a bounded legitimate wait);
* ``WaitForFirstConsumer``, ``WaitForPodScheduled``: the class binds with its first pod;
* ``VolumeMismatch`` (``Cannot bind to requested volume "<pv>": <cause>``): the volume the claim
  names does not fit it; ``FailedBinding`` without a class: no volume and nothing to make one.

A pod that meets an unbound claim (``pod has unbound immediate PersistentVolumeClaims``; a claim
whose StorageClass does not exist counts as Immediate, component-helpers' ``IsDelayBindingMode``)
waits as long as its claim does: :func:`claim_wait` says so. A ``Multi-Attach`` error names the pods that
hold a single-node volume; when all of them are being deleted it is a wait for the detach
(:func:`attach_wait`). docs/triage.md lists the verdicts; the vectors cite the sources. Pure.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence

from deploy_suite.constants import ObjView
from deploy_suite.judges import triage
from deploy_suite.judges.triage import Verdict
from deploy_suite.judges.words import Words
from deploy_suite.vocab import TriageCategory

STORAGE = "storage"  # the PV controller and the external provisioner: one speaker, the claim's binder
_WRAPPER = re.compile(r"^failed to provision volume with storageclass \"[^\"]*\": ", re.IGNORECASE)
_CLASS_MISSING = re.compile(r"storageclass(?:\.storage\.k8s\.io)? \"(?P<cls>[^\"]*)\" not found", re.IGNORECASE)
# The provisioner refuses the access mode: the in-tree plugins' "invalid AccessModes [..]: only
# AccessModes [..] are supported", CSI drivers' capability and multi-node-writer refusals.
_ACCESS_MODE = re.compile(r"invalid accessmodes|only accessmodes|access ?modes? \S* ?(?:is )?not supported|"
                          r"invalid access_mode|multi_node_multi_writer|multi_node_single_writer|"
                          r"capability at index \d+ is not supported|volumecapabilities is invalid|"
                          r"readwritemany[^.]*not supported|only support readwriteonce", re.IGNORECASE)
_SELECTOR = re.compile(r"claim\.spec\.selector is not supported", re.IGNORECASE)
_WAITS = {
    "ExternalProvisioning": "the external provisioner is making its volume",
    "Provisioning": "the external provisioner is making its volume",
    "WaitForFirstConsumer": "its class binds with its first pod (WaitForFirstConsumer)",
    "WaitForPodScheduled": "its class binds once its pod is scheduled",
}


def judge_event(reason: str, message: str) -> Words | None:
    """One event of a claim, judged by its reason and cause clause; None for words that say
    nothing about binding (``Resizing``, ...)."""
    if reason in {"ProvisioningSucceeded", "Bound"}:
        return Words(TriageCategory.CLEARED, STORAGE, reason)
    if reason in _WAITS:
        return Words(TriageCategory.PROVISIONING, STORAGE, _WAITS[reason])
    cause = _WRAPPER.sub("", message.strip())
    if reason == "ProvisioningFailed":
        return provisioning_failed(cause)
    if reason == "VolumeMismatch":
        return Words(TriageCategory.FAILED_DEPLOY, STORAGE, "the volume it names (spec.volumeName) does not fit it "
                     f"({cause.rsplit(': ', 1)[-1]}): fix the claim's size, class or access mode", decisive=True)
    if reason == "FailedBinding" and "no storage class is set" in cause.lower():
        return Words(TriageCategory.DEPENDENCY, STORAGE, "no volume fits it and it names no StorageClass to make one",
                     decisive=True)
    return None


def provisioning_failed(cause: str) -> Words:
    """``ProvisioningFailed`` by its cause clause (the provisioner's wrapper taken off)."""
    missing = _CLASS_MISSING.search(cause)
    if missing is not None:
        return Words(TriageCategory.DEPENDENCY, STORAGE, f"its StorageClass {missing.group('cls')!r} does not "
                     "exist: name a class the cluster has (kubectl get storageclass) or create it", decisive=True)
    if _ACCESS_MODE.search(cause):
        return Words(TriageCategory.FAILED_DEPLOY, STORAGE, "its class's provisioner refuses the access mode it "
                     "asks (ReadWriteMany on single-node storage): ask ReadWriteOnce, or a class whose "
                     "provisioner supports ReadWriteMany", decisive=True)
    if _SELECTOR.search(cause):
        return Words(TriageCategory.FAILED_DEPLOY, STORAGE, "a dynamically provisioned claim cannot have a "
                     "selector: drop spec.selector or bind it to a volume by name", decisive=True)
    # Anything else the provisioner retries by itself (a timeout, a backend error): shown, not final.
    return Words(TriageCategory.UNKNOWN, STORAGE, "the provisioner failed for a cause no rule reads: it retries")


def missing_class(events: Iterable[ObjView]) -> str | None:
    """The StorageClass a claim's ``ProvisioningFailed`` says does not exist, if one does."""
    for event in events:
        if event.get("reason") == "ProvisioningFailed":
            found = _CLASS_MISSING.search(str(event.get("message") or ""))
            if found is not None:
                return found.group("cls")
    return None


def _phase(pvc: ObjView | None) -> str:
    return str(((pvc or {}).get("status") or {}).get("phase") or "")


def triage_claim(name: str, pvc: ObjView | None, events: Sequence[ObjView], recheck_s: float = 30.0) -> Verdict | None:
    """A claim not Bound, from its events: a final word of the provisioner or the PV controller
    since its last success decides; else a volume being made (or a first consumer awaited) is a
    wait; else the words no rule reads are shown (``unknown``). None when Bound or nothing was said."""
    if _phase(pvc) == "Bound":
        return None
    subject = f"PersistentVolumeClaim/{name}"
    if _phase(pvc) == "Lost":
        return Verdict(TriageCategory.PLATFORM, f"{subject} lost its volume (phase Lost): the PersistentVolume it "
                       "was bound to is gone; restore it or recreate the claim", [f"{subject}: phase Lost"])
    said: dict[str, tuple[ObjView, Words]] = {}  # the newest word of each reason since the last success
    for event in sorted(events, key=triage.event_time):
        words = judge_event(str(event.get("reason") or ""), str(event.get("message") or ""))
        if words is not None and words.category == TriageCategory.CLEARED:
            said = {}
        elif words is not None:
            said.pop(str(event.get("reason")), None)
            said[str(event.get("reason"))] = (event, words)
    verdicts = [triage.from_words(subject, str(e.get("reason")), str(e.get("message") or ""), w, recheck_s)
                for e, w in said.values()]
    final = [v for v in verdicts if v.decisive]
    return final[-1] if final else triage.combine(reversed(verdicts))


def claims_of(pod: ObjView) -> list[str]:
    """The claims a pod's volumes name."""
    return [str(v["persistentVolumeClaim"]["claimName"]) for v in (pod.get("spec") or {}).get("volumes") or []
            if isinstance(v, Mapping) and (v.get("persistentVolumeClaim") or {}).get("claimName")]


def claim_wait(pod_verdict: Verdict, claims: Mapping[str, tuple[ObjView | None, Sequence[ObjView]]],
               recheck_s: float = 30.0) -> Verdict:
    """A pod the scheduler holds on its unbound claims (``pod has unbound immediate
    PersistentVolumeClaims``), judged by those claims (name -> the claim, its events): a claim's
    final word decides (a missing class, a refused access mode); a claim still being bound or
    provisioned, or one with no word yet, is a legitimate wait (``provisioning``); a claim that does
    not exist stays the pod's dependency verdict."""
    if not claims:  # no claim named (nothing to read): the scheduler's words stand
        return pod_verdict
    found = []
    for name, (pvc, events) in claims.items():
        if pvc is None:
            return pod_verdict
        verdict = triage_claim(name, pvc, events, recheck_s)
        if verdict is not None and not verdict.can_wait:
            return Verdict(verdict.category, f"{verdict.diagnosis} (its pod waits on it: "
                           f"{pod_verdict.evidence[0] if pod_verdict.evidence else pod_verdict.diagnosis})",
                           [*verdict.evidence, *pod_verdict.evidence], decisive=verdict.decisive)
        if _phase(pvc) != "Bound":
            found.append(name)
    if not found:  # bound since the scheduler spoke: it retries the pod
        return Verdict(TriageCategory.PROVISIONING, "its claims are bound now: the scheduler retries the pod",
                       list(pod_verdict.evidence), can_wait=True, next_check_s=recheck_s)
    return Verdict(TriageCategory.PROVISIONING, f"its claim(s) {', '.join(found)} are still being bound or "
                   f"provisioned (no provisioning failure): a bounded wait; next check in {recheck_s:.0f}s",
                   [*pod_verdict.evidence, *(f"PersistentVolumeClaim/{n}: phase {_phase(claims[n][0]) or '?'}"
                                              for n in found)], can_wait=True, next_check_s=recheck_s)


UNBOUND_CLAIMS = "unbound immediate persistentvolumeclaims"


def waits_on_claims(verdict: Verdict | None) -> bool:
    """The scheduler's verdict on a pod is its unbound claims (the words the claim judges read)."""
    return verdict is not None and verdict.category == TriageCategory.DEPENDENCY and \
        UNBOUND_CLAIMS in " ".join(verdict.evidence).lower()


_HOLDERS = re.compile(r"already used by pod\(s\) (?P<pods>.+?)(?: and \d+ pod\(s\) in different namespaces)?$",
                      re.IGNORECASE)


def attach_wait(verdict: Verdict, pods: Iterable[ObjView]) -> Verdict:
    """A ``Multi-Attach`` verdict whose holders (named in the attach/detach controller's words) are
    all being deleted: the volume detaches once they are gone, a wait, not the manifest's."""
    text = " ".join(verdict.evidence)
    found = _HOLDERS.search(text.split("Multi-Attach", 1)[-1].strip()) if "Multi-Attach" in text else None
    if found is None or verdict.category != TriageCategory.FAILED_DEPLOY:
        return verdict
    names = {n.strip().split("/")[-1] for n in found.group("pods").split(",")}
    going = {str(p["metadata"]["name"]) for p in pods if (p.get("metadata") or {}).get("deletionTimestamp")}
    if not names or not names <= going:
        return verdict
    return Verdict(TriageCategory.CONTENTION, f"its volume is still held by pod(s) {', '.join(sorted(names))} being "
                   "deleted: it detaches once they are gone", list(verdict.evidence), can_wait=True,
                   next_check_s=verdict.next_check_s or 30.0)
