"""How a stopped step ends: ``failed`` only for the candidate's own failure, ``blocked`` otherwise.

The procedure's failed deploy is a failed attempt: a manifest that can never schedule as written
(untolerated taint, selector or affinity mismatch), a crash, an image that does not exist, an engine
argument refused (``failed_attempts``: "scheduling-impossible or crashed attempts", which count
against ``budgets.max_failed_deploys``). Everything else that stops a step is not the candidate's
failure and ends ``blocked`` with a class (the recipe-deployer's blocker classes: a dependency, a
failed Job's log tail, a DGD reconciliation error, a missing frontend Service, a smoke error body;
and the harness's own: no progress, a bound, an API refusal, an unclassified error). One rule for
every step, read from the error the step raised (:func:`judge`); docs/procedure.md, "Outcomes".
"""

from __future__ import annotations

from dataclasses import dataclass, field

from deploy_suite.errors import KubeError, StepBlocked, StepFailure, WaitTimeout, cut
from deploy_suite.vocab import BlockerClass, FailureCategory, StepOutcome, TriageCategory

RERUN = "then rerun the same command (it resumes in the same directory; the candidate is not charged)"
# Each stop that is not a failed attempt: the class it blocks with and what fixes it.
BLOCKS: dict[str, tuple[BlockerClass, str]] = {
    TriageCategory.DEPENDENCY: (BlockerClass.DEPENDENCY, "create or fix the dependency the diagnosis names (a "
                                "secret or its key, a quota, pull credentials, a claim, an admission policy), "
                                + RERUN),
    TriageCategory.PLATFORM: (BlockerClass.PLATFORM, f"fix the cluster's platform component named here, {RERUN}"),
    FailureCategory.JOB_FAILED: (BlockerClass.JOB, "read the Job's last log lines (logs/job-<name>.log); fix the "
                                 f"support manifest or what it needs (a token, storage, the network), {RERUN}"),
    FailureCategory.JOB_TIMEOUT: (BlockerClass.JOB, "the support Job did not complete within its bound: look at its "
                                  f"pod, or raise --timeout-job-download / --timeout-job-validate, {RERUN}"),
    FailureCategory.RECONCILE_ERROR: (BlockerClass.RECONCILE_ERROR, "read the operator's error in the DGD status "
                                      "(logs/readiness-<dgd>.log); fix what it names or hand off to troubleshooting, "
                                      + RERUN),
    FailureCategory.NO_PROGRESS: (BlockerClass.NO_PROGRESS, "nothing advanced within --timeout-readiness-no-progress: "
                                  "read the evidence (logs/readiness-<dgd>.log) and fix what holds the pods, or raise "
                                  f"the bound, {RERUN}"),
    FailureCategory.TIMEOUT: (BlockerClass.TIMEOUT, "a bound ran out while waiting (the message names what was "
                              f"awaited and the last state seen): look at what held it, or raise the bound, {RERUN}"),
    FailureCategory.MISSING_FRONTEND_SERVICE: (BlockerClass.FRONTEND_SERVICE, "the operator created no frontend "
                                               "Service for the ready pods: check the operator's logs and the "
                                               f"frontend component, {RERUN}"),
    FailureCategory.SMOKE: (BlockerClass.SMOKE, "read the smoke bodies (smoke/*.json, smoke_test_artifact.json) and "
                            "the workers' logs: a diagnosis-backed run-scoped patch, or hand off to troubleshooting, "
                            + RERUN),
    FailureCategory.API_ERROR: (BlockerClass.API_ERROR, "the API server refused or failed a request of the run: "
                                f"check the identity's rights and the API server, {RERUN}"),
}
# A support Job's pod that can never run is the support manifest's problem, not the candidate's:
# the candidate was not applied yet.
SUPPORT_STEP = "step4_support_manifests"
UNCLASSIFIED_FIX = ("the run stopped on an error no judge classified (the diagnostics say which): report it; "
                    f"once it is fixed, {RERUN.removeprefix('then ')}")


@dataclass(frozen=True)
class Stop:
    """A stopped step's verdict: ``failed`` (a failed attempt, its category) or ``blocked`` (its class)."""

    outcome: StepOutcome
    category: str  # the failed attempt's category, or the blocker's class
    message: str
    fix: str = ""
    evidence: list[str] = field(default_factory=list)

    @property
    def failed_attempt(self) -> bool:
        return self.outcome == StepOutcome.FAILED


def one_line(error: BaseException | None, phase: str = "call") -> str:
    """The error as a person reads it in the terminal and the diagnostics: its type and first line."""
    if error is None:
        return f"{phase} failed"
    first = str(error).strip().splitlines()[0] if str(error).strip() else ""
    return f"{type(error).__name__}: {cut(first, 300)}"


def judge(step: str, error: BaseException | None) -> Stop:
    """The verdict on the error that stopped ``step``: a :class:`StepFailure` that is a failed attempt
    fails the run; a :class:`StepBlocked` blocks with its own class; any other stop blocks with the
    class of its category (:data:`BLOCKS`), an API refusal with ``api-error``, anything else ``error``.
    A judged stop keeps its whole message (its step's result records it too); an unjudged error only
    its first line, as the diagnostics always kept it."""
    if isinstance(error, StepBlocked):
        return Stop(StepOutcome.BLOCKED, error.category, error.message, error.fix)
    if isinstance(error, StepFailure):
        message = cut(str(error).strip())
        if error.failed_attempt:
            return Stop(StepOutcome.FAILED, str(error.category), message, evidence=list(error.evidence))
        found = BLOCKS.get(str(error.category))
        if found is None and step == SUPPORT_STEP:
            found = BLOCKS[FailureCategory.JOB_FAILED]
        cls, fix = found or (BlockerClass.ERROR, UNCLASSIFIED_FIX)
        return Stop(StepOutcome.BLOCKED, cls, message, fix, list(error.evidence))
    cls, fix = (BLOCKS[FailureCategory.API_ERROR] if isinstance(error, KubeError) else
                BLOCKS[FailureCategory.TIMEOUT] if isinstance(error, WaitTimeout) else
                (BlockerClass.ERROR, UNCLASSIFIED_FIX))
    return Stop(StepOutcome.BLOCKED, cls, one_line(error), fix)
