"""Whose a DGD is, read from the cluster: one GET, judged by :mod:`deploy_suite.judges.ownership`
(the judge reads only the object, so the read is the step's)."""

from __future__ import annotations

from deploy_suite.access.kube import DGD, Kube
from deploy_suite.judges.ownership import Ownership, judge


def check(kube: Kube, namespace: str, name: str) -> Ownership:
    """Read the DGD (one GET) and judge it against ``kube``'s field manager."""
    return judge(kube.get_or_none(DGD, name, namespace), name, namespace, kube.field_manager)


def require_not_foreign(kube: Kube, namespace: str, name: str, what: str) -> Ownership:
    """Stop (:class:`StepBlocked`) when the DGD exists and is not this experiment's."""
    found = check(kube, namespace, name)
    if found.foreign:
        raise found.blocked(what)
    return found
