"""Operator-side fault switches: what the replica does wrong on purpose, for one DGD.

Switched on from the cluster side (never by editing the DGD under test) with the ConfigMap
``kube-system/deploy-suite-operator-faults``, data ``<namespace>.<dgd>: <fault>``; read at every
reconcile. :mod:`deploy_suite_offline.faults` has helpers to set and clear them. Faults:

* ``transient-failed[:SECONDS]``: the first reconcile of each DGD generation writes state
  ``failed`` with a 409-conflict message, as the operator does with any reconcile error; the next
  reconcile, SECONDS later (default 2), recovers;
* ``invalid-template``: the replica writes the main container of each GPU component's Deployment
  with a GPU request one above its limit (components without GPUs are left valid). The apiserver
  refuses such a Deployment (pod template validation), so the error stays at the DCD: ``Available=False``
  reason ``DeploymentFailed`` with the apiserver's message, a Warning event ``FailedCreate`` on the
  DCD, the DGD ``pending`` with no pods (on the profiles without DCDs the DGD is ``failed``). Set
  it before the DGD is created;
* ``checkpoint-gate[:SECONDS]``: the GPU components wait for a checkpoint (a GPU-memory snapshot) as
  the current operator's ``startupPolicy: WaitForCheckpoint`` makes them (applyCheckpointStartupReadiness
  and applyDCDCheckpointStartupPolicy, ai-dynamo/dynamo deploy/operator/internal/controller/
  dynamographdeployment_controller.go): their workloads at zero replicas and the DGD ``pending``,
  Ready reason ``waiting_for_checkpoint``, ``Waiting for checkpoints: <component> (<checkpoint>)``,
  until the checkpoint is ready SECONDS (default 2) after the DGD generation was first reconciled.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass

from deploy_suite.constants import GPU_RESOURCE, Obj
from deploy_suite_offline.faults import OPERATOR_FAULTS_CONFIGMAP

CONFIGMAP = OPERATOR_FAULTS_CONFIGMAP
FAULTS = ("transient-failed", "invalid-template", "checkpoint-gate")
CHECKPOINT_REASON = "waiting_for_checkpoint"
DEFAULT_RECOVERY_S = 2.0


@dataclass(frozen=True)
class OperatorFault:
    kind: str
    seconds: float = DEFAULT_RECOVERY_S


def parse(value: str | None) -> OperatorFault | None:
    """``transient-failed``, ``transient-failed:5`` or ``invalid-template``; None for anything else."""
    if not value:
        return None
    kind, _, arg = value.strip().partition(":")
    if kind not in FAULTS:
        return None
    try:
        return OperatorFault(kind, float(arg) if arg else DEFAULT_RECOVERY_S)
    except ValueError:
        return None


def conflict_message(resource: str, name: str) -> str:
    """A reconcile error from an optimistic-concurrency conflict (HTTP 409), as the operator writes it."""
    return (f"failed to reconcile Dynamo components deployments: Operation cannot be fulfilled on {resource} "
            f"\"{name}\": the object has been modified; please apply your changes to the latest version and "
            "try again")


def invalid_template(deployment: Obj) -> Obj:
    """The Deployment with a pod template the apiserver refuses (GPU request != limit)."""
    dep = copy.deepcopy(deployment)
    containers = dep["spec"]["template"]["spec"].get("containers") or []
    for c in containers[:1]:
        resources = c.get("resources") or {}
        limit = (resources.get("limits") or {}).get(GPU_RESOURCE)
        if limit is not None:  # only GPU components: the frontend and planners stay valid
            resources.setdefault("requests", {})[GPU_RESOURCE] = str(int(limit) + 1)
    return dep


def gated(child: Obj) -> Obj:
    """A GPU component's Deployment held at zero replicas (the others as they are)."""
    if child.get("kind") != "Deployment":
        return child
    containers = child["spec"]["template"]["spec"].get("containers") or []
    if not any(GPU_RESOURCE in ((c.get("resources") or {}).get("limits") or {}) for c in containers):
        return child
    held = copy.deepcopy(child)
    held["spec"]["replicas"] = 0
    return held


def checkpoint_message(components: list[str], dgd: str) -> str:
    """The operator's words while the gate holds (one checkpoint per component)."""
    return "Waiting for checkpoints: " + ", ".join(f"{c} ({dgd}-{c.lower()}-ckpt)" for c in sorted(components))
