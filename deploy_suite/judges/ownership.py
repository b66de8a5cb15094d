"""Which DGDs this experiment created, told without editing the manifests.

Every server-side apply of a run uses the field manager :func:`field_manager` of the experiment
(``deploy-suite/<12 hex of sha256(EXP_ID)>``); the apiserver keeps it in the object's
``metadata.managedFields`` for as long as the object lives, whoever edits it afterwards. A DGD
carrying that manager was applied by a run of this experiment (the previous iteration's, this
iteration's own on a rerun). One without it is someone else's and is never changed or deleted
(step 2 blocks on it, step 3 refuses to delete it, step 5 re-checks right before its apply), unless
a ledger of this experiment names it exactly (:class:`LedgerName`: name, namespace, context, and the
uid when that ledger recorded one): the previous iteration deployed by another tool (a plain
``kubectl apply`` leaves another field manager) is still the experiment's to retire; the ledger is
the authority for what step 3 retires (docs/procedure.md, "The chain of iterations").
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass

from deploy_suite.constants import Obj
from deploy_suite.errors import StepBlocked
from deploy_suite.vocab import BlockerClass

PREFIX = "deploy-suite/"


def field_manager(exp_id: str) -> str:
    """The experiment's field manager: stable across runs and iterations, short (names are
    bounded to 128 characters), no path or user name in it."""
    return PREFIX + hashlib.sha256(exp_id.encode("utf-8")).hexdigest()[:12]


def managers(obj: Obj) -> list[str]:
    """The field managers an object's ``managedFields`` names, in order, each once."""
    names: list[str] = []
    for entry in (obj.get("metadata") or {}).get("managedFields") or []:
        name = entry.get("manager") if isinstance(entry, dict) else None
        if isinstance(name, str) and name not in names:
            names.append(name)
    return names


@dataclass(frozen=True)
class Ownership:
    """``absent`` (no such DGD), ``ours`` (applied by this experiment), ``recorded`` (another field
    manager, but a ledger of this experiment names it exactly) or ``foreign``."""

    name: str
    namespace: str
    state: str
    managers: tuple[str, ...] = ()
    uid: str | None = None

    @property
    def foreign(self) -> bool:
        return self.state == "foreign"

    def as_dict(self) -> dict[str, object]:
        return {"dgd": self.name, "namespace": self.namespace, "state": self.state,
                "managers": list(self.managers), "uid": self.uid}

    def blocked(self, what: str) -> StepBlocked:
        """The one line that stops a run before it touches a DGD that is not its own."""
        return StepBlocked(BlockerClass.OWNERSHIP,
                           f"DynamoGraphDeployment {self.namespace}/{self.name} exists and was not "
                           f"created by this experiment (field managers: {', '.join(self.managers) or 'none'}); "
                           f"{what}", FIX)


FIX = ("rename the candidate's metadata.name, use another namespace, or ask the DGD's owner to remove it; "
       "the harness never changes or deletes a DGD it did not create")


@dataclass(frozen=True)
class LedgerName:
    """What a ledger of this experiment records of the DGD it deployed: name, namespace, context,
    and the ``metadata.uid`` its step 5 recorded (None: a ledger that recorded none, such as one
    another tool wrote)."""

    name: str
    namespace: str
    kube_context: str
    uid: str | None = None

    def names(self, obj: Obj, name: str, namespace: str, kube_context: str) -> bool:
        """Whether this record names ``obj`` (read as ``namespace/name`` in ``kube_context``) exactly."""
        uid = (obj.get("metadata") or {}).get("uid")
        return ((self.name, self.namespace, self.kube_context) == (name, namespace, kube_context)
                and (self.uid is None or self.uid == uid))


def judge(obj: Obj | None, name: str, namespace: str, manager: str, *,
          ledger: LedgerName | None = None, kube_context: str = "") -> Ownership:
    """The ownership decision for one DGD as read from the server (``None``: it does not exist) in
    ``kube_context``; ``ledger``: what the ledger of the DGD step 3 retires records, if any."""
    if obj is None:
        return Ownership(name, namespace, "absent")
    found = tuple(managers(obj))
    uid = (obj.get("metadata") or {}).get("uid")
    if manager in found:
        return Ownership(name, namespace, "ours", found, uid)
    named = ledger is not None and ledger.names(obj, name, namespace, kube_context)
    return Ownership(name, namespace, "recorded" if named else "foreign", found, uid)

