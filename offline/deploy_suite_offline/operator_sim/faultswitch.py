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
  it before the DGD is created.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass
from typing import Any

from deploy_suite.constants import GPU_RESOURCE
from deploy_suite_offline.faults import OPERATOR_FAULTS_CONFIGMAP

Obj = dict[str, Any]

CONFIGMAP = OPERATOR_FAULTS_CONFIGMAP
FAULTS = ("transient-failed", "invalid-template")
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
