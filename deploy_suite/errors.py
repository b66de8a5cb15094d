"""One error tree for the whole suite: every exception the project raises on purpose is here.

Foreign exceptions (the Kubernetes client, YAML, OS) are translated into these in one place each
(``deploy_suite.access.kube`` for the API, ``deploy_suite.yamlio`` for files), with the cause chained, so
that callers and the ledger deal with a handful of meaningful types::

    SuiteError                      .temporary: may waiting or retrying help?
    +-- InputError                  bad user input: one line naming the input and the fix
    |   +-- DeploymentLocked        another run of this iteration holds the directory
    +-- StepBlocked                 a prerequisite is missing: ledger "blocked", later steps skip
    +-- StepFailure                 a step cannot succeed: ledger "failed" for a failed attempt, else "blocked"
    +-- KubeError                   an API answer we did not expect (HTTP status)
    |   +-- NotFound, Forbidden, Conflict, Invalid
    |   +-- Unavailable             no answer, 5xx, dropped connection (temporary)
    |       +-- PlatformFault       a webhook or the operator behind the API failed (temporary, bounded)
    +-- WaitTimeout                 a bounded wait ran out
    +-- LedgerError                 the ledger could not be written
    |   +-- SecretLeak
    +-- SearchBudgetExhausted       the exact capacity search gave up (internal to capacity)

The offline cluster's own errors (``ClusterError``, ``ReconcileError``) derive from ``SuiteError``
in ``deploy_suite_offline.errors``: the core never raises or catches them.

``temporary`` is the one property the wait loop obeys, so that whether to retry is decided where
the error is understood, not by each caller: a temporary error is retried with backoff within
the wait's deadline, any other error stops the wait at once.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from deploy_suite.vocab import BlockerClass, FailureCategory, StopCategory

# Response bodies can be large (a whole object); keep what a person needs to read.
MAX_BODY_CHARS = 2000


def cut(text: str, limit: int = MAX_BODY_CHARS) -> str:
    """Bound a message or body so that logs and ledgers stay readable."""
    return text if len(text) <= limit else text[: limit - 15] + " ...[truncated]"


class PartialResult(Protocol):
    """A step's typed result as far as it got, carried by a stopping error and recorded in the
    ledger before the step stops (``procedure.context.StepResult``; the ledger's type is not
    named here: this module is a leaf)."""

    def record(self, ledger: Any, /) -> Mapping[str, Any]: ...


class SuiteError(Exception):
    """Base of every error the suite raises on purpose."""

    # Whether retrying the same request or waiting longer can help (see the module docstring).
    temporary: bool = False


class InputError(SuiteError):
    """Bad user input: one line naming the input and the fix. Never touches a cluster."""

    def __init__(self, input_name: str, problem: str, fix: str) -> None:
        self.input_name = input_name
        self.problem = problem
        self.fix = fix
        super().__init__(f"{input_name}: {problem}; fix: {fix}")


class RefusedCandidate(InputError):
    """The assigned DGD, its hashes verified, cannot be deployed for reasons of its own. Step 1 has
    claimed the candidate's directory: ``result`` records every incompatibility in a ``blocked``
    ledger there (docs/procedure.md, "A candidate refused for its own reasons")."""

    def __init__(self, input_name: str, problem: str, fix: str, result: PartialResult) -> None:
        super().__init__(input_name, problem, fix)
        self.result = result


class DeploymentLocked(InputError):
    """Another run of the same iteration holds the deployment directory's lock."""


class StepBlocked(SuiteError):
    """A prerequisite is missing; the ledger status becomes ``blocked`` (nothing was attempted that
    failed) and every later step is skipped."""

    def __init__(self, category: BlockerClass, message: str, fix: str, result: PartialResult | None = None) -> None:
        self.category = category
        self.message = message
        self.fix = fix
        self.result = result
        super().__init__(f"{message}; fix: {fix}")


class StepFailure(SuiteError):
    """A step cannot succeed. ``category`` names why (``crash``, ``job-failed``, ...: ``vocab.StopCategory``);
    ``failed_attempt`` says whether it is the candidate's own failure: then the run ends ``failed``
    and it counts against the failed-deploy budget; otherwise the run ends ``blocked`` with the class
    of its category (docs/procedure.md, "Outcomes"). ``result`` is the step's typed result as far as
    it got, recorded in the ledger before the step stops."""

    def __init__(self, message: str, category: StopCategory = FailureCategory.FAILED, evidence: Sequence[str] = (),
                 failed_attempt: bool = False, log_excerpt: str = "",
                 result: PartialResult | None = None) -> None:
        self.category = category
        self.evidence = list(evidence)
        self.failed_attempt = failed_attempt
        self.log_excerpt = log_excerpt
        self.result = result
        super().__init__(message)


class KubeError(SuiteError):
    """An API answer we did not expect; ``status`` is the HTTP status (0 when no answer)."""

    def __init__(self, message: str, status: int = 0, reason: str = "", body: str = "") -> None:
        self.status = status
        self.reason = reason
        self.body = cut(body)
        super().__init__(cut(message))


class NotFound(KubeError):
    """404."""


class Forbidden(KubeError):
    """403: the identity may not do this (RBAC); often a run limitation, not a failure."""


class Conflict(KubeError):
    """409: already exists or changed under us."""


class Invalid(KubeError):
    """422 or 400: the server rejected the object (schema, admission)."""


class Unavailable(KubeError):
    """No answer, 5xx or a dropped connection: retrying or resuming a watch can help."""

    temporary = True


class PlatformFault(Unavailable):
    """The API server could not reach what the platform installs behind it: an admission or
    conversion webhook of the operator (docs/operator-generations.md, "Platform faults"). Temporary,
    since the operator may come back, but only for a bounded grace (``PLATFORM_GRACE_S``): then it
    blocks the run as the platform's fault, never the candidate's."""


class LedgerError(SuiteError):
    """The ledger could not be written: invalid shape, or it would contain a secret."""


class SecretLeak(LedgerError):
    """Refused to write: a value looks like secret material (the message never repeats it)."""


class SearchBudgetExhausted(SuiteError):
    """The exact capacity search ran out of its node-visit budget (never leaves deploy_suite.judges.capacity)."""


@dataclass
class WaitTimeout(SuiteError):
    """A bounded wait ran out: says what was awaited, for how long, and the last state seen."""

    awaited: str
    seconds: float
    last_state: str = "nothing observed"
    details: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        super().__init__(str(self))

    def __str__(self) -> str:
        return f"timed out after {self.seconds:.0f}s waiting for {self.awaited}; last seen: {self.last_state}"
