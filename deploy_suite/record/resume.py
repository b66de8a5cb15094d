"""What a rerun decides from the ledgers: whose live DGD this is, and the GPU allocation intervals.

A rerun of iteration N (same candidate, same directory) must be idempotent at every step boundary
(docs/procedure.md, "Resume"). Two records make that possible:

* ``applied_dgd``: step 5 writes, right after its apply, the DGD's name, namespace, context and
  ``metadata.uid`` as the apiserver returned them. A uid is never reused, so a live DGD whose uid
  is this iteration's ``applied_dgd.uid`` is iteration N's own (step 3 must not delete it, step 2
  must not count its pods as another tenant's), and one whose uid is the previous ledger's
  ``applied_dgd.uid`` is the previous iteration's. A previous ledger without ``applied_dgd`` (written by an
  older suite) is trusted by name, as before. "Previous" is the last iteration whose run may have
  applied a DGD (:func:`may_have_applied`): one blocked before step 5 created nothing, so step 3 of
  the next retires the DGD of the iteration before it.
* ``allocations``: one ``{allocated_at, released_at}`` interval per time the DGD held GPUs. Step 6
  opens one when the first GPU pod is bound and none is open; a re-apply after a teardown closes
  the open one at the recorded ``torn_down_at``. ``allocated_at`` stays the first start (the name
  run-artifacts fixes); ``torn_down_at`` closes the last open interval. GPU-hours add the intervals.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping, MutableMapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Literal

from deploy_suite import clock
from deploy_suite.record.ledger import Ledger
from deploy_suite.vocab import RunStatus, StepOutcome

Whose = Literal["mine", "previous", "unknown"]


def applied_record(obj: Mapping[str, Any], kube_context: str, at: str,
                   field_manager: str | None = None) -> dict[str, Any]:
    """The ``applied_dgd`` section from the object the apply returned; ``field_manager`` is the
    server-side-apply manager that marks the DGD as this experiment's (deploy_suite/judges/ownership.py)."""
    meta = obj.get("metadata") or {}
    record = {"name": meta.get("name"), "namespace": meta.get("namespace"), "kube_context": kube_context,
              "uid": meta.get("uid"), "applied_at": at}
    return {**record, "field_manager": field_manager} if field_manager else record


def recorded_uid(data: Mapping[str, Any] | None) -> str | None:
    """The uid a ledger recorded for its own apply (None when step 5 never ran or an older suite wrote it)."""
    applied = (data or {}).get("applied_dgd")
    uid = applied.get("uid") if isinstance(applied, Mapping) else None
    return uid if isinstance(uid, str) and uid else None


# The ledger's name of step 5, the step that creates a DGD (deploy_suite/procedure/registry.py STEPS).
APPLY_STEP = "step5_apply"


def may_have_applied(data: Mapping[str, Any]) -> bool:
    """Whether a run of this ledger's directory may have created its DGD: step 5 recorded its
    apply (``applied_dgd``), or it started step 5 (a ledger older than ``applied_dgd``, or a run
    killed between its apply and the record), now or in an earlier run kept in ``resumes``. A run
    that stopped before step 5 created nothing: the experiment's live DGD is an earlier iteration's.
    Only a ledger that records its steps says so; one without them is trusted as before (applied)."""
    if isinstance(data.get("applied_dgd"), Mapping) or not isinstance(data.get("steps"), list):
        return True
    runs = [data.get("steps"), *((r or {}).get("previous_steps") for r in data.get("resumes") or []
                                 if isinstance(r, Mapping))]
    # A skipped step carries times too (when it was skipped): it never ran.
    return any(isinstance(s, Mapping) and s.get("name") == APPLY_STEP and s.get("started_at")
               and s.get("outcome") != StepOutcome.SKIPPED for steps in runs if isinstance(steps, list) for s in steps)


