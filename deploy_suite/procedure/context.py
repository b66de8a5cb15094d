"""What a step's logic receives: the step context and the one recorder of the run.

``StepContext`` is the narrow view of a run the procedure modules read (through the ``run``
fixture): the frozen settings, step 1's inputs (``Prepared``) and what an earlier run of this
iteration carried, each earlier step's typed result, and one ``Recorder`` for what a step writes
(its results' ledger sections and evidence, live progress, the commands a ``Kube`` makes). The run's
lifecycle (which step runs, how a stopped step ends, the resume bookkeeping, the end of the session)
is the pytest plugin's alone (``deploy_suite.plugins.lifecycle``); nothing here starts, ends or
skips a step. The ledger is the record of a run, never the state passed between steps.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol, TypeVar

from deploy_suite.model.workload import Workload
from deploy_suite.procedure.inputs import Prepared
from deploy_suite.procedure.settings import Settings
from deploy_suite.procedure.workspace import PreviousDeployment
from deploy_suite.record import ledger as ledger_mod
from deploy_suite.record.resume import Carried


class StepResult(Protocol):
    """What a step's library function returns (``validate.Preflight``, ``readiness.Readiness``, ...).

    The result knows which ledger sections it fills; ``record`` writes them and returns the step's
    evidence card. Results stay on :class:`StepContext` for later steps (``run.result(Preflight)``).
    """

    def record(self, ledger: ledger_mod.Ledger) -> Mapping[str, Any]: ...


R = TypeVar("R", bound=StepResult)


@dataclass
class Recorder:
    """The one writer of the run's ledger a step reaches: results, evidence, sections, progress, commands."""

    ledger: ledger_mod.Ledger
    step: str | None = None  # the running step, whose evidence a result fills (set by the lifecycle)
    # Where live progress lines go (the plugin points it at the terminal); waits call progress().
    sink: Callable[[str], None] | None = None
    last_progress: str = ""
    # What the lifecycle writes into the document before every save (the run's status, its current step).
    stamp: Callable[[], None] | None = None

    def _running(self) -> str:
        if self.step is None:
            raise RuntimeError("no step is running")
        return self.step

    @property
    def evidence(self) -> dict[str, Any]:
        """A copy of the running step's evidence card as recorded so far (for display and tests)."""
        return self.ledger.evidence_of(self._running())

    def add_evidence(self, **items: Any) -> None:
        self.ledger.add_evidence(self._running(), items)

    def write(self, result: StepResult) -> None:
        """A result's ledger sections and evidence card, saved at once."""
        self.ledger.add_evidence(self._running(), result.record(self.ledger))
        self.save()

    def section(self, name: str, value: Any) -> None:
        """One ledger section written and saved now (a record that must survive a killed run)."""
        self.ledger.set_section(name, value)
        self.save()

    def progress(self, message: str) -> None:
        """A live one-line state of the current wait (what is awaited, the last state seen)."""
        self.last_progress = message
        if self.sink is not None:
            self.sink(f"[{self.step or 'run'}] {message}")

    def command(self, record: ledger_mod.CommandLike) -> None:
        """``on_command`` callback of ``deploy_suite.access.kube.Kube``; mutations are saved at once so a
        killed run still says what it changed (and what to clean up)."""
        self.ledger.record_command(record)
        if record.kind == "mutate":
            self.save()

    def save(self, *, check_schema: bool = False) -> bool:
        """Write the ledger now (a no-op until the deployment directory exists); ``check_schema``
        validates it first (see ``deploy_suite.record.ledger``)."""
        if self.stamp is not None:
            self.stamp()
        return self.ledger.save(check_schema=check_schema)


@dataclass
class StepContext:
    """What every step's logic reads and writes, shared through the session-scoped ``run`` fixture."""

    settings: Settings
    recorder: Recorder
    prepared: Prepared | None = None  # step 1's inputs
    # What an earlier run of this iteration recorded (step 1 reads it; empty on a first run).
    carried: Carried = field(default_factory=Carried)
    # Each step's typed result by its type; see StepResult.
    results: dict[type, StepResult] = field(default_factory=dict)

    # --- what later steps read ------------------------------------------------------------------

    def _need(self) -> Prepared:
        if self.prepared is None:
            raise RuntimeError("step1_inputs has not completed: no inputs are known yet")
        return self.prepared

    @property
    def step(self) -> str | None:
        """The step running now."""
        return self.recorder.step

    @property
    def exp_root(self) -> Path:
        return self.prepared.exp_root if self.prepared else Path(os.path.realpath(self.settings.exp_root))

    @property
    def deploy_root(self) -> Path:
        return self._need().deploy_root

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

    def rel(self, path: Path) -> str:
        """EXP_ROOT-relative path for the ledger."""
        return Path(os.path.relpath(os.path.realpath(path), self.exp_root)).as_posix()

    # --- what steps record ---------------------------------------------------------------------

    def record(self, result: R) -> R:
        """Keep a step's typed result for later steps and write its ledger sections and evidence."""
        self.results[type(result)] = result
        if isinstance(result, Prepared):  # step 1: what every later step reads of the inputs
            self.prepared, self.carried = result, result.carried
        self.recorder.write(result)
        return result

    def result(self, kind: type[R]) -> R | None:
        """An earlier step's result (``None`` when that step did not produce one)."""
        found = self.results.get(kind)
        return found if isinstance(found, kind) else None
