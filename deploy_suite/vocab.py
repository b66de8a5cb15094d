"""The suite's vocabularies: one ``StrEnum`` per idea the ledger, the reports and the code share.

A bare string names an idea in one place and is misspelt in another; a member is checked by mypy
and by the ledger schema, whose ``enum`` lists are generated from these classes
(:mod:`deploy_suite.record.schema_gen`). A ``StrEnum`` member equals and serializes to its value,
so ledgers read the same as when these were strings. A leaf: imports nothing of the package.

One name per idea: what kind of stop a blocker or a failure is, is its ``category`` in code (the
ledger keeps its field names: ``class`` on a blocker, ``category`` on a failed attempt and a verdict).
"""

from __future__ import annotations

from enum import StrEnum


class RunStatus(StrEnum):
    """The ledger's ``status``: the run as a whole (``deploy_suite.plugins.lifecycle.Lifecycle.status``)."""

    IN_PROGRESS = "in_progress"
    READY = "ready"
    BLOCKED = "blocked"
    FAILED = "failed"


class StepOutcome(StrEnum):
    """The ledger's ``steps[].outcome``."""

    PASSED = "passed"
    FAILED = "failed"
    BLOCKED = "blocked"
    SKIPPED = "skipped"
    NOT_RUN = "not_run"


class BlockerClass(StrEnum):
    """A ``StepBlocked``'s category, the ledger's ``blockers[].class``: which prerequisite is missing,
    or, for a step that stopped on something other than the candidate's own failure (a failed
    attempt), what stopped it (docs/procedure.md, "Outcomes": ``deploy_suite.procedure.stops``)."""

    INPUT = "input"
    NAMESPACE = "namespace"
    CRD = "crd"
    STORAGE_CLASS = "storage-class"
    SECRET = "secret"
    PVC = "pvc"
    IMAGE = "image"
    DRY_RUN = "dry-run"
    PLATFORM = "platform"  # the cluster is at fault, not the candidate (never a failed attempt)
    PINNED = "pinned"
    GPU_CEILING = "gpu-ceiling"
    GPU_CAPACITY = "gpu-capacity"
    # A resource the pods ask for (rdma/ib, CPU, memory, a DRA device class) that no node they may
    # use can ever offer, whatever is freed: it never fits as written.
    RESOURCE_CAPACITY = "resource-capacity"
    GPU_SKU = "gpu-sku"
    OWNERSHIP = "ownership"
    BUDGET = "budget"
    SERVED_MODEL = "served-model"
    # A step stopped by what is not the candidate's failure (never a failed attempt):
    DEPENDENCY = "dependency"  # a secret key, a quota, a pull refused on auth, a claim, an admission refusal
    JOB = "job"  # a support Job failed or timed out (the candidate was never applied)
    RECONCILE_ERROR = "reconcile-error"  # the operator's error on the DGD, not known to be the candidate's
    NO_PROGRESS = "no-progress"  # the readiness wait saw nothing advance for its bound
    TIMEOUT = "timeout"  # a bound ran out while things still advanced
    FRONTEND_SERVICE = "frontend-service"  # ready pods but no frontend Service from the operator
    SMOKE = "smoke"  # a smoke gate failed on a deployment step 6 judged ready
    API_ERROR = "api-error"  # the API server refused or failed a request of the run
    ERROR = "error"  # an error no judge classified (the harness's own): reported, never charged


class TriageCategory(StrEnum):
    """What a verdict on a pod or object says is wrong (docs/triage.md); each implies an :class:`Action`."""

    FAILED_DEPLOY = "failed-deploy"
    CRASH = "crash"
    CONTENTION = "contention"
    PROVISIONING = "provisioning"
    GANG = "gang"
    PULL_RETRY = "pull-retry"
    DEPENDENCY = "dependency"
    PLATFORM = "platform"
    UNKNOWN = "unknown"
    # A speaker's newest word says its earlier problem is over (``Scheduled``, ``SuccessfulCreate``).
    CLEARED = "cleared"


class Action(StrEnum):
    """What a triage category asks of a person (``deploy-suite triage`` prints it)."""

    WAIT = "wait"
    FAILED_ATTEMPT = "failed-attempt"
    FIX_DEPENDENCY = "fix-dependency"
    UNKNOWN = "unknown"


class FailureCategory(StrEnum):
    """A ``StepFailure``'s category when no triage verdict names it (a verdict's own category,
    a :class:`TriageCategory`, is used as it is)."""

    FAILED = "failed"
    JOB_FAILED = "job-failed"
    JOB_TIMEOUT = "job-timeout"
    RECONCILE_ERROR = "reconcile-error"
    TIMEOUT = "timeout"
    NO_PROGRESS = "no-progress"
    API_ERROR = "api-error"
    MISSING_FRONTEND_SERVICE = "missing-frontend-service"
    SMOKE = "smoke"


class WaitingSign(StrEnum):
    """Why step 6 waits on a pod that reached no new milestone (``judges.wait_signs``): not "no progress"."""

    HELD = "held"  # a hold decision: contention, a node being provisioned, a gang being assembled
    PULLING = "pulling"  # the kubelet pulls its image (``Pulling``, no failure)
    LOADING = "loading"  # a container running without restarts, not ready yet (a model loading)
    CHECKPOINT = "checkpoint"  # the operator holds replicas at zero until a component's checkpoint is ready


# What a StepFailure's ``category`` holds: its own failure category or the verdict that stopped it.
StopCategory = FailureCategory | TriageCategory


class TeardownPolicy(StrEnum):
    """The ledger's ``teardown.policy``: what step 6 does to a failed DGD."""

    TEARDOWN_FINAL_FAILURES = "teardown-final-failures"
    KEEP_ON_FAILURE = "keep-on-failure"


class TeardownAction(StrEnum):
    """The ledger's ``teardown.action``: what step 6 did."""

    DELETED = "deleted"
    KEPT = "kept"
    DELETE_FAILED = "delete-failed"
    DELETING = "deleting"  # saved before the delete: a run stopped during the teardown leaves this
