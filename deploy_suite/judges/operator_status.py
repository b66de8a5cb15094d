"""How to read a DGD's status across the operator's generations (docs/operator-generations.md).

Three facts decide a verdict, and each differs by operator generation:

* **Which generation the status describes.** From 1.0 on, the operator writes
  ``status.observedGeneration`` on every reconcile without error; before 1.0 it never does. With
  the field, Ready counts only when it equals ``metadata.generation``. Without it, Ready counts when
  it cannot be stale: the object was never updated (``metadata.generation`` 1: its status can only
  describe the spec it was created with), or the Ready condition turned True after the apply that
  set the current spec (its ``lastTransitionTime`` at or after the server-side-apply time of this
  experiment's field manager, both stamped by the API server's clock).
* **Whether ``state: failed`` is a verdict.** The operator writes any reconcile error as
  ``failed`` until the next reconcile, transient 409 conflicts included. A known-permanent text is
  a verdict at once; anything else is one only when it persists for a grace period.

Pure logic over plain JSON dicts; imports only leaves.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass

from deploy_suite.clock import parse_iso
from deploy_suite.constants import ObjView
from deploy_suite.vocab import TriageCategory

# Reconcile errors that no later reconcile can clear, by what fixes them (docs/operator-generations.md).
# ``platform``: the cluster lacks what the candidate needs; ``dependency``: an object to create;
# ``failed-deploy``: the API server refuses what the manifest makes the operator write. Each is the
# cause clause, whatever the wrapper the operator generation puts around it ("failed to reconcile
# top-level PVCs: ...", "kai-scheduler queue validation failed: ...").
PERMANENT_ERRORS: tuple[tuple[re.Pattern[str], TriageCategory], ...] = (
    # The API server's field errors: "<kind> "x" is invalid: <field path>: Invalid value|Required value|...".
    (re.compile(r"\bis invalid: [\w.\[\]/-]+: ", re.I), TriageCategory.FAILED_DEPLOY),
    (re.compile(r"no[ _]multinode[ _]orchestrator[ _]available", re.I), TriageCategory.PLATFORM),
    # KAI's Queue CRD itself missing (KAI not installed) behind the operator's queue check.
    (re.compile(r"failed to validate queue .*(could not find the requested resource|no matches for kind)", re.I),
     TriageCategory.PLATFORM),
    (re.compile(r"queue validation failed: queue \S+ not found", re.I), TriageCategory.DEPENDENCY),
    (re.compile(r"PVC \"[^\"]+\" does not exist and create is not enabled", re.I), TriageCategory.DEPENDENCY),
    (re.compile(r"PVCs?: (persistentvolumeclaims?|PersistentVolumeClaim) \"[^\"]+\" not found", re.I),
     TriageCategory.DEPENDENCY),
)
# Reconcile errors the operator retries by itself (optimistic-concurrency conflicts).
TRANSIENT_ERRORS = re.compile(
    r"the object has been modified|Operation cannot be fulfilled|please apply your changes to the latest version",
    re.I)


def ready_condition(status: ObjView) -> ObjView:
    return next((c for c in status.get("conditions") or [] if c.get("type") == "Ready"), {})


def error_text(status: ObjView) -> str:
    """The reconcile error as the operator wrote it: the Ready condition's message, else its reason."""
    cond = ready_condition(status)
    return str(cond.get("message") or cond.get("reason") or status.get("message") or "no message")


def permanent_error(text: str) -> TriageCategory | None:
    """The category of a reconcile error no later reconcile clears (None: it may be transient)."""
    return next((category for pattern, category in PERMANENT_ERRORS if pattern.search(text)), None)


def apply_time(obj: ObjView, field_manager: str | None) -> str | None:
    """When ``field_manager`` last server-side-applied ``obj`` (the API server's clock)."""
    if not field_manager:
        return None
    stamps = [(t, str(e["time"])) for e in (obj.get("metadata") or {}).get("managedFields") or []
              if e.get("manager") == field_manager and e.get("operation") == "Apply"
              and (t := parse_iso(e.get("time"))) is not None]
    return max(stamps)[1] if stamps else None


