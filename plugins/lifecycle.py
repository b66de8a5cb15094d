"""The run's lifecycle, which only the ledger plugin drives: steps begun, ended, stopped and skipped,
the resume bookkeeping of step 1, the end of the session.

The steps' logic never sees this object: it receives the narrow ``StepContext``
(``deploy_suite.procedure.context``), whose ``Recorder`` this lifecycle points at the running step and
whose every save carries the run's ``status`` and ``current_step`` as decided here. One context is
passed along, and a stopped step skips the rest with a reason, because a later step run after a failed
one would act on a state nobody checked.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from deploy_suite import clock
from deploy_suite.errors import DeploymentLocked, InputError, StepBlocked
from deploy_suite.procedure import stops
from deploy_suite.procedure.context import Recorder, StepContext
from deploy_suite.procedure.inputs import verify_sources
from deploy_suite.procedure.registry import STEP_NAMES, STEPS
from deploy_suite.procedure.settings import Settings
from deploy_suite.procedure.workspace import own_directory_ledger, release_deployment_lock
from deploy_suite.record import ledger as ledger_mod
from deploy_suite.vocab import BlockerClass, RunStatus, StepOutcome

# When one step holds several tests, the step's outcome is the worst of them.
_RANK = {StepOutcome.NOT_RUN: 0, StepOutcome.SKIPPED: 1, StepOutcome.PASSED: 2, StepOutcome.FAILED: 3,
         StepOutcome.BLOCKED: 4}
# What a rerun of the same candidate keeps of the earlier ledger: its append-only records, merged.
_APPENDED = ("commands", "patches", "reapplies", "failed_attempts", "hold_decisions", "cleanup_commands", "resumes")
# What the cluster holds of this iteration (deploy_suite/record/resume.py): its own apply, its
# allocation intervals, its teardown and the retire an earlier run already did; and the copies'
# recorded hashes, which a resume refused in step 1 must keep (docs/procedure.md, "Resume"). And whose
# directory it is (source_dgd): a run refused in step 1 after this point must leave a ledger a later
# run of the same candidate still recognises (workspace.existing_candidate).
_CARRIED = ("created_at", "allocated_at", "gpus_requested", "torn_down_at", "applied_dgd", "allocations",
            "retired_previous", "applied_manifests", "source_dgd")


@dataclass
class Lifecycle:
    """One run's lifecycle: the ledger, the steps' context, which step stopped the run."""

    context: StepContext
    stopped: tuple[str, str] | None = None  # (step, reason) that makes every later step skip
    _started: dict[str, float] = field(default_factory=dict)

    @classmethod
    def create(cls, settings: Settings) -> Lifecycle:
        document = ledger_mod.new_document(
            deploy_id=settings.deploy_id,
            iteration=settings.iteration,
            provenance=settings.provenance,
            review_id=settings.review_id,
            step_names=STEP_NAMES,
            settings=settings.public_record(),
        )
        if settings.served_model:
            document["served_model"] = settings.served_model
        lifecycle = cls(StepContext(settings, Recorder(ledger_mod.Ledger(document))))
        lifecycle.recorder.stamp = lifecycle._stamp
        return lifecycle

    # --- views of the run (the report pages, the summary) ----------------------------------------

    @property
    def settings(self) -> Settings:
        return self.context.settings

    @property
    def recorder(self) -> Recorder:
        return self.context.recorder

    @property
    def ledger(self) -> ledger_mod.Ledger:
        return self.recorder.ledger

    @property
    def ledger_path(self) -> Path | None:
        return self.ledger.path

    @property
    def document(self) -> Mapping[str, Any]:
        """The ledger document as written so far."""
        return self.ledger.data

    @property
    def current(self) -> str | None:
        return self.recorder.step

    def save(self, *, check_schema: bool = False) -> bool:
        return self.recorder.save(check_schema=check_schema)

    def _stamp(self) -> None:
        data = self.ledger.data
        data["status"] = self.status()
        data["current_step"] = self.current_step()

    # --- step 1: the deployment directory ----------------------------------------------------------

    def attach_directory(self, deploy_root: Path, resumed: bool, earlier: Mapping[str, Any] | None) -> None:
        """The deployment directory exists: from now on the ledger lives there.

        On a rerun of the same candidate the earlier ledger's history is kept: append-only
        records carry over, and what the earlier run concluded goes into a ``resumes`` entry.
        """
        self.ledger.path = deploy_root / ledger_mod.LEDGER_NAME
        data = self.ledger.data
        if resumed:
            previous = dict(earlier or {})
            for key in _APPENDED:
                if isinstance(previous.get(key), list):
                    data[key] = list(previous[key]) + [x for x in data[key] if x not in previous[key]]
            for key in _CARRIED:
                if key in previous:
                    data[key] = previous[key]
            data["resumes"].append({
                "at": clock.iso_now(),
                "previous_status": previous.get("status"),
                "previous_current_step": previous.get("current_step"),
                # Outcomes only: the earlier evidence would double the ledger on every rerun.
                "previous_steps": [
                    {k: s.get(k) for k in ("name", "outcome", "started_at", "ended_at", "reason")}
                    for s in previous.get("steps") or [] if isinstance(s, dict)
                ],
                "previous_blockers": previous.get("blockers") or [],
                "previous_diagnostics": previous.get("diagnostics") or [],
            })
        self.save()

    def refuse_input(self, step: str, error: InputError) -> None:
        """Record a refused input; the ledger is written only where a directory of this candidate
        exists (never in another candidate's directory, never a new one created for it). A candidate
        refused for its own reasons carries step 1's partial result (``inputs.Refused``): recorded first."""
        partial = getattr(error, "result", None)
        if partial is not None and self.ledger.path is not None and self.current == step:
            self.recorder.add_evidence(**partial.record(self.ledger))
        self.ledger.add_blocker(step, BlockerClass.INPUT, f"{error.input_name}: {error.problem}", error.fix)
        # A locked directory belongs to the live run holding it: its ledger is that run's alone.
        if self.ledger.path is None and not isinstance(error, DeploymentLocked):
            earlier = own_directory_ledger(self.settings)
            if earlier is not None:
                self.attach_directory(self.settings.deploy_root, True, earlier)

    # --- the steps ---------------------------------------------------------------------------------

    def begin_step(self, name: str) -> None:
        entry = self.ledger.step(name)
        if entry["started_at"] is None:
            entry["started_at"] = clock.iso_now()
            self._started[name] = clock.monotonic()
        self.recorder.step = name
        self.save()

    def end_step(self, name: str, outcome: StepOutcome, reason: str | None = None) -> None:
        entry = self.ledger.step(name)
        if _RANK[outcome] >= _RANK[entry["outcome"]]:
            entry["outcome"] = outcome
            if reason is not None or outcome == StepOutcome.PASSED:
                entry["reason"] = reason
        now = clock.iso_now()
        entry["started_at"] = entry["started_at"] or now
        entry["ended_at"] = now
        entry["duration_s"] = max(0.0, round(clock.monotonic() - self._started.get(name, clock.monotonic()), 3))
        if outcome in (StepOutcome.FAILED, StepOutcome.BLOCKED) and self.stopped is None:
            self.stopped = (name, reason or outcome)
        if self.current == name:
            self.recorder.step = None
        self.save(check_schema=True)

    def stop_step(self, name: str, error: BaseException | None, phase: str = "call") -> str:
        """Record why step ``name`` stopped and end it (docs/procedure.md, "Outcomes"): the step's
        partial result first (the evidence reviewers need most then), then the one rule of
        :func:`stops.judge`: ``failed`` with a ``failed_attempts`` entry (unless the result recorded
        its own) only for the candidate's own failure, else ``blocked`` with its class. Returns the
        one line a person reads."""
        stopped_at = clock.iso_now_precise()  # the verdict's time, to the microsecond (bench/bench_time_to_verdict.py)
        partial = getattr(error, "result", None)
        # A step that recorded its attempt itself (step 6, before its teardown) counts it once.
        attempts = len(self.ledger.data["failed_attempts"]) - bool(getattr(partial, "attempt_recorded", False))
        if partial is not None and self.current == name:
            self.context.record(partial)
        self.ledger.step(name)["evidence"]["stopped_at"] = stopped_at
        stop = stops.judge(name, error)
        if isinstance(error, StepBlocked):
            line = str(error)  # its message and fix: a missing prerequisite needs no traceback
        else:
            line = stops.one_line(error, phase)
            self.ledger.add_diagnostic({"step": name, "at": clock.iso_now(), "phase": phase, "error": line})
        if stop.failed_attempt:
            if len(self.ledger.data["failed_attempts"]) == attempts:
                self.ledger.add_failed_attempt(name, stop.category, stop.evidence, stop.message)
            self.end_step(name, StepOutcome.FAILED, line)
        else:
            self.ledger.add_blocker(name, BlockerClass(stop.category), stop.message, stop.fix)
            self.end_step(name, StepOutcome.BLOCKED, line)
        return line

    def skip_step(self, name: str, reason: str) -> None:
        self.end_step(name, StepOutcome.SKIPPED, reason)

    def blocked_reason(self, name: str) -> str | None:
        """Why step ``name`` must not run: an earlier step stopped, or did not run at all."""
        if self.stopped is not None and self.stopped[0] != name:
            return f"blocked by {self.stopped[0]}: {self.stopped[1]}"
        for spec in STEPS:
            if spec.name == name:
                return None
            if self.ledger.step(spec.name)["outcome"] == StepOutcome.NOT_RUN:
                return f"blocked by {spec.name}: not run (its test module is missing or was deselected)"
        return None

    def status(self) -> RunStatus:
        outcomes = [s["outcome"] for s in self.ledger.data["steps"]]
        if StepOutcome.BLOCKED in outcomes or any(b["step"] == "session" for b in self.ledger.data["blockers"]):
            return RunStatus.BLOCKED
        if StepOutcome.FAILED in outcomes:
            return RunStatus.FAILED
        if outcomes and outcomes[-1] == StepOutcome.PASSED and all(
                o in (StepOutcome.PASSED, StepOutcome.SKIPPED) for o in outcomes):
            return RunStatus.READY
        return RunStatus.IN_PROGRESS

    def current_step(self) -> str | None:
        """The running step, else the step that stopped the run, else the next one to run."""
        if self.current is not None:
            return self.current
        if self.stopped is not None:
            return self.stopped[0]
        for entry in self.ledger.data["steps"]:
            if entry["outcome"] == StepOutcome.NOT_RUN:
                name: str = entry["name"]
                return name
        return STEP_NAMES[-1]

    def finish(self, exit_status: int) -> list[str]:
        """End of session: re-check the sources are untouched, close the session record, save."""
        problems: list[str] = []
        if self.context.prepared is not None:
            problems = verify_sources(self.context.prepared)
            for problem in problems:
                self.ledger.add_blocker("session", BlockerClass.INPUT, problem,
                                        "restore the handed-off file: sources are never modified")
        session = self.ledger.data["session"]
        session["finished_at"] = clock.iso_now()
        session["exit_status"] = int(exit_status) if not problems else max(int(exit_status), 1)
        self.recorder.step = None
        try:
            self.save(check_schema=True)
        finally:
            # After the last ledger write: the next run of this iteration may start now.
            release_deployment_lock(self.settings.deploy_root)
        return problems