def whose(live: Mapping[str, Any] | None, own_uid: str | None, previous_uid: str | None) -> Whose | None:
    """Whose is the live DGD found under the previous iteration's name (None: no such DGD)?

    ``mine``: this iteration applied it (a rerun after step 5); ``previous``: iteration N-1's, by its
    recorded uid, or by name alone when its ledger recorded none; ``unknown``: neither (someone
    else re-created the name), so it is not ours to delete.
    """
    if live is None:
        return None
    uid = (live.get("metadata") or {}).get("uid")
    if own_uid is not None and uid == own_uid:
        return "mine"
    if previous_uid is None or uid == previous_uid:
        return "previous"
    return "unknown"


def intervals(data: Mapping[str, Any]) -> list[dict[str, Any]]:
    """The allocation intervals of a ledger; a ledger older than ``allocations`` has at most one,
    from ``allocated_at``."""
    found = data.get("allocations")
    if isinstance(found, list) and found:
        return [dict(i) for i in found if isinstance(i, Mapping)]
    start = data.get("allocated_at")
    return [{"allocated_at": start, "released_at": None}] if isinstance(start, str) and start else []


def open_allocation(data: MutableMapping[str, Any], at: str) -> bool:
    """Step 6 saw the first GPU pod bound: open an interval unless one is open (a rerun on the same
    live DGD keeps it). Returns whether the ledger changed."""
    spans = intervals(data)
    if spans and spans[-1].get("released_at") is None and not data.get("torn_down_at"):
        data["allocations"] = spans
        return False
    if spans and spans[-1].get("released_at") is None:
        spans[-1]["released_at"] = data["torn_down_at"]
    data["allocations"] = [*spans, {"allocated_at": at, "released_at": None}]
    if not data.get("allocated_at"):
        data["allocated_at"] = at
    return True


def reopen(data: MutableMapping[str, Any]) -> str | None:
    """A re-apply after a teardown: close the open interval at ``torn_down_at`` and reset it (the
    DGD holds GPUs again). Returns the ``torn_down_at`` that was reset, if any."""
    torn = data.get("torn_down_at")
    if not torn:
        return None
    spans = intervals(data)
    if spans and spans[-1].get("released_at") is None:
        spans[-1]["released_at"] = torn
    data["allocations"] = spans
    data["torn_down_at"] = None
    return str(torn)


@dataclass
class Allocations:
    """This iteration's GPU allocation record, typed: the ledger's ``allocations``, ``allocated_at``
    and ``torn_down_at``, as an earlier run left them, step 5 reopened them and step 6 opens one.
    A step result: ``record`` writes the three sections."""

    allocations: list[dict[str, Any]] = field(default_factory=list)
    allocated_at: str | None = None
    torn_down_at: str | None = None

    @classmethod
    def of(cls, data: Mapping[str, Any] | None) -> Allocations:
        data = data or {}
        return cls(copy.deepcopy(list(data.get("allocations") or [])), data.get("allocated_at"),
                   data.get("torn_down_at"))

    def fields(self) -> dict[str, Any]:
        return {"allocations": self.allocations, "allocated_at": self.allocated_at, "torn_down_at": self.torn_down_at}

    def copy(self) -> Allocations:
        return Allocations.of(self.fields())

    def _take(self, data: Mapping[str, Any]) -> None:
        self.allocations, self.allocated_at = data["allocations"], data["allocated_at"]
        self.torn_down_at = data["torn_down_at"]

    def opened(self, at: str) -> bool:
        """:func:`open_allocation` on this record."""
        data = self.fields()
        changed = open_allocation(data, at)
        self._take(data)
        return changed

    def reopened(self) -> str | None:
        """:func:`reopen` on this record."""
        data = self.fields()
        reset = reopen(data)
        self._take(data)
        return reset

    def released(self, at: str) -> bool:
        """The DGD was found gone with its pods (a rerun after a teardown stopped in its pods-gone
        wait): ``torn_down_at`` is ``at`` unless one is recorded, which ends the open interval
        (:func:`spans`), so its GPU-hours stop growing; a re-apply then closes it (:func:`reopen`).
        Idempotent: returns whether the record changed."""
        if self.torn_down_at:
            return False
        self.torn_down_at = at
        return True

    def record(self, ledger: Ledger) -> Mapping[str, Any]:
        for name, value in self.fields().items():
            ledger.set_section(name, value)
        return {}


