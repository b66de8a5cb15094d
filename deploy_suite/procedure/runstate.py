"""The ordered step registry and the one typed state a run passes from step to step.

Steps are the seven steps of the procedure (CONTRIBUTING.md, "Where each rule lives"), one test
module each in ``deploy_suite/steps``. Their order and names live here (``STEPS``) so that the
machinery, the ledger and the report know all seven even when a module does not exist yet: a
missing module is simply ``not_run``, and, because the procedure's order is a safety order
(validate before mutate), every later step is then skipped.

``RunState`` is what steps receive (through the ``run`` fixture): the frozen settings, the ledger,
each step's typed result and helpers to record evidence, blockers and commands. The pytest plugin
(``deploy_suite.plugins.ledger``) drives the lifecycle (``begin_step``/``end_step``/
``skip_step``/``finish``); steps never call those. One context is passed along, and a stopped
step skips the rest with a reason, because a later step run after a failed one would act on a
state nobody checked.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, NoReturn, Protocol, TypeVar

from deploy_suite import clock
from deploy_suite.errors import DeploymentLocked, InputError, StepBlocked
from deploy_suite.model.workload import Workload
from deploy_suite.procedure import stops
from deploy_suite.procedure.inputs import Prepared, verify_sources
from deploy_suite.procedure.settings import Settings
from deploy_suite.procedure.workspace import PreviousDeployment, own_directory_ledger, release_deployment_lock
from deploy_suite.record import ledger as ledger_mod
from deploy_suite.record.resume import Carried
from deploy_suite.vocab import BlockerClass, RunStatus, StepOutcome


@dataclass(frozen=True)
class StepSpec:
    name: str
    number: int
    title: str

    @property
    def module(self) -> str:
        """File name of the step's test module in deploy_suite/steps."""
        return f"test_{self.name}.py"


STEPS: tuple[StepSpec, ...] = (
    StepSpec("step1_inputs", 1, "inputs and deployment directory"),
    StepSpec("step2_validate", 2, "validate the assigned DGD (read-only)"),
    StepSpec("step3_retire_previous", 3, "retire the previous iteration"),
    StepSpec("step4_support_manifests", 4, "apply support manifests"),
    StepSpec("step5_apply", 5, "apply the assigned DGD"),
    StepSpec("step6_readiness", 6, "wait for readiness"),
    StepSpec("step7_smoke", 7, "smoke test"),
)
STEP_NAMES: tuple[str, ...] = tuple(s.name for s in STEPS)
_BY_MODULE = {s.module: s for s in STEPS}
# When one step holds several tests, the step's outcome is the worst of them.
_RANK = {StepOutcome.NOT_RUN: 0, StepOutcome.SKIPPED: 1, StepOutcome.PASSED: 2, StepOutcome.FAILED: 3,
         StepOutcome.BLOCKED: 4}


def step_for_module(filename: str) -> StepSpec | None:
    return _BY_MODULE.get(os.path.basename(filename))


class StepResult(Protocol):
    """What a step's library function returns (``validate.Preflight``, ``readiness.Readiness``, ...).

    The result knows which ledger sections it fills; ``record`` writes them and returns the step's
    evidence card. Results stay on :class:`RunState` for later steps (``run.result(Preflight)``):
    the ledger is the record of a run, never the state passed between steps.
    """

    def record(self, ledger: ledger_mod.Ledger) -> Mapping[str, Any]: ...


R = TypeVar("R", bound=StepResult)


