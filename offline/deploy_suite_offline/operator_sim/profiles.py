"""Operator replica profiles: which generation of the Dynamo operator the offline cluster plays.

The facts each profile reproduces are in ``docs/offline-cluster.md`` ("Operator profiles"):

* ``0.9`` (pre-1.0): only ``nvidia.com/v1alpha1`` is served and stored, ``status.observedGeneration``
  is never written, no admission webhook;
* ``1.x``: v1alpha1 storage, ``observedGeneration`` written on every reconcile without error, the
  validating webhook ``vdynamographdeployment.kb.io`` with create and update rules;
* ``latest`` (the default): v1beta1 storage with v1alpha1 served, DynamoComponentDeployments between
  the DGD and its Deployments, a Service per component, the ``nvidia.com/finalizer`` on the DGD.

Orchestrators (``--with lws`` / ``--with grove``) are a separate choice: they install the APIs the
operator detects, so a multinode DGD has somewhere to go.

Pure data: no Kubernetes access here.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass

from deploy_suite.access.kube import Resource
from deploy_suite.constants import DGD_GROUP, DGD_KIND, DGD_PLURAL, Obj
from deploy_suite.errors import InputError

DEFAULT_PROFILE = "latest"
ORCHESTRATORS = ("lws", "grove")
FINALIZER = "nvidia.com/finalizer"


@dataclass(frozen=True)
class Profile:
    name: str
    storage: str  # the DGD storage version
    served: tuple[str, ...]  # every DGD version the apiserver serves
    observed_generation: bool  # writes status.observedGeneration (from 1.0 on)
    webhook: bool  # registers the validating webhook vdynamographdeployment.kb.io
    update_rules: bool  # the webhook's update-time rules (component topology immutable, ...)
    dcds: bool  # DGD -> DynamoComponentDeployment -> Deployment (else DGD -> Deployment)
    finalizer: bool  # nvidia.com/finalizer on the DGD
    component_services: bool  # a Service per component (else the frontend's only)
    field_errors: bool  # webhook messages as Kubernetes field errors (newest) or plain errors (1.x)

    @property
    def dgd(self) -> Resource:
        """The DGD resource the replica watches and writes status through (its storage version)."""
        return Resource(DGD_GROUP, self.storage, DGD_PLURAL, True, DGD_KIND)

    @property
    def multinode_reason(self) -> str:
        """The Ready reason of a multinode DGD with no orchestrator (newest: its own reason)."""
        return "no_multinode_orchestrator_available" if self.dcds else "failed_to_reconcile_the_resources"


PROFILES: dict[str, Profile] = {
    "0.9": Profile("0.9", "v1alpha1", ("v1alpha1",), observed_generation=False, webhook=False,
                   update_rules=False, dcds=False, finalizer=False, component_services=False, field_errors=False),
    "1.x": Profile("1.x", "v1alpha1", ("v1alpha1",), observed_generation=True, webhook=True,
                   update_rules=True, dcds=False, finalizer=False, component_services=False, field_errors=False),
    "latest": Profile("latest", "v1beta1", ("v1alpha1", "v1beta1"), observed_generation=True, webhook=True,
                      update_rules=True, dcds=True, finalizer=True, component_services=True, field_errors=True),
}


def get(name: str) -> Profile:
    profile = PROFILES.get(name)
    if profile is None:
        raise InputError("--operator", f"unknown operator profile {name!r}",
                         f"use one of {', '.join(PROFILES)} (default {DEFAULT_PROFILE})")
    return profile


def orchestrators(names: list[str] | tuple[str, ...]) -> tuple[str, ...]:
    """The orchestrator options, checked and in a stable order."""
    bad = sorted(set(names) - set(ORCHESTRATORS))
    if bad:
        raise InputError("--with", f"unknown orchestrator {', '.join(bad)}",
                         f"use {' or '.join(ORCHESTRATORS)} (repeatable)")
    return tuple(o for o in ORCHESTRATORS if o in names)


def shape_crds(profile: Profile, crds: list[Obj]) -> list[Obj]:
    """Our Dynamo CRDs as this profile's operator installs them: only its versions served, its
    storage version stored (the 1.x chart ships v1alpha1 alone)."""
    shaped = []
    for original in crds:
        crd = copy.deepcopy(original)
        if crd["spec"]["group"] == DGD_GROUP:
            versions = [v for v in crd["spec"]["versions"] if v["name"] in profile.served]
            for v in versions:
                v["storage"] = v["name"] == profile.storage
                if len(versions) == 1:
                    v.pop("deprecated", None)
                    v.pop("deprecationWarning", None)
            crd["spec"]["versions"] = versions
        shaped.append(crd)
    return shaped
