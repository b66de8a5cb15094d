"""Names the Dynamo operator derives from a DGD, checked against Kubernetes' limits (step 1).

A DGD whose name the operator cannot carry is accepted by the API server and fails only later,
inside the operator (a 70-character name: "must be no more than 63 bytes" when its pods are
listed), with the DGD left in the cluster. The derivations, from ai-dynamo/dynamo
deploy/operator/internal/dynamo/graph.go (``GetDCDResourceName``, ``NormalizeKubeResourceName``)
and ``ComputeDGDWorkersSpecHash`` (its first 8 hex characters):

* every pod is labelled ``nvidia.com/dynamo-graph-deployment-name=<dgd>``: a label value;
* each component's DCD is ``<dgd>-<lowercased component>``, ``-<worker hash>`` added for
  worker/prefill/decode; its Deployment has the DCD's name and selects ``nvidia.com/selector=<dcd>``,
  so the DCD name is a label value too;
* the frontend's Service is ``<dgd>-<lowercased component>`` with dots as dashes: a DNS-1035 label.

Limits from k8s.io/apimachinery/pkg/util/validation (``LabelValueMaxLength``,
``DNS1035LabelMaxLength``: 63; their patterns below).
"""

from __future__ import annotations

import re

from deploy_suite.model.dgd import WORKER_TYPES, Dgd

MAX_LABEL_VALUE = 63
MAX_DNS1035 = 63
WORKER_HASH_LEN = 8
LABEL_VALUE = re.compile(r"^(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?$")
DNS1035_LABEL = re.compile(r"^[a-z]([-a-z0-9]*[a-z0-9])?$")
NAME_FIX = ("shorten metadata.name (or the component names) so every name the operator derives stays within "
            "63 characters")


def dcd_name(dgd: str, component: str, worker: bool) -> str:
    """The DCD name, with a placeholder of the worker hash's length (its value does not matter here)."""
    base = f"{dgd}-{component.lower()}"
    return f"{base}-{'0' * WORKER_HASH_LEN}" if worker else base


def service_name(dgd: str, component: str) -> str:
    return f"{dgd}-{component.lower()}".replace(".", "-")


def derived_name_problems(dgd: Dgd) -> list[str]:
    """One line per derived name Kubernetes would refuse, naming the name, its use and the limit."""
    problems: list[str] = []
    if len(dgd.name) > MAX_LABEL_VALUE or not LABEL_VALUE.match(dgd.name):
        problems.append(f"metadata.name {dgd.name!r} ({len(dgd.name)} characters) is the pod label value "
                        f"nvidia.com/dynamo-graph-deployment-name, at most {MAX_LABEL_VALUE} characters")
    for c in dgd.components:
        worker = c.type in WORKER_TYPES or (c.raw_type or "") in WORKER_TYPES
        dcd = dcd_name(dgd.name, c.name, worker)
        if len(dcd) > MAX_LABEL_VALUE:
            suffix = f" plus the {WORKER_HASH_LEN}-character worker hash" if worker else ""
            problems.append(f"component {c.name}'s DynamoComponentDeployment <dgd>-<component>{suffix} is "
                            f"{len(dcd)} characters, its Deployment's selector label value takes at most "
                            f"{MAX_LABEL_VALUE}")
        if c is dgd.frontend:  # whatever its type (docs/operator-generations.md)
            svc = service_name(dgd.name, c.name)
            if len(svc) > MAX_DNS1035 or not DNS1035_LABEL.match(svc):
                problems.append(f"component {c.name}'s Service {svc!r} ({len(svc)} characters) must be a DNS-1035 "
                                f"label: at most {MAX_DNS1035} lowercase letters, digits and '-', starting with a "
                                "letter")
    return problems
