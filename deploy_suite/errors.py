"""One error tree for the whole suite.

Foreign exceptions (the Kubernetes client, YAML, OS) are translated into these in one place each
(``deploy_suite.kube`` for the API, the input readers for files), with the cause chained, so that
callers and the ledger deal with a handful of meaningful types. The split between
``TemporaryError`` and ``PermanentError`` says whether waiting can help (the idea of kopf's
errors): the wait loop and the pending-pod triage obey it.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

# Response bodies can be large (a whole object); keep what a person needs to read.
MAX_BODY_CHARS = 2000


def cut(text: str, limit: int = MAX_BODY_CHARS) -> str:
    """Bound a message or body so that logs and ledgers stay readable."""
    return text if len(text) <= limit else text[: limit - 15] + " ...[truncated]"


class SuiteError(Exception):
    """Base of every error the suite raises on purpose."""


class InputError(SuiteError):
    """Bad user input: one line naming the input and the fix. Never touches a cluster."""

    def __init__(self, input_name: str, problem: str, fix: str) -> None:
        self.input_name = input_name
        self.problem = problem
        self.fix = fix
        super().__init__(f"{input_name}: {problem}; fix: {fix}")


class PermanentError(SuiteError):
    """Waiting will not help (a manifest that can never schedule, a failed Job)."""


class TemporaryError(SuiteError):
    """Waiting may help (capacity contention); ``delay`` suggests the next check in seconds."""

    def __init__(self, message: str, delay: float = 10.0) -> None:
        self.delay = delay
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


class ClusterError(SuiteError):
    """The offline cluster could not be built, started, stopped or inspected."""


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
