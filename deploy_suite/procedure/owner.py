"""Whose a DGD is, read from the cluster: one GET, judged by :mod:`deploy_suite.judges.ownership`
(the judge reads only the object, so the read is the step's)."""

from __future__ import annotations

from deploy_suite.access.kube import DGD, Kube
from deploy_suite.judges.ownership import LedgerName, Ownership, judge


def check(kube: Kube, namespace: str, name: str, ledger: LedgerName | None = None) -> Ownership:
    """Read the DGD (one GET) and judge it against ``kube``'s field manager and, for the DGD step 3
    retires, what its ledger records (``ledger``)."""
    return judge(kube.get_or_none(DGD, name, namespace), name, namespace, kube.field_manager, ledger=ledger,
                 kube_context=kube.context)


def require_not_foreign(kube: Kube, namespace: str, name: str, what: str) -> Ownership:
    """Stop (:class:`StepBlocked`) when the DGD exists and is not this experiment's."""
    found = check(kube, namespace, name)
    if found.foreign:
        raise found.blocked(what)
    return found