@dataclass
class RunState:
    """State of one run, shared by every step through the session-scoped ``run`` fixture."""

    settings: Settings
    ledger: ledger_mod.Ledger
    prepared: Prepared | None = None
    # What an earlier run of this iteration recorded (step 1 reads it; empty on a first run).
    carried: Carried = field(default_factory=Carried)
    current: str | None = None  # the step running now
    stopped: tuple[str, str] | None = None  # (step, reason) that makes every later step skip
    _started: dict[str, float] = field(default_factory=dict)
    # Where live progress lines go (the plugin points it at the terminal); waits call progress().
    progress_sink: Callable[[str], None] | None = None
    last_progress: str = ""
    # Each step's typed result by its type; see StepResult.
    results: dict[type, StepResult] = field(default_factory=dict)

    @classmethod
    def create(cls, settings: Settings) -> RunState:
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
        return cls(settings=settings, ledger=ledger_mod.Ledger(document))

    # --- what later steps read ------------------------------------------------------------------

    def _need(self) -> Prepared:
        if self.prepared is None:
            raise RuntimeError("step1_inputs has not completed: no inputs are known yet")
        return self.prepared

    @property
    def exp_root(self) -> Path:
        return self.prepared.exp_root if self.prepared else Path(os.path.realpath(self.settings.exp_root))

    @property
    def deploy_root(self) -> Path:
        return self._need().deploy_root

    @property
    def ledger_path(self) -> Path | None:
        return self.ledger.path

    @property
    def workload(self) -> Workload:
        return self._need().workload

    @property
    def kube_context(self) -> str:
        return self._need().workload.kube_context

    @property
    def namespace(self) -> str:
        return self._need().workload.namespace

    @property
    def dgd_name(self) -> str:
        return self._need().dgd_name

    @property
    def manifests(self) -> dict[str, Path]:
        """Run-scoped copies by type: deploy, model-cache, model-download, model-validate."""
        return self._need().manifest_paths()

    @property
    def previous(self) -> PreviousDeployment | None:
        return self._need().previous

    @property
    def document(self) -> Mapping[str, Any]:
        """The ledger document as written so far, for views of the run (the report pages, the summary)."""
        return self.ledger.data

    def rel(self, path: Path) -> str:
        """EXP_ROOT-relative path for the ledger."""
        return Path(os.path.relpath(os.path.realpath(path), self.exp_root)).as_posix()

    # --- what steps record ---------------------------------------------------------------------

    @property
    def evidence(self) -> dict[str, Any]:
        """The running step's evidence object in the ledger (edit it in place)."""
        if self.current is None:
            raise RuntimeError("no step is running")
        evidence: dict[str, Any] = self.ledger.step(self.current)["evidence"]
        return evidence

    def progress(self, message: str) -> None:
        """A live one-line state of the current wait (what is awaited, the last state seen)."""
        self.last_progress = message
        if self.progress_sink is not None:
            self.progress_sink(f"[{self.current or 'run'}] {message}")

    def add_evidence(self, **items: Any) -> None:
        self.evidence.update(items)

    def record(self, result: R) -> R:
        """Keep a step's typed result for later steps and write its ledger sections and evidence."""
        self.results[type(result)] = result
        if isinstance(result, Prepared):  # step 1: what every later step reads of the inputs
            self.prepared, self.carried = result, result.carried
        self.evidence.update(result.record(self.ledger))
        self.save()
        return result

    def result(self, kind: type[R]) -> R | None:
        """An earlier step's result (``None`` when that step did not produce one)."""
        found = self.results.get(kind)
        return found if isinstance(found, kind) else None

    def block(self, category: BlockerClass, message: str, fix: str) -> NoReturn:
        """Record a blocker for the running step and stop it; every later step is skipped."""
        self.ledger.add_blocker(self.current or "session", category, message, fix)
        raise StepBlocked(category, message, fix)

    def record_command(self, record: ledger_mod.CommandLike) -> None:
        """``on_command`` callback of ``deploy_suite.access.kube.Kube``; mutations are saved at once so a
        killed run still says what it changed (and what to clean up)."""
        self.ledger.record_command(record)
        if record.kind == "mutate":
            self.save()

    def save(self, *, check_schema: bool = False) -> bool:
        """Write the ledger now (a no-op until the deployment directory exists); ``check_schema``
        validates it first, which ``end_step`` and ``finish`` ask for (see ``deploy_suite.record.ledger``)."""
        self.ledger.data["status"] = self.status()
        self.ledger.data["current_step"] = self.current_step()
        return self.ledger.save(check_schema=check_schema)

    # --- step 1 ---------------------------------------------------------------------------------

    def attach_directory(self, deploy_root: Path, resumed: bool, earlier: Mapping[str, Any] | None) -> None:
        """The deployment directory exists: from now on the ledger lives there.

        On a rerun of the same candidate the earlier ledger's history is kept: append-only
        records carry over, and what the earlier run concluded goes into a ``resumes`` entry.
        """
        self.ledger.path = deploy_root / ledger_mod.LEDGER_NAME
        data = self.ledger.data
        if resumed:
            previous = dict(earlier or {})
            for key in ("commands", "patches", "reapplies", "failed_attempts", "hold_decisions",
                        "cleanup_commands", "resumes"):
                if isinstance(previous.get(key), list):
                    data[key] = list(previous[key]) + [x for x in data[key] if x not in previous[key]]
            # What the cluster holds of this iteration (deploy_suite/record/resume.py): its own apply, its
            # allocation intervals, its teardown and the retire an earlier run already did; and the
            # copies' recorded hashes, which a resume refused in step 1 must keep (docs/procedure.md, "Resume").
            # And whose directory it is (source_dgd): a run refused in step 1 after this point must leave a
            # ledger a later run of the same candidate still recognises (workspace.existing_candidate).
            for key in ("created_at", "allocated_at", "gpus_requested", "torn_down_at", "applied_dgd",
                        "allocations", "retired_previous", "applied_manifests", "source_dgd"):
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
            self.evidence.update(partial.record(self.ledger))
        self.ledger.add_blocker(step, BlockerClass.INPUT, f"{error.input_name}: {error.problem}", error.fix)
        # A locked directory belongs to the live run holding it: its ledger is that run's alone.
        if self.ledger.path is None and not isinstance(error, DeploymentLocked):
            earlier = own_directory_ledger(self.settings)
            if earlier is not None:
                self.attach_directory(self.settings.deploy_root, True, earlier)

    # --- lifecycle, driven by deploy_suite.plugins.ledger ----------------------------------

    def begin_step(self, name: str) -> None:
        entry = self.ledger.step(name)
        if entry["started_at"] is None:
            entry["started_at"] = clock.iso_now()
            self._started[name] = clock.monotonic()
        self.current = name
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
            self.current = None
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
            self.record(partial)
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
        if self.prepared is not None:
            problems = verify_sources(self.prepared)
            for problem in problems:
                self.ledger.add_blocker("session", BlockerClass.INPUT, problem,
                                        "restore the handed-off file: sources are never modified")
        session = self.ledger.data["session"]
        session["finished_at"] = clock.iso_now()
        session["exit_status"] = int(exit_status) if not problems else max(int(exit_status), 1)
        self.current = None
        try:
            self.save(check_schema=True)
        finally:
            # After the last ledger write: the next run of this iteration may start now.
            release_deployment_lock(self.settings.deploy_root)
        return problems
