"""Which DGDs this experiment created, told without editing the manifests.

Every server-side apply of a run uses the field manager :func:`field_manager` of the experiment
(``deploy-suite/<12 hex of sha256(EXP_ID)>``); the apiserver keeps it in the object's
``metadata.managedFields`` for as long as the object lives, whoever edits it afterwards. A DGD
carrying that manager was applied by a run of this experiment (the previous iteration's, this
iteration's own on a rerun); one without it is someone else's and is never changed or deleted:
step 2 blocks on it, step 3 refuses to delete it, step 5 re-checks right before its apply.
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
    """``absent`` (no such DGD), ``ours`` (applied by this experiment) or ``foreign``."""

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


def judge(obj: Obj | None, name: str, namespace: str, manager: str) -> Ownership:
    """The ownership decision for one DGD as read from the server (``None``: it does not exist)."""
    if obj is None:
        return Ownership(name, namespace, "absent")
    found = tuple(managers(obj))
    uid = (obj.get("metadata") or {}).get("uid")
    return Ownership(name, namespace, "ours" if manager in found else "foreign", found, uid)