def ready_since(data: Mapping[str, Any], attempt: Mapping[str, Any]) -> bool:
    """Whether a run of this ledger's iteration ended ready after ``attempt``: the ledger's own
    status, or a ``resumes`` entry begun after the attempt whose previous run ended ready."""
    if data.get("status") == RunStatus.READY:
        return True
    at = str(attempt.get("at") or "")
    return any(isinstance(r, Mapping) and r.get("previous_status") == RunStatus.READY and str(r.get("at") or "") > at
               for r in data.get("resumes") or [])


@dataclass(frozen=True)
class Carried:
    """What an earlier run of this iteration recorded in its ledger (a rerun in the same directory):
    its own apply (``applied_dgd``), the retire it did, its allocation record. Step 1 reads it once;
    later steps read it here, never from the ledger."""

    applied_dgd: Mapping[str, Any] | None = None
    retired_previous: Mapping[str, Any] | None = None
    allocations: Allocations = field(default_factory=Allocations)
    # The last failed attempt of this iteration, its diagnosis and the copies' SHA-256 it ran with,
    # while it is the iteration's last word: after a run that ended ready it is history (a rerun of a
    # ready iteration resumes in place, docs/procedure.md "Resume").
    last_failure: Mapping[str, Any] | None = None
    # The teardown an earlier run's step 6 began (``deleting``: stopped before its pods were gone).
    teardown: Mapping[str, Any] | None = None

    @classmethod
    def of(cls, earlier: Mapping[str, Any] | None) -> Carried:
        earlier = earlier or {}
        applied, retired = earlier.get("applied_dgd"), earlier.get("retired_previous")
        attempts = [a for a in earlier.get("failed_attempts") or [] if isinstance(a, Mapping)]
        teardown = earlier.get("teardown")
        last = attempts[-1] if attempts and not ready_since(earlier, attempts[-1]) else None
        return cls(dict(applied) if isinstance(applied, Mapping) else None,
                   dict(retired) if isinstance(retired, Mapping) else None, Allocations.of(earlier),
                   dict(last) if last is not None else None,
                   dict(teardown) if isinstance(teardown, Mapping) else None)

    @property
    def uid(self) -> str | None:
        return recorded_uid({"applied_dgd": self.applied_dgd})


def spans(data: Mapping[str, Any]) -> list[tuple[datetime, datetime | None]]:
    """The allocation intervals as (start, end): the last open one ends at ``torn_down_at``; an
    end that is None is still held (or unreadable); an interval without a readable start is left out."""
    found = intervals(data)
    out: list[tuple[datetime, datetime | None]] = []
    for index, span in enumerate(found):
        start = clock.parse_iso(span.get("allocated_at"))
        if start is None:
            continue
        end = span.get("released_at")
        if end is None and index == len(found) - 1:
            end = data.get("torn_down_at")
        out.append((start, clock.parse_iso(end)))
    return out


def gpu_hours(data: Mapping[str, Any], now: str | datetime | None = None) -> float:
    """GPUs requested x the sum of the allocation intervals; the last open one ends at
    ``torn_down_at``, or ``now`` while the DGD still holds its GPUs. The one GPU-hours computation:
    the report's summary and step 2's ``budgets.gpu_hours`` (deploy_suite/record/budget.py) both call it.
    An unreadable start counts nothing; an unreadable end counts until ``now``, the side that never
    undercounts a live allocation."""
    gpus = data.get("gpus_requested")
    gpus = gpus if isinstance(gpus, int) and not isinstance(gpus, bool) else 0
    end_now = (now if isinstance(now, datetime) else clock.parse_iso(now)) or clock.now()
    seconds = sum(max(0.0, ((end or end_now) - start).total_seconds()) for start, end in spans(data))
    return round(gpus * seconds / 3600.0, 6)