@dataclass(frozen=True)
class Generation:
    """Whether the status describes the current spec, and by which rule."""

    current: bool
    rule: str  # observedGeneration | never-updated | ready-after-apply | stale


def generation(obj: ObjView, field_manager: str | None) -> Generation:
    """Does the status describe the spec of ``obj`` (see the module's docstring)?"""
    meta, status = obj.get("metadata") or {}, obj.get("status") or {}
    gen = meta.get("generation")
    if "observedGeneration" in status:
        return Generation(status.get("observedGeneration") == gen, "observedGeneration")
    if gen in (None, 1):
        return Generation(True, "never-updated")
    applied = parse_iso(apply_time(obj, field_manager))
    since = parse_iso(ready_condition(status).get("lastTransitionTime"))
    if applied is not None and since is not None and since >= applied:
        return Generation(True, "ready-after-apply")
    return Generation(False, "stale")


# The reasons the current operator gives on the DGD's Ready condition while it is not ready, and
# what each leaves to the harness (docs/operator-generations.md, "Why the DGD is not Ready"):
# ``some_resources_are_not_ready`` (every generation: checkResourcesReadiness), the Grove-derived
# ``insufficient_capacity``, ``pods_not_ready``, ``updating``, ``mixed_not_ready_reasons`` (ai-dynamo/dynamo
# pull request 11131), and ``waiting_for_checkpoint`` (applyCheckpointStartupReadiness, ai-dynamo/dynamo
# deploy/operator/internal/controller/dynamographdeployment_controller.go): a component whose
# checkpoint startup policy waits for its checkpoint is held at zero replicas until it is ready.
CHECKPOINT_GATE = "waiting_for_checkpoint"
NOT_READY_REASONS: dict[str, str] = {
    "some_resources_are_not_ready": "some of its resources are not ready (the pods say why)",
    "insufficient_capacity": "the orchestrator could not schedule every replica (the pods' scheduling words say why)",
    "pods_not_ready": "its pods are scheduled, not all ready (loading, or their containers say why)",
    "updating": "a rollout of its components is under way",
    "mixed_not_ready_reasons": "its components are not ready for different reasons (the pods say which)",
    CHECKPOINT_GATE: "the operator holds a component at zero replicas until its checkpoint (a GPU-memory "
                     "snapshot) is ready: a legitimate wait",
}


def not_ready_reason(status: ObjView) -> str | None:
    """What the Ready condition's reason says while the DGD is not ready (None: Ready, or a reason
    no generation gives here: its text is shown as it is)."""
    cond = ready_condition(status)
    if cond.get("status") == "True" or status.get("state") == "failed":
        return None
    return NOT_READY_REASONS.get(str(cond.get("reason") or ""))


def checkpoint_gate(status: ObjView) -> str | None:
    """The operator's message while a checkpoint gate holds replicas at zero (``Waiting for
    checkpoints: <component> (<checkpoint>)``); None otherwise."""
    cond = ready_condition(status)
    if status.get("state") == "failed" or cond.get("status") == "True" or cond.get("reason") != CHECKPOINT_GATE:
        return None
    return str(cond.get("message") or CHECKPOINT_GATE)


def unscheduled(status: ObjView) -> list[str]:
    """Components whose ``scheduledReplicas`` (current operators, Grove path) is below their
    ``replicas``: ``decode scheduled 1/2``."""
    out = []
    for field in ("components", "services"):
        for name, comp in (status.get(field) or {}).items():
            if not isinstance(comp, Mapping) or "scheduledReplicas" not in comp:
                continue
            scheduled, wanted = comp.get("scheduledReplicas"), comp.get("replicas")
            if isinstance(scheduled, int) and isinstance(wanted, int) and scheduled < wanted:
                out.append(f"{name} scheduled {scheduled}/{wanted}")
    return out
